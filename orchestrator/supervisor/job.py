"""The job state machine: the only place that decides to restart or stop a task, or end the job.

Rules:

* The job succeeds when the coordinator (the chief, or worker 0 without one) exits 0.
  Tasks that never exit on their own (ps, PSS workers) are then stopped at once; other
  workers get ``success_grace_s`` seconds to finish (MWMS workers exit by themselves).
* A task fails when it exits on its own with a non-zero code or a signal, when a ps or PSS
  worker exits at all, or when it is hung: no heartbeat for ``heartbeat_timeout_s``, no new
  step for ``stall_timeout_s`` while training, or not training/serving ``startup_timeout_s``
  after its start. A hung task is first asked for a Python stack dump (SIGUSR1 ->
  faulthandler, into its stderr log and ``stacks.txt``), then killed.
* A failure is retried when the role's restart policy allows its exit code and the job has
  restarts left (:mod:`orchestrator.spec.supervision`); the scope follows the strategy: the
  whole group under MWMS, the worker alone under PSS (the whole cluster for a ps or chief),
  the evaluator alone. Otherwise the job fails: every task is stopped.
* An evaluator never fails the job.
* ``deadline_s`` passed, or :meth:`Supervisor.request_stop` (SIGINT/SIGTERM): every task is
  stopped; exit code 1 for the deadline, 130 for an interruption.

The earliest failure is the root cause. Every wait is bounded; time is this process's
monotonic clock, never a task's.
"""

from __future__ import annotations

import json
import logging

import psutil
import re
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from orchestrator.health.server import HeartbeatStore
from orchestrator.plan import Plan, attempt_env, task_dir
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.spec.model import Strategy
from orchestrator.supervisor.states import Failure, JobState, TaskRuntime, TaskState, describe_exit

log = logging.getLogger(__name__)

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130

_WORKING_PHASES = (pb.PHASE_TRAINING, pb.PHASE_SERVING, pb.PHASE_EVALUATING, pb.PHASE_SAVING, pb.PHASE_DONE)
_TF_NOISE = re.compile(
    r"^([IW]\d{4} [\d:.]+ +\d+ \S+:\d+\]|E\d{4} [\d:.]+ +\d+ cuda_\w+\.cc:\d+\]|WARNING: All log messages before absl)"
)


class View(Protocol):
    """What the supervisor tells the user about (see :mod:`orchestrator.report.live`)."""

    def update(self, supervisor: "Supervisor") -> None: ...

    def event(self, supervisor: "Supervisor", text: str) -> None: ...


class _NullView:
    def update(self, supervisor: "Supervisor") -> None:
        pass

    def event(self, supervisor: "Supervisor", text: str) -> None:
        pass


@dataclass
class Recovery:
    """One restart decision.

    Attributes:
        cause: the failure that triggered it.
        scope: ``group`` (every training task) or ``task`` (the failed task alone).
        tasks: names of the restarted tasks.
        detected_at: monotonic seconds when the failure was seen.
        restarted_at: monotonic seconds when the new attempts started.
        resumed_at: monotonic seconds of the first training step after the restart.
        resumed_from_step: the step training resumed from (BackupAndRestore), when reported.
    """

    cause: Failure
    scope: str
    tasks: list[str]
    detected_at: float
    restarted_at: float | None = None
    resumed_at: float | None = None
    resumed_from_step: int | None = None

    def to_dict(self, origin: float) -> dict:
        def rel(t):
            return None if t is None else round(t - origin, 3)

        return {
            "cause": self.cause.headline(),
            "scope": self.scope,
            "tasks": self.tasks,
            "detected_at_s": rel(self.detected_at),
            "restarted_at_s": rel(self.restarted_at),
            "resumed_at_s": rel(self.resumed_at),
            "detection_to_resumed_training_s": None
            if self.resumed_at is None
            else round(self.resumed_at - self.detected_at, 3),
            "resumed_from_step": self.resumed_from_step,
        }


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


