"""What the supervisor does with heartbeats: take those that arrived, note what they change.

A part of the :class:`~orchestrator.supervisor.job.Supervisor`'s loop (a mixin, as
:mod:`~orchestrator.supervisor.failures`), with one concern: each tick it drains the
:class:`~orchestrator.health.store.HeartbeatStore` (only what changed since the last look) and
updates each reporting task's attempt: its latest heartbeat, progress, peaks, running state,
recoveries it completes, the coordinator's life record. Tasks that send none are sampled by the
backend once a second.

It is the loop's hot path (10,000 tasks send 10,000 heartbeats a second, on the same interpreter
as the health server), so a routine heartbeat (same phase as the one before, no recovery open,
not the coordinator) costs only its bookkeeping: its hang check is not rescheduled, since a newer
heartbeat or step only moves the check's deadline later (:func:`~orchestrator.supervisor.decisions.next_check_at`),
and the check, when its earlier deadline comes, finds the task alive and sets the next one
(:meth:`~orchestrator.supervisor.hangs.HangChecks.due`). A phase change, a first heartbeat, an
``exiting`` flag or a finish reschedules it at once (those can move the deadline earlier).
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

from orchestrator.backends.base import Backend
from orchestrator.health.store import HeartbeatRecord, HeartbeatStore
from orchestrator.plan import Plan
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.spec.model import TaskId
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import decisions, exitrules
from orchestrator.supervisor.decisions import RestartScope
from orchestrator.supervisor.formed import FormedCheck
from orchestrator.supervisor.gpu import usages_of
from orchestrator.supervisor.hangs import HangChecks
from orchestrator.supervisor.lives import LifeBook
from orchestrator.supervisor.logcap import LogCaps
from orchestrator.supervisor.recovery import RecoveryBook, rejoined_workers
from orchestrator.supervisor.snapshot import phase_name
from orchestrator.supervisor.states import JobState, TaskRuntime, TaskState
from orchestrator.supervisor.training_rules import NanWatch

_PHASES = {value: phase_name(value) for value in pb.Phase.values()}
"""Phase number -> name (``training``), looked up once per heartbeat."""
_WORKING = (pb.PHASE_SERVING, pb.PHASE_TRAINING)
PAST_FIRST_STEP = -1
"""``Attempt.first_step`` of an attempt whose first reported step was already past its first one
(no step is negative, so ``last_step`` never equals it)."""
GC_FREEZE_TASKS = 1000
"""From this many tasks, what the process holds once every task runs (the plan, the task
records, the health server's streams: ~1M objects at 10,000 tasks) is moved out of the cyclic
collector's sight (``gc.freeze`` after a collection): a full collection scans every tracked
object with the GIL held, 0.3-1 s at that size, long enough to see a SIGKILL late. They are still
freed when no longer referenced; only cycles among them wait."""


class HeartbeatHandling:
    """The heartbeat half of the supervision loop (see the module docstring)."""

    if TYPE_CHECKING:  # the loop's records and actions this part uses
        plan: Plan
        backend: Backend[Any]
        store: HeartbeatStore
        policy: SupervisionSpec
        tasks: list[TaskRuntime]
        book: RecoveryBook
        lives: LifeBook
        state: JobState
        _by_task: dict[TaskId, TaskRuntime]
        _by_name: dict[str, TaskRuntime]
        _silent: list[TaskRuntime]
        _checks: HangChecks
        _formed: FormedCheck
        _nan: NanWatch
        _logs: LogCaps
        _coordinator: TaskRuntime | None
        _rotation_reported: bool
        _spares_at: float | None
        _cold_start_s: float | None

        def _event(self, *texts: str) -> None: ...
        def _exits_meanwhile(self, done: int) -> None: ...
        def _persist(self) -> None: ...
        def _set_state(self, state: JobState, exit_code: int | None = None, reason: str = "") -> None: ...
        def _warn(self, text: str) -> None: ...

    def _take_heartbeats(self, now: float) -> None:
        """Heartbeats that arrived since the last look (O(changes)); backend samples, once a
        second, of the tasks that send none (a user's program that never reported)."""
        by_task, checks, policy = self._by_task, self._checks, self.policy
        for done, ((task, attempt), record) in enumerate(self.store.drain().items(), 1):
            self._exits_meanwhile(done)
            rt = by_task.get(task)
            if rt is not None and rt.current.number == attempt and rt.current.process is not None:
                if self._on_heartbeat(rt, record):
                    checks.reschedule(rt, policy)
        for rt in self._silent:
            a = rt.current
            if a.process is not None and a.heartbeat is None and not a.state.terminal and (
                    a.sampled_at is None or now - a.sampled_at >= 1.0):
                a.took_sample(self.backend.sample(a.process), now)
                rt.saw_gpus(a.sample.gpus if a.sample else ())
        self._event(*self._logs.check(self.tasks, now, len(self.tasks)))  # --max-log-size (logcap)
        if self.state is JobState.STARTING and all(rt.current.state is TaskState.RUNNING for rt in self.tasks):
            self._set_state(JobState.RUNNING)
            if len(self.tasks) >= GC_FREEZE_TASKS:
                gc.collect()
                gc.freeze()

    def _on_heartbeat(self, rt: TaskRuntime, record: HeartbeatRecord) -> bool:
        """Note ``record``, the latest heartbeat of ``rt``'s current attempt. Returns True when
        its hang check must be rescheduled now (its deadline may have moved earlier)."""
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
        if a.training_at is None and phase == pb.PHASE_TRAINING:
            a.training_at = at  # its first step is judged from here (hang_rules.first_step_due_at)
        metrics = hb.metrics
        coordinator = rt is self._coordinator
        resumed = metrics.get("resumed_from_step") if metrics else None
        resumed_from = int(resumed) if resumed is not None else None
        if coordinator and self.lives.coordinator_beat(hb.step if hb.HasField("step") else None, resumed_from, at,
                                                       metrics.get("global_batch_size")):
            self._persist()  # a SIGKILLed orchestrator's resume knows how far training got
        self._event(*self.lives.take_warnings(), *(self._formed.beat(rt.task, a.number, metrics) if metrics else ()))
        for line in self._nan.beat(rt.task.name, a.number, hb.step if hb.HasField("step") else None,
                                   hb.loss if hb.HasField("loss") else None, metrics):
            self._warn(line)  # a non-finite loss: said once per attempt (training_rules)
        # a recovery to note only when one restarted this task, or it says where it resumed (O(1))
        recovering = resumed_from is not None or self.book.waits_for(rt.task.name)
        note: dict[str, Any] = {"doing": "training" if phase == pb.PHASE_TRAINING else "serving",
                                "resumed_from_step": resumed_from,
                                "coordinator": self.plan.spec.coordinator.name} if recovering or coordinator else {}
        if hb.HasField("step") and hb.step != a.last_step:
            if hb.step > 0 and self._spares_at is None and self.book.all_resumed:
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
                self._event(*self.book.note(rt.task.name, at, RestartScope.GROUP, **note))
        if recovering and phase in _WORKING:
            self._event(*self.book.note(rt.task.name, at, RestartScope.TASK, **note))
        if coordinator and self._rotation_reported:
            for name in rejoined_workers(previous.metrics if previous is not None else {}, metrics):
                if name in self._by_name:
                    self._event(*self.book.note(name, at, RestartScope.TASK, rejoined=True,
                                                doing="", resumed_from_step=None, coordinator=note["coordinator"]))
        if a.state is TaskState.STARTING:
            a.state, a.running_at = TaskState.RUNNING, record.first_received_at
        if a.finished_at is None and not rt.plan.serves_forever and exitrules.finished(_PHASES.get(phase), hb.exiting):
            a.finished_at = at  # its exit grace runs from here
            reschedule = True
        return reschedule
