"""What the supervisor does about failures: decide, then restart or end the job.

The decisions are the pure functions of :mod:`~orchestrator.supervisor.rules.decisions`
(:func:`~orchestrator.supervisor.rules.decisions.failure_action`: restart scope, training ended, a
whole-job preemption; :func:`~orchestrator.supervisor.rules.decisions.restart_plan`: policy, budget,
backoff) and of :mod:`~orchestrator.supervisor.rules.exitrules` (a crash loop); this part of the
supervisor gathers their inputs from the live records and returns the verdict as what to do
(:mod:`~orchestrator.supervisor.actions`): a restart (:class:`~orchestrator.supervisor.actions.Restart`,
finished by :meth:`Restarts.placed` once the backend placed its tasks: the new attempts, the
recovery record, the survivors of a group stopped) or the end of the job with its root cause.
It owns the job's restart count.

The same exception line on ``crash_loop_limit`` consecutive attempts of a task is a crash loop:
no further restart; an evaluator that then never evaluated is a warning.

A ParameterServerStrategy worker of elastic workers that will not come back by a restart (a crash
loop, the restarts spent, its slot or its node lost) is parked instead, while at least MIN workers remain
(:mod:`~orchestrator.supervisor.rules.parking`): the job goes on without it, a new segment in the
life's record (:meth:`~orchestrator.supervisor.records.lives.LifeBook.resized`, which holds the parked
workers); a resize parks workers and takes them back (:meth:`Restarts.resized`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from orchestrator.plan import Plan
from orchestrator.spec.model import Strategy, TaskId
from orchestrator.supervisor import forensics
from orchestrator.supervisor.actions import (
    Action,
    Become,
    End,
    Event,
    Persist,
    Preempt,
    Resize,
    Restart,
    RestartAt,
    Stop,
    Warn,
)
from orchestrator.supervisor.records.lives import SEGMENT_PARKED, LifeBook, size_of
from orchestrator.supervisor.records.recovery import Recovery, RecoveryBook, awaits_rotation
from orchestrator.supervisor.records.snapshot import phase_name
from orchestrator.supervisor.records.states import EXIT_FAILED, Failure, FailureLog, JobState, TaskState, describe_exit
from orchestrator.supervisor.rules import decisions, exitrules, parking, training_rules
from orchestrator.supervisor.rules.decisions import RestartScope
from orchestrator.supervisor.rules.rehearsal import planned_faults
from orchestrator.supervisor.rules.resize import NODE_LOST, SLOT_LOST, slot_lost
from orchestrator.supervisor.rules.service import (
    restarts_alone,
    survives_group_restart,
    unrestarted_failure_ends_job,
)
from orchestrator.supervisor.table import TaskTable

AWAIT_SAID_AFTER_S = 1.0
"""A wait for preempted peers is said in the events once it lasts this long (seconds): the peers
normally exit within milliseconds of each other."""


class Restarts:
    """Failures and restarts (see the module docstring).

    Args:
        plan: the job's plan (its spec carries the restart policy).
        table: the job's tasks.
        log: the failures of this life.
        book: the recoveries (a restart opens one).
        restarts_used: the job's restarts so far (a resumed run's earlier lives included).
        preemption_grace_s: the longest wait for MWMS peers that save on a preemption.
        rotation_reported: PSS with the built-in coordinator (it says when a worker is back).
        lives: this life's record (a parked worker begins a segment; it holds the parked workers).
        lost_node: the lost node of a failed worker attempt (task name, attempt number) to park for it
            (:meth:`~orchestrator.supervisor.resizing.Resizing.lost_node`: Slurm), None when not lost.
    """

    def __init__(self, plan: Plan, table: TaskTable, log: FailureLog, book: RecoveryBook, *, restarts_used: int,
                 preemption_grace_s: float, rotation_reported: bool, lives: LifeBook,
                 lost_node: Callable[[str, int], str | None] = lambda task, attempt: None) -> None:
        self._plan, self._table, self._log, self._book, self._lives = plan, table, log, book, lives
        self._policy = plan.spec.supervision
        self._grace_s, self._rotation_reported = preemption_grace_s, rotation_reported
        self._lost_node = lost_node
        self.used = restarts_used
        """The job's restarts (counted ones: not the evaluator's own, not a preemption's)."""
        self._awaiting: tuple[str, int] | None = None
        """The preemption exit (task, attempt) whose peers the decision waits for, once said."""
        self._lose = {(f.task.name, f.attempt) for f in planned_faults(plan) if f.kind == "lose"}
        """The attempts an injected ``lose`` withdraws the slot of."""

    @property
    def parked(self) -> tuple[str, ...]:
        """The workers parked now (:mod:`~orchestrator.supervisor.rules.parking`), in the order parked."""
        return tuple(self._lives.life.parked)

    def _awaiting_saving_peers(self, now: float, pending: Collection[str], out: list[Action]) -> bool:
        """Whether the first new training failure is a preemption exit under MWMS whose peers
        are still saving and exiting (:func:`~orchestrator.supervisor.rules.decisions.awaits_saving_peers`);
        says so once per failure, when the wait lasts :data:`AWAIT_SAID_AFTER_S`."""
        first_of = [f for f in self._log.pending()
                    if not restarts_alone(f.task.task_type) and f.task.name not in pending]
        if not first_of:
            return False
        first, trainers = first_of[0], set(self._plan.spec.trainers())  # a set: O(tasks) per tick, not O(tasks^2)
        saving = [rt.task.name for rt in self._table.live() if rt.task in trainers and rt.task.name not in pending]
        wait = decisions.awaits_saving_peers(preemption_exit=self._policy.preemption_code(first.exit_code),
                                             strategy=self._plan.spec.strategy, saving=saving,
                                             waited_s=now - first.at, bound_s=self._grace_s)
        if wait and now - first.at >= AWAIT_SAID_AFTER_S and self._awaiting != (first.task.name, first.attempt):
            self._awaiting = (first.task.name, first.attempt)  # said once, and only when it lasts
            out.append(Event(f"{first.task.name} exited preempted {now - first.at:.1f} s ago; waiting up to "
                             f"{self._grace_s:g} s for {', '.join(saving)} to save and exit too (every MWMS worker "
                             "saves when one is preempted; --preemption-grace)"))
        return wait

    def decide(self, now: float, state: JobState, preempting: bool, pending: Collection[str],
               job_preempted: Callable[[], bool | None]) -> list[Action]:
        """What to do about the failures seen since the last decision.

        Args:
            now: orchestrator monotonic seconds.
            state: the job's state.
            preempting: a job preemption was requested.
            pending: the tasks whose restart is due (a failure of one is part of that restart).
            job_preempted: asks the engine whether it preempts the whole job (asked only when
                a training task got the preemption notice).
        """
        out: list[Action] = []
        if not state.terminal and not preempting and self._awaiting_saving_peers(now, pending, out):
            return out
        failures = self._log.take_new()
        if state is JobState.SUCCEEDED and failures:
            self._log.mark(failures, after_success=True)
            return [Event(f"{f.task.name} failed after the job succeeded: {f.headline()}") for f in failures]
        if state.terminal or not failures:
            return out
        out.append(Persist())
        # a failure seen while a group restart is pending is part of that restart
        failures = [f for f in failures if f.task.name not in pending]
        for f in failures:
            if restarts_alone(f.task.task_type):  # the evaluator, the tf.data service's tasks
                out += self._restart_or_not(f, (f.task,), RestartScope.TASK, job_restart=False, culprit="")
        training = [f for f in failures if not restarts_alone(f.task.task_type)]
        training = [training[i] for i in decisions.cause_first([f.preemption_notice for f in training])]
        if not training or preempting:
            return out
        spec, table = self._plan.spec, self._table
        coordinator = table.of(spec.coordinator)
        phases = [(r.task.name, phase_name(r.current.heartbeat.heartbeat.phase) if r.current.heartbeat else None)
                  for r in (coordinator, table.of(training[0].task)) if not restarts_alone(r.task.task_type)]
        culprit = ""
        if not training[0].preemption_notice and self._policy.preemption_code(training[0].exit_code):
            noticed = [rt.task.name for rt in table if not restarts_alone(rt.task.task_type)
                       and rt.current.process is not None and forensics.sigterm_received(rt)]
            culprit = decisions.preempted_task(training[0].task.name, False, noticed)
            culprit = culprit if culprit != training[0].task.name else ""
        action = decisions.failure_action(
            [f.task for f in training], job_preempted=training[0].preemption_notice and bool(
                forensics.all_got_sigterm(table.tasks) or job_preempted()),
            ended=decisions.training_ended(coordinator.task.name, coordinator.current.state is TaskState.SUCCEEDED,
                                           phases),
            strategy=spec.strategy,
            training_tasks=[rt.task for rt in table if not restarts_alone(rt.task.task_type)
                            and rt.task.name not in self._lives.life.held],  # held: not started, not restarted
            trainers=spec.trainers(), coordinator=spec.coordinator, success_policy=spec.success_policy)
        if action.kind == "preempt":
            out.append(Preempt("every task of the job received SIGTERM from outside (the job is preempted)"))
        elif action.kind in ("fail", "goes-on"):
            self._log.mark(training, after_training=True)
            training = [self._log.current(f) for f in training]
            if action.kind == "fail":
                out += self._fail(training[action.cause], action.why)
            out += [Event(f"{f.task.name} is not restarted: {action.why}")
                    for f in (training if action.kind == "goes-on" else ())]
        else:
            assert action.scope is not None
            out += self._restart_or_not(training[0], action.tasks, action.scope, job_restart=True, culprit=culprit)
        return out

    def _fail(self, cause: Failure, why_not: str) -> list[Action]:
        """End the job as Failed because of ``cause``, the failure that ended it (the root cause)."""
        return [End(JobState.FAILED, EXIT_FAILED, f"{cause.headline()}; {why_not}", fatal=self._log.current(cause)),
                Stop(None, f"stopped: {cause.task.name} failed")]

    def _restart_or_not(self, cause: Failure, tasks: tuple[TaskId, ...], scope: RestartScope, *, job_restart: bool,
                        culprit: str) -> list[Action]:
        """Restart ``tasks`` after ``cause`` if the policy allows (then the backend places them:
        :meth:`placed`); otherwise fail the job (or, for the evaluator, which never fails the job,
        leave it ended). A preemption is never counted against ``max_restarts`` and never waits a backoff."""
        failed = self._table.of(cause.task)
        out: list[Action] = []
        crash_loop = self._crash_loop(cause, out)  # the same error again and again: no restart helps
        looping = crash_loop or self._uneven_data(cause) or training_rules.shm_exhausted(cause.exit_code) or ""
        plan = decisions.RestartPlan(False, looping) if looping else self._plan_for(
            cause, self.used if job_restart else failed.restarts)
        if job_restart and scope is RestartScope.TASK:  # a PSS worker: park it when it will not come back
            spent = not looping and not plan.retry and self._plan_for(cause, self.used, budget=True).retry
            lost = (cause.task.name, cause.attempt) in self._lose and slot_lost(["lose"], failed.current.stop_requested)
            node = None if lost else self._lost_node(cause.task.name, cause.attempt)
            fate = parking.worker_fate(
                strategy=self._plan.spec.strategy, task_types=tuple(t.task_type for t in tasks),
                elastic_min=None if self._plan.spec.elastic is None else self._plan.spec.elastic.min,
                workers_now=self._plan.spec.workers - len(self._lives.life.idle), retry=plan.retry,
                why_not=plan.why_not,
                gone=parking.LOST if lost else parking.NODE_LOST if node else parking.CRASH_LOOP if crash_loop
                else parking.RESTARTS_SPENT if spent else "")
            if fate.kind == parking.PARK:
                return out + self._park(cause, tasks, fate.why, SLOT_LOST if lost else NODE_LOST if node
                                        else SEGMENT_PARKED)
            plan = plan if fate.kind == parking.RESTART else replace(plan, why_not=fate.why)
        if plan.retry:
            return out + [Restart(cause, tasks, scope, job_restart, plan.counted, plan.delay_s, plan.label, culprit)]
        return out + self.placed(Restart(cause, tasks, scope, job_restart, plan.counted, plan.delay_s, plan.label,
                                         culprit), False, plan.why_not, 0.0)

    def _plan_for(self, cause: Failure, restarts_used: int, budget: bool = False) -> decisions.RestartPlan:
        """:func:`~orchestrator.supervisor.rules.decisions.restart_plan` for ``cause``; ``budget``: as if
        one restart were left (whether the restart policy alone would retry it)."""
        policy = replace(self._policy, max_restarts=restarts_used + 1) if budget else self._policy
        return decisions.restart_plan(policy, cause.task.task_type, cause.exit_code, task_name=cause.task.name,
                                      restarts_used=restarts_used, attempt=self._table.of(cause.task).current.number,
                                      peer=cause.peer_error, gpu_oom=cause.gpu_oom is not None)

    def _park(self, cause: Failure, tasks: tuple[TaskId, ...], why: str, segment: str) -> list[Action]:
        """Park ``tasks`` after ``cause`` (``why``: :func:`~orchestrator.supervisor.rules.parking.worker_fate`):
        not restarted, the job not failed, nothing spent; a new segment (``segment``: its cause) at the size left."""
        names = tuple(t.name for t in tasks)
        left = self._plan.spec.workers - len(self._lives.life.idle) - len(names)
        self._lives.resized(size_of(self._plan.spec, left), segment, names)
        return [Warn(f"{', '.join(names)} {why}; the last failure: {cause.headline()}"), Persist()]

    def resized(self, change: Resize, now: float) -> list[Action]:
        """A resize of a PSS job (:class:`~orchestrator.supervisor.actions.Resize`): the workers it parks
        are stopped, those it takes back start their next attempt at once at their addresses (not counted
        against ``max_restarts``; a recovery opens for one that failed before, ended when the coordinator
        has it back in its rotation); a new segment either way."""
        names, back = (change.unpark, True) if change.unpark else (change.park, False)
        self._lives.resized(size_of(self._plan.spec, change.workers), change.cause, names, back=back,
                            resumes=bool(change.coordinator))
        if change.coordinator:  # PSS grown past its coordinator's cluster: it restarts too, its save taken
            return [Event(f"{', '.join(names)} started ({change.cause}) and {change.coordinator} restarted from its "
                          f"save with a TF_CONFIG naming {change.workers} worker(s); the ps and the other workers "
                          "kept running"), RestartAt((*names, change.coordinator), now), Persist()]
        said = f"{', '.join(names)} {'taken back' if back else 'parked'} ({change.cause}): training goes on with " \
               f"{change.workers} worker(s)"
        if not back:
            return [Event(said), Stop(names, f"parked: {change.cause}"), Persist()]
        coordinator = self._table.find(self._plan.spec.coordinator)
        for name in names:
            failed = next((f for f in reversed(self._log.failures) if f.task.name == name), None)
            if failed is not None:
                task = self._table.named(name).task
                self._book.open(Recovery(cause=failed, scope=RestartScope.TASK, tasks=[name], detected_at=now,
                                         await_rotation=self._rotation_reported and awaits_rotation((task,),
                                                                                                     coordinator)))
        return [Event(said + "; restarted at the same address, the coordinator re-adds it"),
                RestartAt(names, now), Persist()]

    def placed(self, restart: Restart, placeable: bool, note: str, now: float) -> list[Action]:
        """The rest of ``restart`` once the backend answered (``placeable``, its ``note``), at ``now``."""
        cause, tasks, scope = restart.cause, restart.tasks, restart.scope
        if not placeable:
            if restart.job_restart or unrestarted_failure_ends_job(cause.task.task_type):  # no trainer reads
                return self._fail(cause, note)  # without the tf.data service's dispatcher
            return [Event(f"{cause.task.name} is not restarted: {note}; the job goes on")]
        out: list[Action] = [Event(note)] if note else []
        if restart.job_restart and restart.counted:  # the evaluator's restarts are its own
            self.used += 1
        names = tuple(t.name for t in tasks)
        coordinator = self._table.find(self._plan.spec.coordinator)
        await_rotation = self._rotation_reported and awaits_rotation(tasks, coordinator)
        culprit = restart.culprit
        self._book.open(Recovery(cause=cause, scope=scope, tasks=list(names), detected_at=now,
                                 await_rotation=await_rotation, preempted=culprit))
        if scope is RestartScope.GROUP:
            # the survivors' state is discarded anyway: SIGKILL at once, no SIGTERM grace; the tf.data
            # service goes on serving, for the restarted group to re-attach to its job
            survivors = tuple(rt.task.name for rt in self._table.live()
                              if not survives_group_restart(rt.task.task_type))
            out += [Become(JobState.RESTARTING),
                    Stop(survivors, f"stopped for a group restart after {cause.task.name} failed", grace_s=0.0)]
        out.append(Event(f"{restart.label}: {', '.join(names)} in {restart.delay_s:.1f} s "
                         f"({scope.value} restart after {cause.task.name} failed, {describe_exit(cause.exit_code)}"
                         + (f"; {culprit} was the one preempted" if culprit else "") + ")"))
        return out + [RestartAt(names, now + restart.delay_s), Persist()]

    # -- crash loops -----------------------------------------------------------------------------
    def _crash_loop(self, cause: Failure, out: list[Action]) -> str:
        """Why ``cause``'s task is not restarted again because it is crash-looping, "" when it is not."""
        errors = [(f.attempt, f.exception) for f in self._log.failures if f.task == cause.task]
        times = exitrules.crash_loop(errors, self._policy.crash_loop_limit)
        if not times:
            return ""
        why = (f"the same error {times} times in a row ({cause.exception}): a crash loop, a restart would fail the "
               f"same way (crash loop limit {self._policy.crash_loop_limit}, --crash-loop-limit)")
        if cause.task.task_type == "evaluator" and not self._evaluated(cause.task.name):
            out.append(Warn(f"{cause.task.name} never evaluated: it failed with {why}"))
        return why

    def _uneven_data(self, cause: Failure) -> str:
        """Why ``cause`` is uneven data across MWMS workers (a peer finished while its task still
        trained: :func:`~orchestrator.supervisor.rules.training_rules.uneven_data`), "" when it is not."""
        trainers, a = set(self._plan.spec.trainers()), self._table.of(cause.task).current
        finished = sorted((rt.current.ended_at or 0.0, rt.task.name, rt.current.last_step) for rt in self._table
                          if rt.task in trainers and rt.task != cause.task and rt.current.state is TaskState.SUCCEEDED)
        return training_rules.uneven_data(
            self._plan.spec.strategy is Strategy.MULTI_WORKER_MIRRORED, cause.task.name, a.last_step,
            phase_name(a.heartbeat.heartbeat.phase) if a.heartbeat else None,
            stuck=cause.message.startswith("hung: ") or bool(cause.peer_error),
            finished=[(name, step) for _, name, step in finished]) or ""

    def _evaluated(self, name: str) -> bool:
        """The task reported an evaluation (``evaluated_step`` or an ``eval_*`` metric) in its
        current attempt (an earlier attempt's is in its history only as a state)."""
        hb = self._table.named(name).current.heartbeat
        return hb is not None and (hb.heartbeat.HasField("evaluated_step")
                                   or any(k.startswith("eval_") for k in hb.heartbeat.metrics))
