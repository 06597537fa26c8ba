"""A user's program that dies as a TensorFlow program often does: a ``ValueError`` whose one
line is kilobytes long (``LONG_ERROR_BYTES``, default 6000), after a deep traceback, and then
lots of log lines on stderr from its exit handlers and a thread, shaped as TensorFlow's C++,
absl and Python logging lines (``LONG_ERROR_LOG_LINES`` of each kind, default 400). The message
ends in ``the assigned value shape (2,) are incompatible``: the root cause must carry it."""

from __future__ import annotations

import atexit
import os
import sys
import threading

TAIL = "and the assigned value shape (2,) are incompatible"


def _logs(who: str) -> None:
    for i in range(int(os.environ.get("LONG_ERROR_LOG_LINES", "400"))):
        sys.stderr.write(f"I0000 00:00:1796134696.368789     985 {who}.cc:153] line {i} of the teardown\n")
        sys.stderr.write(f"W0000 00:00:1796134696.371671     985 {who}.cc:31] still tearing down {i}\n")
        sys.stderr.write(f"2026-12-01 14:00:00.000000: W tensorflow/core/{who}.cc:42] old-style line {i}\n")
        sys.stderr.write(f"WARNING:absl:{who} is still closing ({i})\n")
    sys.stderr.flush()


def _at_exit() -> None:  # runs after the traceback was printed
    thread = threading.Thread(target=_logs, args=("thread",))
    thread.start()
    _logs("atexit")
    thread.join()


def assign(depth: int) -> None:
    if depth:
        call(depth - 1)  # two functions in turn: Python prints every frame (it folds only repeats)
        return
    variables = ", ".join(f"'dense_{i}/kernel:0'" for i in range(int(os.environ.get("LONG_ERROR_BYTES", "6000")) // 20))
    raise ValueError(f"Cannot assign value to variables {variables}: Shape mismatch. The variable shape (3,), "
                     + TAIL)


def call(depth: int) -> None:
    assign(depth)


if __name__ == "__main__":
    atexit.register(_at_exit)
    assign(60)  # a deep traceback: longer than any tail of the log
