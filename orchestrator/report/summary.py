"""The end-of-job report: ``runs/<run-id>/summary.json`` and the final text."""

from __future__ import annotations

import os
import resource
import textwrap
import time
from pathlib import Path
from typing import Any

from orchestrator.report.dataservice import data_service_section
from orchestrator.report.schema import HeartbeatEntry, RunSummary, TaskEntry, field_docs
from orchestrator.rundir import RunDir, write_json_atomic
from orchestrator.spec.elastic import batch_facts
from orchestrator.spec.model import JobSpec, Strategy
from orchestrator.supervisor.forensics import left_behind_text
from orchestrator.supervisor.records import lives as lifelog
from orchestrator.supervisor.records.snapshot import JobSnapshot, LastHeartbeat, TaskSnapshot
from orchestrator.supervisor.records.states import describe_exit, exit_fields
from orchestrator.supervisor.rules import formed

_INTEGER_METRICS = ("global_batch_size", "batch_size_per_replica", "replicas", "steps_per_epoch", "epochs")
_COORDINATOR_METRICS = ("test_accuracy", "test_loss", "final_loss", "global_batch_size", "batch_size_per_replica",
                        "replicas", "steps_per_epoch", "epochs", "resumed_from_step")

SUMMARY_FIELDS: dict[str, str] = field_docs(RunSummary)
"""Every top-level field of ``summary.json`` -> what it holds (the fields of :class:`RunSummary`)."""

TASK_FIELDS: dict[str, str] = field_docs(TaskEntry)
"""Every field of an entry of ``summary.json``'s ``tasks`` (the fields of :class:`TaskEntry`)."""

HEARTBEAT_FIELDS: dict[str, str] = field_docs(HeartbeatEntry)
"""Every field of a task's ``last_heartbeat`` (the fields of :class:`HeartbeatEntry`)."""


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def heartbeat_dict(beat: LastHeartbeat | None) -> dict[str, Any] | None:
    """The latest heartbeat of a task as plain JSON (a :class:`HeartbeatEntry`), or None."""
    if beat is None:
        return None
    return heartbeat_entry(beat).to_dict()


def heartbeat_entry(beat: LastHeartbeat) -> HeartbeatEntry:
    """The record of a task's latest heartbeat."""
    return HeartbeatEntry(
        phase=beat.phase,
        cpu_percent=round(beat.cpu_percent, 1),
        rss_bytes=beat.rss_bytes,
        heartbeats=beat.count,
        step=beat.step,
        epoch=beat.epoch,
        loss=beat.loss,
        examples_per_second=beat.examples_per_second,
        metrics=dict(beat.metrics) or None,
        formed=dict(beat.formed) or None,
        first_step_s=round(beat.first_step_s, 1) if beat.first_step_s is not None else None,
    )


def task_dict(t: TaskSnapshot) -> dict[str, Any]:
    """One task's entry of ``summary.json`` (a :class:`TaskEntry`) as plain JSON."""
    return task_entry(t).to_dict()


def task_entry(t: TaskSnapshot) -> TaskEntry:
    """One task's record."""
    code = t.exit_code
    sample = None if t.cpu_percent is None else {"cpu_percent": t.cpu_percent, "rss_bytes": t.rss_bytes}
    exited = exit_fields(code)
    return TaskEntry(
        task=str(t.task),
        state=t.state.value,
        address=t.address,
        attempts=t.attempt + 1,
        restarts=t.restarts,
        pid=t.pid,
        exit_code=exited["exit_code"],  # type: ignore[arg-type]
        signal=exited["signal"],  # type: ignore[arg-type]
        exit=describe_exit(code) if code is not None else None,
        reason=t.reason,
        stdout=str(t.stdout_path) if t.stdout_path else None,
        stderr=str(t.stderr_path) if t.stderr_path else None,
        last_heartbeat=heartbeat_entry(t.heartbeat) if t.heartbeat is not None else None,
        process_sample=sample,
        earlier_attempts=[dict(h) for h in t.history],
        gpus=gpus_dict(t) if t.gpu_count or t.gpus else None,
        left_behind=[dict(e) for e in t.left_behind],
    )


