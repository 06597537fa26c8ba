"""Live output while the job runs.

* :class:`TableView`: a per-task table (state, phase, step, loss, examples/s, CPU, RSS,
  restarts, heartbeat age) redrawn twice a second with rich, for terminals.
* :class:`LinesView`: plain lines for logs and CI: one line per event, and a progress
  line every ``progress_interval_s`` seconds.
* :class:`QuietView`: nothing.

The status table's columns and cells come from :mod:`orchestrator.report.status`, imported at the
first row drawn: a launch creates its view before its tasks start, and that import (the summary's
schema with it) is not on the path to their start (docs/architecture.md, "What a launch spends").
"""

from __future__ import annotations

import sys
import time
from typing import Any, Mapping, Sequence, TextIO

from orchestrator.supervisor.records.snapshot import JobSnapshot, NullView, TaskSnapshot
from orchestrator.supervisor.rules import formed


def task_row(t: TaskSnapshot) -> dict[str, str]:
    """Display strings of one task's row (the same as ``status`` and the web page show)."""
    from orchestrator.report.status import row, task_dict

    return row(task_dict(t))


class QuietView(NullView):
    """Shows nothing while the job runs (``--quiet``): the supervisor's :class:`NullView`."""


class LinesView:
    """Plain lines: events as they happen, progress every ``progress_interval_s`` seconds."""

    def __init__(self, stream: TextIO = sys.stdout, progress_interval_s: float = 5.0) -> None:
        self._stream = stream
        self._interval_s = progress_interval_s
        self.interval_s = min(1.0, progress_interval_s)
        self._next = time.monotonic() + progress_interval_s

    def _print(self, elapsed_s: float, text: str) -> None:
        print(f"[{elapsed_s:7.1f}s] {text}", file=self._stream, flush=True)

    def event(self, elapsed_s: float, text: str) -> None:
        self._print(elapsed_s, text)

    def update(self, snapshot: JobSnapshot) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._interval_s
        parts = []
        for t in snapshot.tasks:
            row = task_row(t)
            bit = f"{row['task']} {row['state']}"
            if row["phase"]:
                bit += f"/{row['phase']}"
            if row["gpu%"] != "-":
                bit += f" gpu {row['gpu%']}% {row['gpu MB']} MB"
            if row["step"] != "-":
                bit += f" step {row['step']} loss {row['loss']}"
                if row["ex/s"] != "-":
                    bit += f" {row['ex/s']} ex/s"
                elif t.heartbeat is not None and "steps_per_second" in t.heartbeat.metrics:
                    bit += f" {t.heartbeat.metrics['steps_per_second']:.1f} steps/s"
            parts.append(bit)
        ready = sum(1 for s in snapshot.spares if s.state == "ready")
        if ready:
            parts.append(f"{ready} warm spare(s)")
        self._print(snapshot.elapsed_s, f"{snapshot.state.value}: " + " | ".join(parts))

    def close(self) -> None:
        pass


class TableView:
    """A rich live table, redrawn at most every ``refresh_s`` seconds (default 0.5 s)."""

    def __init__(self, refresh_s: float = 0.5) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console()
        self._live = Live(console=self._console, auto_refresh=False, transient=False)
        self._refresh_s = refresh_s
        self.interval_s = refresh_s
        self._next = 0.0
        self._events: list[str] = []
        self._live.start()

    def event(self, elapsed_s: float, text: str) -> None:
        self._events.append(f"[{elapsed_s:6.1f}s] {text}")
        del self._events[:-6]
        self._next = 0.0

    def update(self, snapshot: JobSnapshot) -> None:
        now = time.monotonic()
        if now < self._next and not snapshot.ended:
            return
        self._next = now + self._refresh_s
        self._live.update(self._render(snapshot), refresh=True)

    def _render(self, snapshot: JobSnapshot):
        from orchestrator.report.status import task_dict

        plan = snapshot.plan
        status = {
            "run_id": plan.run_id, "strategy": plan.spec.strategy.value, "status": snapshot.state.value,
            "elapsed_s": snapshot.elapsed_s,
            "global_batch_size": plan.spec.global_batch_size if plan.user_program is None else None,
            "tasks": [task_dict(t) for t in snapshot.tasks],
            "spares": [{"pid": s.pid, "state": s.state, "task": s.task or None} for s in snapshot.spares],
            "warnings": [formed.warning(text, plan.spec) for text in formed.mismatches(
                plan.spec, ((t.task, t.heartbeat.formed if t.heartbeat else {}) for t in snapshot.tasks))]
            + [f"WARNING: {text}" for text in snapshot.warnings],
        }
        return render_status(status, self._events)

    def close(self) -> None:
        self._live.stop()


def render_status(status: Mapping[str, Any], events: Sequence[str] = ()):
    """The live table of a status (:func:`orchestrator.report.status.status_dict`, or a
    ``summary.json``) as a rich renderable: the launcher's view and ``status --watch``."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from orchestrator.report.status import columns, row, title

    table = Table(title=title(status), title_justify="left", expand=False)
    cols = columns(status)
    for col in cols:
        table.add_column(col, justify="right" if col not in ("task", "state", "phase") else "left")
    styles = {"Running": "green", "Succeeded": "bold green", "Failed": "bold red", "Stopped": "yellow"}
    parked = (status.get("elastic") or {}).get("parked") or ()
    for task in status.get("tasks", []):
        cells = row(task, parked)
        table.add_row(*(cells[c] for c in cols), style=styles.get(str(task["state"]), ""))
    ready = [str(s["pid"]) for s in status.get("spares") or [] if s.get("state") == "ready"]
    spares = Text(f"warm spares: {len(ready)} (pid {', '.join(ready)})" if ready else "", style="cyan")
    warnings = Text("\n".join(status.get("warnings") or ()), style="bold red")  # stay while the job runs
    return Group(table, spares, warnings, Text("\n".join(events), style="dim"))
