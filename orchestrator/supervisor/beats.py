"""What the supervisor does with heartbeats: take those that arrived, note what they change.

A part of the supervisor (:mod:`~orchestrator.supervisor.loop`) with one concern: the loop
drains the :class:`~orchestrator.health.store.HeartbeatStore` each tick (only what changed since
the last look) and hands each heartbeat to :meth:`Intake.beat`, which updates the reporting
task's attempt: its latest heartbeat, progress, peaks, running state,
recoveries it completes, the coordinator's life record. Tasks that send none are sampled by the
backend once a second (:meth:`Intake.to_sample`). What it wants done it returns
(:mod:`~orchestrator.supervisor.actions`); it owns when the warm spares start.

It is the loop's hot path (10,000 tasks send 10,000 heartbeats a second, on the same interpreter
as the health server), so a routine heartbeat (same phase as the one before, no recovery open,
not the coordinator) costs only its bookkeeping: its hang check is not rescheduled, since a newer
heartbeat or step only moves the check's deadline later
(:func:`~orchestrator.supervisor.rules.decisions.next_check_at`), and the check, when its
earlier deadline comes, finds the task alive and sets the next one
(:meth:`~orchestrator.supervisor.hangs.HangChecks.due`). A phase change, a first heartbeat, an
``exiting`` flag or a finish reschedules it at once (those can move the deadline earlier).
"""

from __future__ import annotations

import gc
from typing import Any

from orchestrator.health.store import HeartbeatRecord
from orchestrator.plan import Plan
from orchestrator.proto import phases
from orchestrator.supervisor.actions import Action, Become, Event, Persist, Spares, Warn
from orchestrator.supervisor.logcap import LogCaps
from orchestrator.supervisor.records.lives import LifeBook
from orchestrator.supervisor.records.recovery import RecoveryBook, rejoined_workers
from orchestrator.supervisor.records.snapshot import formed_of
from orchestrator.supervisor.records.states import JobState, TaskRuntime, TaskState
from orchestrator.supervisor.rules import decisions, exitrules
from orchestrator.supervisor.rules.decisions import RestartScope
from orchestrator.supervisor.rules.formed import FormedCheck
from orchestrator.supervisor.rules.gpu import usages_of
from orchestrator.supervisor.rules.training_rules import NanWatch
from orchestrator.supervisor.table import TaskTable

_WORKING = (phases.PHASE_SERVING, phases.PHASE_TRAINING)
PAST_FIRST_STEP = -1
"""``Attempt.first_step`` of an attempt whose first reported step was already past its first one
(no step is negative, so ``last_step`` never equals it)."""
GC_FREEZE_TASKS = 1000
"""From this many tasks, what the process holds once every task runs (the plan, the task
records, the health server's streams: ~1M objects at 10,000 tasks) is moved out of the cyclic
collector's sight (``gc.freeze`` after a collection): a full collection scans every tracked
object with the GIL held, 0.3-1 s at that size, long enough to see a SIGKILL late. They are still
freed when no longer referenced; only cycles among them wait."""


