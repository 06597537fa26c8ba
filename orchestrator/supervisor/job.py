"""The supervision loop: the only place that acts (starts, signals, stops, restarts, ends the job).

Read it top to bottom as the loop: :meth:`Supervisor.run` starts every task, then ticks until
the job is over; each :meth:`Supervisor.tick` looks at stop requests, exits, heartbeats
(:mod:`~orchestrator.supervisor.beats`) and hangs, decides on the failures it saw, and starts
the restarts that are due. What to do is decided by the pure functions of
:mod:`~orchestrator.supervisor.decisions`; what explains a failure comes from
:mod:`~orchestrator.supervisor.forensics`; recoveries are kept by
:mod:`~orchestrator.supervisor.recovery`, hang checks by :mod:`~orchestrator.supervisor.hangs`,
spares planned by :mod:`~orchestrator.supervisor.spares`, a job preemption by
:mod:`~orchestrator.supervisor.preemption`, the lives of a resumable run by
:mod:`~orchestrator.supervisor.lives`. Every wait is bounded; time is this process's monotonic
clock (injectable). Tests drive the loop tick by tick with a fake backend and clock.

Ends: Succeeded (the success policy met), Failed (a failure the policy does not retry, the
deadline: exit 1), Preempted (saved and left: exit 75, resumable), Interrupted (Ctrl-C: 130).
The earliest failure that ended the job is its root cause.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from orchestrator.backends.base import Backend, LaunchRequest
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import Plan, attempt_env
from orchestrator.rundir import ERROR_FILE, RunDir
from orchestrator.spec.model import Strategy
from orchestrator.supervisor import decisions, exitrules, forensics, stack_rules
from orchestrator.supervisor.beats import HeartbeatHandling
from orchestrator.supervisor.ending import EndHandling
from orchestrator.supervisor.exits import LOOK_EVERY, ExitWatch
from orchestrator.supervisor.failures import FailureHandling
from orchestrator.supervisor.formed import FormedCheck
from orchestrator.supervisor.hangs import HangChecks, watch
from orchestrator.supervisor.lives import Carried, LifeBook
from orchestrator.supervisor.logcap import LogCaps
from orchestrator.supervisor.options import LoopOptions
from orchestrator.supervisor.pictures import Pictures
from orchestrator.supervisor.preemption import Preemption
from orchestrator.supervisor.recovery import RecoveryBook
from orchestrator.supervisor.rehearsal import Rehearsal, checked_success
from orchestrator.supervisor.snapshot import JobSnapshot, NullView, TaskSnapshot, View, phase_name, task_snapshot
from orchestrator.supervisor.spares import spare_request
from orchestrator.supervisor.states import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PREEMPTED,
    Attempt,
    Failure,
    FailureLog,
    JobState,
    TaskRuntime,
    TaskState,
    describe_exit,
)
from orchestrator.supervisor.training_rules import NanWatch

log = logging.getLogger(__name__)

VIEW_TASKS_PER_S = 4000
"""Most task pictures the loop builds per second (``tick_s`` of them a tick) for the view
(``status``, the page; :mod:`~orchestrator.supervisor.pictures`): a job of more than
``VIEW_TASKS_PER_S * view_interval_s`` tasks gets its snapshots less often, and no tick stalls."""


class Supervisor(HeartbeatHandling, FailureHandling, EndHandling):
    """Starts the planned tasks, watches them, restarts what the strategy can recover, ends the job.

    Args:
        plan: the job plan (its spec carries the restart policy and timeouts).
        backend: runs the tasks (:class:`~orchestrator.backends.base.Backend`).
        store: where the health server puts heartbeats.
        view: live output; default none.
        carried: what a resumed run takes over from its earlier lives (:class:`Carried`).
        persist: called with the supervisor whenever the run record changes (the API writes
            ``run.json``); None: nothing persisted.
        on_started: called by :meth:`run` once every task's first attempt has started, before
            the first tick (the API starts the health server there, on the port it held:
            :class:`~orchestrator.health.endpoint.HealthEndpoint`); what it raises ends the run
            with every task stopped.
        clock: monotonic clock, seconds.
        **options: the timing knobs of :class:`~orchestrator.supervisor.options.LoopOptions`
            (``stop_timeout_s``, ``success_grace_s``, ``tick_s``, ``preemption_grace_s``, ...).

    Raises:
        TypeError: for an unknown option.
    """

    def __init__(
        self,
        plan: Plan,
        backend: Backend[Any],
        store: HeartbeatStore,
        view: View | None = None,
        *,
        carried: Carried | None = None,
        persist: Callable[["Supervisor"], None] | None = None,
        on_started: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **options: float,
    ) -> None:
        self.plan, self.backend, self.store = plan, backend, store
        self.view: View = view or NullView()
        self.policy = plan.spec.supervision
        self.options = o = LoopOptions(**options)
        self.clock = clock
        self.carried = carried or Carried()
        self._persist_hook = persist
        self._on_started = on_started
        self.tasks = [TaskRuntime(plan=tp, current=Attempt(number=self.carried.next_attempt.get(tp.task.name, 0)),
                                  restarts=self.carried.task_restarts.get(tp.task.name, 0)) for tp in plan.tasks]
        self._by_task = {rt.task: rt for rt in self.tasks}
        self._by_name = {rt.task.name: rt for rt in self.tasks}
        self._silent = [rt for rt in self.tasks if not rt.plan.reports_heartbeats]  # sampled by the backend
        self._checks = HangChecks(len(self.tasks))
        self.book = RecoveryBook()
        self.log = FailureLog()
        self.failures = self.log.failures  # every task failure of this life, earliest first
        self.state = JobState.PENDING
        self.restarts_used = self.carried.restarts_used
        self.reason = ""
        self.fatal: Failure | None = None
        self.started_at = clock()
        self.started_wall = time.time()
        self.ended_at: float | None = None
        self.lives = LifeBook(self.carried, self.started_wall, os.getpid())
        self._interrupt: str | None = None
        self.preemption = Preemption(o.preemption_grace_s)
        self._exits, self._force_stop = ExitWatch(), threading.Event()  # the loop sleeps in _exits
        self._order = {rt.task.name: i for i, rt in enumerate(self.tasks)}
        self._grace_deadline: float | None = None
        self._evaluator_deadline, self.warnings = None, []  # warnings: work lost or cut off, the job not failed
        self._trainers_deadline: float | None = None
        self._restart_at: dict[str, float] = {}  # task name -> when to start its next attempt
        self._exit_code = EXIT_FAILED
        self._next_view_at = 0.0
        self._spares_at: float | None = None  # when the spares start (decisions.spares_start_at); None: not yet
        self._cold_start_s: float | None = None  # the first attempt's start -> first step
        self._coordinator = coordinator = self._by_task.get(plan.spec.coordinator)
        # PSS with the built-in coordinator: it says when a restarted worker is back in its
        # rotation; that, not the worker's server being up again, ends the worker's recovery
        self._rotation_reported = (plan.spec.strategy is Strategy.PARAMETER_SERVER and coordinator is not None
                                   and coordinator.plan.reports_heartbeats)
        self._spares = spare_request(plan)
        self._formed, self._rehearsal = FormedCheck(plan.spec), Rehearsal(plan)
        self._nan, self._logs = NanWatch(self.policy.on_nan, self.policy.nan_metrics), LogCaps(
            self.policy.max_log_size_bytes)
        self._pictures = Pictures(self.tasks, int(VIEW_TASKS_PER_S * o.tick_s), task_snapshot)

    # -- control from outside ------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Stop every task now and end the job Interrupted (safe from a signal handler).

        A second request while tasks are being stopped skips the rest of the SIGTERM grace:
        what is left gets SIGKILL at once.
        """
        if self._interrupt is not None or self.preemption.requested:
            self._force_stop.set()
        self._interrupt = reason
        self._exits.wake()

    def request_preemption(self, reason: str) -> None:
        """Save and leave (safe from a signal handler): every training task gets the preemption
        notice and checkpoints at its next step, within ``preemption_grace_s``; then every task
        is stopped and the job ends Preempted. A second request is a no-op."""
        self.preemption.request(reason)
        self._exits.wake()

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> JobSnapshot:
        """Run the job to its end. Returns the final snapshot; no task process is left running."""
        try:
            self._exits.open()
            self.start()
            if self._on_started is not None:
                self._on_started()
            while not self.tick():  # wakes on a task's exit, a stop request, or after tick_s
                self._exits.wait(self.options.tick_s)
        finally:
            live = self._live()
            if live:  # an exception escaped the loop: leave nothing behind
                self._stop(live, "stopped: orchestrator error")
            try:
                self.backend.close()
            except Exception:  # noqa: BLE001 - cleanup never costs the user the result
                log.warning("the %s backend failed to clean up", self.backend.name, exc_info=True)
            self._exits.close()
        return self.finish()

    def start(self) -> None:
        """Start the job: every task's first attempt (of this life)."""
        self.started_at = self.clock()
        self.started_wall = time.time()
        self.lives.started(self.started_wall)
        self._set_state(JobState.STARTING)
        self._persist()
        for rt in self.tasks:
            if self._interrupt:
                break
            self._start(rt)

    def tick(self) -> bool:
        """One look at the job: stop requests, exits, heartbeats, hangs, decisions, due restarts.

        Returns:
            True when the job is over (every started task ended and no restart is due).
        """
        now = self.clock()
        if not self.state.terminal:
            if self._interrupt:
                self._set_state(JobState.INTERRUPTED, EXIT_INTERRUPTED, self._interrupt)
                self._stop(self._live(), f"stopped: {self._interrupt}")
            elif self.preemption.requested and self.preemption.deadline is None:
                self._preemption(now)
            elif failed := self._formed.failure or self._nan.failure:  # N solo trainings are not one N-worker
                self._set_state(JobState.FAILED, EXIT_FAILED, failed)  # job; --on-nan fail: a restart meets it again
                self._stop(self._live(), "stopped: the tasks did not form the planned cluster" if self._formed.failure
                           else "stopped: a non-finite loss (--on-nan fail)")
            elif self.policy.deadline_s is not None and now - self.started_at >= self.policy.deadline_s:
                self._set_state(JobState.FAILED, EXIT_FAILED,
                                f"the job deadline of {self.policy.deadline_s:g} s passed")
                self._stop(self._live(), "stopped: job deadline passed")
        self._poll(now)
        self._take_heartbeats(now)
        self._check_hangs(now)
        self._event(*self._rehearsal.watch(self.tasks, now))  # before a restart replaces an ended attempt
        self._decide(now)
        self._start_due_restarts(now)
        if self.preemption.deadline is not None and not self.state.terminal:
            self._preemption(now)
        if (self._spares is not None and self._spares_at is not None and now >= self._spares_at
                and not self.state.terminal and not self.preemption.requested):
            self.backend.keep_spares(self._spares)
        if self._trainers_deadline is not None and now >= self._trainers_deadline and not self.state.terminal:
            self._trainers_deadline = None
            for rt in self._live():
                if rt.task in self.plan.spec.trainers() and rt.current.finished_at is not None:
                    self._stuck_in_exit(rt, now, f"{now - rt.current.finished_at:.1f} s after it finished")
                elif rt.task in self.plan.spec.trainers():
                    self._record_failure(rt, None, now, f"did not exit within {self.options.success_grace_s:g} s after "
                                         f"{self.plan.spec.coordinator.name} succeeded", killed=True)
            self._decide(now)
        if self.state is JobState.SUCCEEDED and self._grace_deadline and now >= self._grace_deadline:
            self._stop([rt for rt in self._live() if rt.task.task_type != "evaluator"],
                       f"did not exit within {self.options.success_grace_s:.0f} s after the job succeeded")
        if self.state is JobState.SUCCEEDED:
            self._evaluator_grace_over(now)
        over = not self._restart_at and all(rt.current.state.terminal for rt in self.tasks
                                            if rt.current.process is not None)
        interval = getattr(self.view, "interval_s", self.options.view_interval_s)
        if not over and interval is not None and (self._pictures.in_round or now >= self._next_view_at):
            if not self._pictures.in_round:
                self._next_view_at = now + max(self.options.view_interval_s, interval)
            pictured = self._pictures.advance(now)  # O(tasks) in slices: at most VIEW_TASKS_PER_S a second
            if pictured is not None:
                self.view.update(self._snapshot_of(pictured, now))
        return over

    def finish(self) -> JobSnapshot:
        """Close the books once the loop is over: the final state, the life's record, the view.
        Returns the final snapshot (what ``summary.json`` is made of)."""
        if not self.state.terminal:
            if self._interrupt:
                self._set_state(JobState.INTERRUPTED, EXIT_INTERRUPTED, self._interrupt)
            else:
                self._set_state(JobState.FAILED, EXIT_FAILED, "no task is left running")
        if self.state is JobState.SUCCEEDED:  # what it formed and what its rehearsal tested
            self._set_state(*checked_success(self.reason, self._formed.failure, self._rehearsal.untested))
        self.ended_at = self.clock()
        self.warnings.extend(self._logs.final(self.tasks))  # each log cut by --max-log-size, and how much
        self.lives.close(self.state.value, self.preemption.reason, ended_at=time.time())
        self._persist()
        final = self.snapshot()
        self.view.update(final)
        return final

    # -- what others read ----------------------------------------------------------------
    def snapshot(self) -> JobSnapshot:
        """An immutable picture of the job now (see :mod:`orchestrator.supervisor.snapshot`)."""
        now = self.clock()
        return self._snapshot_of(tuple(task_snapshot(rt, now) for rt in self.tasks), now)

    def _snapshot_of(self, tasks: tuple[TaskSnapshot, ...], now: float) -> JobSnapshot:
        end = self.ended_at if self.ended_at is not None else now
        return JobSnapshot(
            plan=self.plan, state=self.state, reason=self.reason,
            exit_code=self._exit_code if self.ended_at is not None else None,
            elapsed_s=end - self.started_at, started_wall=self.started_wall, ended=self.ended_at is not None,
            restarts_used=self.restarts_used, tasks=tasks,
            failures=tuple(self.log.failures), recoveries=self.book.records(self.started_at), fatal=self.fatal,
            spares=tuple(self.backend.spares()), lives=self.lives.lives(),
            earlier_failures=self.carried.failures, warnings=tuple(self.warnings),
        )

    # -- starting ------------------------------------------------------------------------
    def _live(self) -> list[TaskRuntime]:
        return [rt for rt in self.tasks if rt.live]

    def _event(self, *texts: str) -> None:
        for text in texts:
            self.view.event(self.clock() - self.started_at, text)

    def _persist(self) -> None:
        self.lives.persisted_at = self.clock()
        if self._persist_hook is not None:
            self._persist_hook(self)

    def _start(self, rt: TaskRuntime) -> None:
        a = rt.current
        directory = RunDir(self.plan.run_dir).task(a.number, rt.task)
        env = attempt_env(self.plan, rt.task, a.number)
        if not rt.plan.reports_heartbeats:  # a user's program binds its port without asking
            self.backend.release_port(rt.task, a.number)
        handle = self.backend.start(LaunchRequest(rt.task, a.number, rt.plan.argv, env, directory,
                                                  runtime=rt.plan.reports_heartbeats))
        a.process, a.pid = handle, handle.pid
        a.stdout_path, a.stderr_path = handle.stdout_path, handle.stderr_path
        a.error_file = directory / ERROR_FILE
        a.started_at = a.progress_at = self.clock()
        a.state = TaskState.STARTING
        if a.number > 0:
            self._spares_at = None  # a restart: the spares it left start again once it trains
        self._exits.watch(rt.task.name, self.backend.exit_fd(handle))
        self._checks.reschedule(rt, self.policy)
        self._event(f"{rt.task.name} started (pid {a.pid}, attempt {a.number})")

    def _start_due_restarts(self, now: float) -> None:
        if self.state.terminal or not self._restart_at or self.preemption.requested:
            return
        due = sorted((self._by_name[n] for n, at in self._restart_at.items() if at <= now),
                     key=lambda rt: self._order[rt.task.name])  # O(pending restarts), in plan order
        for rt in due:
            del self._restart_at[rt.task.name]
            self._start(rt)
        if due:
            self.book.restarted(now)
            if self.state is JobState.RESTARTING and not self._restart_at:
                self._set_state(JobState.STARTING)

    # -- watching ------------------------------------------------------------------------
    def _poll(self, now: float) -> None:
        """Exits: of the tasks whose exit descriptor fired, and of those polled every tick
        (:mod:`~orchestrator.supervisor.exits`): O(exits), not O(tasks)."""
        exited = []
        for name in self._exits.to_poll(lambda n: self._by_name[n].live):
            rt = self._by_name[name]
            code = self.backend.poll(rt.current.process) if rt.current.process is not None and rt.live else None
            if code is not None or not rt.live:
                self._exits.forget(name)
            elif self._exits.watched(name):  # it fired but the backend says it runs: poll it from now on
                self._exits.watch(name, None)
            if code is not None and rt.live:
                exited.append((rt, code))
        exited.sort(key=lambda e: self._order[e[0].task.name])  # plan order, as one scan would find them
        for i in decisions.exit_order([code for _, code in exited]):
            self._on_exit(exited[i][0], exited[i][1], now)

    def _exits_meanwhile(self, done: int) -> None:
        """Inside a tick, after every :data:`~orchestrator.supervisor.exits.LOOK_EVERY` items
        (``done``: items so far) of its O(heartbeats) and O(hang checks) work: take the exits that
        came meanwhile, so that a task's exit waits for a slice of that work, not the whole tick."""
        if done % LOOK_EVERY == 0 and self._exits.exited():
            self._poll(self.clock())

    def _check_hangs(self, now: float) -> None:
        """Hang checks of the tasks whose check deadline has passed; the one furthest behind is
        killed first (its peers are blocked in a collective with it). Time in which the health
        server was deaf (:meth:`~orchestrator.health.store.HeartbeatStore.deaf_s`) since a
        task's latest heartbeat does not count as its silence."""
        if self.state.terminal:
            return
        hung = []
        for done, name in enumerate(self._checks.due(now), 1):
            self._exits_meanwhile(done)
            rt = self._by_name[name]
            if not rt.live:
                continue
            if stuck := exitrules.exit_overdue(rt.current.finished_at, now, self.policy):
                self._stuck_in_exit(rt, now, stuck)
                continue
            seen = watch(rt)
            # time the health server took in no heartbeat (its own loop held up) is no task's silence
            deaf = self.store.deaf_s(seen.heartbeat_at if seen.heartbeat_at is not None else seen.started_at, now)
            why = decisions.hang_reason(seen, now - deaf, self.policy)
            if why:
                hung.append((rt, why))
            else:
                self._checks.reschedule(rt, self.policy, seen, credit_s=deaf)
        dumps = [self._hang_dump(rt, why) for rt, why in hung]  # every one's stacks before any is killed
        hung, dumps = self._waited_on(hung, dumps)  # a collective's waiters name the peer they wait for
        for i in stack_rules.culprit_order([rt.current.last_step for rt, _ in hung], dumps):  # not in a collective
            rt, why = hung[i]
            if not rt.current.state.terminal:
                self._record_failure(rt, None, now, forensics.hang_message(rt, why, dumps[i]), killed=True)

    # -- exits and decisions ---------------------------------------------------------------
    def _on_exit(self, rt: TaskRuntime, code: int, now: float) -> None:
        a = rt.current
        a.exit_code, a.ended_at = code, now
        verdict = decisions.classify_exit(code, stop_requested=a.stop_requested,
                                          serves_forever=rt.plan.serves_forever, task_type=rt.task.task_type)
        if left := forensics.take_left_behind(rt):
            self._event(left)
        late = self._late_notice(rt, code) if verdict.state is TaskState.FAILED else ""
        if late:
            verdict = decisions.ExitVerdict(TaskState.SUCCEEDED)
        if verdict.state is TaskState.STOPPED:
            a.state = TaskState.STOPPED
            self._event(f"{rt.task.name} stopped ({describe_exit(code)})")
        elif verdict.state is TaskState.SUCCEEDED:
            a.state, a.reason = TaskState.SUCCEEDED, f"{describe_exit(code)}: {late}" if late else "exited 0"
            self._event(f"{rt.task.name} succeeded" + (f" ({a.reason})" if late else ""))
            if not late and forensics.sigterm_received(rt) and not self.preemption.requested:  # too late: say so
                self._event(f"{rt.task.name} received SIGTERM from outside (a preemption notice) but finished first")
            self._task_succeeded(rt, now)
        elif self.preemption.requested and self.policy.preemption_code(code):
            a.state, a.reason = TaskState.STOPPED, f"saved and left on the preemption notice ({describe_exit(code)})"
            self._event(f"{rt.task.name} {a.reason}")
        else:
            message, notice = verdict.message or forensics.error_message(a.error_file), False
            if self.policy.preemption_code(code) and not message:
                message, notice = forensics.preemption_cause(rt, self.tasks)
            self._record_failure(rt, code, now, message, preemption_notice=notice)

    def _record_failure(self, rt: TaskRuntime, code: int | None, now: float, message: str,
                        killed: bool = False, preemption_notice: bool = False) -> None:
        """Record the failure of ``rt``'s attempt; ``killed``: first SIGKILL it (hung, or past
        its grace) and take the code it died with."""
        if killed:
            assert rt.current.process is not None
            self.backend.signal(rt.current.process, signal.SIGKILL)
            code = self.backend.wait(rt.current.process, timeout_s=10.0)
        rt.current.exit_code, rt.current.ended_at = code, now
        rt.current.state = TaskState.FAILED
        failure = forensics.explain_failure(rt, self.tasks, self.backend, code=code, now=now, message=message,
                                            killed=killed, preemption_notice=preemption_notice)
        rt.current.reason = failure.headline()
        self.log.add(failure)
        self._event(failure.headline())

    # -- preemption ------------------------------------------------------------------------
    def _preemption(self, now: float) -> None:
        """First the notice to every live trainer (:mod:`~orchestrator.supervisor.preemption`);
        then, once every trainer has left or the grace is over, stop the rest and end Preempted."""
        spec = self.plan.spec
        # trainers only: under PSS that is the coordinator alone (its workers serve until stopped,
        # and must keep serving while it saves)
        trainers = [rt for rt in self._live() if rt.task in spec.trainers()]
        names = [rt.task.name for rt in trainers]
        if self.preemption.deadline is None:
            self._restart_at.clear()
            coordinator = self._by_task[spec.coordinator].current
            phase = phase_name(coordinator.heartbeat.heartbeat.phase) if coordinator.heartbeat else None
            if phase in decisions.POST_TRAINING_PHASES:  # a notice now would lose it (BackupAndRestore's
                self._event(self.preemption.begin(now, []) + "; training had ended: letting it finish")
                return  # backup is gone once fit returns): let evaluation and export finish in the grace
            self._event(self.preemption.begin(now, names))
            for rt in trainers:
                if rt.current.process is not None and not forensics.sigterm_received(rt):
                    self.backend.signal(rt.current.process, signal.SIGTERM)  # no stop marker: a notice
        elif self.preemption.over(now, names):
            self._set_state(JobState.PREEMPTED, EXIT_PREEMPTED, self.preemption.outcome(names, self.lives.last_step))
            self._stop(self._live(), "stopped: the job was preempted")

    # -- the end ---------------------------------------------------------------------------
    def _set_state(self, state: JobState, exit_code: int | None = None, reason: str = "") -> None:
        """Move the job to ``state``; an end (``exit_code`` given) cancels pending restarts."""
        if exit_code is not None:
            self._exit_code, self.reason = exit_code, reason
            self._restart_at.clear()
        if state is not self.state:
            self.state = state
            self._event(f"job {state.value}" + (f": {self.reason}" if state.terminal and self.reason else ""))

    def _stop(self, tasks: list[TaskRuntime], reason: str, grace_s: float | None = None) -> None:
        """Stop ``tasks`` in two phases (SIGTERM, SIGKILL after ``grace_s``, default the stop timeout)."""
        tasks = [rt for rt in tasks if rt.live]
        if not tasks:
            return
        for rt in tasks:
            rt.current.stop_requested, rt.current.reason = True, reason
        self.backend.stop([rt.current.process for rt in tasks if rt.current.process is not None],
                          timeout_s=self.options.stop_timeout_s if grace_s is None else grace_s, abort=self._force_stop)
        now = self.clock()
        for rt in tasks:
            assert rt.current.process is not None
            code = self.backend.poll(rt.current.process)
            if code is not None and not rt.current.state.terminal:
                self._on_exit(rt, code, now)

