"""Hang rules over stack dumps (pure: the dump's text in, a frame or an order out).

A hang was reported, but not where it hangs: the report named ``stacks.txt`` and, when steps
tied, chose its culprit by the step alone, so it named the MWMS worker that waited in the
all-reduce, not the one stuck reading its input. The stacks say it (docs/failure-handling.md,
"Where a hung task is stuck"):

* :func:`stuck_frame`: the frame the task's main thread is in, the innermost one of the
  program's own code (a frame of TensorFlow, gRPC, the standard library or the orchestrator is
  where it waits, not what it was doing): ``read_shard_record (train.py:57)``.
* :func:`in_collective`: the main thread is inside a collective operation (an all-reduce, an
  all-gather, a broadcast, a barrier, NCCL): it waits for a peer.
* :func:`culprit_order`: of tasks hung together, those *not* inside a collective first (the
  peers inside one wait for them), then the one furthest behind in steps, as before.

The dumps are py-spy's (``Thread 12 (idle): "MainThread"``, then ``function (file:line)``
lines; the paths relative to ``sys.path``) or ``faulthandler``'s (``Current thread 0x...``,
then ``File "path", line N in function``); a task's dump may hold several processes (the
wrapper and the program): each process's main thread is read.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

_PYSPY_THREAD = re.compile(r'^Thread (\d+) \([^)]*\)(?::\s*"(.*)")?\s*$')
_PYSPY_PROCESS = re.compile(r"^Process (\d+):")
_PYSPY_FRAME = re.compile(r"^\s+(\S.*?) \((.+):(\d+)\)\s*$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (\S+)')
_LIBRARIES = ("orchestrator/", "tensorflow/", "keras/", "tf_keras/", "grpc/", "absl/", "numpy/", "google/",
              "concurrent/", "multiprocessing/", "asyncio/", "importlib/", "json/", "<frozen")
_COLLECTIVE = re.compile(r"collective|all_?reduce|all_?gather|reduce_?scatter|nccl|barrier|broadcast", re.I)

Frame = tuple[str, str, int]
"""``(function, file as dumped, line)``."""


def main_threads(dump: str) -> list[list[Frame]]:
    """The frames of each process's main thread in ``dump``, innermost first, in dump order."""
    out: list[list[Frame]] = []
    frames: list[Frame] | None = None
    pid = ""
    for line in dump.splitlines():
        if process := _PYSPY_PROCESS.match(line):
            pid, frames = process.group(1), None
            continue
        thread, fh = _PYSPY_THREAD.match(line), _FH_THREAD.match(line)
        if thread or fh:
            main = (thread.group(2) == "MainThread" or thread.group(1) == pid) if thread else \
                fh.group(1) == "Current thread"  # type: ignore[union-attr]
            frames = [] if main else None
            if frames is not None:
                out.append(frames)
            continue
        if frames is None:
            continue
        if m := _FH_FRAME.match(line):
            frames.append((m.group(3), m.group(1), int(m.group(2))))
        elif m := _PYSPY_FRAME.match(line):
            frames.append((m.group(1), m.group(2), int(m.group(3))))
        elif not line.strip():
            frames = None
    return out


def is_library(path: str) -> bool:
    """The file belongs to a library or the standard library, not to the program: where it waits."""
    if any(part in path for part in ("site-packages/", "dist-packages/", "/lib/python3")):
        return True
    if path.startswith(_LIBRARIES):
        return True
    return "/" not in path and path.removesuffix(".py") in sys.stdlib_module_names


def stuck_frame(dump: str) -> str:
    """Where the task's main thread is stuck, as ``function (file:line)`` (the file's name only):
    the innermost frame of the program's own code in any process's main thread, else the innermost
    frame of the last one dumped; "" without a main thread."""
    threads = [t for t in main_threads(dump) if t]
    for frames in reversed(threads):  # the program is dumped after its wrapper
        own = [f for f in frames if not is_library(f[1])]
        if own:
            return _text(own[0])
    return _text(threads[-1][0]) if threads else ""


def in_collective(dump: str) -> bool:
    """Some process's main thread is inside a collective operation (a frame named like one)."""
    return any(_COLLECTIVE.search(function) for frames in main_threads(dump) for function, _, _ in frames)


def culprit_order(steps: Sequence[int | None], dumps: Sequence[str]) -> list[int]:
    """Indices of tasks hung together, the likeliest cause first: a task whose dump shows it
    outside any collective, then a task without a dump, then those waiting in a collective; within
    each, the one furthest behind in steps (no step counts as furthest), as
    :func:`orchestrator.supervisor.rules.decisions.culprit_order` did alone."""
    def key(i: int) -> tuple[int, int]:
        rank = 1 if not dumps[i] else (2 if in_collective(dumps[i]) else 0)
        return rank, -1 if steps[i] is None else steps[i]  # type: ignore[return-value]

    return sorted(range(len(steps)), key=key)


def stuck_line(task: str, dump: str) -> str:
    """``worker-1 is stuck in read_shard_record (train.py:57)``, with ``, waiting in a collective``
    when it is inside one; "" when the dump shows no main thread."""
    frame = stuck_frame(dump)
    if not frame:
        return ""
    return f"{task} is stuck in {frame}" + (" (inside a collective: waiting for a peer)" if in_collective(dump) else "")


def _text(frame: Frame) -> str:
    function, path, line = frame
    return f"{function} ({path.rsplit('/', 1)[-1]}:{line})"


def waited_on(hung_dumps: Sequence[str], peer_dumps: Sequence[str]) -> list[int]:
    """Indices of the live peers (``peer_dumps``: each training peer's stack dump, "" for none) that
    a collective hang waits on: when some hung task is inside a collective (``hung_dumps``), the
    peers whose main thread is outside one are what it waits for, though their own stall deadline
    has not come yet (a peer stuck reading its input reports its last step a little later than the
    one that waits for it). Empty when no hung task is inside a collective."""
    if not any(in_collective(d) for d in hung_dumps if d):
        return []
    return [i for i, d in enumerate(peer_dumps) if d and not in_collective(d)]