class Intake:
    """Heartbeat intake (see the module docstring).

    Args:
        plan: the job's plan.
        table: the job's tasks.
        book: the recoveries (a heartbeat may complete one).
        lives: the lives of the run (the coordinator's heartbeats say how far training got).
        formed: what the tasks formed, checked against the plan.
        rotation_reported: PSS with the built-in coordinator: it says when a restarted worker is
            back in its rotation (that ends the worker's recovery).
    """

    def __init__(self, plan: Plan, table: TaskTable, book: RecoveryBook, lives: LifeBook, formed: FormedCheck,
                 rotation_reported: bool) -> None:
        self._plan, self._table, self._book, self._lives, self._formed = plan, table, book, lives, formed
        self._rotation_reported = rotation_reported
        self._spares_at: float | None = None  # when the spares start (decisions.spares_start_at); None: not yet
        self._cold_start_s: float | None = None  # the first attempt's start -> first step
        policy = plan.spec.supervision
        self.nan = NanWatch(policy.on_nan, policy.nan_metrics)
        """Non-finite losses, said once per attempt; its ``failure`` ends the job under ``--on-nan fail``."""
        self._logs = LogCaps(policy.max_log_size_bytes)  # --max-log-size (logcap)

    def to_sample(self, now: float) -> list[TaskRuntime]:
        """The tasks that send no heartbeats whose backend sample is due (once a second)."""
        return [rt for rt in self._table.silent if rt.current.process is not None and rt.current.heartbeat is None
                and not rt.current.state.terminal and (rt.current.sampled_at is None
                                                       or now - rt.current.sampled_at >= 1.0)]

    def all_running(self, state: JobState) -> list[Action]:
        """A starting job whose every task runs (a parked or held PSS worker left out: docs/elastic.md) is running."""
        parked = self._lives.life.idle if state is JobState.STARTING else ()
        if state is JobState.STARTING and all(rt.current.state is TaskState.RUNNING or rt.task.name in parked
                                              for rt in self._table):
            if len(self._table) >= GC_FREEZE_TASKS:
                gc.collect()
                gc.freeze()
            return [Become(JobState.RUNNING)]
        return []

    def logs(self, now: float) -> list[Action]:
        """Cut the live attempts' logs past ``--max-log-size`` (:class:`~orchestrator.supervisor.logcap.LogCaps`):
        an event for each file cut for the first time."""
        return [Event(t) for t in self._logs.check(self._table, now, len(self._table))]

    def logs_cut(self) -> list[str]:
        """At the end: a warning for each log cut by ``--max-log-size``, and how much (``summary.json``)."""
        return self._logs.final(self._table)

    def restarted(self) -> None:
        """A task started again: the spares it left start again once it trains."""
        self._spares_at = None

    def spares(self, now: float) -> list[Action]:
        """The warm spares, once training has run as long as a start takes."""
        return [Spares()] if self._spares_at is not None and now >= self._spares_at else []

    def beat(self, rt: TaskRuntime, record: HeartbeatRecord) -> tuple[bool, list[Action]]:
        """Note ``record``, the latest heartbeat of ``rt``'s current attempt. Returns whether its
        hang check must be rescheduled now (its deadline may have moved earlier), and what to do."""
        out: list[Action] = []
        a, hb = rt.current, record.heartbeat
        previous = a.heartbeat.heartbeat if a.heartbeat else None
        a.heartbeat = record
        at = record.received_at
        if a.peak_rss_bytes is None or hb.rss_bytes > a.peak_rss_bytes:
            a.peak_rss_bytes = hb.rss_bytes
        if hb.gpus:
            rt.saw_gpus(usages_of(hb))
        phase = hb.phase
        reschedule = previous is None or previous.phase != phase or previous.exiting != hb.exiting
        if reschedule:
            a.progress_at = at
        if a.training_at is None and phase == phases.PHASE_TRAINING:
            a.training_at = at  # its first step is judged from here (hang_rules.first_step_due_at)
        metrics = hb.metrics
        coordinator = rt is self._table.coordinator
        resumed_from = hb.resumed_from_step if hb.HasField("resumed_from_step") else None  # a typed control fact
        if coordinator and self._lives.coordinator_beat(hb.step if hb.HasField("step") else None, resumed_from, at,
                                                        metrics.get("global_batch_size")):
            out.append(Persist())  # a SIGKILLed orchestrator's resume knows how far training got
        formed = formed_of(hb)  # what its strategy formed (the heartbeat's typed field)
        in_cluster = self._plan.spec.workers - len(self._lives.life.held)  # held workers: in no TF_CONFIG yet
        out += [Event(t) for t in (*self._lives.take_warnings(),
                                   *(self._formed.beat(rt.task, a.number, formed, in_cluster) if formed else ()))]
        out += [Warn(t) for t in self.nan.beat(  # a non-finite loss: said once per attempt (training_rules)
            rt.task.name, a.number, hb.step if hb.HasField("step") else None, hb.loss if hb.HasField("loss") else None,
            metrics, hb.non_finite_step if hb.HasField("non_finite_step") else None)]
        # a recovery to note only when one restarted this task, or it says where it resumed (O(1))
        book = self._book
        recovering = resumed_from is not None or book.waits_for(rt.task.name)
        note: dict[str, Any] = {"doing": "training" if phase == phases.PHASE_TRAINING else "serving",
                                "resumed_from_step": resumed_from,
                                "coordinator": self._plan.spec.coordinator.name} if recovering or coordinator else {}
        if hb.HasField("step") and hb.step != a.last_step:
            if hb.step > 0 and self._spares_at is None and book.all_resumed:
                # spares start (again) only once training has run as long as a start takes
                if self._cold_start_s is None:
                    self._cold_start_s = at - (a.started_at or at)
                self._spares_at = decisions.spares_start_at(at, self._cold_start_s)
            if a.first_step is None:  # step 0 (on_train_begin) or where it resumed: its first step starts;
                # a first report past that (a program reporting after each step) is its first step done
                a.first_step = hb.step if hb.step == 0 or hb.step == resumed_from else PAST_FIRST_STEP
            elif a.last_step == a.first_step:
                reschedule = True  # past its first step: the stall timeout may come earlier
            a.last_step, a.progress_at = hb.step, at
            if recovering:
                out += [Event(t) for t in book.note(rt.task.name, at, RestartScope.GROUP, **note)]
        if recovering and phase in _WORKING:
            out += [Event(t) for t in book.note(rt.task.name, at, RestartScope.TASK, **note)]
        if coordinator and self._rotation_reported:
            for name in rejoined_workers(previous.rejoined if previous is not None else {}, hb.rejoined):
                if self._table.has(name):
                    out += [Event(t) for t in book.note(name, at, RestartScope.TASK, rejoined=True, doing="",
                                                        resumed_from_step=None, coordinator=note["coordinator"])]
        if a.state is TaskState.STARTING:
            a.state, a.running_at = TaskState.RUNNING, record.first_received_at
        if (a.finished_at is None and not rt.plan.serves_forever
                and exitrules.finished(phases.NAMES.get(phase), hb.exiting)):
            a.finished_at = at  # its exit grace runs from here
            reschedule = True
        return reschedule, out
