"""Fault injection, for users rehearsing recovery and for tests: ``--inject-fault``.

Syntax: ``TASK:KIND@TRIGGER[,attempt=N]``

* ``TASK``: ``worker:1``, ``chief:0``, ``ps:0`` ...
* ``KIND``: ``kill`` (SIGKILL itself), ``exit=N`` (exit with code N at once),
  ``raise`` (raise an exception in the training loop: an error file is written),
  ``hang`` (block the training loop; heartbeats go on, steps stop),
  ``stop`` (SIGSTOP itself: the whole process freezes, heartbeats stop too).
* ``TRIGGER``: ``step=N`` (after training step N; chief/worker running the built-in
  program) or ``time=S`` (S seconds after the task started; any task, not ``raise``).
* ``attempt=N``: which attempt it hits (default 0, so a restarted task runs clean).

Example: ``--inject-fault worker:1:kill@step=20``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass

from orchestrator.errors import SpecError
from orchestrator.spec.model import TaskId

ENV = "ORCH_FAULTS"
KINDS = ("kill", "exit", "raise", "hang", "stop")
_RE = re.compile(
    r"^(?P<task>[a-z]+[:\-]\d+):(?P<kind>[a-z]+)(?:=(?P<code>\d+))?@(?P<trigger>step|time)=(?P<at>\d+(?:\.\d+)?)"
    r"(?:,attempt=(?P<attempt>\d+))?$"
)
_FIX = "write TASK:KIND@TRIGGER, e.g. worker:1:kill@step=20 or ps:0:exit=3@time=5 (kinds: kill, exit=N, raise, hang, stop)"


@dataclass(frozen=True)
class Fault:
    """One fault to inject.

    Attributes:
        task: the task it hits.
        kind: kill | exit | raise | hang | stop.
        exit_code: for ``exit``.
        trigger: ``step`` or ``time``.
        at: the step number, or seconds after the task started.
        attempt: the attempt it hits.
    """

    task: TaskId
    kind: str
    trigger: str
    at: float
    exit_code: int = 0
    attempt: int = 0

    @classmethod
    def parse(cls, text: str) -> "Fault":
        """Parse one ``--inject-fault`` value.

        Raises:
            SpecError: naming ``inject-fault`` and the expected syntax.
        """
        m = _RE.match(str(text).strip())
        if not m:
            raise SpecError("inject-fault", text, "not a fault", _FIX)
        task = TaskId.parse(m.group("task"), "inject-fault")
        kind = m.group("kind")
        if kind not in KINDS:
            raise SpecError("inject-fault", text, f"unknown kind {kind!r}", _FIX)
        if (kind == "exit") != (m.group("code") is not None):
            raise SpecError("inject-fault", text, "exit needs a code and only exit takes one", "write exit=N, e.g. exit=3")
        code = int(m.group("code") or 0)
        if kind == "exit" and not 0 < code < 256:
            raise SpecError("inject-fault", text, "exit code must be 1..255", "e.g. exit=3")
        if kind == "raise" and m.group("trigger") == "time":
            raise SpecError("inject-fault", text, "raise needs a step trigger", "use raise@step=N")
        return cls(task, kind, m.group("trigger"), float(m.group("at")), code, int(m.group("attempt") or 0))

    def to_json(self) -> dict:
        d = asdict(self)
        d["task"] = str(self.task)
        return d


def check_tasks(faults: list[Fault], tasks: list[TaskId]) -> None:
    """Raises SpecError when a fault names a task that is not in ``tasks``."""
    for fault in faults:
        if fault.task not in tasks:
            raise SpecError(
                "inject-fault", str(fault.task), "the job has no such task", "name one of: " + ", ".join(map(str, tasks))
            )


def encode(faults: list[Fault]) -> str:
    """The ``ORCH_FAULTS`` value for a task: JSON list of its faults."""
    return json.dumps([f.to_json() for f in faults])


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
        return cls(os.environ.get(ENV, ""), int(os.environ.get("ORCH_ATTEMPT", "0")))

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
