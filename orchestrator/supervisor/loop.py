"""The supervision loop: the only place that acts (starts, signals, stops, restarts, ends the job).

:meth:`Supervisor.run` starts the tasks, then ticks until the job is over; each :meth:`Supervisor.tick` is the list
of steps it takes. The parts decide and own their state: heartbeat intake (:mod:`.beats`), failures and restarts
(:mod:`.failures`), endings and graces (:mod:`.ending`), hang checks (:mod:`.hangs`), a job preemption
(:mod:`.preemption`), rehearsals (:mod:`.rehearsal`), size changes (a slot or node lost, a resize) and grow-back
(:mod:`.resizing`), the start order (:mod:`.waves`). Each returns what it wants done as small frozen records
(:mod:`.actions`); :meth:`Supervisor._do` carries them out, in order; this module alone holds the backend. The
parts share one read-only task table (:mod:`.table`) and never call each other; their rules are pure functions
(:mod:`.decisions` and beside it). Every wait is bounded; time is this process's monotonic clock (injectable);
tests drive the loop tick by tick with a fake backend and clock.

Ends: Succeeded (the success policy met), Failed (a failure the policy does not retry, the deadline: exit 1),
Preempted (saved and left: exit 75, resumable), Interrupted (Ctrl-C: 130). The earliest failure that ended the job
is its root cause.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from orchestrator.backends.base import Backend, TaskHandle, start_attempt
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import Plan
from orchestrator.rundir import ERROR_FILE, RunDir
from orchestrator.spec.model import Strategy
from orchestrator.supervisor import actions as do
from orchestrator.supervisor import forensics
from orchestrator.supervisor.beats import Intake
from orchestrator.supervisor.ending import Endings
from orchestrator.supervisor.exits import LOOK_EVERY, ExitWatch
from orchestrator.supervisor.failures import Restarts
from orchestrator.supervisor.hangs import HangChecks, culprits_first, peers_to_dump
from orchestrator.supervisor.options import KILL_WAIT_S, VIEW_TASKS_PER_S, LoopOptions
from orchestrator.supervisor.pictures import Pictures, job_snapshot
from orchestrator.supervisor.preemption import Preemption
from orchestrator.supervisor.records.lives import Carried, LifeBook
from orchestrator.supervisor.records.recovery import RecoveryBook
from orchestrator.supervisor.records.snapshot import JobSnapshot, NullView, TaskSnapshot, View, task_snapshot
from orchestrator.supervisor.records.states import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    Attempt,
    Failure,
    FailureLog,
    JobState,
    TaskRuntime,
    TaskState,
)
from orchestrator.supervisor.rehearsal import Rehearsal
from orchestrator.supervisor.resizing import Resizing
from orchestrator.supervisor.rules import decisions
from orchestrator.supervisor.rules.formed import FormedCheck
from orchestrator.supervisor.rules.rehearsal import checked_success
from orchestrator.supervisor.rules.spares import spare_request
from orchestrator.supervisor.table import TaskTable
from orchestrator.supervisor.waves import StartWaves

log = logging.getLogger(__name__)


class Supervisor:
    """Starts the planned tasks, watches them, restarts what the strategy can recover, ends the job.

    Args:
        plan: the job plan (its spec carries the restart policy and timeouts).
        backend: runs the tasks (:class:`~orchestrator.backends.base.Backend`).
        store: where the health server puts heartbeats.
        view: live output; default none.
        carried: what a resumed run takes over from its earlier lives (:class:`Carried`).
        persist: called with the supervisor whenever the run record changes (``run.json``); None: nothing persisted.
        on_started: called by :meth:`run` once every task's first attempt has started, before the first tick (the
            API starts the health server there); what it raises ends the run with every task stopped.
        room: the most workers the machine has room for now (MWMS grow-back, :mod:`.growback`); None: no grow-back.
        asked_room: what a grow asked by ``resize`` waits for (Slurm's nodes, :mod:`.resizing`); None: it goes at once.
        started: task name -> its first attempt of this life, already started on ``backend`` (a launch's first wave,
            :func:`orchestrator.handle.first_wave`): :meth:`start` takes them over instead of starting them.
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
        persist: Callable[["Supervisor"], None] | None = None, on_started: Callable[[], None] | None = None,
        room: Callable[[], int | None] | None = None, asked_room: Any = None,
        started: dict[str, TaskHandle] | None = None,
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
        self._on_started, self._started = on_started, dict(started or {})
        self.tasks = [TaskRuntime(plan=tp, current=Attempt(number=self.carried.next_attempt.get(tp.task.name, 0)),
                                  restarts=self.carried.task_restarts.get(tp.task.name, 0)) for tp in plan.tasks]
        self.table = table = TaskTable(self.tasks, plan.spec.coordinator)
        self.book = RecoveryBook()
        self.log = FailureLog()
        self.failures = self.log.failures  # every task failure of this life, earliest first
        self.state, self.reason, self._exit_code = JobState.PENDING, "", EXIT_FAILED
        self.fatal: Failure | None = None
        self.warnings: list[str] = []  # work lost or cut off, the job not failed
        self.started_at, self.started_wall = clock(), time.time()
        self.ended_at: float | None = None
        self.lives = LifeBook(self.carried, self.started_wall, os.getpid(), spec=plan.spec, held=plan.held)
        self._interrupt: str | None = None
        self._exits, self._force_stop = ExitWatch(), threading.Event()  # the loop sleeps in _exits
        self._restart_at: dict[str, float] = {}  # task name -> when to start its next attempt
        self._spares = spare_request(plan)
        # PSS with the built-in coordinator: it says when a restarted worker is back in its
        # rotation; that, not the worker's server being up again, ends the worker's recovery
        rotation = (plan.spec.strategy is Strategy.PARAMETER_SERVER and table.coordinator is not None
                    and table.coordinator.plan.reports_heartbeats)
        self._formed, self._rehearsal = FormedCheck(plan.spec), Rehearsal(plan)
        # the parts: each owns its state and returns what it wants done
        self.preemption = Preemption(o.preemption_grace_s)
        self.resizing = Resizing(plan, self.carried, self.lives, room, self.started_wall, o.preemption_grace_s,
                                 asked_room=asked_room)
        self.intake = Intake(plan, table, self.book, self.lives, self._formed, rotation)
        self.restarts = Restarts(plan, table, self.log, self.book, restarts_used=self.carried.restarts_used,
                                 preemption_grace_s=o.preemption_grace_s, rotation_reported=rotation, lives=self.lives,
                                 lost_node=self.resizing.lost_node)
        self.endings = Endings(plan, table, o.success_grace_s)
        self.waves = StartWaves(table, plan.held)  # the tf.data service's tasks first, the trainers once it serves
        self._checks = HangChecks(len(self.tasks))
        self._pictures = Pictures(self.tasks, int(VIEW_TASKS_PER_S * o.tick_s), task_snapshot)

    @property
    def restarts_used(self) -> int:
        """The job's counted restarts (a resumed run's earlier lives included)."""
        return self.restarts.used

    # -- control from outside ------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Stop every task now and end the job Interrupted (safe from a signal handler). A second request while
        tasks are being stopped skips the rest of the SIGTERM grace: what is left gets SIGKILL at once."""
        if self._interrupt is not None or self.preemption.requested:
            self._force_stop.set()
        self._interrupt = reason
        self._exits.wake()

    def request_preemption(self, reason: str) -> None:
        """Save and leave (safe from a signal handler): every training task gets the preemption
        notice and checkpoints at its next step, within ``preemption_grace_s``; then every task
        is stopped and the job ends Preempted. A second request is a no-op."""
        self.resizing.preempted(reason)  # from outside (not a resize's save): the run ends, no next life
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
            if self.table.live():  # an exception escaped the loop: leave nothing behind
                self._stop(None, "stopped: orchestrator error")
            if self._started:  # started for this life, never taken over (an exception before)
                self.backend.stop(list(self._started.values()), timeout_s=self.options.stop_timeout_s)
            try:
                if not self.resizing.continues(self.state):  # a next life at another size keeps the warm spares
                    self.backend.close()
            except Exception:  # noqa: BLE001 - cleanup never costs the user the result
                log.warning("the %s backend failed to clean up", self.backend.name, exc_info=True)
            self._exits.close()
        return self.finish()

    def start(self) -> None:
        """Start the job: every task's first attempt (of this life) that waits for no other."""
        self.started_at, self.started_wall = self.clock(), time.time()
        self.lives.started(self.started_wall)
        self._do([do.Become(JobState.STARTING), do.Persist(), *self.waves.first()], self.started_at)

    def tick(self) -> bool:
        """One look at the job, step by step (see the module docstring).

        Returns:
            True when the job is over (every started task ended and no restart is due).
        """
        now = self.clock()
        if not self.state.terminal:  # stop requests, a preemption, a wrong cluster, the deadline
            if self._interrupt:
                self._do([do.End(JobState.INTERRUPTED, EXIT_INTERRUPTED, self._interrupt),
                          do.Stop(None, f"stopped: {self._interrupt}")], now)
            elif self.preemption.requested and self.preemption.deadline is None:
                self._preempt(now)
            elif failed := self._formed.failure or self.intake.nan.failure:  # not the planned cluster; --on-nan fail
                why = "the tasks did not form the planned cluster" if self._formed.failure else \
                    "a non-finite loss (--on-nan fail)"  # a restart would meet it again
                self._do([do.End(JobState.FAILED, EXIT_FAILED, failed), do.Stop(None, f"stopped: {why}")], now)
            elif self.policy.deadline_s is not None and now - self.started_at >= self.policy.deadline_s:
                why = f"the job deadline of {self.policy.deadline_s:g} s passed"
                self._do([do.End(JobState.FAILED, EXIT_FAILED, why), do.Stop(None, "stopped: job deadline passed")],
                         now)
        self._poll(now)  # exits
        self._take_heartbeats(now)  # heartbeats (exits taken between slices of them)
        self._do(self.waves.next(self.state.terminal or self._interrupt is not None), now)  # the next start wave
        self._check_hangs(now)  # hangs (and exits between slices)
        self._do([do.Event(t) for t in self._rehearsal.watch(self.tasks, now)], now)  # before a restart replaces it
        self._do(self.resizing.step(self.tasks, self.state, now), now)  # a resize asked, a slot or node lost, grow back
        self._decide(now)  # failures: restart or end
        self._start_due_restarts(now)
        if self.preemption.deadline is not None and not self.state.terminal:
            self._preempt(now)
        if self._spares is not None and not self.state.terminal and not self.preemption.requested:
            self._do(self.intake.spares(now), now)
        if (overdue := self.endings.trainers_overdue(now, self.state)) is not None:
            self._do(overdue, now)
            self._decide(now)
        self._do(self.endings.success_grace_over(now, self.state), now)
        self._do(self.endings.evaluator_grace_over(now, self.state), now)
        over = not self._restart_at and all(rt.current.state.terminal for rt in self.tasks
                                            if rt.current.process is not None)
        interval = self.view.interval_s  # the view's snapshots, in slices
        pictured = None if over else self._pictures.look(
            now, None if interval is None else max(self.options.view_interval_s, interval))
        if pictured is not None:
            self.view.update(self._snapshot_of(pictured, now))
        return over

    def finish(self) -> JobSnapshot:
        """Close the books once the loop is over: the final state, the life's record, the view.
        Returns the final snapshot (what ``summary.json`` is made of)."""
        now = self.clock()
        if not self.state.terminal:
            self._do([do.End(JobState.INTERRUPTED, EXIT_INTERRUPTED, self._interrupt) if self._interrupt
                      else do.End(JobState.FAILED, EXIT_FAILED, "no task is left running")], now)
        if self.state is JobState.SUCCEEDED:  # what it formed and what its rehearsal tested
            self._do([do.End(*checked_success(self.reason, self._formed.failure, self._rehearsal.untested))], now)
        self.warnings.extend(self.intake.logs_cut())  # each log cut by --max-log-size, and how much
        self.ended_at = self.clock()
        cause, reached = self.resizing.ended_by(self.state)  # a size change: the next life's segment's cause
        self.lives.close(self.state.value, self.preemption.reason, ended_at=time.time(), cause=cause, reached=reached)
        self._do([do.Persist()], now)
        final = self.snapshot()
        self.view.update(final)
        return final

    # -- what others read ----------------------------------------------------------------
    def snapshot(self) -> JobSnapshot:
        """An immutable picture of the job now (see :mod:`orchestrator.supervisor.records.snapshot`)."""
        now = self.clock()
        return self._snapshot_of(tuple(task_snapshot(rt, now) for rt in self.tasks), now)

    def _snapshot_of(self, tasks: tuple[TaskSnapshot, ...], now: float) -> JobSnapshot:
        return job_snapshot(self, tasks, now, exit_code=self._exit_code, spares=tuple(self.backend.spares()),
                            faults=self._rehearsal.records())

    # -- acting: what the parts returned, in order --------------------------------------------
    def _do(self, actions: Iterable[do.Action], now: float) -> None:
        """Carry out ``actions`` in order (a :class:`~.actions.Restart`: the backend's answer goes back to the part)."""
        for action in actions:
            if isinstance(action, do.Event):
                self.view.event(self.clock() - self.started_at, action.text)
            elif isinstance(action, do.Warn):
                self.warnings.append(action.text)
                self.view.event(self.clock() - self.started_at, f"WARNING: {action.text}")  # as every live warning
            elif isinstance(action, do.Persist):
                self.lives.persisted_at = self.clock()
                if self._persist_hook is not None:
                    self._persist_hook(self)
            elif isinstance(action, (do.Become, do.End)):
                if isinstance(action, do.End):  # an end cancels pending restarts
                    self._exit_code, self.reason = action.exit_code, action.reason
                    self.fatal = action.fatal if action.fatal is not None else self.fatal
                    self._restart_at.clear()
                if action.state is not self.state:
                    self.state = action.state
                    self._do([do.Event(f"job {self.state.value}" + (
                        f": {self.reason}" if self.state.terminal and self.reason else ""))], now)
            elif isinstance(action, do.Stop):
                self._stop(action.tasks, action.reason, action.grace_s)
            elif isinstance(action, do.Failed):
                self._record_failure(self.table.named(action.task), action.code, now, action.message,
                                     killed=action.killed, preemption_notice=action.preemption_notice)
            elif isinstance(action, (do.Hung, do.Stuck)):
                self._kill_stuck_or_hung(action, now)
            elif isinstance(action, do.Notice):
                for rt in map(self.table.named, action.tasks):
                    assert rt.current.process is not None
                    rt.current.stop_requested = rt.current.stop_requested or action.planned  # we restart it
                    self.backend.signal(rt.current.process, signal.SIGTERM)  # no stop marker: a notice
            elif isinstance(action, do.Restart):
                placeable, note = self.backend.prepare_restart(action.tasks)  # e.g. Slurm: off a lost node
                self._do(self.restarts.placed(action, placeable, note, now), now)
            elif isinstance(action, do.RestartAt):
                for name in action.tasks:
                    rt = self.table.named(name)
                    if rt.current.process is not None:  # not already waiting for its next attempt
                        rt.next_attempt()
                        self.backend.reserve_again(rt.task)
                    self._restart_at[name] = action.at
            elif isinstance(action, do.DropRestarts):
                self._restart_at.clear()
            elif isinstance(action, do.Preempt):
                self.request_preemption(action.reason)
                self._preempt(now)
            elif isinstance(action, do.Start):
                for name in action.tasks:
                    if not self._interrupt or name in self._started:  # one already started is stopped with the rest
                        self._start(self.table.named(name))
            elif isinstance(action, do.Resize):  # PSS: workers parked or taken back (failures.Restarts.resized)
                self._do(self.restarts.resized(action, now), now)
            elif isinstance(action, do.NodeLost):  # an elastic worker failed: is its node lost? (Slurm)
                rt = self.table.named(action.task)
                self._do(self.resizing.node_lost(rt, self.backend.lost_nodes.node_of(rt.task)), now)
            elif isinstance(action, do.Spares) and self._spares is not None:
                self.backend.keep_spares(self._spares)

    def _start(self, rt: TaskRuntime) -> None:
        a = rt.current
        directory = RunDir(self.plan.run_dir).task(a.number, rt.task)
        handle = self._started.pop(rt.task.name, None) or start_attempt(
            self.backend, self.plan, rt.plan, a.number, self.resizing.cluster)  # TF_CONFIG: the workers started
        a.process, a.pid = handle, handle.pid
        a.stdout_path, a.stderr_path = handle.stdout_path, handle.stderr_path
        a.error_file = directory / ERROR_FILE
        a.started_at = a.progress_at = self.clock()
        a.state = TaskState.STARTING
        if a.number > 0:
            self.intake.restarted()  # the spares it left start again once it trains
        self._exits.watch(rt.task.name, self.backend.exit_fd(handle))
        self._checks.reschedule(rt, self.policy)
        self._do([do.Event(f"{rt.task.name} started (pid {a.pid}, attempt {a.number})")], a.started_at)

    def _start_due_restarts(self, now: float) -> None:
        if self.state.terminal or not self._restart_at or self.preemption.requested:
            return
        due = sorted((self.table.named(n) for n, at in self._restart_at.items() if at <= now),
                     key=lambda rt: self.table.order(rt.task.name))  # O(pending restarts), in plan order
        for rt in due:
            del self._restart_at[rt.task.name]
            self._start(rt)
        if due:
            self.book.restarted(now)
            if self.state is JobState.RESTARTING and not self._restart_at:
                self._do([do.Become(JobState.STARTING)], now)

    # -- watching ------------------------------------------------------------------------
    def _poll(self, now: float) -> None:
        """Exits: of the tasks whose exit descriptor fired, and of those polled every tick
        (:mod:`~orchestrator.supervisor.exits`): O(exits), not O(tasks)."""
        exited = []
        for name in self._exits.to_poll(lambda n: self.table.named(n).live):
            rt = self.table.named(name)
            code = self.backend.poll(rt.current.process) if rt.current.process is not None and rt.live else None
            if code is not None or not rt.live:
                self._exits.forget(name)
            elif self._exits.watched(name):  # it fired but the backend says it runs: poll it from now on
                self._exits.watch(name, None)
            if code is not None and rt.live:
                exited.append((rt, code))
        exited.sort(key=lambda e: self.table.order(e[0].task.name))  # plan order, as one scan would find them
        for i in decisions.exit_order([code for _, code in exited]):
            self._on_exit(exited[i][0], exited[i][1], now)

    def _exits_meanwhile(self, done: int) -> None:
        """Inside a tick, after every :data:`~orchestrator.supervisor.exits.LOOK_EVERY` items (``done``: so far) of
        its O(heartbeats), O(hang checks) work: the exits meanwhile (an exit waits for a slice, not the tick)."""
        if done % LOOK_EVERY == 0 and self._exits.exited():
            self._poll(self.clock())

    def _take_heartbeats(self, now: float) -> None:
        """Heartbeats that arrived since the last look (O(changes)), each to the intake; backend
        samples, once a second, of the tasks that send none (a user's program that never reported)."""
        intake, checks, policy, table = self.intake, self._checks, self.policy, self.table
        for done, ((task, attempt), record) in enumerate(self.store.drain().items(), 1):
            self._exits_meanwhile(done)
            rt = table.find(task)
            if rt is not None and rt.current.number == attempt and rt.current.process is not None:
                reschedule, actions = intake.beat(rt, record)
                if actions:
                    self._do(actions, now)
                if reschedule:
                    checks.reschedule(rt, policy)
        for rt in intake.to_sample(now):
            a = rt.current
            assert a.process is not None
            a.took_sample(self.backend.sample(a.process), now)
            rt.saw_gpus(a.sample.gpus if a.sample else ())
        self._do(intake.logs(now) + intake.all_running(self.state), now)  # --max-log-size; all running

    def _check_hangs(self, now: float) -> None:
        """Hang checks of the tasks whose check deadline has passed (:meth:`~.hangs.HangChecks.look`); the likeliest
        cause is killed first (:func:`~.hangs.culprits_first`: by their stacks, then steps)."""
        if self.state.terminal:
            return
        hung: list[tuple[TaskRuntime, do.Hung]] = []
        for done, name in enumerate(self._checks.due(now), 1):
            self._exits_meanwhile(done)
            rt = self.table.named(name)
            if not rt.live:
                continue
            verdict = self._checks.look(rt, now, self.policy, self.store.deaf_s)
            if isinstance(verdict, do.Hung):
                hung.append((rt, verdict))
            elif verdict is not None:
                self._do([verdict], now)
        dumps = [self._dump(rt, h.why, now) for rt, h in hung]  # every one's stacks before any is killed
        peers = peers_to_dump(self.plan.spec, self.table, hung, dumps)  # what a collective's waiter waits for
        self._do(culprits_first(hung, dumps, peers, [self._dump(rt, "", now) for rt in peers]), now)

    def _decide(self, now: float) -> None:
        self._do(self.restarts.decide(now, self.state, self.preemption.requested, self._restart_at,
                                      self.backend.job_preempted), now)

    def _preempt(self, now: float) -> None:
        trainers = self.plan.spec.trainers()
        self._do(self.preemption.step(now, [rt for rt in self.table.live() if rt.task in trainers],
                                      self.table.of(self.plan.spec.coordinator), self.lives.last_step), now)

    # -- processes ---------------------------------------------------------------------------
    def _on_exit(self, rt: TaskRuntime, code: int, now: float) -> None:
        rt.current.exit_code, rt.current.ended_at = code, now
        self._do(self.endings.exited(rt, code, now, self.state, self.preemption.requested), now)

    def _kill(self, rt: TaskRuntime) -> int | None:
        """SIGKILL ``rt``'s attempt and wait for it (at most :data:`KILL_WAIT_S`); the code it died with."""
        assert rt.current.process is not None
        self.backend.signal(rt.current.process, signal.SIGKILL)
        return self.backend.wait(rt.current.process, timeout_s=KILL_WAIT_S)

    def _dump(self, rt: TaskRuntime, why: str, now: float) -> str:
        """``rt``'s stack dump ("" once it ended, or none given); ``why``: it is hung, said first."""
        if rt.current.state.terminal or rt.current.process is None:
            return ""
        self._do([do.Event(f"{rt.task.name} is hung: {why}; dumping its stacks, then killing it")] if why else [], now)
        return self.backend.dump_stacks(rt.current.process, self.options.stack_dump_timeout_s)

    def _kill_stuck_or_hung(self, action: do.Hung | do.Stuck, now: float) -> None:
        """Dump the stacks of a hung task (then kill it: a failure naming where it is stuck) or of one
        stuck in its exit (then kill it: its work is done, :meth:`~orchestrator.supervisor.ending.Endings.stuck`)."""
        rt = self.table.named(action.task)
        if isinstance(action, do.Hung):  # its stacks were taken with every hung task's, before any was killed
            dump = action.dump if action.dump is not None else self._dump(rt, action.why, now)
            return None if rt.current.state.terminal else self._record_failure(
                rt, None, now, forensics.hang_message(rt, action.why, dump), killed=True)
        assert rt.current.process is not None
        dump = self.backend.dump_stacks(rt.current.process, self.options.stack_dump_timeout_s)
        self._do(self.endings.stuck(rt, now, action.why, dump, forensics.keep_stacks(rt, dump), self._kill(rt),
                                    self.state), now)

    def _record_failure(self, rt: TaskRuntime, code: int | None, now: float, message: str,
                        killed: bool = False, preemption_notice: bool = False) -> None:
        """Record the failure of ``rt``'s attempt; ``killed``: first SIGKILL it (hung, or past
        its grace) and take the code it died with."""
        if killed:
            code = self._kill(rt)
        rt.current.exit_code, rt.current.ended_at = code, now
        rt.current.state = TaskState.FAILED
        process = rt.current.process
        memory = (self.backend.oom_killed(process), self.backend.memory_total_bytes(process)) \
            if process is not None and forensics.memory_facts_needed(code, killed) else None
        failure = forensics.explain_failure(rt, self.tasks, memory, code=code, now=now, message=message,
                                            killed=killed, preemption_notice=preemption_notice)
        rt.current.reason = failure.headline()
        self.log.add(failure)
        self._do([do.Event(failure.headline())], now)

    def _stop(self, names: Sequence[str] | None, reason: str, grace_s: float | None = None) -> None:
        """do.Stop tasks ``names`` (None: every live one) in two phases (SIGTERM, SIGKILL after
        ``grace_s``, default the stop timeout)."""
        tasks = [rt for rt in (self.tasks if names is None else [self.table.named(n) for n in names]) if rt.live]
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
