"""Task side of fault injection: fires the faults the orchestrator put in ``ORCH_FAULTS``.

The syntax and the parsing (``--inject-fault``) are in :mod:`orchestrator.spec.faults`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from orchestrator import env
from orchestrator.spec.faults import ENV


class InjectedFault(RuntimeError):
    """Raised in the training loop by a ``raise`` fault."""


class FaultInjector:
    """Task side: fires the faults of ``ORCH_FAULTS`` that match this attempt.

    Args:
        raw: the ``ORCH_FAULTS`` JSON ("" for none).
        attempt: this task's attempt.
    """

    def __init__(self, raw: str, attempt: int) -> None:
        faults = json.loads(raw) if raw else []
        self._step_faults = [f for f in faults if f["attempt"] == attempt and f["trigger"] == "step"]
        self._time_faults = [f for f in faults if f["attempt"] == attempt and f["trigger"] == "time"]

    @classmethod
    def from_env(cls) -> "FaultInjector":
        return cls(os.environ.get(ENV, ""), int(os.environ.get(env.ATTEMPT, "0")))

    def start_timers(self) -> None:
        """Arm the ``time=`` faults (daemon timers from now)."""
        for fault in self._time_faults:
            timer = threading.Timer(fault["at"], self._fire, args=(fault,))
            timer.daemon = True
            timer.start()

    def on_step(self, step: int) -> None:
        """Call after each training step; fires ``step=`` faults whose step has come."""
        for fault in list(self._step_faults):
            if step >= fault["at"]:
                self._step_faults.remove(fault)
                self._fire(fault)

    @staticmethod
    def _fire(fault: dict) -> None:
        line = f"injecting fault: {fault['kind']} at {fault['trigger']}={fault['at']:g} (unix {time.time():.3f})"
        print(line, flush=True)
        print(line, file=sys.stderr, flush=True)  # so the failure report's stderr tail shows it
        kind = fault["kind"]
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "exit":
            os._exit(fault["exit_code"])
        elif kind == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif kind == "hang":
            while True:  # blocks this thread only; heartbeats continue
                time.sleep(3600)
        elif kind == "raise":
            raise InjectedFault(f"injected fault at {fault['trigger']}={fault['at']:g}")
