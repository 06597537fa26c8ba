"""The status of a job as plain JSON, and the rows every view shows of it.

:func:`status_dict` is what ``status --json``, the web page and ``/metrics`` read (over gRPC,
``GetStatus`` carries the same fields typed: :mod:`orchestrator.report.status_reply`): the
shape of ``summary.json`` (so a finished run's summary reads the same way) plus live fields:
``live`` (the job is still running), ``elapsed_s``, and per task ``attempt`` and
``heartbeat_age_s``. :func:`row` turns one of its tasks into the display
strings of the live table; :func:`title` is the table's title line.
"""

from __future__ import annotations

import time
from typing import Any, Collection, Mapping

from orchestrator.report.summary import build_summary
from orchestrator.report.summary import task_dict as summary_task_dict
from orchestrator.supervisor.records.snapshot import JobSnapshot, TaskSnapshot
from orchestrator.supervisor.records.states import TaskState

COLUMNS = ("task", "state", "phase", "pid", "step", "epoch", "loss", "ex/s", "cpu%", "rss MB", "restarts", "beat")
"""The columns of the task table: the terminal's live view, ``status`` and the web page."""
GPU_COLUMNS = ("gpus", "gpu%", "gpu MB")
"""Added after ``rss MB`` when a task of the job holds a GPU: devices held, utilisation (the mean
over its devices), memory used / total (MB, its devices together)."""


