"""Each task's log files capped (``--max-log-size``): the middle cut, the head and the tail kept.

A task that floods its stderr (a warning in a loop, a progress bar per step) once filled a disk
unannounced: 150 MiB in a minute, for one task. Every task attempt's ``stdout.log`` and
``stderr.log`` is bounded by ``supervision.max_log_size_bytes`` (docs/failure-handling.md, "Log
size"): when one grows past it, its middle is cut, keeping

* its head, the first quarter of the cap (how the task started: its arguments, TF's start-up), and
* its tail, the rest of the cap (how it ended: the last exception, which the root cause reads),

with one marker line between them saying how much was cut. Every writer of a task log (the local
and Slurm backends' redirections, the Docker backend's copy, a spare's reopening) appends
(``O_APPEND``), so the file is cut in place: truncated to its head, then the marker and the tail
appended; the task writes on at the new end. As with logrotate's ``copytruncate``, what the task
writes during the cut itself (microseconds) may land before the marker or be lost.

:func:`cut_plan` is the rule (pure); :class:`LogCaps` runs it from each tick (``Intake.logs``: a stat per log file,
all of them at most once a second, less often for thousands of tasks) and keeps what was cut, for
the live view and the summary's ``warnings``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.supervisor.records.states import TaskRuntime

DEFAULT_MAX_LOG_SIZE_BYTES = 256 * 1024 * 1024
"""256 MiB per log file: far above what a training task writes (TensorFlow's start-up, a line per
epoch: kilobytes), small enough that a flood on every task of a job does not fill a disk."""
MARKER = "\n[... {cut} cut from the middle of this log by the orchestrator (--max-log-size {cap}): its first " \
         "{head} and its last {tail} are kept ...]\n"


def size_text(n: float) -> str:
    """``150.0 MiB``, ``512 KiB``, ``12 B``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class CutPlan:
    """How to cut one log file: keep ``[0, head_bytes)`` and its last ``tail_bytes``."""

    head_bytes: int
    tail_bytes: int


def cut_plan(size_bytes: int, max_bytes: int, head_bytes: int | None = None) -> CutPlan | None:
    """Whether a log file of ``size_bytes`` is cut, and how; None while it is within ``max_bytes``.

    The head kept is the first quarter of the cap (``head_bytes``: the head an earlier cut kept,
    which stays as it is); the tail, the rest of the cap less the marker line's room (256 bytes),
    so that a cut file is at most ``max_bytes`` long."""
    if size_bytes <= max_bytes:
        return None
    head = head_bytes if head_bytes is not None else max_bytes // 4
    return CutPlan(head, max(0, max_bytes - head - 256))


class LogCaps:
    """The cap as the intake runs it: :meth:`check` from every tick, :meth:`final` at the end.

    Args:
        max_bytes: the cap of each log file, bytes (``supervision.max_log_size_bytes``).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._cut: dict[Path, tuple[str, int, int]] = {}  # path -> (task name, bytes cut so far, head kept)
        self._next_at = 0.0

    def check(self, tasks: Iterable[TaskRuntime], now: float, count: int) -> list[str]:
        """Cut the live attempts' logs past the cap (at most once a second, once every
        ``count / 1000`` s for ``count`` tasks: a stat per file). Returns a line for each file cut
        for the first time (the live view's event)."""
        if now < self._next_at:
            return []
        self._next_at = now + max(1.0, count / 1000)
        return [line for rt in tasks if rt.live for line in self._cap(rt)]

    def final(self, tasks: Iterable[TaskRuntime]) -> list[str]:
        """Cut what is still past the cap (a flood just before an exit), then one warning per cut
        file: the task, the file, how much was cut (``summary.json``'s ``warnings``)."""
        for rt in tasks:
            self._cap(rt)
        lines = []
        for path, (name, cut, head) in self._cut.items():
            lines.append(f"{name}'s {path.name} (attempt {path.parent.parent.name.removeprefix('attempt-')}) was "
                         f"cut: {size_text(cut)} dropped from its middle (--max-log-size {size_text(self.max_bytes)}; "
                         f"its first {size_text(head)} and its end kept): {path}")
        return lines

    def _cap(self, rt: TaskRuntime) -> list[str]:
        out = []
        for path in (rt.current.stdout_path, rt.current.stderr_path):
            if path is None:
                continue
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            name, cut_before, head = self._cut.get(path, (rt.task.name, 0, -1))
            plan = cut_plan(size, self.max_bytes, head if head >= 0 else None)
            if plan is None:
                continue
            cut = cut_before + self._cut_file(path, size, plan, cut_before)
            self._cut[path] = (name, cut, plan.head_bytes)
            if not cut_before:
                out.append(f"{name}'s {path.name} passed --max-log-size {size_text(self.max_bytes)}: its middle is "
                           f"cut, its first {size_text(plan.head_bytes)} and its end kept ({path})")
        return out

    def _cut_file(self, path: Path, size: int, plan: CutPlan, cut_before: int) -> int:
        """Cut ``path`` (``size`` bytes) in place; returns the bytes dropped now (0 when it failed)."""
        try:
            with open(path, "rb") as fh:
                fh.seek(size - plan.tail_bytes)
                tail = fh.read(plan.tail_bytes)
            dropped = max(0, size - plan.head_bytes - len(tail))  # after an earlier cut: its marker, a few bytes
            marker = MARKER.format(cut=size_text(cut_before + dropped), cap=size_text(self.max_bytes),
                                   head=size_text(plan.head_bytes), tail=size_text(len(tail)))
            os.truncate(path, plan.head_bytes)
            with open(path, "ab") as fh:
                fh.write(marker.encode() + tail)
            return dropped
        except OSError:
            return 0
