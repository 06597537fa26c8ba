"""Fault injection, for users rehearsing recovery and for tests: ``--inject-fault``.

Syntax: ``TASK:KIND@TRIGGER[,attempt=N]``

* ``TASK``: ``worker:1``, ``chief:0``, ``ps:0`` ...
* ``KIND``: ``kill`` (SIGKILL itself), ``exit=N`` (exit with code N at once),
  ``raise`` (raise an exception in the training loop: an error file is written),
  ``hang`` (block the training loop; heartbeats go on, steps stop),
  ``stop`` (SIGSTOP itself: the whole process freezes, heartbeats stop too),
  ``term`` (SIGTERM as a preemption sends it: from outside the orchestrator, without its
  stop marker; the task checkpoints at the next step and exits 143).
* ``TRIGGER``: ``step=N`` (after training step N: chief/worker running the built-in
  program, or a user's program reporting steps through :mod:`orchestrator.client`) or
  ``time=S`` (S seconds after the task started; any task, not ``raise``; for a user's
  program only ``kill``, ``exit=N``, ``stop`` and ``term``, fired by its wrapper
  :mod:`orchestrator.task.execwrap`).
* ``attempt=N``: which attempt it hits (default 0, so a restarted task runs clean).

Example: ``--inject-fault worker:1:kill@step=20``.

This module is the fault *spec*, shared data: the control plane parses and checks faults
and hands each task its own as ``ORCH_FAULTS`` (:func:`encode`); the task side fires them
(:mod:`orchestrator.task.faults`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.model import TaskId

ENV = "ORCH_FAULTS"
KINDS = ("kill", "exit", "raise", "hang", "stop", "term")
_RE = re.compile(
    r"^(?P<task>[a-z]+[:\-]\d+):(?P<kind>[a-z]+)(?:=(?P<code>\d+))?@(?P<trigger>step|time)=(?P<at>\d+(?:\.\d+)?)"
    r"(?:,attempt=(?P<attempt>\d+))?$"
)
_FIX = ("write TASK:KIND@TRIGGER, e.g. worker:1:kill@step=20 or ps:0:exit=3@time=5 "
        "(kinds: kill, exit=N, raise, hang, stop, term)")


@dataclass(frozen=True)
class Fault:
    """One fault to inject.

    Attributes:
        task: the task it hits.
        kind: kill | exit | raise | hang | stop | term.
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
            raise SpecError("inject-fault", text, "exit needs a code and only exit takes one",
                            "write exit=N, e.g. exit=3")
        code = int(m.group("code") or 0)
        if kind == "exit" and not 0 < code < 256:
            raise SpecError("inject-fault", text, "exit code must be 1..255", "e.g. exit=3")
        if kind == "raise" and m.group("trigger") == "time":
            raise SpecError("inject-fault", text, "raise needs a step trigger", "use raise@step=N")
        return cls(task, kind, m.group("trigger"), float(m.group("at")), code, int(m.group("attempt") or 0))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"] = str(self.task)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Fault":
        """The fault of one :meth:`to_json` dict (an ``ORCH_FAULTS`` entry)."""
        return cls(TaskId.parse(str(d["task"]), "inject-fault"), str(d["kind"]), str(d["trigger"]), float(d["at"]),
                   int(d.get("exit_code", 0)), int(d.get("attempt", 0)))

    @property
    def when(self) -> str:
        """``step=20``, ``time=2.5``: the trigger as the fault's lines say it."""
        return f"{self.trigger}={self.at:g}"


def check_tasks(faults: list[Fault], tasks: list[TaskId]) -> None:
    """Raises SpecError when a fault names a task that is not in ``tasks``."""
    for fault in faults:
        if fault.task not in tasks:
            raise SpecError(
                "inject-fault", str(fault.task), "the job has no such task",
                "name one of: " + ", ".join(map(str, tasks)),
            )


def encode(faults: list[Fault]) -> str:
    """The ``ORCH_FAULTS`` value for a task: JSON list of its faults."""
    return json.dumps([f.to_json() for f in faults])


def decode(raw: str) -> list[Fault]:
    """The faults of an ``ORCH_FAULTS`` value (``""``: none); the inverse of :func:`encode`."""
    return [Fault.from_json(d) for d in json.loads(raw)] if raw else []


def untestable(fault: Fault, serves_forever: bool, user_program: bool) -> str | None:
    """Why ``fault`` as asked cannot test anything, said at launch (a plan warning); None when it can.

    * A ``step=N`` trigger fires from the steps the task itself reports: a ps, a
      ParameterServerStrategy worker (both serve, ``serves_forever``) and the evaluator report
      none, so it never fires and the rehearsal ends untested (exit 3).
    * A ``hang`` with a ``time=S`` trigger blocks the timer thread that fires it: on a task whose
      work is not that thread's (every task: the timer is a thread of its own), the task goes on
      serving or evaluating and nothing is tested; ``stop`` (SIGSTOP: the whole process) is what
      freezes it.
    * A user's program's ``time=`` faults are fired by its wrapper, from outside the program:
      ``hang`` cannot be (``kill``, ``exit=N``, ``stop``, ``term`` can).

    Args:
        fault: the parsed fault.
        serves_forever: its task only serves (a ps, a PSS worker).
        user_program: its task runs a user's program.
    """
    kind = f"exit={fault.exit_code}" if fault.kind == "exit" else fault.kind
    name = f"{fault.task}:{kind}@{fault.trigger}={fault.at:g}"
    stepless = serves_forever or fault.task.task_type == "evaluator"
    if fault.trigger == "step" and stepless:
        role = "an evaluator" if fault.task.task_type == "evaluator" else f"a serving {fault.task.task_type}"
        return (f"{name} never fires: {role} reports no training step, so the rehearsal would test nothing (exit "
                f"3); trigger it by time instead (@time=S)")
    if fault.kind == "hang" and fault.trigger == "time":
        what = "its wrapper cannot hang the program" if user_program else \
            "it blocks only the timer thread that fires it, and the task goes on"
        return (f"{name} tests nothing: {what}; use stop@time={fault.at:g} (SIGSTOP freezes the whole process) "
                f"or a step trigger on a training task")
    return None
