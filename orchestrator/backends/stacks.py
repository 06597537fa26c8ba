"""Stacks of a running task, taken through the runtime's ``faulthandler`` (SIGUSR1): what every
backend's ``dump_stacks`` does for a task it can signal."""

from __future__ import annotations

import signal
import time
from typing import TypeVar

from orchestrator.backends.base import Backend, TaskHandle

H = TypeVar("H", bound=TaskHandle)


def faulthandler_dump(backend: Backend[H], handle: H, timeout_s: float) -> str:
    """Stacks of a task whose runtime registered ``faulthandler`` on SIGUSR1 (the built-in
    programs do): send SIGUSR1, and SIGCONT (a stopped task handles it once continued), and
    return what the task appended to its ``stderr.log`` once that stopped growing; "" when
    nothing came within ``timeout_s`` seconds, and "" at once for a task without the runtime
    (SIGUSR1's default action would kill it)."""
    if not handle.runtime:
        return ""
    path = handle.stderr_path
    try:
        before = path.stat().st_size
    except OSError:
        return ""
    backend.signal(handle, signal.SIGUSR1)
    backend.signal(handle, signal.SIGCONT)
    deadline = time.monotonic() + timeout_s
    size, stable_since = before, None
    while time.monotonic() < deadline:
        time.sleep(0.05)
        current = path.stat().st_size
        if current > before and current == size:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= 0.2:
                break
        else:
            stable_since = None
        size = current
    if size <= before:
        return ""
    with open(path, "rb") as fh:
        fh.seek(before)
        return fh.read().decode("utf-8", errors="replace")
