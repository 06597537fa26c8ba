"""Task side of fault injection: fires the faults the orchestrator put in ``ORCH_FAULTS``.

The syntax, the parsing (``--inject-fault``) and the record (:class:`~orchestrator.spec.faults.Fault`)
are in :mod:`orchestrator.spec.faults`. Who fires what:

* the built-in programs (:func:`orchestrator.task.runtime.run_task`): ``time=`` faults from
  a timer thread, ``step=`` faults from the training loop (:class:`worker.progress.Progress`);
* a user's program: ``time=`` faults (``kill``, ``exit=N``, ``stop``) from its wrapper,
  :mod:`orchestrator.task.execwrap`, which acts on the program from outside; ``step=``
  faults from :func:`orchestrator.client.report` and the Keras callback.

Every fault that fires first prints one line, to stdout and to stderr (flushed)::

    injecting fault: KIND at TRIGGER=N (unix T)

e.g. ``injecting fault: kill at time=2 (unix 1718000000.123)``. The control plane looks for
it in an attempt's logs to tell which faults fired: keep the format stable (:func:`announce`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from orchestrator import env
from orchestrator.spec.faults import ENV, Fault, decode


class InjectedFault(RuntimeError):
    """Raised in the training loop by a ``raise`` fault."""


def announce(fault: Fault) -> None:
    """Print the ``injecting fault: ...`` line of ``fault`` to stdout and stderr (flushed)."""
    line = f"injecting fault: {fault.kind} at {fault.when} (unix {time.time():.3f})"
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)  # so the failure report's stderr tail shows it


def without_time_faults(raw: str) -> str:
    """``raw`` (an ``ORCH_FAULTS`` value) without its ``time=`` faults: what a wrapper that
    fires those itself passes on to the program it runs."""
    return json.dumps([f.to_json() for f in decode(raw) if f.trigger != "time"])


class FaultInjector:
    """Task side: fires the faults of ``ORCH_FAULTS`` that match this attempt.

    Args:
        raw: the ``ORCH_FAULTS`` JSON ("" for none).
        attempt: this task's attempt.
    """

    def __init__(self, raw: str, attempt: int) -> None:
        faults = [f for f in decode(raw) if f.attempt == attempt]
        self._step_faults = [f for f in faults if f.trigger == "step"]
        self._time_faults = [f for f in faults if f.trigger == "time"]

    @property
    def time_faults(self) -> list[Fault]:
        """This attempt's ``time=`` faults."""
        return list(self._time_faults)

    @classmethod
    def from_env(cls) -> "FaultInjector":
        return cls(env.read(ENV), env.read_int(env.ATTEMPT))

    def start_timers(self) -> None:
        """Arm the ``time=`` faults (daemon timers from now)."""
        for fault in self._time_faults:
            timer = threading.Timer(fault.at, self._fire, args=(fault,))
            timer.daemon = True
            timer.start()

    def on_step(self, step: int) -> None:
        """Call after each training step; fires ``step=`` faults whose step has come."""
        for fault in list(self._step_faults):
            if step >= fault.at:
                self._step_faults.remove(fault)
                self._fire(fault)

    @staticmethod
    def _fire(fault: Fault) -> None:
        announce(fault)
        kind = fault.kind
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "exit":
            os._exit(fault.exit_code)
        elif kind == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif kind == "term":  # a preemption: SIGTERM without the orchestrator's stop marker
            os.kill(os.getpid(), signal.SIGTERM)
        elif kind == "hang":
            while True:  # blocks this thread only; heartbeats continue
                time.sleep(3600)
        elif kind == "raise":
            raise InjectedFault(f"injected fault at {fault.when}")
