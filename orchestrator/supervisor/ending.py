"""How tasks end once their work is done, or can never be done: the evaluator's grace, a task
stuck in its exit, a crash loop. A part of the :class:`~orchestrator.supervisor.job.Supervisor`
(a mixin, as :mod:`~orchestrator.supervisor.failures`): it decides by the pure rules of
:mod:`~orchestrator.supervisor.exitrules` and acts through the loop's own methods and the backend.

* The evaluator gets ``evaluator_grace_s`` after the job succeeded to evaluate the last
  checkpoint; still running then, it is stopped and the report says ``final evaluation lost``.
* A finished task (phase ``done``, or exiting after training ended) still alive
  ``exit_grace_s`` later is stuck in its exit: its stacks are kept, it is killed, and it counts
  as succeeded (its work is done) with a warning naming the thread it was stuck in.
* The same exception line on ``crash_loop_limit`` consecutive attempts of a task is a crash
  loop: no further restart; an evaluator that then never evaluated is a warning.

Every warning goes to the live view as an event and into the snapshot's ``warnings`` (the final
report's ``warning`` lines, ``summary.json``'s ``warnings``).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

from orchestrator.supervisor import decisions, exitrules, forensics
from orchestrator.supervisor.states import EXIT_SUCCEEDED, Failure, FailureLog, JobState, TaskRuntime, TaskState

if TYPE_CHECKING:
    from orchestrator.backends.base import Backend
    from orchestrator.plan import Plan
    from orchestrator.spec.supervision import SupervisionSpec
    from orchestrator.supervisor.options import LoopOptions

EVALUATION_LOST = "final evaluation lost"
"""The words the report uses for an evaluator stopped before it finished its last evaluation."""


class EndHandling:
    """The ending half of the supervision loop (see the module docstring)."""

    if TYPE_CHECKING:  # the loop's records and actions this part uses
        plan: Plan
        backend: Backend[Any]
        policy: SupervisionSpec
        options: LoopOptions
        tasks: list[TaskRuntime]
        log: FailureLog
        state: JobState
        warnings: list[str]
        _evaluator_deadline: float | None
        _grace_deadline: float | None
        _trainers_deadline: float | None

        def _event(self, *texts: str) -> None: ...
        def _live(self) -> list[TaskRuntime]: ...
        def _stop(self, tasks: list[TaskRuntime], reason: str, grace_s: float | None = None) -> None: ...
        def _set_state(self, state: JobState, exit_code: int | None = None, reason: str = "") -> None: ...

    def _task_succeeded(self, rt: TaskRuntime, now: float) -> None:
        """``rt``'s attempt succeeded (exit 0, or finished and killed in its exit): the job
        succeeds when its success policy is met; serving tasks are stopped at once, the other
        trainers get ``success_grace_s``, the evaluator ``evaluator_grace_s``."""
        spec = self.plan.spec
        if self.state.terminal:
            return
        succeeded = {t.task for t in self.tasks if t.current.state is TaskState.SUCCEEDED}
        if decisions.success_reached(spec.success_policy, spec.coordinator, spec.trainers(), succeeded):
            self._trainers_deadline = None
            self._set_state(JobState.SUCCEEDED, EXIT_SUCCEEDED, decisions.success_reason(
                spec.success_policy, spec.coordinator, spec.trainers()))
            self._stop([r for r in self._live() if r.plan.serves_forever],
                       f"stopped after {spec.coordinator.name} succeeded (it serves until stopped)")
            self._grace_deadline = now + self.options.success_grace_s
            self._evaluator_deadline = now + self.policy.evaluator_grace_s
        elif decisions.ends_job_successfully(rt.task, decisions.ExitVerdict(TaskState.SUCCEEDED), spec.coordinator):
            self._trainers_deadline = now + self.options.success_grace_s

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        self._event(f"WARNING: {text}")  # as every live warning says it

    # -- the evaluator's grace ---------------------------------------------------------------
    def _evaluator_grace_over(self, now: float) -> None:
        """After the job succeeded: once ``evaluator_grace_s`` passed, stop the evaluator that
        is still evaluating, and say its final evaluation was lost."""
        if self._evaluator_deadline is None or now < self._evaluator_deadline:
            return
        self._evaluator_deadline = None
        grace = self.policy.evaluator_grace_s
        for rt in [r for r in self._live() if r.task.task_type == "evaluator"]:
            step = rt.current.heartbeat.heartbeat.metrics.get("evaluated_step") if rt.current.heartbeat else None
            last = f"its last result is of step {int(step)}" if step is not None else "it reported no result"
            self._warn(f"{rt.task.name}: {EVALUATION_LOST}: still evaluating {grace:g} s after the job succeeded "
                       f"(evaluator grace {grace:g} s, --evaluator-grace); {last}")
            self._stop([rt], f"stopped: still evaluating {grace:g} s after the job succeeded ({EVALUATION_LOST})")

    # -- a task stuck in its exit --------------------------------------------------------------
    def _stuck_in_exit(self, rt: TaskRuntime, now: float, why: str) -> None:
        """``rt`` finished its work but its process does not end: keep its stacks, kill it,
        and count it as succeeded, with a warning naming the thread it is stuck in."""
        a = rt.current
        assert a.process is not None
        dump = self.backend.dump_stacks(a.process, self.options.stack_dump_timeout_s)
        stacks = forensics.keep_stacks(rt, dump)
        message = a.heartbeat.heartbeat.message if a.heartbeat else ""
        waits_for = message.split("waiting for non-daemon thread(s): ", 1)[1].split(", ") \
            if "waiting for non-daemon thread(s): " in message else []
        where = exitrules.stuck_thread(dump, waits_for) or (
            f"non-daemon thread(s) {', '.join(waits_for)}" if waits_for else "an unknown place (no stack dump)")
        self.backend.signal(a.process, signal.SIGKILL)
        a.exit_code, a.ended_at = self.backend.wait(a.process, timeout_s=10.0), now
        a.state = TaskState.SUCCEEDED
        a.reason = f"finished, then stuck in its exit: killed ({why})"
        self._warn(f"{rt.task.name} finished its work but was stuck in its exit, in {where}; killed: {why}"
                   + (f"; stack dump in {stacks}" if stacks else ""))
        self._task_succeeded(rt, now)

    # -- crash loops -----------------------------------------------------------------------------
    def _crash_loop(self, cause: Failure) -> str:
        """Why ``cause``'s task is not restarted again because it is crash-looping, "" when it is not."""
        errors = [(f.attempt, f.exception) for f in self.log.failures if f.task == cause.task]
        times = exitrules.crash_loop(errors, self.policy.crash_loop_limit)
        if not times:
            return ""
        why = (f"the same error {times} times in a row ({cause.exception}): a crash loop, a restart would fail the "
               f"same way (crash loop limit {self.policy.crash_loop_limit}, --crash-loop-limit)")
        if cause.task.task_type == "evaluator" and not self._evaluated(cause.task.name):
            self._warn(f"{cause.task.name} never evaluated: it failed with {why}")
        return why

    def _evaluated(self, name: str) -> bool:
        """The task reported an evaluation (``evaluated_step`` or an ``eval_*`` metric) in its
        current attempt (an earlier attempt's is in its history only as a state)."""
        rt = next(r for r in self.tasks if r.task.name == name)
        hb = rt.current.heartbeat
        return hb is not None and any(k == "evaluated_step" or k.startswith("eval_") for k in hb.heartbeat.metrics)
