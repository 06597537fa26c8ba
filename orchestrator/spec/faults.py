"""Fault injection, for users rehearsing recovery and for tests: ``--inject-fault``.

Syntax: ``TASK:KIND@TRIGGER[,attempt=N]``

* ``TASK``: ``worker:1``, ``chief:0``, ``ps:0`` ...
* ``KIND`` (each means the same on every role): ``kill`` (SIGKILL itself), ``exit=N`` (exit with
  code N at once), ``raise`` (an uncaught exception: raised in the training loop, or, fired off
  the main thread (a ps, a timer), recorded in the error file and exit 1 as one would end it),
  ``hang`` (the task's work stops while its heartbeats go on: a trainer's loop blocks, and off
  the main thread the whole process freezes (SIGSTOP) while a keeper process heartbeats for it,
  so a ps stops serving and an evaluator stops evaluating),
  ``stop`` (SIGSTOP itself: the whole process freezes, heartbeats stop too),
  ``term`` (SIGTERM as a preemption sends it: from outside the orchestrator, without its
  stop marker; the task checkpoints at the next step and exits 143),
  ``lose`` (a lost slot: the task SIGKILLs itself as ``kill`` does, and its slot is withdrawn:
  the supervisor does not restart it in place; an elastic job continues without it, and on the
  local and docker backends the slot stays withdrawn until ``resize`` gives it back; workers
  of an elastic job only, :func:`check_lose`; docs/elastic.md).
* ``TRIGGER``: ``step=N`` (after the job's training step N, whoever receives it: a trainer
  fires it on its own steps (the built-in program, or a user's program reporting steps through
  :mod:`orchestrator.client`); a task that reports no step (a ps, a ParameterServerStrategy
  worker, the evaluator, the tf.data service's) receives it from the job's *gate*, the trainer
  whose step is the job's (:func:`gate_of`), at that step: :mod:`orchestrator.task.relay`) or
  ``time=S`` (S seconds after the task started; any task; for a user's program only ``kill``,
  ``exit=N``, ``stop`` and ``term``, fired by its wrapper :mod:`orchestrator.task.execwrap`).
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
KINDS = ("kill", "exit", "raise", "hang", "stop", "term", "lose")
_RE = re.compile(
    r"^(?P<task>[a-z]+[:\-]\d+):(?P<kind>[a-z]+)(?:=(?P<code>\d+))?@(?P<trigger>step|time)=(?P<at>\d+(?:\.\d+)?)"
    r"(?:,attempt=(?P<attempt>\d+))?$"
)
_FIX = ("write TASK:KIND@TRIGGER, e.g. worker:1:kill@step=20 or ps:0:exit=3@time=5 "
        "(kinds: kill, exit=N, raise, hang, stop, term, lose)")


@dataclass(frozen=True)
class Fault:
    """One fault to inject.

    Attributes:
        task: the task it hits.
        kind: kill | exit | raise | hang | stop | term | lose.
        exit_code: for ``exit``.
        trigger: ``step`` or ``time``.
        at: the step number, or seconds after the task started.
        attempt: the attempt it hits.
        relay: for a ``step`` fault of a task that reports no step, the gate that hands it over
            at the job's step N (``chief:0``; :func:`gate_of`); "" for a fault its task fires itself.
    """

    task: TaskId
    kind: str
    trigger: str
    at: float
    exit_code: int = 0
    attempt: int = 0
    relay: str = ""

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
        return cls(task, kind, m.group("trigger"), float(m.group("at")), code, int(m.group("attempt") or 0))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"] = str(self.task)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Fault":
        """The fault of one :meth:`to_json` dict (an ``ORCH_FAULTS`` entry)."""
        return cls(TaskId.parse(str(d["task"]), "inject-fault"), str(d["kind"]), str(d["trigger"]), float(d["at"]),
                   int(d.get("exit_code", 0)), int(d.get("attempt", 0)), str(d.get("relay", "")))

    @property
    def name(self) -> str:
        """``ps:0:kill@step=5`` (``,attempt=N`` after the first attempt), as ``--inject-fault`` takes it."""
        kind = self.kind + (f"={self.exit_code}" if self.kind == "exit" else "")
        return f"{self.task}:{kind}@{self.when}" + (f",attempt={self.attempt}" if self.attempt else "")

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


def check_lose(faults: list[Fault], elastic: bool) -> None:
    """A ``lose`` fault withdraws a worker's slot, which only an elastic job's workers can do
    without (docs/elastic.md).

    Args:
        faults: the parsed faults.
        elastic: the job's workers are elastic (``--workers MIN:MAX``).

    Raises:
        SpecError: a ``lose`` fault of a task that is not a worker, or of a job whose workers
            are a plain count.
    """
    for fault in faults:
        if fault.kind != "lose":
            continue
        if fault.task.task_type != "worker":
            raise SpecError("inject-fault", fault.name, f"lose withdraws a worker's slot; {fault.task} is not a worker",
                            "name a worker, e.g. worker:1:lose@step=20")
        if not elastic:
            raise SpecError("inject-fault", fault.name, "lose needs elastic workers (the job cannot go on "
                            "without the slot)", "launch with --workers MIN:MAX, or use kill")


def encode(faults: list[Fault]) -> str:
    """The ``ORCH_FAULTS`` value for a task: JSON list of its faults."""
    return json.dumps([f.to_json() for f in faults])


def decode(raw: str) -> list[Fault]:
    """The faults of an ``ORCH_FAULTS`` value (``""``: none); the inverse of :func:`encode`."""
    return [Fault.from_json(d) for d in json.loads(raw)] if raw else []


def gate_of(trainers: list[TaskId]) -> TaskId | None:
    """The task whose training step is the job's step: the first trainer (the chief under
    ParameterServerStrategy, whose steps the coordinator counts; the chief, else worker 0, under
    MultiWorkerMirroredStrategy, whose trainers step together); None for a job without one.

    Args:
        trainers: the job's trainers in plan order (:meth:`orchestrator.spec.model.JobSpec.trainers`).
    """
    return trainers[0] if trainers else None


def relayed(fault: Fault, stepless: bool, gate: TaskId | None) -> Fault:
    """``fault`` as planned: a ``step`` fault of a task that reports no step (``stepless``) gets
    the gate that hands it over (:func:`gate_of`); any other fault is unchanged."""
    if fault.trigger != "step" or not stepless or gate is None or gate == fault.task:
        return fault
    return Fault(fault.task, fault.kind, fault.trigger, fault.at, fault.exit_code, fault.attempt, str(gate))


def untestable(fault: Fault, stepless: bool, user_program: bool, gate: TaskId | None) -> str | None:
    """Why ``fault`` as asked cannot test anything, said at launch (a plan warning); None when it can.

    * A ``step=N`` fault of a task that reports no step (``stepless``: a ps, a
      ParameterServerStrategy worker, the evaluator) is handed over by the job's gate at the
      job's step N: a job without a trainer has none; a user's program in that task takes it in
      its wrapper (:mod:`orchestrator.task.execwrap`), which fires it from outside the program
      and so cannot ``hang`` or ``raise`` it.
    * A user's program's ``time=`` faults are fired by its wrapper, from outside the program:
      ``hang`` and ``raise`` cannot be (``kill``, ``exit=N``, ``stop``, ``term`` can).

    Every other fault tests something: a ``hang`` or ``raise`` fired off the task's main thread
    (a timer, a handed-over fault) freezes the whole task while a keeper process goes on
    heartbeating for it, or ends it as an uncaught exception would
    (:mod:`orchestrator.task.faults`).

    Args:
        fault: the parsed fault.
        stepless: its task reports no training step (a ps, a PSS worker, the evaluator, the
            tf.data service's tasks).
        user_program: its task runs a user's program.
        gate: the job's gate (:func:`gate_of`).
    """
    kind = f"exit={fault.exit_code}" if fault.kind == "exit" else fault.kind
    name = f"{fault.task}:{kind}@{fault.trigger}={fault.at:g}"
    if fault.trigger == "step" and stepless:
        role = "an evaluator" if fault.task.task_type == "evaluator" else f"a serving {fault.task.task_type}"
        if gate is None:
            return (f"{name} never fires: {role} reports no training step and the job has no trainer whose step "
                    "is the job's; trigger it by time instead (@time=S)")
        if user_program and fault.kind in ("hang", "raise"):
            return (f"{name} tests nothing: {role} running your program takes the faults handed over at the job's "
                    f"step in its wrapper, which cannot {fault.kind} the program from outside; use stop@step="
                    f"{fault.at:g} (SIGSTOP freezes it) or kill, exit=N, term")
    if fault.trigger == "time" and user_program and fault.kind in ("hang", "raise"):
        return (f"{name} tests nothing: its wrapper fires time= faults from outside your program and cannot "
                f"{fault.kind} it; use stop@time={fault.at:g} (SIGSTOP freezes the whole process) or a step trigger")
    return None
