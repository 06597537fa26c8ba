"""Each task's log files capped (``--max-log-size``): the middle cut, the head and the tail kept.

A task that floods its stderr (a warning in a loop, a progress bar per step) once filled a disk
unannounced: 150 MiB in a minute, for one task. Every task attempt's ``stdout.log`` and
``stderr.log`` is bounded by ``supervision.max_log_size_bytes`` (docs/failure-handling.md, "Log
size"): when one grows past it, its middle is cut, keeping

* its head, the first quarter of the cap (how the task started: its arguments, TF's start-up), and
* its tail, the rest of the cap (how it ended: the last exception, which the root cause reads),

with one marker line between them saying how much was cut. Every writer of a task log (the local
and Slurm backends' redirections, the Docker backend's copy, a spare's reopening) appends
(``O_APPEND``), so the file is cut in place while the task writes on at its end:

* where the file system can (ext4, XFS: Linux's ``fallocate(FALLOC_FL_COLLAPSE_RANGE)``,
  fallocate(2)), the middle is collapsed out of the file, whole blocks of it, under the kernel's
  lock of the file, so a line the task appends during the cut lands after the tail and nothing is
  lost (a task's last words, the traceback the root cause reads, come just after a flood); the
  marker then overwrites the last bytes of the head;
* elsewhere (tmpfs, NFS, another OS), as logrotate's ``copytruncate`` does: the tail read to the
  file's end, the file truncated to its head, the marker and the tail appended; what the task
  writes between that read and the truncation (microseconds) is lost.

:func:`cut_plan` is the rule (pure); :class:`LogCaps` runs it from each tick (``Intake.logs``: a stat per log file,
all of them at most once a second, less often for thousands of tasks) and keeps what was cut, for
the live view and the summary's ``warnings``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.supervisor.records.states import TaskRuntime

DEFAULT_MAX_LOG_SIZE_BYTES = 256 * 1024 * 1024
"""256 MiB per log file: far above what a training task writes (TensorFlow's start-up, a line per
epoch: kilobytes), small enough that a flood on every task of a job does not fill a disk."""
MARKER = "\n[... {cut} cut from the middle of this log by the orchestrator (--max-log-size {cap}): its first " \
         "{head} and its last {tail} are kept ...]\n"
MARKER_BYTES = 256
"""The room of the marker line: it is padded to this length, so that a later cut rewrites it in place."""
FALLOC_FL_COLLAPSE_RANGE = 0x08
"""``linux/falloc.h``: remove a byte range (whole blocks) from a file, shifting what follows down."""


def _fallocate() -> Callable[[int, int, int, int], int] | None:
    """libc's ``fallocate(fd, mode, offset, len)``, or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


def collapse_range(fd: int, offset: int, length: int) -> bool:
    """Remove ``[offset, offset + length)`` (bytes; both multiples of the file system's block size)
    from the open file ``fd``: what follows moves down, and writers appending meanwhile append
    after it (fallocate(2), ``FALLOC_FL_COLLAPSE_RANGE``). Returns False where the file system
    or the OS cannot (EOPNOTSUPP on tmpfs and NFS, EINVAL): the caller copies instead.

    Raises:
        OSError: any other failure of the call (EIO, EBADF)."""
    fn = _FALLOCATE
    if fn is None:
        return False
    if fn(fd, FALLOC_FL_COLLAPSE_RANGE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err))


_FALLOCATE = _fallocate()


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
    which stays as it is); the tail, the rest of the cap less the marker line's room
    (:data:`MARKER_BYTES`), so that a cut file is at most ``max_bytes`` long (a collapse cuts whole
    blocks, so it keeps up to a block less of the tail)."""
    if size_bytes <= max_bytes:
        return None
    head = head_bytes if head_bytes is not None else max_bytes // 4
    return CutPlan(head, max(0, max_bytes - head - MARKER_BYTES))


class LogCaps:
    """The cap as the intake runs it: :meth:`check` from every tick, :meth:`final` at the end.

    Args:
        max_bytes: the cap of each log file, bytes (``supervision.max_log_size_bytes``).
        collapse: cut by collapsing the middle where the file system can (:func:`collapse_range`);
            False copies and truncates everywhere (the fallback, which tests also run).
    """

    def __init__(self, max_bytes: int, collapse: bool = True) -> None:
        self.max_bytes = max_bytes
        self.collapse = collapse
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
            dropped = self._cut_file(path, size, plan, cut_before)
            if not dropped:  # failed
                continue
            cut = cut_before + dropped
            self._cut[path] = (name, cut, plan.head_bytes)
            if not cut_before:
                out.append(f"{name}'s {path.name} passed --max-log-size {size_text(self.max_bytes)}: its middle is "
                           f"cut, its first {size_text(plan.head_bytes)} and its end kept ({path})")
        return out

    def _cut_file(self, path: Path, size: int, plan: CutPlan, cut_before: int) -> int:
        """Cut ``path`` (``size`` bytes) in place; returns the bytes dropped now (0 when it failed)."""
        try:
            with open(path, "r+b") as fh:
                if self.collapse:
                    dropped = self._collapse(fh.fileno(), size, plan, cut_before)
                    if dropped is not None:
                        return dropped
                fh.seek(max(plan.head_bytes, size - plan.tail_bytes))
                tail = fh.read()  # to the end: with what the task wrote since the stat
                os.truncate(path, plan.head_bytes)  # at once: what is written in between is lost
                tail = tail[-plan.tail_bytes:] if plan.tail_bytes else b""
                dropped = max(0, size - plan.head_bytes - len(tail))  # after an earlier cut: its marker, a few bytes
            with open(path, "ab") as out:  # appends, as the task does
                out.write(self._marker(cut_before + dropped, plan.head_bytes, len(tail)) + tail)
            return dropped
        except OSError:
            return 0

    def _collapse(self, fd: int, size: int, plan: CutPlan, cut_before: int) -> int | None:
        """Collapse whole blocks between the head and the tail out of ``fd``, then write the marker
        over the head's last :data:`MARKER_BYTES`; None where the file system cannot."""
        block = os.fstat(fd).st_blksize or 4096
        start = plan.head_bytes - plan.head_bytes % block
        excess = size - plan.tail_bytes - start
        length = min(-(-excess // block), (size - start) // block) * block  # whole blocks: the tail kept <= its share
        if start < MARKER_BYTES:
            return None
        if length <= 0:
            return 0
        if not collapse_range(fd, start, length):
            return None
        dropped = length + (0 if cut_before else MARKER_BYTES)  # the first marker overwrites the head's end
        head = start - MARKER_BYTES
        os.pwrite(fd, self._marker(cut_before + dropped, head, size - start - length), head)
        return dropped

    def _marker(self, cut: int, head: int, tail: int) -> bytes:
        """The marker line, padded to :data:`MARKER_BYTES` (a later cut rewrites it in place)."""
        text = MARKER.format(cut=size_text(cut), cap=size_text(self.max_bytes), head=size_text(head),
                             tail=size_text(tail))
        return text[:-1].ljust(MARKER_BYTES - 1).encode()[:MARKER_BYTES - 1] + b"\n"
