"""What the supervisor does about failures: decide, then restart or end the job.

The decisions are the pure functions of :mod:`~orchestrator.supervisor.decisions`
(:func:`~orchestrator.supervisor.decisions.failure_action`: restart scope, training ended, a
whole-job preemption; :func:`~orchestrator.supervisor.decisions.restart_plan`: policy, budget,
backoff); this part of the :class:`~orchestrator.supervisor.job.Supervisor` gathers their
inputs from the live records and carries the verdict out: the restart's bookkeeping (a new
attempt per task, the recovery record, the survivors of a group stopped) or the end of the job
with its root cause. It is a part of the supervisor's loop (a mixin) with one concern, read on
its own; it acts only through the loop's own methods and the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.backends.base import Backend
from orchestrator.plan import Plan
from orchestrator.spec.model import Strategy, TaskId
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import decisions, forensics, stack_rules, training_rules
from orchestrator.supervisor.decisions import RestartScope
from orchestrator.supervisor.options import LoopOptions
from orchestrator.supervisor.preemption import Preemption
from orchestrator.supervisor.recovery import Recovery, RecoveryBook, awaits_rotation
from orchestrator.supervisor.snapshot import phase_name
from orchestrator.supervisor.states import (
    EXIT_FAILED,
    Failure,
    FailureLog,
    JobState,
    TaskRuntime,
    TaskState,
    describe_exit,
)

PEERS_DUMPED = 16
"""At most this many peers of a hung MWMS trainer inside a collective are dumped to find the one
it waits for (each dump may take the stack-dump timeout): those furthest behind, oldest progress
first."""
AWAIT_SAID_AFTER_S = 1.0
"""A wait for preempted peers is said in the events once it lasts this long (seconds): the peers
normally exit within milliseconds of each other."""


class FailureHandling:
    """The failure half of the supervision loop (see the module docstring)."""

    _preempted: str = ""
    """While a restart is decided: the task that received the preemption notice, when not the cause's."""
    _awaiting: tuple[str, int] | None = None
    """The preemption exit (task, attempt) whose peers the decision waits for, once said."""

    if TYPE_CHECKING:  # the loop's records and actions this part uses
        plan: Plan
        backend: Backend[Any]
        policy: SupervisionSpec
        tasks: list[TaskRuntime]
        log: FailureLog
        book: RecoveryBook
        preemption: Preemption
        state: JobState
        restarts_used: int
        fatal: Failure | None
        _by_task: dict[TaskId, TaskRuntime]
        _restart_at: dict[str, float]
        _rotation_reported: bool
        _trained: bool
        options: LoopOptions

        def _event(self, *texts: str) -> None: ...
        def _persist(self) -> None: ...
        def _live(self) -> list[TaskRuntime]: ...
        def _preemption(self, now: float) -> None: ...
        def request_preemption(self, reason: str) -> None: ...
        def _set_state(self, state: JobState, exit_code: int | None = None, reason: str = "") -> None: ...
        def _stop(self, tasks: list[TaskRuntime], reason: str, grace_s: float | None = None) -> None: ...
        def _crash_loop(self, cause: Failure) -> str: ...

    def _awaiting_saving_peers(self, now: float) -> bool:
        """Whether the first new training failure is a preemption exit under MWMS whose peers
        are still saving and exiting (:func:`~orchestrator.supervisor.decisions.awaits_saving_peers`);
        says so once per failure, when the wait lasts :data:`AWAIT_SAID_AFTER_S`."""
        if self.state.terminal or self.preemption.requested:
            return False
        pending = [f for f in self.log.pending()
                   if f.task.task_type != "evaluator" and f.task.name not in self._restart_at]
        if not pending:
            return False
        first, trainers = pending[0], set(self.plan.spec.trainers())  # a set: O(tasks) per tick, not O(tasks^2)
        saving = [rt.task.name for rt in self._live() if rt.task in trainers and rt.task.name not in self._restart_at]
        bound = self.preemption.grace_s
        wait = decisions.awaits_saving_peers(preemption_exit=self.policy.preemption_code(first.exit_code),
                                             strategy=self.plan.spec.strategy, saving=saving,
                                             waited_s=now - first.at, bound_s=bound)
        if wait and now - first.at >= AWAIT_SAID_AFTER_S and self._awaiting != (first.task.name, first.attempt):
            self._awaiting = (first.task.name, first.attempt)  # said once, and only when it lasts
            self._event(f"{first.task.name} exited preempted {now - first.at:.1f} s ago; waiting up to {bound:g} s "
                        f"for {', '.join(saving)} to save and exit too (every MWMS worker saves when one is "
                        f"preempted; --preemption-grace)")
        return wait

    def _decide(self, now: float) -> None:
        if self._awaiting_saving_peers(now):
            return
        failures = self.log.take_new()
        if self.state is JobState.SUCCEEDED and failures:
            self.log.mark(failures, after_success=True)
            for f in failures:
                self._event(f"{f.task.name} failed after the job succeeded: {f.headline()}")
            return
        if self.state.terminal or not failures:
            return
        self._persist()
        # a failure seen while a group restart is pending is part of that restart
        failures = [f for f in failures if f.task.name not in self._restart_at]
        for f in failures:
            if f.task.task_type == "evaluator":
                self._maybe_restart(f, (f.task,), RestartScope.TASK, now, job_restart=False)
        training = [f for f in failures if f.task.task_type != "evaluator"]
        training = [training[i] for i in decisions.cause_first([f.preemption_notice for f in training])]
        if not training or self.preemption.requested:
            return
        coordinator, spec = self._by_task[self.plan.spec.coordinator], self.plan.spec
        phases = [(r.task.name, phase_name(r.current.heartbeat.heartbeat.phase) if r.current.heartbeat else None)
                  for r in (coordinator, self._by_task[training[0].task]) if r.task.task_type != "evaluator"]
        if not training[0].preemption_notice and self.policy.preemption_code(training[0].exit_code):
            noticed = [rt.task.name for rt in self.tasks if rt.task.task_type != "evaluator"
                       and rt.current.process is not None and forensics.sigterm_received(rt)]
            culprit = decisions.preempted_task(training[0].task.name, False, noticed)
            self._preempted = culprit if culprit != training[0].task.name else ""
        action = decisions.failure_action(
            [f.task for f in training], job_preempted=training[0].preemption_notice and bool(
                forensics.all_got_sigterm(self.tasks) or self.backend.job_preempted()),
            ended=decisions.training_ended(coordinator.task.name, coordinator.current.state is TaskState.SUCCEEDED,
                                           phases),
            strategy=spec.strategy, training_tasks=[rt.task for rt in self.tasks if rt.task.task_type != "evaluator"],
            trainers=spec.trainers(), coordinator=spec.coordinator, success_policy=spec.success_policy)
        if action.kind == "preempt":
            self.request_preemption("every task of the job received SIGTERM from outside (the job is preempted)")
            self._preemption(now)
        elif action.kind in ("fail", "goes-on"):
            self.log.mark(training, after_training=True)
            training = [self.log.current(f) for f in training]
            if action.kind == "fail":
                self._fail(training[action.cause], action.why)
            for f in training if action.kind == "goes-on" else ():
                self._event(f"{f.task.name} is not restarted: {action.why}")
        else:
            assert action.scope is not None
            self._maybe_restart(training[0], action.tasks, action.scope, now, job_restart=True)
        self._preempted = ""

    def _late_notice(self, rt: TaskRuntime, code: int) -> str:
        """The note when ``rt`` exited on a SIGTERM from outside after training ended
        (:func:`~orchestrator.supervisor.decisions.late_notice`), else ""."""
        if self.preemption.requested or rt.task.task_type == "evaluator" or not self.policy.preemption_code(code):
            return ""
        coordinator = self._by_task[self.plan.spec.coordinator]
        phases = [(r.task.name, phase_name(r.current.heartbeat.heartbeat.phase) if r.current.heartbeat else None)
                  for r in ((coordinator, rt) if rt is not coordinator else (rt,))]
        ended = decisions.training_ended(coordinator.task.name, coordinator.current.state is TaskState.SUCCEEDED,
                                         phases)
        return decisions.late_notice(preemption_exit=True, notice=forensics.sigterm_received(rt), ended=ended)

    def _hang_dump(self, rt: TaskRuntime, why: str) -> str:
        """Say ``rt`` is hung and take its stack dump ("" when it has ended or gave none)."""
        if rt.current.state.terminal or rt.current.process is None:
            return ""
        self._event(f"{rt.task.name} is hung: {why}; dumping its stacks, then killing it")
        return self.backend.dump_stacks(rt.current.process, self.options.stack_dump_timeout_s)

    def _waited_on(self, hung: list[tuple[TaskRuntime, str]], dumps: list[str]
                   ) -> tuple[list[tuple[TaskRuntime, str]], list[str]]:
        """``hung`` and their ``dumps``, with the live MWMS trainers that a hung one inside a
        collective waits for (:func:`~orchestrator.supervisor.stack_rules.waited_on`): hung too,
        though their own stall deadline has not come yet."""
        if self.plan.spec.strategy is not Strategy.MULTI_WORKER_MIRRORED or not any(dumps):
            return hung, dumps
        names, trainers = {rt.task.name for rt, _ in hung}, set(self.plan.spec.trainers())
        peers = sorted((rt for rt in self.tasks if rt.task in trainers and rt.live and rt.task.name not in names
                        and rt.current.process is not None and rt.current.finished_at is None),
                       key=lambda rt: (rt.current.last_step or 0, rt.current.progress_at or 0.0))[:PEERS_DUMPED]
        peer_dumps = [self.backend.dump_stacks(rt.current.process, self.options.stack_dump_timeout_s)
                      for rt in peers if rt.current.process is not None]
        waiter = hung[0][0].task.name
        found = stack_rules.waited_on(dumps, peer_dumps)
        for i in found:
            self._event(f"{peers[i].task.name} is what {waiter} waits for in a collective; killing it too")
        return (hung + [(peers[i], f"{waiter} waits in a collective for it (step {peers[i].current.last_step})")
                        for i in found], dumps + [peer_dumps[i] for i in found])

    def _uneven_data(self, cause: Failure) -> str:
        """Why ``cause`` is uneven data across MWMS workers (a peer finished while its task still
        trained: :func:`~orchestrator.supervisor.training_rules.uneven_data`), "" when it is not."""
        trainers, a = set(self.plan.spec.trainers()), self._by_task[cause.task].current
        finished = sorted((rt.current.ended_at or 0.0, rt.task.name, rt.current.last_step) for rt in self.tasks
                          if rt.task in trainers and rt.task != cause.task and rt.current.state is TaskState.SUCCEEDED)
        return training_rules.uneven_data(
            self.plan.spec.strategy is Strategy.MULTI_WORKER_MIRRORED, cause.task.name, a.last_step,
            phase_name(a.heartbeat.heartbeat.phase) if a.heartbeat else None,
            stuck=cause.message.startswith("hung: ") or bool(cause.peer_error),
            finished=[(name, step) for _, name, step in finished]) or ""

    def _fail(self, cause: Failure, why_not: str) -> None:
        """End the job as Failed because of ``cause``, the failure that ended it (the root cause)."""
        self.fatal = self.log.current(cause)
        self._set_state(JobState.FAILED, EXIT_FAILED, f"{cause.headline()}; {why_not}")
        self._stop(self._live(), f"stopped: {cause.task.name} failed")

    def _maybe_restart(self, cause: Failure, tasks: tuple[TaskId, ...], scope: RestartScope, now: float,
                       job_restart: bool) -> None:
        """Restart ``tasks`` after ``cause`` if the policy allows; otherwise fail the job (or,
        for the evaluator, which never fails the job, leave it ended). A preemption is never
        counted against ``max_restarts`` and never waits a backoff."""
        failed = self._by_task[cause.task]
        looping = (self._crash_loop(cause) or self._uneven_data(cause)  # no restart helps either
                   or training_rules.shm_exhausted(cause.exit_code) or "")
        plan = decisions.RestartPlan(False, looping) if looping else decisions.restart_plan(
            self.policy, cause.task.task_type, cause.exit_code, task_name=cause.task.name,
            restarts_used=self.restarts_used if job_restart else failed.restarts, attempt=failed.current.number,
            peer=cause.peer_error, gpu_oom=cause.gpu_oom is not None)
        placeable, note = (plan.retry, plan.why_not)
        if plan.retry:
            placeable, note = self.backend.prepare_restart(tasks)  # e.g. Slurm: move tasks off a lost node
        if not placeable:
            if job_restart:
                self._fail(cause, note)
            else:
                self._event(f"{cause.task.name} is not restarted: {note}; the job goes on")
            return
        if note:
            self._event(note)
        if job_restart and plan.counted:  # the evaluator's restarts are its own; they never use up the job's
            self.restarts_used += 1
        names = [t.name for t in tasks]
        self._trained = False
        coordinator = self._by_task.get(self.plan.spec.coordinator)
        await_rotation = self._rotation_reported and awaits_rotation(tasks, coordinator)
        culprit = self._preempted
        self.book.open(Recovery(cause=cause, scope=scope, tasks=names, detected_at=now, await_rotation=await_rotation,
                                preempted=culprit))
        if scope is RestartScope.GROUP:
            self._set_state(JobState.RESTARTING)
            # the survivors' state is discarded anyway: SIGKILL at once, no SIGTERM grace
            self._stop(self._live(), f"stopped for a group restart after {cause.task.name} failed", grace_s=0.0)
        self._event(f"{plan.label}: {', '.join(names)} in {plan.delay_s:.1f} s "
                    f"({scope.value} restart after {cause.task.name} failed, {describe_exit(cause.exit_code)}"
                    + (f"; {culprit} was the one preempted" if culprit else "") + ")")
        for task in tasks:
            rt = self._by_task[task]
            if rt.current.process is not None:  # not already waiting for its next attempt
                rt.next_attempt()
                self.backend.reserve_again(rt.task)
            self._restart_at[rt.task.name] = now + plan.delay_s
        self._persist()