def gpus_dict(t: TaskSnapshot) -> dict:
    """A task's GPUs: how many it holds, which (UUIDs, when this orchestrator assigned them),
    the latest sample per device and summed (utilisation: the mean), and the peak memory its
    devices held together during the job (bytes)."""
    usage = t.gpus
    return {
        "count": t.gpu_count,
        "devices": list(t.gpu_devices),
        "utilization_percent": round(sum(u.utilization_percent for u in usage) / len(usage), 1) if usage else None,
        "memory_used_bytes": sum(u.memory_used_bytes for u in usage) if usage else None,
        "memory_total_bytes": sum(u.memory_total_bytes for u in usage) if usage else None,
        "peak_memory_bytes": t.peak_gpu_memory_bytes,
        "samples": [u.to_dict() for u in usage],
    }


def build_summary(snapshot: JobSnapshot) -> dict[str, Any]:
    """Everything the user needs after the job, as JSON-ready data (a :class:`RunSummary`), from
    the job's final snapshot."""
    return run_summary(snapshot).to_dict()


def run_summary(snapshot: JobSnapshot) -> RunSummary:
    """The run record of ``snapshot`` (what ``summary.json`` holds)."""
    plan = snapshot.plan
    spec = plan.spec
    layout = RunDir(plan.run_dir)
    coordinator = snapshot.task(spec.coordinator)
    metrics: dict = {}
    if coordinator.heartbeat is not None:
        hb = coordinator.heartbeat
        if hb.step is not None:
            metrics["steps"] = hb.step
        if hb.loss is not None:
            metrics["final_loss"] = hb.loss
        builtin = coordinator.reports_heartbeats
        for name, value in hb.metrics.items():
            if name in _COORDINATOR_METRICS or not builtin:  # a user's program: every metric it reported
                metrics[name] = int(value) if name in _INTEGER_METRICS else value
        if hb.resumed_from_step is not None:  # a typed control fact of the heartbeat, shown here
            metrics["resumed_from_step"] = hb.resumed_from_step
        if hb.evaluated_step is not None and not builtin:
            metrics["evaluated_step"] = hb.evaluated_step
    evaluation = None
    evaluator = next((t for t in snapshot.tasks if t.task.task_type == "evaluator"), None)
    if evaluator is not None and evaluator.heartbeat is not None:
        hb = evaluator.heartbeat
        evaluation = ({"evaluated_step": hb.evaluated_step} if hb.evaluated_step is not None else {}) | {
            k: v for k, v in hb.metrics.items() if k.startswith("eval_")} or None
    user_program = next((tp.argv for tp in plan.tasks if not tp.reports_heartbeats), None)
    root_cause = snapshot.root_cause
    return RunSummary(
        run_id=plan.run_id,
        run_dir=str(plan.run_dir),
        status=snapshot.state.value,
        exit_code=snapshot.exit_code,
        reason=snapshot.reason,
        wall_time_s=round(snapshot.elapsed_s, 3),
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(snapshot.started_wall)),
        strategy=spec.strategy.value,
        topology={"chief": spec.chief, "worker": spec.workers, "ps": spec.ps, "evaluator": spec.evaluator},
        cluster=dict(plan.cluster),
        threads_per_task=plan.threads_per_task,
        program=list(user_program) if user_program else "built-in",
        training=None if user_program else {
            "loop": "hogwild" if spec.strategy is Strategy.HOGWILD else spec.training.loop,
            "threads": spec.training.hogwild_threads if spec.strategy is Strategy.HOGWILD else None,
            "checkpoint_every": spec.training.checkpoint_every,
            "data": spec.training.data or "digits",
            "epochs": spec.training.epochs,
            "batch_size_per_replica": batch_facts(spec).per_replica_batch_size,  # at the size it runs at
            "replicas": spec.replicas,
            "global_batch_size": spec.global_batch_size,
            "steps_per_epoch": metrics.get("steps_per_epoch", spec.training.steps_per_epoch),
        },
        metrics=metrics,
        evaluation=evaluation,
        model_dir=str(layout.model) if layout.model.is_dir() else None,
        tensorboard_dir=str(layout.tensorboard) if layout.tensorboard.is_dir() else None,
        root_cause=root_cause.to_dict() if root_cause and snapshot.exit_code != 0 else None,
        restarts=snapshot.restarts_used,
        max_restarts=spec.supervision.max_restarts,
        restart_policy={role: p.value for role, p in spec.supervision.restart_policy.items()},
        recoveries=[r.to_dict() for r in snapshot.recoveries],
        failures=[dict(f) for f in snapshot.earlier_failures] + [f.to_dict() for f in snapshot.failures],
        lives=[life.to_dict() for life in snapshot.lives],
        segments=lifelog.segments(snapshot.lives),
        elastic=elastic_entry(spec, snapshot.lives[-1] if snapshot.lives else None),
        late_failures=[f.to_dict() for f in snapshot.late_failures],
        warnings=list(snapshot.warnings),
        faults=[f.to_dict() for f in snapshot.faults],
        cluster_check=formed.summary_field(spec, ((t.task, t.heartbeat.formed if t.heartbeat else {})
                                                     for t in snapshot.tasks),
                                           spec.workers - len(snapshot.lives[-1].held) if snapshot.lives else None),
        spares=[{"pid": s.pid, "state": s.state, "task": s.task or None} for s in snapshot.spares],
        tasks=[task_entry(t) for t in snapshot.tasks],
        peak_gpu_memory_bytes=max(t.peak_gpu_memory_bytes or 0 for t in snapshot.tasks)
        if any(t.peak_gpu_memory_bytes is not None for t in snapshot.tasks) else None,
        orchestrator={"pid": os.getpid(), "peak_rss_bytes": peak_rss_bytes()},
        data_service=data_service_section(snapshot),
    )


