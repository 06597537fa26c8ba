"""The supervision loop: the only place that acts (starts, signals, stops, restarts, ends the job).

What to do is decided by the pure functions of :mod:`orchestrator.supervisor.decisions`
(exit meaning, job success, hang, retry, restart scope, backoff); this module gathers their
inputs (exits from the backend, heartbeats from the store, the clock) and carries out their
verdicts through the :class:`~orchestrator.backends.base.Backend` contract.

* The job succeeds when the coordinator (the chief, or worker 0 without one) exits 0.
  Tasks that never exit on their own (ps, PSS workers) are then stopped at once; other
  workers get ``success_grace_s`` seconds to finish (MWMS workers exit by themselves).
* A hung task is first asked for a Python stack dump (the backend's ``dump_stacks``, copied
  to ``stacks.txt`` beside its logs), then killed.
* ``deadline_s`` passed, or :meth:`Supervisor.request_stop` (SIGINT/SIGTERM): every task is
  stopped; exit code 1 for the deadline, 130 for an interruption.

The earliest failure is the root cause. Every wait is bounded; time is this process's
monotonic clock (injectable), never a task's. Tests drive the loop tick by tick with a fake
backend and clock (:meth:`Supervisor.start` and :meth:`Supervisor.tick`).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import logging
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator.backends.base import Backend, LaunchRequest, SpareInfo, SpareRequest
from orchestrator.env import PREEMPTED_EXIT_CODE, REJOINED_METRIC, SIGTERM_RECEIVED_FILE
from orchestrator.health.server import HeartbeatRecord, HeartbeatStore
from orchestrator.plan import SPARE_PRELOAD, Plan, attempt_env, task_dir, user_spare
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.spec.model import Strategy, TaskId
from orchestrator.spec.supervision import SuccessPolicy
from orchestrator.supervisor import decisions
from orchestrator.supervisor.decisions import RestartScope, TaskWatch
from orchestrator.supervisor.snapshot import JobSnapshot, LastHeartbeat, RecoveryRecord, TaskSnapshot
from orchestrator.supervisor.states import Failure, JobState, TaskRuntime, TaskState, describe_exit

log = logging.getLogger(__name__)

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130

_TF_NOISE = re.compile(
    r"^([IW]\d{4} [\d:.]+ +\d+ \S+:\d+\]|E\d{4} [\d:.]+ +\d+ cuda_\w+\.cc:\d+\]|WARNING: All log messages before absl)"
)


class View(Protocol):
    """What the supervisor tells the user about (see :mod:`orchestrator.report.live`).

    ``interval_s``: least seconds between two snapshots it wants; None for none until the
    end (a snapshot costs O(tasks), so a quiet view costs nothing per tick).
    """

    interval_s: float | None

    def update(self, snapshot: JobSnapshot) -> None: ...

    def event(self, elapsed_s: float, text: str) -> None: ...


class _NullView:
    interval_s: float | None = None

    def update(self, snapshot: JobSnapshot) -> None:
        pass

    def event(self, elapsed_s: float, text: str) -> None:
        pass


@dataclass
class Recovery:
    """One restart decision (live record; reports read :class:`RecoveryRecord`).

    Attributes:
        cause: the failure that triggered it.
        scope: what it covers.
        tasks: names of the restarted tasks.
        detected_at: monotonic seconds when the failure was seen.
        restarted_at: monotonic seconds when the new attempts started.
        resumed_at: monotonic seconds of the first training step after the restart.
        resumed_from_step: the step training resumed from (BackupAndRestore), when reported.
        await_rotation: a PSS worker restarted while the built-in coordinator trained: its
            recovery ends when the coordinator has it back in its rotation, not when it serves.
    """

    cause: Failure
    scope: RestartScope
    tasks: list[str]
    detected_at: float
    restarted_at: float | None = None
    resumed_at: float | None = None
    resumed_from_step: int | None = None
    await_rotation: bool = False

    def record(self, origin: float) -> RecoveryRecord:
        def rel(t: float | None) -> float | None:
            return None if t is None else t - origin

        return RecoveryRecord(
            cause=self.cause.headline(),
            scope=self.scope.value,
            tasks=tuple(self.tasks),
            detected_at_s=self.detected_at - origin,
            restarted_at_s=rel(self.restarted_at),
            resumed_at_s=rel(self.resumed_at),
            resumed_from_step=self.resumed_from_step,
        )


@dataclass
class JobResult:
    """How the job ended.

    Attributes:
        state: Succeeded or Failed.
        exit_code: 0 succeeded, 1 failed, 130 interrupted.
        reason: one line saying why it ended.
        root_cause: the earliest task failure, if any.
        failures: every task failure, earliest first.
        recoveries: every restart decision.
        wall_time_s: seconds from start to the last task's end.
    """

    state: JobState
    exit_code: int
    reason: str
    root_cause: Failure | None
    failures: list[Failure] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    wall_time_s: float = 0.0


def tail_lines(path: Path | str | None, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a text file ("" when it does not exist).

    TensorFlow's INFO and WARNING lines (``I0000 00:00:...``) are left out, so the
    traceback or error that explains a failure is what remains; the log keeps them all.
    """
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(deque((ln for ln in data.splitlines() if not _TF_NOISE.match(ln)), maxlen=lines))


