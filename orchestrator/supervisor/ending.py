"""How tasks end once their work is done, or can never be done: the evaluator's grace, a task
stuck in its exit, a crash loop. A part of the supervisor
(:mod:`~orchestrator.supervisor.loop`): it decides by the pure rules of
:mod:`~orchestrator.supervisor.rules.exitrules` and :mod:`~orchestrator.supervisor.rules.decisions`, owns
the graces' deadlines, and returns what it wants done (:mod:`~orchestrator.supervisor.actions`).
It also reads what a task's exit means (:meth:`Endings.exited`).

* The evaluator gets ``evaluator_grace_s`` after the job succeeded to evaluate the last
  checkpoint; still running then, it is stopped and the report says ``final evaluation lost``.
* A finished task (phase ``done``, or exiting after training ended) still alive
  ``exit_grace_s`` later is stuck in its exit: its stacks are kept, it is killed, and it counts
  as succeeded (its work is done) with a warning naming the thread it was stuck in.

Every warning goes to the live view as an event and into the snapshot's ``warnings`` (the final
report's ``warning`` lines, ``summary.json``'s ``warnings``).
"""

from __future__ import annotations

from orchestrator.plan import Plan
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import forensics
from orchestrator.supervisor.actions import Action, End, Event, Failed, Stop, Stuck, Warn
from orchestrator.supervisor.records.snapshot import phase_name
from orchestrator.supervisor.records.states import EXIT_SUCCEEDED, JobState, TaskRuntime, TaskState, describe_exit
from orchestrator.supervisor.rules import decisions, exitrules
from orchestrator.supervisor.rules.service import restarts_alone
from orchestrator.supervisor.table import TaskTable

EVALUATION_LOST = "final evaluation lost"
"""The words the report uses for an evaluator stopped before it finished its last evaluation."""