def elastic_entry(spec: JobSpec, life: lifelog.Life | None) -> dict[str, Any] | None:
    """``elastic``: the bounds, the size now (``workers``: the worker tasks training now, the parked
    ones left out), ``parked`` (the workers parked in this life: docs/elastic.md), the batch policy;
    None for a fixed count."""
    if spec.elastic is None:
        return None
    size = life.size_now if life is not None else None
    return {"min": spec.elastic.min, "max": spec.elastic.max,
            "workers": spec.workers if size is None else size["workers"],
            "parked": [] if life is None else life.parked,
            "batch_policy": spec.elastic.batch_policy, "lr_scaling": spec.elastic.lr_scaling}


def write_summary(run_dir: Path, summary: dict) -> Path:
    """Write ``summary.json`` atomically; returns its path."""
    return write_json_atomic(RunDir(run_dir).summary, summary)


def _wrap(label: str, text: str, width: int) -> list[str]:
    """``  label       text`` wrapped to ``width`` columns, continuation lines indented."""
    head = f"  {label:<11} "
    return textwrap.wrap(text, width=width, initial_indent=head, subsequent_indent=" " * len(head),
                         break_long_words=True, break_on_hyphens=False) or [head.rstrip()]


def _fit(line: str, width: int) -> str:
    """``line`` in ``width`` columns: a longer one keeps its start and its end (where a long
    exception message says what was wrong) around " ... "."""
    if len(line) <= width:
        return line
    keep = max(0, width - 5)
    return f"{line[:keep // 2]} ... {line[len(line) - (keep - keep // 2):]}"


def _failure_text(f: dict) -> str:
    how = f"exit code {f['exit_code']}" if f["exit_code"] is not None else f"signal {f['signal']}"
    text = f"{f['task']} (attempt {f['attempt']}): {how}" + (f": {f['message']}" if f["message"] else "")
    if f.get("likely_culprit"):
        text += f"; a consequence of a peer ({f['peer_error']}): likely culprit {f['likely_culprit']}"
    return text