def columns(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The table's columns for ``status``: :data:`COLUMNS`, with :data:`GPU_COLUMNS` when a task has GPUs."""
    if not any(t.get("gpus") for t in status.get("tasks") or ()):
        return COLUMNS
    at = COLUMNS.index("rss MB") + 1
    return COLUMNS[:at] + GPU_COLUMNS + COLUMNS[at:]


def status_dict(snapshot: JobSnapshot) -> dict[str, Any]:
    """The job now, as JSON-ready data: ``summary.json``'s fields plus ``live``, ``elapsed_s``
    (seconds since the start) and per task ``task_type``, ``task_index``, ``attempt`` and
    ``heartbeat_age_s`` (seconds since its last heartbeat, orchestrator clock; None without one)."""
    out = build_summary(snapshot)
    out["live"] = not snapshot.ended
    out["elapsed_s"] = round(snapshot.elapsed_s, 3)
    out["global_batch_size"] = snapshot.plan.spec.global_batch_size if snapshot.plan.user_program is None else None
    out["updated_at"] = time.time()
    out["tasks"] = [_live_fields(task, t) for task, t in zip(out["tasks"], snapshot.tasks)]  # each built once
    return out


def task_dict(t: TaskSnapshot) -> dict[str, Any]:
    """One task of :func:`status_dict`: its ``summary.json`` entry plus live fields."""
    return _live_fields(summary_task_dict(t), t)


def _live_fields(task: dict[str, Any], t: TaskSnapshot) -> dict[str, Any]:
    task["name"] = t.name
    task["task_type"] = t.task.task_type
    task["task_index"] = t.task.task_index
    task["attempt"] = t.attempt
    task["heartbeat_age_s"] = round(t.heartbeat.age_s, 3) if t.heartbeat is not None else None
    return task


def _num(beat: Mapping[str, Any] | None, name: str, fmt: str) -> str:
    value = beat.get(name) if beat else None
    return format(value, fmt) if value is not None else "-"


def row(task: Mapping[str, Any], parked: Collection[str] = ()) -> dict[str, str]:
    """Display strings of one task of a :func:`status_dict` (or of a ``summary.json``) for the
    table (:data:`COLUMNS`); a task named in ``parked`` (``elastic.parked``: a PSS worker parked,
    docs/elastic.md) reads ``Parked`` in its state cell."""
    beat = task.get("last_heartbeat")
    sample = task.get("process_sample")
    name = str(task.get("name") or str(task["task"]).replace(":", "-"))
    state = str(task["state"])
    terminal = TaskState(state).terminal if state in TaskState._value2member_map_ else False
    if terminal and name in parked:
        state = "Parked"
    if terminal and task.get("exit"):
        state = f"{state} ({str(task['exit']).replace('exit code ', 'exit ')})"
    age = task.get("heartbeat_age_s")
    cpu = beat.get("cpu_percent") if beat else (sample or {}).get("cpu_percent")
    rss = beat.get("rss_bytes") if beat else (sample or {}).get("rss_bytes")
    return {
        "task": name,
        "state": state,
        "phase": phase_cell(beat),
        "pid": str(task.get("pid") or "-"),
        "step": _num(beat, "step", "d"),
        "epoch": _num(beat, "epoch", "d"),
        "loss": _num(beat, "loss", ".4f"),
        "ex/s": _num(beat, "examples_per_second", ".0f"),
        "cpu%": f"{cpu:.0f}" if cpu is not None else "-",
        "rss MB": f"{rss / 1e6:.0f}" if rss is not None else "-",
        "restarts": str(task.get("restarts", 0)),
        "beat": f"{age:.1f}s" if age is not None and beat and not terminal else "-",
        **gpu_cells(task.get("gpus")),
    }


def phase_cell(beat: Mapping[str, Any] | None) -> str:
    """The phase column: ``training``, or ``training (first step 12s)`` while a task is in its
    first step (judged by the startup timeout: hang_rules.first_step_due_at)."""
    if not beat:
        return ""
    first = beat.get("first_step_s")
    return f"{beat.get('phase', '')} (first step {first:.0f}s)" if first is not None else str(beat.get("phase", ""))


def gpu_cells(gpus: Mapping[str, Any] | None) -> dict[str, str]:
    """The :data:`GPU_COLUMNS` cells of a task's ``gpus`` (:func:`orchestrator.report.summary.gpus_dict`)."""
    gpus = gpus or {}
    util, used, total = gpus.get("utilization_percent"), gpus.get("memory_used_bytes"), gpus.get("memory_total_bytes")
    return {
        "gpus": str(gpus.get("count") or "-"),
        "gpu%": f"{util:.0f}" if util is not None else "-",
        "gpu MB": f"{used / 1e6:.0f}/{total / 1e6:.0f}" if used is not None and total else "-",
    }


def title(status: Mapping[str, Any]) -> str:
    """``run 2026... · parameter_server · Running · 11.5s · global batch 16`` (`` · workers 1 of 1..2``
    with elastic workers, `` (worker-1 parked)`` when a PSS worker is parked)."""
    elapsed = status.get("elapsed_s", status.get("wall_time_s", 0.0)) or 0.0
    text = f"run {status['run_id']} · {status['strategy']} · {status['status']} · {elapsed:.1f}s"
    batch = status.get("global_batch_size") or (status.get("training") or {}).get("global_batch_size")
    if batch:
        text += f" · global batch {batch}"
    elastic = status.get("elastic")
    if elastic:  # --workers MIN:MAX: the size now against the range, and the workers parked
        text += f" · workers {elastic['workers']} of {elastic['min']}..{elastic['max']}"
        if elastic.get("parked"):
            text += f" ({', '.join(elastic['parked'])} parked)"
    return text


def format_table(status: Mapping[str, Any]) -> str:
    """The task table as plain text (``status`` when stdout is not a terminal, and tests)."""
    cols = columns(status)
    parked = (status.get("elastic") or {}).get("parked") or ()
    rows = [dict(zip(cols, cols))] + [row(t, parked) for t in status.get("tasks", [])]
    widths = {c: max(len(r[c]) for r in rows) for c in cols}
    left = ("task", "state", "phase")
    lines = [title(status)]
    for r in rows:
        lines.append("  ".join(r[c].ljust(widths[c]) if c in left else r[c].rjust(widths[c]) for c in cols).rstrip())
    if status.get("reason") and not status.get("live", False):
        lines.append(f"{status['status']}: {status['reason']}")
    rc = status.get("root_cause")
    if rc:
        lines.append(f"root cause: {rc['task']} (attempt {rc['attempt']}): {rc.get('message') or ''}".rstrip(": "))
    return "\n".join(lines)