class Endings:
    """How tasks end (see the module docstring).

    Args:
        plan: the job's plan (its spec: the success policy, the coordinator, the trainers).
        table: the job's tasks.
        success_grace_s: seconds the other trainers get to exit after the coordinator succeeded.
    """

    def __init__(self, plan: Plan, table: TaskTable, success_grace_s: float) -> None:
        self._plan, self._table, self._success_grace_s = plan, table, success_grace_s
        self._policy: SupervisionSpec = plan.spec.supervision
        self._grace_deadline: float | None = None
        self._evaluator_deadline: float | None = None
        self._trainers_deadline: float | None = None

    def exited(self, rt: TaskRuntime, code: int, now: float, state: JobState, preempting: bool) -> list[Action]:
        """``rt``'s attempt exited with ``code`` (its ``exit_code`` and ``ended_at`` set):
        stopped, succeeded (also on a SIGTERM from outside after training ended), saved on the
        preemption notice, or failed."""
        a = rt.current
        out: list[Action] = []
        verdict = decisions.classify_exit(code, stop_requested=a.stop_requested,
                                          serves_forever=rt.plan.serves_forever, task_type=rt.task.task_type)
        if left := forensics.take_left_behind(rt):
            out.append(Event(left))
        late = self._late_notice(rt, code, preempting) if verdict.state is TaskState.FAILED else ""
        if late:
            verdict = decisions.ExitVerdict(TaskState.SUCCEEDED)
        if verdict.state is TaskState.STOPPED:
            a.state = TaskState.STOPPED
            out.append(Event(f"{rt.task.name} stopped ({describe_exit(code)})"))
        elif verdict.state is TaskState.SUCCEEDED:
            a.state, a.reason = TaskState.SUCCEEDED, f"{describe_exit(code)}: {late}" if late else "exited 0"
            out.append(Event(f"{rt.task.name} succeeded" + (f" ({a.reason})" if late else "")))
            if not late and forensics.sigterm_received(rt) and not preempting:  # too late: say so
                out.append(Event(f"{rt.task.name} received SIGTERM from outside (a preemption notice) but finished "
                                 "first"))
            out += self.succeeded(rt, now, state)
        elif preempting and self._policy.preemption_code(code):
            a.state, a.reason = TaskState.STOPPED, f"saved and left on the preemption notice ({describe_exit(code)})"
            out.append(Event(f"{rt.task.name} {a.reason}"))
        else:
            message, notice = verdict.message or forensics.error_message(a.error_file), False
            if self._policy.preemption_code(code) and not message:
                message, notice = forensics.preemption_cause(rt, self._table.tasks)
            out.append(Failed(rt.task.name, code, message, preemption_notice=notice))
        return out

    def _late_notice(self, rt: TaskRuntime, code: int, preempting: bool) -> str:
        """The note when ``rt`` exited on a SIGTERM from outside after training ended
        (:func:`~orchestrator.supervisor.rules.decisions.late_notice`), else ""."""
        if preempting or restarts_alone(rt.task.task_type) or not self._policy.preemption_code(code):
            return ""
        coordinator = self._table.of(self._plan.spec.coordinator)
        phases = [(r.task.name, phase_name(r.current.heartbeat.heartbeat.phase) if r.current.heartbeat else None)
                  for r in ((coordinator, rt) if rt is not coordinator else (rt,))]
        ended = decisions.training_ended(coordinator.task.name, coordinator.current.state is TaskState.SUCCEEDED,
                                         phases)
        return decisions.late_notice(preemption_exit=True, notice=forensics.sigterm_received(rt), ended=ended)

    def succeeded(self, rt: TaskRuntime, now: float, state: JobState) -> list[Action]:
        """``rt``'s attempt succeeded (exit 0, or finished and killed in its exit): the job
        succeeds when its success policy is met; serving tasks are stopped at once, the other
        trainers get ``success_grace_s``, the evaluator ``evaluator_grace_s``."""
        spec = self._plan.spec
        if state.terminal:
            return []
        succeeded = {t.task for t in self._table if t.current.state is TaskState.SUCCEEDED}
        if decisions.success_reached(spec.success_policy, spec.coordinator, spec.trainers(), succeeded):
            self._trainers_deadline = None
            self._grace_deadline = now + self._success_grace_s
            self._evaluator_deadline = now + self._policy.evaluator_grace_s
            return [End(JobState.SUCCEEDED, EXIT_SUCCEEDED,
                        decisions.success_reason(spec.success_policy, spec.coordinator, spec.trainers())),
                    Stop(tuple(r.task.name for r in self._table.live() if r.plan.serves_forever),
                         f"stopped after {spec.coordinator.name} succeeded (it serves until stopped)")]
        if decisions.ends_job_successfully(rt.task, decisions.ExitVerdict(TaskState.SUCCEEDED), spec.coordinator):
            self._trainers_deadline = now + self._success_grace_s
        return []

    # -- the graces ----------------------------------------------------------------------------
    def trainers_overdue(self, now: float, state: JobState) -> list[Action] | None:
        """Once the coordinator succeeded and ``success_grace_s`` passed: the trainers still
        running are stuck in their exit (finished) or failed (killed). None: not due."""
        if self._trainers_deadline is None or now < self._trainers_deadline or state.terminal:
            return None
        self._trainers_deadline = None
        out: list[Action] = []
        trainers = self._plan.spec.trainers()
        for rt in self._table.live():
            if rt.task in trainers and rt.current.finished_at is not None:
                out.append(Stuck(rt.task.name, f"{now - rt.current.finished_at:.1f} s after it finished"))
            elif rt.task in trainers:
                out.append(Failed(rt.task.name, None, f"did not exit within {self._success_grace_s:g} s after "
                                  f"{self._plan.spec.coordinator.name} succeeded", killed=True))
        return out

    def success_grace_over(self, now: float, state: JobState) -> list[Action]:
        """After the job succeeded: once ``success_grace_s`` passed, stop what still runs but the evaluator."""
        if state is not JobState.SUCCEEDED or not self._grace_deadline or now < self._grace_deadline:
            return []
        names = tuple(rt.task.name for rt in self._table.live() if rt.task.task_type != "evaluator")
        return [Stop(names, f"did not exit within {self._success_grace_s:.0f} s after the job succeeded")] if names \
            else []

    def evaluator_grace_over(self, now: float, state: JobState) -> list[Action]:
        """After the job succeeded: once ``evaluator_grace_s`` passed, stop the evaluator that
        is still evaluating, and say its final evaluation was lost."""
        if state is not JobState.SUCCEEDED or self._evaluator_deadline is None or now < self._evaluator_deadline:
            return []
        self._evaluator_deadline = None
        grace = self._policy.evaluator_grace_s
        out: list[Action] = []
        for rt in [r for r in self._table.live() if r.task.task_type == "evaluator"]:
            hb = rt.current.heartbeat.heartbeat if rt.current.heartbeat else None
            step = hb.evaluated_step if hb is not None and hb.HasField("evaluated_step") else None
            last = f"its last result is of step {int(step)}" if step is not None else "it reported no result"
            out.append(Warn(f"{rt.task.name}: {EVALUATION_LOST}: still evaluating {grace:g} s after the job succeeded "
                            f"(evaluator grace {grace:g} s, --evaluator-grace); {last}"))
            out.append(Stop((rt.task.name,),
                            f"stopped: still evaluating {grace:g} s after the job succeeded ({EVALUATION_LOST})"))
        return out

    # -- a task stuck in its exit --------------------------------------------------------------
    def stuck(self, rt: TaskRuntime, now: float, why: str, dump: str, stacks: str, code: int | None,
              state: JobState) -> list[Action]:
        """``rt`` finished its work but its process did not end: it was killed (``code``) after
        its stacks were dumped (``dump``, kept in ``stacks``); it counts as succeeded, with a
        warning naming the thread it was stuck in."""
        a = rt.current
        message = a.heartbeat.heartbeat.message if a.heartbeat else ""
        waits_for = message.split("waiting for non-daemon thread(s): ", 1)[1].split(", ") \
            if "waiting for non-daemon thread(s): " in message else []
        where = exitrules.stuck_thread(dump, waits_for) or (
            f"non-daemon thread(s) {', '.join(waits_for)}" if waits_for else "an unknown place (no stack dump)")
        a.exit_code, a.ended_at = code, now
        a.state = TaskState.SUCCEEDED
        a.reason = f"finished, then stuck in its exit: killed ({why})"
        return [Warn(f"{rt.task.name} finished its work but was stuck in its exit, in {where}; killed: {why}"
                     + (f"; stack dump in {stacks}" if stacks else "")), *self.succeeded(rt, now, state)]
