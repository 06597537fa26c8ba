"""A task process's lifetime: it dies with the orchestrator (``PR_SET_PDEATHSIG``, Linux; checked
once after it is set) and dumps every thread's stack to stderr on ``SIGUSR1`` (the orchestrator
asks before it kills a hung task) and on fatal signals (``faulthandler``)."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys

from orchestrator.task.context import TaskContext

_PR_SET_PDEATHSIG = 1


def die_with_orchestrator(orchestrator_pid: int, signum: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``signum`` (default SIGKILL) to this process when its parent
    dies (Linux ``PR_SET_PDEATHSIG``).

    The parent must be the orchestrator (the local backend starts tasks directly).
    If the orchestrator is already gone when this runs, exit at once.
    """
    if orchestrator_pid <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != orchestrator_pid:
        os._exit(137)


def install(context: TaskContext) -> None:
    """Prepare the task process: parent-death signal, stack dumps on SIGUSR1, fatal-signal dumps."""
    die_with_orchestrator(context.orchestrator_pid)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)