def error_message(error_file: Path | None) -> str:
    """The ``message`` of a task's JSON error file ("" when there is none)."""
    if error_file is None:
        return ""
    try:
        return str(json.loads(error_file.read_text(encoding="utf-8")).get("message", ""))
    except (OSError, ValueError, AttributeError):
        return ""


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)|KeyboardInterrupt)(?::.*)?$")


def exception_line(stderr_tail: str) -> str:
    """The exception a Python program died of, from its stderr: the last line of the last
    ``Traceback`` (``ZeroDivisionError: division by zero``), its module path dropped; ""
    when there is none. For programs that write no error file (a user's program)."""
    lines = stderr_tail.splitlines()
    start = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")), default=None)
    if start is None:
        return ""
    for line in reversed(lines[start + 1:]):
        m = _EXCEPTION_LINE.match(line.strip())
        if m:
            text = line.strip()
            return text[text.index(m.group(1)):]
    return ""


def _phase_name(phase: int) -> str:
    return str(pb.Phase.Name(phase)).removeprefix("PHASE_").lower()


def _memory_total_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


class Supervisor:
    """Starts the planned tasks, watches them, restarts what the strategy can recover, ends the job.

    Args:
        plan: the job plan (its spec carries the restart policy and timeouts).
        backend: runs the tasks (:class:`~orchestrator.backends.base.Backend`).
        store: where the health server puts heartbeats.
        view: live output; default none.
        stop_timeout_s: seconds between SIGTERM and SIGKILL when stopping tasks.
        success_grace_s: seconds workers may take to exit after the coordinator succeeded.
        tick_s: seconds between two looks at the processes (bounds exit-detection latency).
        stack_dump_timeout_s: how long to wait for a hung task's stack dump before the kill.
        view_interval_s: least seconds between two snapshots handed to the view.
        clock: monotonic clock, seconds.
    """

    def __init__(
        self,
        plan: Plan,
        backend: Backend[Any],
        store: HeartbeatStore,
        view: View | None = None,
        *,
        stop_timeout_s: float = 10.0,
        success_grace_s: float = 30.0,
        tick_s: float = 0.1,
        stack_dump_timeout_s: float = 2.0,
        view_interval_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.store = store
        self.view: View = view or _NullView()
        self.policy = plan.spec.supervision
        self.stop_timeout_s = stop_timeout_s
        self.success_grace_s = success_grace_s
        self.tick_s = tick_s
        self.stack_dump_timeout_s = stack_dump_timeout_s
        self.view_interval_s = view_interval_s
        self.clock = clock
        self.tasks = [TaskRuntime(plan=tp) for tp in plan.tasks]
        self._by_task = {rt.task: rt for rt in self.tasks}
        self._by_name = {rt.task.name: rt for rt in self.tasks}
        self._silent = [rt for rt in self.tasks if not rt.plan.reports_heartbeats]  # sampled by the backend
        self._checks: list[tuple[float, int, str]] = []  # hang-check deadline heap: (when, version, task name)
        self._check_version: dict[str, int] = {}
        self.state = JobState.PENDING
        self.failures: list[Failure] = []
        self.recoveries: list[Recovery] = []
        self.restarts_used = 0
        self.reason = ""
        self.started_at = clock()
        self.started_wall = time.time()
        self.ended_at: float | None = None
        self._interrupt: str | None = None
        self._wake = threading.Event()
        self._force_stop = threading.Event()
        self._grace_deadline: float | None = None
        self._restart_at: dict[str, float] = {}  # task name -> when to start its next attempt
        self._exit_code = EXIT_FAILED
        self._tick_failures: list[Failure] = []
        self._next_view_at = 0.0
        self.fatal: Failure | None = None
        self._trained = False  # a task reported a training step: spares may start
        coordinator = self._by_task.get(plan.spec.coordinator) if plan.spec.coordinator else None
        # PSS with the built-in coordinator: it says when a restarted worker is back in its
        # rotation (metric ``rejoined:worker-N``, worker/rotation.py); that, not the worker's
        # server being up again, is when the worker's recovery is done
        self._rotation_reported = (plan.spec.strategy is Strategy.PARAMETER_SERVER and coordinator is not None
                                   and coordinator.plan.reports_heartbeats)
        self._spares = self._spare_request()
        self._trainers_deadline: float | None = None

    # -- control from outside ------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Ask the loop to stop every task and end the job (safe from a signal handler).

        A second request while tasks are being stopped skips the rest of the SIGTERM grace:
        what is left gets SIGKILL at once.
        """
        if self._interrupt is not None:
            self._force_stop.set()
        self._interrupt = reason
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> JobResult:
        """Run the job to its end. Returns the result; no task process is left running."""
        try:
            self.start()
            while not self.tick():
                self._wake.wait(self.tick_s)
                self._wake.clear()
        finally:
            live = self._live()
            if live:  # an exception escaped the loop: leave nothing behind
                self._stop(live, "stopped: orchestrator error")
            try:
                self.backend.close()
            except Exception:  # noqa: BLE001 - cleanup never costs the user the result
                log.warning("the %s backend failed to clean up", self.backend.name, exc_info=True)
        return self.finish()

    def start(self) -> None:
        """Start the job: every task's first attempt."""
        self.started_at = self.clock()
        self.started_wall = time.time()
        self._set_job_state(JobState.STARTING)
        for rt in self.tasks:
            if self._interrupt:
                break
            self._start(rt)

    def tick(self) -> bool:
        """One look at the job: exits, heartbeats, hangs, decisions, due restarts.

        Returns:
            True when the job is over (every started task ended and no restart is due).
        """
        now = self.clock()
        if not self.state.terminal:
            if self._interrupt:
                self._end(JobState.INTERRUPTED, EXIT_INTERRUPTED, self._interrupt)
                self._stop(self._live(), f"stopped: {self._interrupt}")
            elif self.policy.deadline_s is not None and now - self.started_at >= self.policy.deadline_s:
                self._end(JobState.FAILED, EXIT_FAILED, f"the job deadline of {self.policy.deadline_s:g} s passed")
                self._stop(self._live(), "stopped: job deadline passed")
        self._poll(now)
        self._take_heartbeats(now)
        self._check_hangs(now)
        self._decide(now)
        self._start_due_restarts(now)
        if self._trained and self._spares is not None and not self.state.terminal:
            self.backend.keep_spares(self._spares)
        if self._trainers_deadline is not None and now >= self._trainers_deadline and not self.state.terminal:
            self._trainers_deadline = None
            for rt in self._live():
                if rt.task in self.plan.spec.trainers():
                    assert rt.process is not None
                    self.backend.signal(rt.process, signal.SIGKILL)
                    code = self.backend.wait(rt.process, timeout_s=10.0)
                    self._record_failure(rt, code, now, f"did not exit within {self.success_grace_s:g} s after "
                                         f"{self.plan.spec.coordinator.name} succeeded", killed=True)
            self._decide(now)
        if self.state is JobState.SUCCEEDED and self._grace_deadline and now >= self._grace_deadline:
            self._stop(self._live(), f"did not exit within {self.success_grace_s:.0f} s after the job succeeded")
        over = not self._restart_at and all(rt.state.terminal for rt in self.tasks if rt.process is not None)
        interval = getattr(self.view, "interval_s", self.view_interval_s)
        if not over and interval is not None and now >= self._next_view_at:
            self._next_view_at = now + max(self.view_interval_s, interval)
            self.view.update(self.snapshot())
        return over

    def finish(self) -> JobResult:
        """Close the books once the loop is over: the final state, result and view."""
        if not self.state.terminal:
            if self._interrupt:
                self._end(JobState.INTERRUPTED, EXIT_INTERRUPTED, self._interrupt)
            else:
                self._end(JobState.FAILED, EXIT_FAILED, "no task is left running")
        self.ended_at = self.clock()
        self.view.update(self.snapshot())
        return JobResult(
            state=self.state,
            exit_code=self._exit_code,
            reason=self.reason,
            root_cause=self.fatal,
            failures=list(self.failures),
            recoveries=list(self.recoveries),
            wall_time_s=self.ended_at - self.started_at,
        )

    # -- what others read ----------------------------------------------------------------
    def snapshot(self) -> JobSnapshot:
        """An immutable picture of the job now (see :mod:`orchestrator.supervisor.snapshot`)."""
        now = self.clock()
        end = self.ended_at if self.ended_at is not None else now
        return JobSnapshot(
            plan=self.plan,
            state=self.state,
            reason=self.reason,
            exit_code=self._exit_code if self.ended_at is not None else None,
            elapsed_s=end - self.started_at,
            started_wall=self.started_wall,
            ended=self.ended_at is not None,
            restarts_used=self.restarts_used,
            tasks=tuple(self._task_snapshot(rt, now) for rt in self.tasks),
            failures=tuple(self.failures),
            recoveries=tuple(r.record(self.started_at) for r in self.recoveries),
            fatal=self.fatal,
            spares=tuple(self.backend.spares()),
        )

    @staticmethod
    def _task_snapshot(rt: TaskRuntime, now: float) -> TaskSnapshot:
        beat = None
        if rt.heartbeat is not None:
            hb = rt.heartbeat.heartbeat
            beat = LastHeartbeat(
                phase=_phase_name(hb.phase),
                cpu_percent=hb.cpu_percent,
                rss_bytes=hb.rss_bytes,
                count=rt.heartbeat.count,
                age_s=now - rt.heartbeat.received_at,
                step=hb.step if hb.HasField("step") else None,
                epoch=hb.epoch if hb.HasField("epoch") else None,
                loss=hb.loss if hb.HasField("loss") else None,
                examples_per_second=hb.examples_per_second if hb.HasField("examples_per_second") else None,
                metrics=dict(hb.metrics),
                message=hb.message,
            )
        return TaskSnapshot(
            task=rt.task,
            address=rt.plan.address,
            state=rt.state,
            attempt=rt.attempt,
            restarts=rt.restarts,
            pid=rt.pid,
            exit_code=rt.exit_code,
            reason=rt.reason,
            stdout_path=rt.stdout_path,
            stderr_path=rt.stderr_path,
            heartbeat=beat,
            cpu_percent=rt.sample.cpu_percent if rt.sample else None,
            rss_bytes=rt.sample.rss_bytes if rt.sample else None,
            history=tuple(dict(h) for h in rt.history),
            reports_heartbeats=rt.plan.reports_heartbeats,
            serves_forever=rt.plan.serves_forever,
        )

    # -- starting ------------------------------------------------------------------------
    def _live(self) -> list[TaskRuntime]:
        return [rt for rt in self.tasks if rt.process is not None and not rt.state.terminal]

    def _event(self, text: str) -> None:
        self.view.event(self.clock() - self.started_at, text)

    def _start(self, rt: TaskRuntime) -> None:
        directory = task_dir(self.plan.run_dir, rt.attempt, rt.task)
        env = attempt_env(self.plan, rt.task, rt.attempt)
        if not rt.plan.reports_heartbeats:  # a user's program binds its port without asking
            self.backend.release_port(rt.task, rt.attempt)
        handle = self.backend.start(LaunchRequest(rt.task, rt.attempt, rt.plan.argv, env, directory,
                                                  runtime=rt.plan.reports_heartbeats))
        rt.process = handle
        rt.pid = handle.pid
        rt.stdout_path, rt.stderr_path = handle.stdout_path, handle.stderr_path
        rt.error_file = directory / "error.json"
        rt.started_at = rt.progress_at = self.clock()
        rt.state = TaskState.STARTING
        self._schedule_check(rt)
        self._event(f"{rt.task.name} started (pid {rt.pid}, attempt {rt.attempt})")

    def _new_attempt(self, rt: TaskRuntime) -> None:
        rt.history.append(
            {
                "attempt": rt.attempt,
                "pid": rt.pid,
                "state": rt.state.value,
                "exit": describe_exit(rt.exit_code) if rt.exit_code is not None else None,
                "reason": rt.reason,
            }
        )
        rt.attempt += 1
        rt.restarts += 1
        rt.state = TaskState.PENDING
        rt.process = None
        rt.pid = rt.exit_code = rt.heartbeat = rt.ended_at = rt.running_at = None
        rt.sample = rt.sampled_at = rt.peak_rss_bytes = None
        rt.stop_requested = False
        rt.reason = ""
        rt.last_step = None
        self.backend.reserve_again(rt.task)

    def _start_due_restarts(self, now: float) -> None:
        if self.state.terminal or not self._restart_at:
            return
        due = [rt for rt in self.tasks if rt.task.name in self._restart_at and self._restart_at[rt.task.name] <= now]
        for rt in due:
            del self._restart_at[rt.task.name]
            self._start(rt)
        if due:
            for recovery in self.recoveries:
                if recovery.restarted_at is None:
                    recovery.restarted_at = now
            if self.state is JobState.RESTARTING and not self._restart_at:
                self._set_job_state(JobState.STARTING)

    # -- watching ------------------------------------------------------------------------
    def _poll(self, now: float) -> None:
        exited = []
        for rt in self.tasks:
            if rt.process is None or rt.state.terminal:
                continue
            code = self.backend.poll(rt.process)
            if code is not None:
                exited.append((rt, code))
        # several exits seen in one look: deaths by signal first, they are the likelier cause
        exited.sort(key=lambda item: item[1] >= 0)
        for rt, code in exited:
            self._on_exit(rt, code, now)

    def _sample_process(self, rt: TaskRuntime, now: float) -> None:
        """CPU and RSS of a task that sends no heartbeats (a user's program and the processes
        it started), from the backend, once a second."""
        if rt.sampled_at is not None and now - rt.sampled_at < 1.0:
            return
        assert rt.process is not None
        rt.sample = self.backend.sample(rt.process)
        rt.sampled_at = now
        if rt.sample is not None:
            rt.peak_rss_bytes = max(rt.peak_rss_bytes or 0, rt.sample.rss_bytes)
        if rt.state is TaskState.STARTING:
            rt.state = TaskState.RUNNING
            rt.running_at = now

    def _take_heartbeats(self, now: float) -> None:
        """Heartbeats that arrived since the last look (O(changes)); backend samples of the
        tasks that send none (a user's program that never reported)."""
        for (task, attempt), record in self.store.drain().items():
            rt = self._by_task.get(task)
            if rt is not None and rt.attempt == attempt and rt.process is not None:
                self._on_heartbeat(rt, record)
                self._schedule_check(rt)
        for rt in self._silent:
            if rt.process is not None and rt.heartbeat is None and not rt.state.terminal:
                self._sample_process(rt, now)
        if self.state is JobState.STARTING and all(rt.state is TaskState.RUNNING for rt in self.tasks):
            self._set_job_state(JobState.RUNNING)

    def _on_heartbeat(self, rt: TaskRuntime, record: HeartbeatRecord) -> None:
        hb = record.heartbeat
        previous = rt.heartbeat.heartbeat if rt.heartbeat else None
        rt.heartbeat = record
        rt.peak_rss_bytes = max(rt.peak_rss_bytes or 0, hb.rss_bytes)
        if previous is None or previous.phase != hb.phase:
            rt.progress_at = record.received_at
        if hb.HasField("step") and hb.step != rt.last_step:
            if hb.step > 0 and all(r.resumed_at is not None for r in self.recoveries):
                self._trained = True  # spares start (again) only once training runs: they never slow a (re)start
            rt.last_step = hb.step
            rt.progress_at = record.received_at
            self._note_resumed(rt, record.received_at, RestartScope.GROUP)
        if hb.phase in (pb.PHASE_SERVING, pb.PHASE_TRAINING):
            self._note_resumed(rt, record.received_at, RestartScope.TASK)
        if self._rotation_reported and rt.task == self.plan.spec.coordinator:
            old = previous.metrics if previous is not None else {}
            for key, count in hb.metrics.items():
                if key.startswith(REJOINED_METRIC) and count > old.get(key, 0):
                    worker = self._by_name.get(key[len(REJOINED_METRIC):])
                    if worker is not None:
                        self._note_resumed(worker, record.received_at, RestartScope.TASK, rejoined=True)
        if rt.state is TaskState.STARTING:
            rt.state = TaskState.RUNNING
            rt.running_at = record.first_received_at

    def _awaits_rotation(self, tasks: tuple[TaskId, ...]) -> bool:
        """A PSS worker restarted while the built-in coordinator trains: the coordinator will
        notice the failure and say when the worker is back in its rotation (before it trains,
        the coordinator connects to the new worker like to any other)."""
        if not self._rotation_reported or len(tasks) != 1 or tasks[0].task_type != "worker":
            return False
        coordinator = self._by_task[self.plan.spec.coordinator]
        return coordinator.heartbeat is not None and coordinator.heartbeat.heartbeat.phase == pb.PHASE_TRAINING

    def _note_resumed(self, rt: TaskRuntime, at: float, scope: RestartScope, rejoined: bool = False) -> None:
        """A group restart has resumed at its first new training step; a task restart once
        the task trains or serves again, or, for a PSS worker of the built-in coordinator,
        once the coordinator put it back into its rotation (``rejoined``)."""
        for recovery in self.recoveries:
            if (
                recovery.scope is scope
                and recovery.resumed_at is None
                and recovery.restarted_at is not None
                and rt.task.name in recovery.tasks
                and recovery.await_rotation == rejoined
            ):
                recovery.resumed_at = at
                resumed = rt.heartbeat.heartbeat.metrics.get("resumed_from_step") if rt.heartbeat else None
                recovery.resumed_from_step = int(resumed) if resumed is not None else None
                if rejoined:
                    text = (f"{rt.task.name} back in {self.plan.spec.coordinator.name}'s rotation "
                            f"{at - recovery.detected_at:.1f} s after the failure")
                else:
                    doing = "training" if rt.heartbeat and rt.heartbeat.heartbeat.phase == pb.PHASE_TRAINING else "serving"
                    text = f"{rt.task.name} {doing} again {at - recovery.detected_at:.1f} s after the failure"
                if recovery.resumed_from_step is not None:
                    text += f", resumed from step {recovery.resumed_from_step}"
                self._event(text)

    def _watch(self, rt: TaskRuntime) -> TaskWatch:
        record = rt.heartbeat
        assert rt.started_at is not None
        return TaskWatch(
            reports=rt.plan.reports_heartbeats,
            started_at=rt.started_at,
            heartbeat_at=record.received_at if record else None,
            phase=_phase_name(record.heartbeat.phase) if record else None,
            progress_at=rt.progress_at,
            step=rt.last_step,
            trains=rt.task.task_type != "evaluator",
            exiting=bool(record and record.heartbeat.exiting),
        )

    def _schedule_check(self, rt: TaskRuntime) -> None:
        """(Re)schedule ``rt``'s next hang check (:func:`decisions.next_check_at`); an older
        entry of the same task in the heap becomes stale (its version no longer matches)."""
        name = rt.task.name
        version = self._check_version.get(name, 0) + 1
        self._check_version[name] = version
        when = decisions.next_check_at(self._watch(rt), self.policy) if rt.started_at is not None else None
        if when is not None:
            heapq.heappush(self._checks, (when, version, name))
        if len(self._checks) > 4 * len(self.tasks) + 64:  # drop stale entries now and then
            self._checks = [c for c in self._checks if self._check_version.get(c[2]) == c[1]]
            heapq.heapify(self._checks)

    def _check_hangs(self, now: float) -> None:
        """Hang checks of the tasks whose check deadline has passed (a heap: O(changes))."""
        if self.state.terminal:
            return
        due: list[TaskRuntime] = []
        while self._checks and self._checks[0][0] < now:
            _, version, name = heapq.heappop(self._checks)
            rt = self._by_name[name]
            if self._check_version.get(name) == version and rt.process is not None and not rt.state.terminal:
                due.append(rt)
        hung = []
        for rt in due:
            why = decisions.hang_reason(self._watch(rt), now, self.policy)
            if why:
                hung.append((rt, why))
            else:
                self._schedule_check(rt)
        for i in decisions.culprit_order([rt.last_step for rt, _ in hung]):
            rt, why = hung[i]
            if not rt.state.terminal:
                self._kill_hung(rt, why, now)

    def _kill_hung(self, rt: TaskRuntime, why: str, now: float) -> None:
        self._event(f"{rt.task.name} is hung: {why}; dumping its stacks, then killing it")
        assert rt.process is not None
        stacks = self._dump_stacks(rt)
        self.backend.signal(rt.process, signal.SIGKILL)
        code = self.backend.wait(rt.process, timeout_s=10.0)
        message = f"hung: {why}" + (f"; stack dump in {stacks}" if stacks else "")
        self._record_failure(rt, code, now, message, killed=True)

    def _dump_stacks(self, rt: TaskRuntime) -> str:
        """Ask the backend for the task's stacks and keep them in ``stacks.txt`` beside its logs;
        returns that path ("" when no dump came)."""
        assert rt.process is not None
        dump = self.backend.dump_stacks(rt.process, self.stack_dump_timeout_s)
        if not dump or rt.stderr_path is None:
            return ""
        target = rt.stderr_path.parent / "stacks.txt"
        try:
            target.write_text(dump, encoding="utf-8")
        except OSError:
            return ""
        return str(target)

    # -- exits and decisions ---------------------------------------------------------------
    def _on_exit(self, rt: TaskRuntime, code: int, now: float) -> None:
        rt.exit_code, rt.ended_at = code, now
        verdict = decisions.classify_exit(code, stop_requested=rt.stop_requested,
                                          serves_forever=rt.plan.serves_forever, task_type=rt.task.task_type)
        if verdict.state is TaskState.STOPPED:
            rt.state = TaskState.STOPPED
            self._event(f"{rt.task.name} stopped ({describe_exit(code)})")
            return
        if verdict.state is TaskState.SUCCEEDED:
            rt.state = TaskState.SUCCEEDED
            rt.reason = "exited 0"
            self._event(f"{rt.task.name} succeeded")
            if self._sigterm_received(rt):  # too late to matter: say so rather than swallow it
                self._event(f"{rt.task.name} received SIGTERM from outside (a preemption notice) but finished first")
            if not self.state.terminal:
                self._on_trainer_success(rt, verdict, now)
            return
        message, notice = verdict.message or error_message(rt.error_file), False
        if code == PREEMPTED_EXIT_CODE and not message:
            message, notice = self._preemption_cause(rt)
        self._record_failure(rt, code, now, message, preemption_notice=notice)

    @staticmethod
    def _sigterm_received(rt: TaskRuntime) -> bool:
        """The task's attempt wrote :data:`orchestrator.env.SIGTERM_RECEIVED_FILE`."""
        return rt.stdout_path is not None and (Path(rt.stdout_path).parent / SIGTERM_RECEIVED_FILE).exists()

    def _preemption_cause(self, rt: TaskRuntime) -> tuple[str, bool]:
        """Why ``rt`` exited preempted, and whether it received the SIGTERM itself: every MWMS
        worker saves and exits when one is preempted (TF's ``PreemptionCheckpointHandler``), so
        the marker :data:`orchestrator.env.SIGTERM_RECEIVED_FILE` in a task's directory names
        the one that was."""
        if self._sigterm_received(rt):
            return "received SIGTERM from outside (a preemption notice)", True
        peers = [o.task.name for o in self.tasks if o is not rt and o.process is not None and self._sigterm_received(o)]
        if peers:
            return f"{', '.join(peers)} received SIGTERM from outside; every worker saved and exited", False
        return "", False

    def _record_failure(self, rt: TaskRuntime, code: int | None, now: float, message: str,
                        killed: bool = False, preemption_notice: bool = False) -> None:
        """Record a failure of ``rt``'s attempt with what explains it: the exception line (from
        the error file, else the stderr tail), a peer error and the likely culprit, the peak
        RSS and whether it was likely killed for memory. ``killed``: the orchestrator killed it."""
        rt.exit_code, rt.ended_at = code, now
        rt.state = TaskState.FAILED
        tail = tail_lines(rt.stderr_path)
        if not message:
            message = exception_line(tail)
        peer = decisions.peer_error(message + "\n" + tail)
        culprit = ""
        if peer:
            others = [o for o in self.tasks if o is not rt and o.task.task_type != "evaluator" and o.process is not None]
            name = decisions.likely_culprit([(o.task.name, o.last_step, o.progress_at) for o in others])
            if name:
                o = next(o for o in others if o.task.name == name)
                since = f", no progress for {now - o.progress_at:.1f} s" if o.progress_at is not None else ""
                culprit = f"{name} (last step {o.last_step if o.last_step is not None else '-'}{since})"
        likely_oom = False
        if code == -signal.SIGKILL and not killed and rt.process is not None:
            oom = self.backend.oom_killed(rt.process)
            near_limit = rt.peak_rss_bytes is not None and rt.peak_rss_bytes > 0.9 * _memory_total_bytes()
            likely_oom = bool(oom) or near_limit
            if rt.peak_rss_bytes:
                message = (message + "; " if message else "") + f"peak RSS {rt.peak_rss_bytes / 2**20:.0f} MiB"
            if likely_oom:
                message += ("; likely killed for memory (" + ("the cgroup counted an OOM kill" if oom
                            else "its RSS was near the machine's memory") + ")")
            elif oom is False:  # the cgroup was read: no OOM kill, so the SIGKILL came from outside
                message = (message + "; " if message else "") + "not the OOM killer (no OOM kill counted)"
        failure = Failure(
            task=rt.task,
            attempt=rt.attempt,
            exit_code=code,
            at=now,
            wall_time=time.time(),
            message=message,
            stderr_tail=tail,
            log_path=str(rt.stderr_path),
            peer_error=peer,
            likely_culprit=culprit,
            peak_rss_bytes=rt.peak_rss_bytes,
            likely_oom=likely_oom,
            preemption_notice=preemption_notice,
        )
        rt.reason = failure.headline()
        self.failures.append(failure)
        self._tick_failures.append(failure)
        self._event(failure.headline())

    def _decide(self, now: float) -> None:
        failures, self._tick_failures = self._tick_failures, []
        if self.state is JobState.SUCCEEDED and failures:
            self._mark(failures, after_success=True)
            for f in failures:
                self._event(f"{f.task.name} failed after the job succeeded: {f.headline()}")
            return
        if self.state.terminal or not failures:
            return
        # a failure seen while a group restart is pending is part of that restart
        failures = [f for f in failures if f.task.name not in self._restart_at]
        # the task that received the preemption notice first: its peers exited because it did
        training = sorted((f for f in failures if f.task.task_type != "evaluator"), key=lambda f: not f.preemption_notice)
        for f in failures:
            if f.task.task_type == "evaluator":
                self._maybe_restart(f, (f.task,), RestartScope.TASK, now, job_restart=False)
        if not training:
            return
        ended = self._training_ended(training[0])
        if ended:
            self._mark(training, after_training=True)
            training = [self._failure_of(f) for f in training]
            fatal = [f for f in training if f.task in self.plan.spec.trainers() or f.task.task_type == "ps"]
            if self.plan.spec.success_policy is SuccessPolicy.CHIEF and self.plan.spec.coordinator not in [
                    f.task for f in training]:
                fatal = [f for f in fatal if f.task.task_type == "ps"]  # the coordinator is all that counts
            if not fatal:
                for f in training:
                    self._event(f"{f.task.name} is not restarted: training had ended ({ended}); the job goes on")
                return
            why = f"training had ended ({ended}), and a restart would run it again"
            self._fail(fatal[0], why)
            return
        training_tasks = [rt.task for rt in self.tasks if rt.task.task_type != "evaluator"]
        targets = decisions.restart_scope(self.plan.spec.strategy, [f.task for f in training], training_tasks)
        self._maybe_restart(training[0], targets.tasks, targets.scope, now, job_restart=True)

    def _spare_request(self) -> SpareRequest | None:
        """The warm spares this job keeps once it trains (None: none): stand-ins for the
        trainers' command, with the job's common environment and TensorFlow preloaded."""
        spec = self.plan.spec
        trainers = [self._by_task[t] for t in spec.trainers()]
        if not trainers:
            return None
        argv = trainers[0].plan.argv
        if any(rt.plan.argv != argv for rt in trainers):
            return None
        builtin = trainers[0].plan.reports_heartbeats
        count = decisions.spare_count(spec.strategy, len(trainers), spec.supervision.spares, builtin)
        if count <= 0:
            return None
        common = {k: v for k, v in trainers[0].plan.env.items() if k not in ("TF_CONFIG", "ORCH_FAULTS")}
        if not builtin:  # a user's Python program (opt-in, --spares N): execwrap's spare mode
            spare = user_spare(argv, common)
            if spare is None:
                return None
            command, preload = spare
            return SpareRequest(count=count, argv=argv, env=common, preload=preload,
                                log_dir=self.plan.run_dir / "spares", command=command)
        module = argv[2] if len(argv) == 3 and argv[1] == "-m" else ""
        if not module:
            return None
        return SpareRequest(count=count, argv=argv, env=common, preload=SPARE_PRELOAD.get(module, ()),
                            log_dir=self.plan.run_dir / "spares")

    def spares(self) -> list[SpareInfo]:
        """The warm spares the backend started for this job."""
        return self.backend.spares()

    def _training_ended(self, cause: Failure) -> str:
        """Why training counts as ended at this failure ("" when it does not): the coordinator
        succeeded or reported a post-training phase, or the failed task itself did."""
        coordinator = self._by_task[self.plan.spec.coordinator]
        if coordinator.state is TaskState.SUCCEEDED:
            return f"{coordinator.task.name} succeeded"
        for rt in (coordinator, self._by_task[cause.task]):
            if rt.heartbeat is not None:
                phase = _phase_name(rt.heartbeat.heartbeat.phase)
                if phase in decisions.POST_TRAINING_PHASES and rt.task.task_type != "evaluator":
                    return f"{rt.task.name} reported {phase}"
        return ""

    def _mark(self, failures: list[Failure], *, after_training: bool = False, after_success: bool = False) -> None:
        """Flag recorded failures as after training / after success (they are frozen)."""
        for f in failures:
            i = next(i for i, g in enumerate(self.failures) if g is f)
            self.failures[i] = dataclasses.replace(f, after_training=after_training or f.after_training,
                                                   after_success=after_success or f.after_success)

    def _failure_of(self, f: Failure) -> Failure:
        """The current record of a failure (after :meth:`_mark`)."""
        return next(g for g in self.failures if g.task == f.task and g.attempt == f.attempt and g.at == f.at)

    def _fail(self, cause: Failure, why_not: str) -> None:
        """End the job as Failed because of ``cause``, the failure that ended it (the root cause)."""
        self.fatal = self._failure_of(cause)
        self._end(JobState.FAILED, EXIT_FAILED, f"{cause.headline()}; {why_not}")
        self._stop(self._live(), f"stopped: {cause.task.name} failed")

    def _maybe_restart(self, cause: Failure, tasks: tuple[TaskId, ...], scope: RestartScope, now: float,
                       job_restart: bool) -> None:
        """Restart ``tasks`` after ``cause`` if the policy allows; otherwise fail the job (or,
        for the evaluator, which never fails the job, leave it ended)."""
        failed = self._by_task[cause.task]
        used = self.restarts_used if job_restart else failed.restarts
        verdict = decisions.retry_verdict(
            self.policy.policy(cause.task.task_type), cause.task.task_type, cause.exit_code,
            restarts_used=used, max_restarts=self.policy.max_restarts, task_name=cause.task.name, attempt=failed.attempt,
            peer=cause.peer_error,
        )
        if not verdict.retry:
            if job_restart:
                self._fail(cause, verdict.why_not)
            else:
                self._event(f"{cause.task.name} is not restarted: {verdict.why_not}; the job goes on")
            return
        placeable, note = self.backend.prepare_restart(tasks)  # e.g. Slurm: move tasks off a lost node
        if not placeable:
            if job_restart:
                self._fail(cause, note)
            else:
                self._event(f"{cause.task.name} is not restarted: {note}; the job goes on")
            return
        if note:
            self._event(note)
        if job_restart:  # the evaluator's restarts are its own; they never use up the job's
            self.restarts_used += 1
        delay = decisions.backoff_s(self.policy, used + 1)
        names = [t.name for t in tasks]
        self._trained = False
        self.recoveries.append(Recovery(cause=cause, scope=scope, tasks=names, detected_at=now,
                                        await_rotation=self._awaits_rotation(tasks)))
        if scope is RestartScope.GROUP:
            self._set_job_state(JobState.RESTARTING)
            # the survivors' state is discarded anyway: SIGKILL at once, no SIGTERM grace
            self._stop(self._live(), f"stopped for a group restart after {cause.task.name} failed", grace_s=0.0)
        self._event(
            f"restart {used + 1}/{self.policy.max_restarts}: {', '.join(names)} in {delay:.1f} s "
            f"({scope.value} restart after {cause.task.name} failed, {describe_exit(cause.exit_code)})",
        )
        for task in tasks:
            rt = self._by_task[task]
            if rt.process is not None:  # not already waiting for its next attempt
                self._new_attempt(rt)
            self._restart_at[rt.task.name] = now + delay

    def _on_trainer_success(self, rt: TaskRuntime, verdict: decisions.ExitVerdict, now: float) -> None:
        """A task exited 0: the job succeeds once its success policy is met; under
        ``all-workers`` the other trainers get ``success_grace_s`` after the coordinator."""
        spec = self.plan.spec
        succeeded = {t.task for t in self.tasks if t.state is TaskState.SUCCEEDED}
        if decisions.success_reached(spec.success_policy, spec.coordinator, spec.trainers(), succeeded):
            self._on_success(now)
        elif decisions.ends_job_successfully(rt.task, verdict, spec.coordinator):
            self._trainers_deadline = now + self.success_grace_s

    def _on_success(self, now: float) -> None:
        coordinator = self.plan.spec.coordinator
        self._trainers_deadline = None
        if self.plan.spec.success_policy is SuccessPolicy.ALL_WORKERS:
            reason = f"every chief and worker exited 0 ({', '.join(t.name for t in self.plan.spec.trainers())})"
        else:
            reason = f"{coordinator.name} exited 0"
        self._end(JobState.SUCCEEDED, EXIT_SUCCEEDED, reason)
        servers = [rt for rt in self._live() if rt.plan.serves_forever]
        if servers:
            self._stop(servers, f"stopped after {coordinator.name} succeeded (it serves until stopped)")
        self._grace_deadline = now + self.success_grace_s

    def _end(self, state: JobState, exit_code: int, reason: str) -> None:
        self._exit_code = exit_code
        self.reason = reason
        self._restart_at.clear()
        self._set_job_state(state)

    def _set_job_state(self, state: JobState) -> None:
        if state is not self.state:
            self.state = state
            self._event(f"job {state.value}" + (f": {self.reason}" if state.terminal and self.reason else ""))

    def _stop(self, tasks: list[TaskRuntime], reason: str, grace_s: float | None = None) -> None:
        """Stop ``tasks`` in two phases (SIGTERM, SIGKILL after ``grace_s``, default the stop timeout)."""
        tasks = [rt for rt in tasks if rt.process is not None and not rt.state.terminal]
        if not tasks:
            return
        for rt in tasks:
            rt.stop_requested = True
            rt.reason = reason
        self.backend.stop([rt.process for rt in tasks if rt.process is not None],
                          timeout_s=self.stop_timeout_s if grace_s is None else grace_s, abort=self._force_stop)
        now = self.clock()
        for rt in tasks:
            assert rt.process is not None
            code = self.backend.poll(rt.process)
            if code is not None and not rt.state.terminal:
                self._on_exit(rt, code, now)