def tail_lines(path, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a text file ("" when it does not exist).

    TensorFlow's INFO and WARNING lines (``I0000 00:00:...``) are left out, so the
    traceback or error that explains a failure is what remains; the log keeps them all.
    """
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(deque((ln for ln in data.splitlines() if not _TF_NOISE.match(ln)), maxlen=lines))


class Supervisor:
    """Starts the planned tasks, watches them, restarts what the strategy can recover, ends the job.

    Args:
        plan: the job plan (its spec carries the restart policy and timeouts).
        backend: runs the tasks (``start`` / ``poll`` / ``signal`` / ``stop`` / ``reserve_again``).
        store: where the health server puts heartbeats.
        view: live output; default none.
        stop_timeout_s: seconds between SIGTERM and SIGKILL when stopping tasks.
        success_grace_s: seconds workers may take to exit after the coordinator succeeded.
        tick_s: seconds between two looks at the processes (bounds exit-detection latency).
        stack_dump_timeout_s: how long to wait for a hung task's stack dump before the kill.
        clock: monotonic clock.
    """

    def __init__(
        self,
        plan: Plan,
        backend,
        store: HeartbeatStore,
        view: View | None = None,
        *,
        stop_timeout_s: float = 10.0,
        success_grace_s: float = 30.0,
        tick_s: float = 0.1,
        stack_dump_timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.store = store
        self.view = view or _NullView()
        self.policy = plan.spec.supervision
        self.stop_timeout_s = stop_timeout_s
        self.success_grace_s = success_grace_s
        self.tick_s = tick_s
        self.stack_dump_timeout_s = stack_dump_timeout_s
        self.clock = clock
        self.tasks = [TaskRuntime(plan=tp) for tp in plan.tasks]
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
        self.started_at = self.clock()
        self.started_wall = time.time()
        self._set_job_state(JobState.STARTING)
        try:
            for rt in self.tasks:
                if self._interrupt:
                    break
                self._start(rt)
            while True:
                now = self.clock()
                if not self.state.terminal:
                    if self._interrupt:
                        self._end(JobState.FAILED, EXIT_INTERRUPTED, self._interrupt)
                        self._stop(self._live(), f"stopped: {self._interrupt}")
                    elif self.policy.deadline_s is not None and now - self.started_at >= self.policy.deadline_s:
                        self._end(JobState.FAILED, EXIT_FAILED, f"the job deadline of {self.policy.deadline_s:g} s passed")
                        self._stop(self._live(), "stopped: job deadline passed")
                self._poll(now)
                self._take_heartbeats(now)
                self._check_hangs(now)
                self._decide(now)
                self._start_due_restarts(now)
                if self.state is JobState.SUCCEEDED and self._grace_deadline and now >= self._grace_deadline:
                    self._stop(self._live(), f"did not exit within {self.success_grace_s:.0f} s after the job succeeded")
                if not self._restart_at and all(rt.state.terminal for rt in self.tasks if rt.process is not None):
                    break
                self.view.update(self)
                self._wake.wait(self.tick_s)
                self._wake.clear()
        finally:
            live = self._live()
            if live:  # an exception escaped the loop: leave nothing behind
                self._stop(live, "stopped: orchestrator error")
            self.backend.close()
        if not self.state.terminal:
            self._end(JobState.FAILED, EXIT_FAILED, self._interrupt or "no task is left running")
        self.ended_at = self.clock()
        self.view.update(self)
        return JobResult(
            state=self.state,
            exit_code=self._exit_code,
            reason=self.reason,
            root_cause=self.failures[0] if self.failures else None,
            failures=list(self.failures),
            recoveries=list(self.recoveries),
            wall_time_s=self.ended_at - self.started_at,
        )

    # -- starting ------------------------------------------------------------------------
    def _live(self) -> list[TaskRuntime]:
        return [rt for rt in self.tasks if rt.process is not None and not rt.state.terminal]

    def _start(self, rt: TaskRuntime) -> None:
        directory = task_dir(self.plan.run_dir, rt.attempt, rt.task)
        env = attempt_env(self.plan, rt.task, rt.attempt)
        if not rt.plan.reports_heartbeats:  # a user's program binds its port without asking
            self.backend.release_port(rt.task, rt.attempt)
        rt.process = self.backend.start(rt.plan.argv, env, directory)
        rt.pid = rt.process.pid
        rt.stdout_path, rt.stderr_path = rt.process.stdout_path, rt.process.stderr_path
        rt.error_file = directory / "error.json"
        rt.started_at = rt.progress_at = self.clock()
        rt.state = TaskState.STARTING
        self.view.event(self, f"{rt.task.name} started (pid {rt.pid}, attempt {rt.attempt})")

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
        rt.process = rt.pid = rt.exit_code = rt.heartbeat = rt.ended_at = rt.running_at = None
        rt.sample = rt.sampler = None
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
        it started), once a second."""
        if rt.sample is not None and now - rt.sample["at"] < 1.0:
            return
        try:
            if rt.sampler is None:
                rt.sampler = {}
            root = rt.sampler.get(rt.pid) or psutil.Process(rt.pid)
            processes = {p.pid: rt.sampler.get(p.pid, p) for p in [root, *root.children(recursive=True)]}
            cpu = rss = 0.0
            for pid, proc in processes.items():
                try:
                    first = pid not in rt.sampler
                    value = proc.cpu_percent(None)
                    cpu += 0.0 if first else value
                    rss += proc.memory_info().rss
                except psutil.Error:
                    continue
            rt.sampler = processes
            rt.sample = {"at": now, "cpu_percent": cpu, "rss_bytes": int(rss)}
        except (psutil.Error, TypeError, ValueError):
            rt.sample = {"at": now, "cpu_percent": 0.0, "rss_bytes": 0}
        if rt.state is TaskState.STARTING:
            rt.state = TaskState.RUNNING
            rt.running_at = now

    def _take_heartbeats(self, now: float) -> None:
        for rt in self.tasks:
            if rt.process is None:
                continue
            record = self.store.get(rt.task, rt.attempt)
            if record is None:
                if not rt.plan.reports_heartbeats and not rt.state.terminal:
                    self._sample_process(rt, now)
                continue
            hb = record.heartbeat
            previous = rt.heartbeat.heartbeat if rt.heartbeat else None
            rt.heartbeat = record
            if previous is None or previous.phase != hb.phase:
                rt.progress_at = record.received_at
            if hb.HasField("step") and hb.step != rt.last_step:
                rt.last_step = hb.step
                rt.progress_at = record.received_at
                self._note_resumed(rt, record.received_at, "group")
            if hb.phase in (pb.PHASE_SERVING, pb.PHASE_TRAINING):
                self._note_resumed(rt, record.received_at, "task")
            if rt.state is TaskState.STARTING:
                rt.state = TaskState.RUNNING
                rt.running_at = record.first_received_at
        if self.state is JobState.STARTING and all(rt.state is TaskState.RUNNING for rt in self.tasks):
            self._set_job_state(JobState.RUNNING)

    def _note_resumed(self, rt: TaskRuntime, at: float, scope: str) -> None:
        """A group restart has resumed at its first new training step; a task restart once
        the task trains or serves again."""
        for recovery in self.recoveries:
            if (
                recovery.scope == scope
                and recovery.resumed_at is None
                and recovery.restarted_at is not None
                and rt.task.name in recovery.tasks
            ):
                recovery.resumed_at = at
                resumed = rt.heartbeat.heartbeat.metrics.get("resumed_from_step") if rt.heartbeat else None
                recovery.resumed_from_step = int(resumed) if resumed is not None else None
                doing = "training" if rt.heartbeat and rt.heartbeat.heartbeat.phase == pb.PHASE_TRAINING else "serving"
                text = f"{rt.task.name} {doing} again {at - recovery.detected_at:.1f} s after the failure"
                if recovery.resumed_from_step is not None:
                    text += f", resumed from step {recovery.resumed_from_step}"
                self.view.event(self, text)

    def _check_hangs(self, now: float) -> None:
        if self.state.terminal:
            return
        hung: list[tuple[TaskRuntime, str]] = []
        p = self.policy
        for rt in self._live():
            record = rt.heartbeat
            if record is None and not rt.plan.reports_heartbeats:
                continue  # a user's program that does not report: only its exit is watched
            if record is None or record.heartbeat.phase not in _WORKING_PHASES:
                if rt.started_at is not None and now - rt.started_at > p.startup_timeout_s:
                    hung.append((rt, f"not training or serving {now - rt.started_at:.1f} s after its start "
                                     f"(startup timeout {p.startup_timeout_s:g} s)"))
                    continue
            if record is not None and now - record.received_at > p.heartbeat_timeout_s:
                hung.append((rt, f"no heartbeat for {now - record.received_at:.1f} s "
                                 f"(heartbeat timeout {p.heartbeat_timeout_s:g} s)"))
            elif (
                record is not None
                and record.heartbeat.phase == pb.PHASE_TRAINING
                and now - rt.progress_at > p.stall_timeout_s
            ):
                hung.append((rt, f"no training progress for {now - rt.progress_at:.1f} s at step "
                                 f"{rt.last_step if rt.last_step is not None else '-'} (stall timeout {p.stall_timeout_s:g} s)"))
        # peers blocked in a collective stall with the hung task: the one furthest behind first
        hung.sort(key=lambda item: (item[0].last_step if item[0].last_step is not None else -1))
        for rt, why in hung:
            if rt.state.terminal:
                continue
            self._kill_hung(rt, why, now)

    def _kill_hung(self, rt: TaskRuntime, why: str, now: float) -> None:
        self.view.event(self, f"{rt.task.name} is hung: {why}; dumping its stacks, then killing it")
        stacks = self._dump_stacks(rt)
        self.backend.signal(rt.process, signal.SIGKILL)
        code = self.backend.wait(rt.process, timeout_s=10.0)
        message = f"hung: {why}" + (f"; stack dump in {stacks}" if stacks else "")
        self._record_failure(rt, code, now, message)

    def _dump_stacks(self, rt: TaskRuntime) -> str:
        """SIGUSR1 -> faulthandler writes every thread's stack to the task's stderr; copy it out."""
        path = rt.stderr_path
        try:
            before = path.stat().st_size
        except (OSError, AttributeError):
            return ""
        self.backend.signal(rt.process, signal.SIGUSR1)
        self.backend.signal(rt.process, signal.SIGCONT)  # a SIGSTOPped task handles it once continued
        deadline = self.clock() + self.stack_dump_timeout_s
        size, stable_since = before, None
        while self.clock() < deadline:
            time.sleep(0.05)
            current = path.stat().st_size
            if current > before and current == size:
                stable_since = stable_since or self.clock()
                if self.clock() - stable_since >= 0.2:
                    break
            else:
                stable_since = None
            size = current
        if size <= before:
            return ""
        with open(path, "rb") as fh:
            fh.seek(before)
            dump = fh.read().decode("utf-8", errors="replace")
        target = path.parent / "stacks.txt"
        target.write_text(dump, encoding="utf-8")
        return str(target)

    # -- exits and decisions ---------------------------------------------------------------
    def _on_exit(self, rt: TaskRuntime, code: int, now: float) -> None:
        rt.exit_code, rt.ended_at = code, now
        if rt.stop_requested:
            rt.state = TaskState.STOPPED
            self.view.event(self, f"{rt.task.name} stopped ({describe_exit(code)})")
            return
        if code == 0 and not rt.plan.serves_forever:
            rt.state = TaskState.SUCCEEDED
            rt.reason = "exited 0"
            self.view.event(self, f"{rt.task.name} succeeded")
            if rt.task == self.plan.spec.coordinator and not self.state.terminal:
                self._on_coordinator_success(now)
            return
        message = self._error_message(rt)
        if code == 0:
            message = f"a {rt.task.task_type} task serves until stopped, but it exited on its own"
        self._record_failure(rt, code, now, message)

    def _record_failure(self, rt: TaskRuntime, code: int | None, now: float, message: str) -> None:
        rt.exit_code, rt.ended_at = code, now
        rt.state = TaskState.FAILED
        failure = Failure(
            task=rt.task,
            attempt=rt.attempt,
            exit_code=code,
            at=now,
            wall_time=time.time(),
            message=message,
            stderr_tail=tail_lines(rt.stderr_path),
            log_path=str(rt.stderr_path),
        )
        rt.reason = failure.headline()
        self.failures.append(failure)
        self._tick_failures.append(failure)
        self.view.event(self, failure.headline())

    def _decide(self, now: float) -> None:
        failures, self._tick_failures = self._tick_failures, []
        if self.state.terminal or not failures:
            return
        # a failure seen while a group restart is pending is part of that restart
        failures = [f for f in failures if f.task.name not in self._restart_at]
        training = [f for f in failures if f.task.task_type != "evaluator"]
        for f in failures:
            if f.task.task_type == "evaluator":
                self._maybe_restart(f, [self._runtime(f.task)], now, fail_job=False)
        if not training:
            return
        cause = training[0]
        if self.plan.spec.strategy is Strategy.PARAMETER_SERVER and cause.task.task_type == "worker":
            failed_workers = [self._runtime(f.task) for f in training if f.task.task_type == "worker"]
            if len(failed_workers) == len(training):
                self._maybe_restart(cause, failed_workers, now, scope="task")
                return
        group = [rt for rt in self.tasks if rt.task.task_type != "evaluator"]
        self._maybe_restart(cause, group, now, scope="group")

    def _maybe_restart(self, cause: Failure, tasks: list[TaskRuntime], now: float, scope: str = "task",
                       fail_job: bool = True) -> None:
        policy = self.policy.policy(cause.task.task_type)
        why_not = ""
        if not policy.retryable(cause.exit_code):
            why_not = f"the {policy.value} restart policy of {cause.task.task_type} does not retry {describe_exit(cause.exit_code)}"
            if policy.value == "exit-code":
                why_not += " (exit codes 1-127 are permanent)"
        elif (used := self._runtime(cause.task).restarts if not fail_job else self.restarts_used) >= self.policy.max_restarts:
            attempts = self._runtime(cause.task).attempt + 1
            why_not = (f"restarts exhausted: {cause.task.name} failed on attempt {attempts} of {attempts}, "
                       f"{used} of --max-restarts {self.policy.max_restarts} used")
        if why_not:
            if fail_job:
                self._end(JobState.FAILED, EXIT_FAILED, f"{cause.headline()}; {why_not}")
                self._stop(self._live(), f"stopped: {cause.task.name} failed")
            else:
                self.view.event(self, f"{cause.task.name} is not restarted: {why_not}; the job goes on")
            return
        if fail_job:  # the evaluator's restarts are its own; they never use up the job's
            self.restarts_used += 1
        delay = self.policy.backoff_for(self.restarts_used if fail_job else self._runtime(cause.task).restarts + 1)
        names = [rt.task.name for rt in tasks]
        self.recoveries.append(Recovery(cause=cause, scope=scope, tasks=names, detected_at=now))
        if scope == "group":
            self._set_job_state(JobState.RESTARTING)
            self._stop(self._live(), f"stopped for a group restart after {cause.task.name} failed")
        self.view.event(
            self,
            f"restart {used + 1}/{self.policy.max_restarts}: {', '.join(names)} in {delay:.1f} s "
            f"({scope} restart after {cause.task.name} failed, {describe_exit(cause.exit_code)})",
        )
        for rt in tasks:
            if rt.process is not None:  # not already waiting for its next attempt
                self._new_attempt(rt)
            self._restart_at[rt.task.name] = now + delay

    def _runtime(self, task) -> TaskRuntime:
        return next(rt for rt in self.tasks if rt.task == task)

    def _on_coordinator_success(self, now: float) -> None:
        coordinator = self.plan.spec.coordinator
        self._end(JobState.SUCCEEDED, EXIT_SUCCEEDED, f"{coordinator.name} exited 0")
        self._restart_at.clear()
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
            self.view.event(self, f"job {state.value}" + (f": {self.reason}" if state.terminal and self.reason else ""))

    def _stop(self, tasks: list[TaskRuntime], reason: str) -> None:
        tasks = [rt for rt in tasks if rt.process is not None and not rt.state.terminal]
        if not tasks:
            return
        for rt in tasks:
            rt.stop_requested = True
            rt.reason = reason
        self.backend.stop([rt.process for rt in tasks], timeout_s=self.stop_timeout_s, abort=self._force_stop)
        now = self.clock()
        for rt in tasks:
            code = self.backend.poll(rt.process)
            if code is not None and not rt.state.terminal:
                self._on_exit(rt, code, now)

    @staticmethod
    def _error_message(rt: TaskRuntime) -> str:
        if rt.error_file is None:
            return ""
        try:
            return str(json.loads(rt.error_file.read_text(encoding="utf-8")).get("message", ""))
        except (OSError, ValueError):
            return ""
