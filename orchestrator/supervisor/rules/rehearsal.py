"""Rehearsals (``--inject-fault``) that test nothing, said as soon as it is known.

A ``step=N`` fault fires from the steps the task's program reports (the built-in worker,
``orchestrator.client.report(step=...)``, the Keras callback): a program that reports no step
can never fire it. The supervisor says so, once per fault, as soon as it is known
(:func:`never_fires`): the targeted attempt ended without sending a step, or it has run
:data:`NO_STEP_WARNING_S` without one; with the fix (``@time=S``, or ``report(step=)``).

A job that succeeded while one of its injected faults never fired tested nothing: the CLI
exits :data:`~orchestrator.supervisor.records.states.EXIT_UNTESTED` (3), not 0
(docs/failure-handling.md, "Rehearsing failures"). Whether a fault fired is read from the
attempt's logs, where the task prints ``injecting fault: KIND at TRIGGER=N`` when it fires one
(:func:`orchestrator.task.faults.announce`): once, when the attempt it targets has ended (a
``kill`` leaves no heartbeat to say it), and kept in the run record (:class:`FaultRecord`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.plan import Plan, task_dir
from orchestrator.spec.faults import ENV as FAULTS_ENV
from orchestrator.spec.faults import Fault, decode
from orchestrator.supervisor.records.states import EXIT_FAILED, EXIT_SUCCEEDED, EXIT_UNTESTED, JobState

NO_STEP_WARNING_S = 30.0
"""Seconds a task may run without sending a step before its pending ``step=`` faults are said
never to fire (a program's first step rarely comes later: TensorFlow's import and a small
model's build take ~10 s on one core)."""


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault as the run record keeps it (``summary.json``'s ``faults``).

    Attributes:
        fault: its name as ``--inject-fault`` takes it (:func:`fault_name`).
        fired: whether it fired; known once the attempt it targets has ended (its logs are
            read then, once), False before.
    """

    fault: str
    fired: bool

    def to_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "fired": self.fired}


def fault_name(fault: Fault) -> str:
    """``worker:0:kill@step=5`` (``,attempt=N`` after the first attempt), as ``--inject-fault`` takes it."""
    return fault.name


def planned_faults(plan: Plan) -> list[Fault]:
    """Every injected fault of the plan (the ``ORCH_FAULTS`` of each task's env, less the relayed
    faults its gate holds to hand over), in plan order."""
    return [fault for tp in plan.tasks for fault in decode(tp.env.get(FAULTS_ENV, "")) if fault.task == tp.task]


def fired(plan: Plan, fault: Fault) -> bool:
    """Whether ``fault`` fired: its ``injecting fault: ...`` line is in the logs of the attempt
    it targets (reads them: the supervisor asks once, when that attempt has ended)."""
    directory = task_dir(plan.run_dir, fault.attempt, fault.task)
    line = f"injecting fault: {fault.kind} at {fault.when}"
    for name in ("stdout.log", "stderr.log"):
        try:
            if line in (directory / name).read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            pass
    return False


def never_fires(name: str, fault: Fault, *, attempt: int, saw_step: bool, ended: bool,
                ran_s: float) -> str | None:
    """Why the ``step=`` fault ``fault`` can never fire, when that is known now; None while it
    still may (or for a ``time=`` fault, or another attempt's).

    Args:
        name: the name (``worker-0``) of the task whose steps fire it: the fault's own, or for a
            fault handed over (``fault.relay``), the job's gate's.
        fault: the fault.
        attempt: that task's current attempt (a gate's hands over to any attempt of the fault's task).
        saw_step: that attempt reported a training step.
        ended: that attempt has ended.
        ran_s: seconds since that attempt started.
    """
    if fault.trigger != "step" or (fault.attempt != attempt and not fault.relay) or saw_step:
        return None
    if ended:
        why = f"{name} (attempt {attempt}) ended without ever sending a step"
    elif ran_s >= NO_STEP_WARNING_S:
        why = f"{name} has run {ran_s:.0f} s without sending a step"
    else:
        return None
    owner = fault.task.name if fault.relay else name
    via = f" ({name} is the job's gate: its steps hand {owner}'s step faults over)" if fault.relay else ""
    return (f"WARNING: the injected fault {fault.kind}@{fault.when} of {owner} will never fire: "
            f"{why}{via}, and step faults fire on the steps the program reports; report them "
            "(orchestrator.client.report(step=...) or keras_callback()), or use @time=SECONDS")


def checked_success(reason: str, formed_failure: str | None,
                    untested: Callable[[], list[str]]) -> tuple[JobState, int, str]:
    """The end of a job that met its success policy, once what it formed and tested is known.

    Args:
        reason: why it succeeded (``every chief and worker exited 0``).
        formed_failure: the formed-vs-planned mismatch that fails it
            (:attr:`orchestrator.supervisor.rules.formed.FormedCheck.failure`), None for none.
        untested: the injected faults that never fired (called only when needed: it reads logs).

    Returns:
        ``(state, exit code, reason)``: Failed (1) for a mismatch; Succeeded with exit
        :data:`~orchestrator.supervisor.records.states.EXIT_UNTESTED` (3) when a fault never fired (a
        rehearsal that tested nothing); else Succeeded (0) as it was.
    """
    if formed_failure is not None:
        return JobState.FAILED, EXIT_FAILED, formed_failure
    never = untested()
    if never:
        return (JobState.SUCCEEDED, EXIT_UNTESTED,
                f"{reason}; but the rehearsal tested nothing: {', '.join(never)} never fired")
    return JobState.SUCCEEDED, EXIT_SUCCEEDED, reason
