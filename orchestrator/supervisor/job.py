"""The job state machine: the only place that decides to stop a task or end the job.

Rules (issue #2; restart policies come on top of these):

* The job succeeds when the coordinator (the chief, or worker 0 without one) exits 0.
  Tasks that never exit on their own (ps, PSS workers) are then stopped at once; other
  workers get ``success_grace_s`` seconds to finish (MWMS workers exit by themselves).
* Any other exit of a task before that (non-zero, a signal, or a ps exiting at all) fails
  the job: every task is stopped, and the earliest failure is the root cause.
* :meth:`Supervisor.request_stop` (SIGINT/SIGTERM of the orchestrator) stops everything;
  the result's exit code is 130.

Every wait is bounded; time is this process's monotonic clock.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from orchestrator.health.server import HeartbeatStore
from orchestrator.plan import Plan, attempt_env, task_dir
from orchestrator.supervisor.states import Failure, JobState, TaskRuntime, TaskState, describe_exit

log = logging.getLogger(__name__)

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


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
class JobResult:
    """How the job ended.

    Attributes:
        state: Succeeded or Failed.
        exit_code: 0 succeeded, 1 failed, 130 interrupted.
        reason: one line saying why it ended.
        root_cause: the earliest task failure, if any.
        failures: every task failure, earliest first.
        wall_time_s: seconds from start to the last task's end.
    """

    state: JobState
    exit_code: int
    reason: str
    root_cause: Failure | None
    failures: list[Failure] = field(default_factory=list)
    wall_time_s: float = 0.0


_TF_NOISE = re.compile(r"^([IW]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ |WARNING: All log messages before absl)")


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
    """Starts the planned tasks, watches them, and ends the job.

    Args:
        plan: the job plan.
        backend: runs the tasks (``start`` / ``poll`` / ``signal`` / ``stop``).
        store: where the health server puts heartbeats.
        view: live output; default none.
        stop_timeout_s: seconds between SIGTERM and SIGKILL when stopping tasks.
        success_grace_s: seconds workers may take to exit after the coordinator succeeded.
        tick_s: seconds between two looks at the processes (exit detection latency).
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.store = store
        self.view = view or _NullView()
        self.stop_timeout_s = stop_timeout_s
        self.success_grace_s = success_grace_s
        self.tick_s = tick_s
        self.clock = clock
        self.tasks = [TaskRuntime(plan=tp) for tp in plan.tasks]
        self.state = JobState.PENDING
        self.failures: list[Failure] = []
        self.reason = ""
        self.started_at = clock()
        self.started_wall = time.time()
        self.ended_at: float | None = None
        self._interrupt: str | None = None
        self._wake = threading.Event()
        self._grace_deadline: float | None = None
        self._exit_code = EXIT_FAILED

    # -- control from outside ------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Ask the loop to stop every task and end the job (safe from a signal handler)."""
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
                if self._interrupt and not self.state.terminal:
                    self._end(JobState.FAILED, EXIT_INTERRUPTED, self._interrupt)
                    self._stop(self._live(), f"stopped: {self._interrupt}")
                self._poll(now)
                self._take_heartbeats()
                if self.state is JobState.SUCCEEDED and self._grace_deadline and now >= self._grace_deadline:
                    self._stop(self._live(), f"did not exit within {self.success_grace_s:.0f} s after the job succeeded")
                if all(rt.state.terminal or rt.state is TaskState.PENDING for rt in self.tasks):
                    break
                self.view.update(self)
                self._wake.wait(self.tick_s)
                self._wake.clear()
        finally:
            live = self._live()
            if live:  # an exception escaped the loop: leave nothing behind
                self._stop(live, "stopped: orchestrator error")
                self._poll(self.clock())
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
            wall_time_s=self.ended_at - self.started_at,
        )

    # -- steps ---------------------------------------------------------------------------
    def _live(self) -> list[TaskRuntime]:
        return [rt for rt in self.tasks if rt.process is not None and not rt.state.terminal]

    def _start(self, rt: TaskRuntime) -> None:
        directory = task_dir(self.plan.run_dir, rt.attempt, rt.task)
        env = attempt_env(self.plan, rt.task, rt.attempt)
        rt.process = self.backend.start(rt.plan.argv, env, directory)
        rt.pid = rt.process.pid
        rt.stdout_path, rt.stderr_path = rt.process.stdout_path, rt.process.stderr_path
        rt.error_file = directory / "error.json"
        rt.started_at = self.clock()
        rt.state = TaskState.STARTING
        self.view.event(self, f"{rt.task.name} started (pid {rt.pid}, attempt {rt.attempt})")

    def _poll(self, now: float) -> None:
        for rt in self.tasks:
            if rt.process is None or rt.state.terminal:
                continue
            code = self.backend.poll(rt.process)
            if code is not None:
                self._on_exit(rt, code, now)

    def _take_heartbeats(self) -> None:
        for rt in self.tasks:
            record = self.store.get(rt.task, rt.attempt)
            if record is None:
                continue
            rt.heartbeat = record
            if rt.state is TaskState.STARTING:
                rt.state = TaskState.RUNNING
                rt.running_at = record.first_received_at
        if self.state is JobState.STARTING and all(rt.state is TaskState.RUNNING for rt in self.tasks):
            self._set_job_state(JobState.RUNNING)

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
        rt.state = TaskState.FAILED
        message = self._error_message(rt)
        if code == 0:
            message = f"a {rt.task.task_type} task serves until stopped, but it exited on its own"
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
        self.view.event(self, failure.headline())
        if not self.state.terminal:
            self._end(JobState.FAILED, EXIT_FAILED, failure.headline())
            self._stop(self._live(), f"stopped: {rt.task.name} failed")

    def _on_coordinator_success(self, now: float) -> None:
        coordinator = self.plan.spec.coordinator
        self._end(JobState.SUCCEEDED, EXIT_SUCCEEDED, f"{coordinator.name} exited 0")
        servers = [rt for rt in self._live() if rt.plan.serves_forever]
        if servers:
            self._stop(servers, f"stopped after {coordinator.name} succeeded (it serves until stopped)")
        self._grace_deadline = now + self.success_grace_s

    def _end(self, state: JobState, exit_code: int, reason: str) -> None:
        self._exit_code = exit_code
        self.reason = reason
        self._set_job_state(state)

    def _set_job_state(self, state: JobState) -> None:
        if state is not self.state:
            self.state = state
            self.view.event(self, f"job {state.value}" + (f": {self.reason}" if state.terminal and self.reason else ""))

    def _stop(self, tasks: list[TaskRuntime], reason: str) -> None:
        if not tasks:
            return
        for rt in tasks:
            rt.stop_requested = True
            rt.reason = reason
        self.backend.stop([rt.process for rt in tasks], timeout_s=self.stop_timeout_s)
        self._poll(self.clock())

    @staticmethod
    def _error_message(rt: TaskRuntime) -> str:
        if rt.error_file is None:
            return ""
        try:
            return str(json.loads(rt.error_file.read_text(encoding="utf-8")).get("message", ""))
        except (OSError, ValueError):
            return ""