def format_final(summary: dict, root_cause_tail: int = 12, width: int = 120) -> str:
    """The final text report shown in the terminal, no line wider than ``width`` columns
    (paths and free text wrap onto indented continuation lines)."""
    m = summary["metrics"]
    t = summary["training"]
    lines = textwrap.wrap(f"Job {summary['status']} in {summary['wall_time_s']:.1f} s: {summary['reason']}",
                          width=width, subsequent_indent="    ", break_on_hyphens=False)
    lines += _wrap("run dir", summary["run_dir"], width)
    if t is None:
        # after execwrap --
        batch = m.get("global_batch_size")
        lines += _wrap("program", f"{' '.join(summary['program'][4:])} ({summary['strategy']}"
                       + (f", global batch {batch}" if batch else "") + ")", width)
    else:
        lines += _wrap("strategy", f"{summary['strategy']}, {t['loop']} loop, {t['replicas']} replica(s), global batch "
                       f"{t['global_batch_size']} = {t['batch_size_per_replica']} per replica"
                       + (f", {t['steps_per_epoch']} steps/epoch" if t.get("steps_per_epoch") else "")
                       + f", data {t['data']}", width)
    if m:
        parts = []
        if "steps" in m:
            parts.append(f"steps {m['steps']}")
        if "final_loss" in m:
            parts.append(f"final loss {m['final_loss']:.4f}")
        if "test_accuracy" in m:
            parts.append(f"test accuracy {m['test_accuracy']:.4f}")
        parts += [f"{k} {v:.4g}" for k, v in m.items() if k not in _COORDINATOR_METRICS and k != "steps"]
        if parts:
            lines += _wrap("result", ", ".join(parts), width)
    if summary.get("evaluation"):
        ev = summary["evaluation"]
        lines += _wrap("evaluator", ", ".join(
            f"{k.removeprefix('eval_')} {v:.4f}" if k != "evaluated_step" else f"at step {v}"
            for k, v in ev.items()), width)
    lines.append("  tasks")
    for task in summary["tasks"]:
        restarts = f" ({task['restarts']} restart{'s' if task['restarts'] != 1 else ''})" if task["restarts"] else ""
        head = f"    {task['task']:<12} {task['state']:<11} {task['exit'] or '-':<15} "
        lines += textwrap.wrap(f"{task['reason'] or '-'}{restarts}", width=width, initial_indent=head,
                               subsequent_indent=" " * len(head), break_on_hyphens=False)
    for task in summary["tasks"]:
        if task.get("left_behind"):
            lines += _wrap("cleanup", f"{task['task']}: {left_behind_text(task['left_behind'])}", width)
    for r in summary.get("recoveries", []):
        line = f"{r['scope']} restart of {', '.join(r['tasks'])} after {r['cause']}"
        if r["detection_to_resumed_training_s"] is not None:
            line += f"; working again after {r['detection_to_resumed_training_s']:.1f} s"
        if r["resumed_from_step"] is not None:
            line += f", resumed from step {r['resumed_from_step']}"
        lines += _wrap("recovery", line, width)
    if summary.get("elastic") and summary.get("segments"):
        lines += _wrap("sizes", "; ".join(
            f"{g['workers']} worker(s) from step {g['first_step'] if g['first_step'] is not None else '?'} to "
            f"{g['last_step'] if g['last_step'] is not None else '?'} (global batch {g['global_batch_size']}, "
            f"{g['per_replica_batch_size']} per replica, {g['cause']})" for g in summary["segments"]), width)
    if summary.get("spares"):
        used = [s for s in summary["spares"] if s["state"] == "used"]
        lines += _wrap("spares", f"{len(summary['spares'])} warm spare(s) started, {len(used)} used"
                       + (" (" + ", ".join(f"pid {s['pid']} became {s['task']}" for s in used) + ")" if used else ""),
                       width)
    for f in summary.get("late_failures", []):
        when = "after the job succeeded" if f["after_success"] else "after training ended"
        lines += _wrap("WARNING", f"{_failure_text(f)} ({when})", width)
    for text in (summary.get("cluster_check") or {}).get("mismatches", []):
        lines += _wrap("WARNING", f"{text}: the tasks did not train as one cluster"
                       + (" (allowed: --allow-cluster-mismatch)" if summary["cluster_check"]["allowed"] else ""),
                       width)
    batches = [(life["global_batch_size"], life["life"]) for life in summary.get("lives") or []
               if life.get("global_batch_size") is not None]
    if len({b for b, _ in batches}) > 1 and not summary.get("elastic"):  # elastic: the sizes line says it
        lines += _wrap("WARNING", "the global batch changed between lives: "
                       + ", ".join(f"{b} (life {n})" for b, n in batches), width)
    for text in summary.get("warnings", []):
        lines += _wrap("WARNING", text, width)
    for fault in summary.get("faults", []):
        if not fault["fired"]:
            lines += _wrap("WARNING", f"the injected fault {fault['fault']} did not fire: the rehearsal tested nothing",
                           width)
    rc = summary.get("root_cause")
    if rc:
        lines += _wrap("root cause", _failure_text(rc), width)
        lines += _wrap("log", rc["log_path"], width)
        tail = [ln for ln in rc["stderr_tail"].splitlines() if ln.strip()][-root_cause_tail:]
        if tail:
            lines.append("  last lines of its stderr:")
            lines.extend(_fit("    | " + ln, width) for ln in tail)
    if summary.get("model_dir"):
        lines += _wrap("model", summary["model_dir"], width)
    if summary.get("tensorboard_dir"):
        lines += _wrap("tensorboard", f"tensorboard --logdir {summary['tensorboard_dir']}", width)
    lines += _wrap("summary", f"{summary['run_dir']}/summary.json", width)
    return "\n".join(lines)
