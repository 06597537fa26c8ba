"""What the supervision loop waits on: task exits as events, and wake-ups from other threads.

A task's exit is seen when it happens, not at the next poll: each started attempt's
:meth:`~orchestrator.backends.base.ExitHooks.exit_fd` (a pidfd of the local process on Linux
>= 5.3: the task's own, or its ``srun``) is registered in one selector (epoll), and the loop
sleeps in that selector, so a SIGKILL wakes it at once and only the tasks whose descriptor fired
are polled (O(exits) per tick, at any task count). A task without a descriptor (a backend
without :attr:`~orchestrator.backends.base.Capability.EXIT_EVENTS`, an older kernel, no
descriptor left) is polled every tick, as before (torchrun polls every 100 ms). The selector
also holds the read end of a pipe: :meth:`ExitWatch.wake` (a stop request, a preemption, from
any thread or a signal handler) writes a byte to it, so the loop wakes for those too; the
loop's timeout (``tick_s``) keeps it looking at heartbeats and hang checks between events.
"""

from __future__ import annotations

import os
import resource
import selectors
from collections.abc import Callable

LOOK_EVERY = 256
"""Heartbeats taken or hang checks made between two looks at the exit descriptors inside one tick
(:meth:`ExitWatch.exited`): at 10,000 tasks a tick handles ~1,000 heartbeats and ~300 hang
checks, tens to hundreds of milliseconds with the health server's thread beside it, and a task's
exit waited for all of it (the scale bench saw SIGKILL decisions 0.22-0.47 s late). 256 of either
is a few milliseconds."""


def descriptor_budget(reserve: int = 256) -> int:
    """How many exit descriptors to hold at most: half the open-file limit (the other half is
    for the heartbeat connections, one per task, and logs), less ``reserve``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, soft // 2 - reserve)


class ExitWatch:
    """The exit descriptors of the live attempts, by task name, and the loop's wake-up pipe.

    Args:
        budget: most descriptors held at once (default :func:`descriptor_budget`); tasks past it
            are polled.
    """

    def __init__(self, budget: int | None = None) -> None:
        self._selector: selectors.BaseSelector | None = None
        self._read = self._write = -1
        self._fds: dict[str, int] = {}
        self._budget = descriptor_budget() if budget is None else budget
        self.polled: set[str] = set()
        """Tasks without a descriptor: polled every tick."""

    def open(self) -> selectors.BaseSelector:
        """The selector and the wake-up pipe, created on first use (a loop driven tick by tick
        by a test with a fake backend never holds a descriptor)."""
        if self._selector is None:
            self._read, self._write = os.pipe()
            os.set_blocking(self._read, False)
            os.set_blocking(self._write, False)
            self._selector = selectors.DefaultSelector()
            self._selector.register(self._read, selectors.EVENT_READ, "")
        return self._selector

    def watch(self, name: str, fd: int | None) -> None:
        """Watch task ``name``'s new attempt through ``fd`` (now owned here, closed by :meth:`forget`),
        or poll it every tick when ``fd`` is None; replaces what was watched for ``name`` before."""
        self.forget(name)
        if fd is not None and len(self._fds) >= self._budget:
            os.close(fd)
            fd = None
        if fd is None:
            self.polled.add(name)
            return
        self.open().register(fd, selectors.EVENT_READ, name)
        self._fds[name] = fd

    def forget(self, name: str) -> None:
        """Stop watching ``name`` (its attempt ended): its descriptor is unregistered and closed."""
        self.polled.discard(name)
        fd = self._fds.pop(name, None)
        if fd is not None:
            self.open().unregister(fd)
            os.close(fd)

    def watched(self, name: str) -> bool:
        """Whether ``name``'s exit comes as an event (it has a descriptor)."""
        return name in self._fds

    def wake(self) -> None:
        """Wake the loop now (any thread, or a signal handler: one non-blocking write); a no-op
        before :meth:`open` (no loop is waiting)."""
        if self._write < 0:
            return
        try:
            os.write(self._write, b"\0")
        except (BlockingIOError, OSError):  # full: a wake-up is pending anyway; closed: the loop is over
            pass

    def wait(self, timeout_s: float) -> bool:
        """Sleep until an exit descriptor or the wake-up pipe is readable, at most ``timeout_s``
        seconds; nothing is consumed (:meth:`ready` takes it). Returns True when woken early."""
        return bool(self.open().select(max(0.0, timeout_s)))

    def ready(self) -> list[str]:
        """The tasks whose descriptor is readable now (their process exited), without waiting;
        drains the wake-up pipe."""
        names: list[str] = []
        if self._selector is None:
            return names
        for key, _ in self._selector.select(0):
            if key.data:
                names.append(key.data)
            else:
                try:
                    while os.read(self._read, 4096):
                        pass
                except BlockingIOError:
                    pass
        return names

    def exited(self) -> bool:
        """Whether an exit descriptor is readable now (a task exited since the last :meth:`ready`),
        without waiting; consumes nothing, and a wake-up alone does not count. One
        ``epoll_wait`` with no timeout: O(ready descriptors), not O(watched), so the loop can ask
        between slices of its work (:data:`LOOK_EVERY`)."""
        if self._selector is None:
            return False
        return any(key.data for key, _ in self._selector.select(0))

    def to_poll(self, live: Callable[[str], bool]) -> list[str]:
        """The tasks to poll this tick: those whose descriptor fired, and every task without one
        (``live(name)`` false: forgotten, not returned)."""
        names = self.ready()
        for name in list(self.polled):
            if live(name):
                names.append(name)
            else:
                self.polled.discard(name)
        return names

    def close(self) -> None:
        """Close every exit descriptor (the loop is over). The wake-up pipe lives as long as this
        object: another thread may still :meth:`wake` it (a late stop request)."""
        for name in list(self._fds):
            self.forget(name)

    def __del__(self) -> None:
        if self._selector is not None:
            self._selector.close()
            for fd in (self._read, self._write):
                os.close(fd)
