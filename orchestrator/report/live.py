"""Live output while the job runs.

* :class:`TableView`: a per-task table (state, phase, step, loss, examples/s, CPU, RSS,
  restarts, heartbeat age) redrawn twice a second with rich, for terminals.
* :class:`LinesView`: plain lines for logs and CI: one line per event, and a progress
  line every ``progress_interval_s`` seconds.
* :class:`QuietView`: nothing.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.supervisor import Supervisor, TaskRuntime, describe_exit


def _phase(rt: TaskRuntime) -> str:
    if rt.heartbeat is None:
        return ""
    return pb.Phase.Name(rt.heartbeat.heartbeat.phase).removeprefix("PHASE_").lower()


def _num(hb, name: str, fmt: str) -> str:
    return format(getattr(hb, name), fmt) if hb is not None and hb.HasField(name) else "-"


def _elapsed(supervisor: Supervisor) -> float:
    end = supervisor.ended_at if supervisor.ended_at is not None else supervisor.clock()
    return end - supervisor.started_at


def task_row(supervisor: Supervisor, rt: TaskRuntime) -> dict[str, str]:
    """Display strings of one task's row."""
    hb = rt.heartbeat.heartbeat if rt.heartbeat else None
    age = "-"
    if rt.heartbeat is not None and not rt.state.terminal:
        age = f"{supervisor.clock() - rt.heartbeat.received_at:.1f}s"
    state = rt.state.value
    if rt.state.terminal and rt.exit_code is not None:
        state = f"{state} ({describe_exit(rt.exit_code).replace('exit code ', 'exit ')})"
    return {
        "task": rt.task.name,
        "state": state,
        "phase": _phase(rt),
        "pid": str(rt.pid or "-"),
        "step": _num(hb, "step", "d"),
        "epoch": _num(hb, "epoch", "d"),
        "loss": _num(hb, "loss", ".4f"),
        "ex/s": _num(hb, "examples_per_second", ".0f"),
        "cpu%": f"{hb.cpu_percent:.0f}" if hb is not None else f"{rt.sample['cpu_percent']:.0f}" if rt.sample else "-",
        "rss MB": f"{hb.rss_bytes / 1e6:.0f}" if hb is not None else f"{rt.sample['rss_bytes'] / 1e6:.0f}" if rt.sample else "-",
        "restarts": str(rt.restarts),
        "beat": age,
    }


class QuietView:
    """Shows nothing while the job runs."""

    def update(self, supervisor: Supervisor) -> None:
        pass

    def event(self, supervisor: Supervisor, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class LinesView:
    """Plain lines: events as they happen, progress every ``progress_interval_s`` seconds."""

    def __init__(self, stream: TextIO = sys.stdout, progress_interval_s: float = 5.0) -> None:
        self._stream = stream
        self._interval_s = progress_interval_s
        self._next = time.monotonic() + progress_interval_s

    def _print(self, supervisor: Supervisor, text: str) -> None:
        print(f"[{_elapsed(supervisor):7.1f}s] {text}", file=self._stream, flush=True)

    def event(self, supervisor: Supervisor, text: str) -> None:
        self._print(supervisor, text)

    def update(self, supervisor: Supervisor) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._interval_s
        parts = []
        for rt in supervisor.tasks:
            row = task_row(supervisor, rt)
            bit = f"{row['task']} {row['state']}"
            if row["phase"]:
                bit += f"/{row['phase']}"
            if row["step"] != "-":
                bit += f" step {row['step']} loss {row['loss']} {row['ex/s']} ex/s"
            parts.append(bit)
        self._print(supervisor, f"{supervisor.state.value}: " + " | ".join(parts))

    def close(self) -> None:
        pass


class TableView:
    """A rich live table, redrawn at most every ``refresh_s`` seconds (default 0.5 s)."""

    COLUMNS = ("task", "state", "phase", "pid", "step", "epoch", "loss", "ex/s", "cpu%", "rss MB", "restarts", "beat")

    def __init__(self, refresh_s: float = 0.5) -> None:
        from rich.console import Console
        from rich.live import Live

        self._console = Console()
        self._live = Live(console=self._console, auto_refresh=False, transient=False)
        self._refresh_s = refresh_s
        self._next = 0.0
        self._events: list[str] = []
        self._live.start()

    def event(self, supervisor: Supervisor, text: str) -> None:
        self._events.append(f"[{_elapsed(supervisor):6.1f}s] {text}")
        del self._events[:-6]
        self._next = 0.0

    def update(self, supervisor: Supervisor) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._refresh_s
        self._live.update(self._render(supervisor), refresh=True)

    def _render(self, supervisor: Supervisor):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        plan = supervisor.plan
        title = (
            f"run {plan.run_id} · {plan.spec.strategy.value} · {supervisor.state.value} · "
            f"{_elapsed(supervisor):.1f}s · global batch {plan.spec.global_batch_size}"
        )
        table = Table(title=title, title_justify="left", expand=False)
        for col in self.COLUMNS:
            table.add_column(col, justify="right" if col not in ("task", "state", "phase") else "left")
        styles = {"Running": "green", "Succeeded": "bold green", "Failed": "bold red", "Stopped": "yellow"}
        for rt in supervisor.tasks:
            row = task_row(supervisor, rt)
            table.add_row(*(row[c] for c in self.COLUMNS), style=styles.get(rt.state.value, ""))
        return Group(table, Text("\n".join(self._events), style="dim"))

    def close(self) -> None:
        self._live.stop()
