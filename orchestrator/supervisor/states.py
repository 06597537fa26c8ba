"""Job and task states, and the runtime record of one task.

Job: Pending -> Starting -> Running -> (Restarting -> Running)* -> Succeeded | Failed | Interrupted.
Task: Pending -> Starting -> Running -> Succeeded | Failed | Stopped. Terminal states
are terminal: a restart is a new attempt of the task.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.backends.base import ProcessSample, TaskHandle
from orchestrator.env import PREEMPTED_EXIT_CODE
from orchestrator.health.server import HeartbeatRecord
from orchestrator.plan import TaskPlan
from orchestrator.spec.model import TaskId


class JobState(str, enum.Enum):
    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INTERRUPTED = "Interrupted"  # stopped on request (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT): exit 130

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED)


class TaskState(str, enum.Enum):
    PENDING = "Pending"
    STARTING = "Starting"  # process started, no heartbeat yet
    RUNNING = "Running"  # heartbeats arriving
    SUCCEEDED = "Succeeded"  # exited 0 on its own
    FAILED = "Failed"  # exited non-zero or by a signal on its own
    STOPPED = "Stopped"  # stopped by the orchestrator

    @property
    def terminal(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED)


def describe_exit(exit_code: int | None) -> str:
    """``exit code 3`` or ``signal SIGKILL`` (Popen's negative return codes are signals)."""
    if exit_code is None:
        return "still running"
    if exit_code < 0:
        try:
            return f"signal {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"signal {-exit_code}"
    if exit_code == PREEMPTED_EXIT_CODE:
        return f"exit code {exit_code} (preempted)"
    return f"exit code {exit_code}"


def exit_fields(exit_code: int | None) -> dict[str, object]:
    """``{"exit_code": 3, "signal": None}`` or ``{"exit_code": None, "signal": "SIGKILL"}``
    for summary.json (Popen's negative return codes are signals)."""
    if exit_code is not None and exit_code < 0:
        return {"exit_code": None, "signal": describe_exit(exit_code).split()[1]}
    return {"exit_code": exit_code, "signal": None}


@dataclass
class TaskRuntime:
    """What the supervisor knows about one task (its current attempt). Only the supervisor
    reads or writes it; everyone else reads a :class:`~orchestrator.supervisor.snapshot.TaskSnapshot`.

    Times are orchestrator ``time.monotonic()`` seconds.
    """

    plan: TaskPlan
    attempt: int = 0
    state: TaskState = TaskState.PENDING
    process: TaskHandle | None = None
    pid: int | None = None
    started_at: float | None = None
    running_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    stop_requested: bool = False
    reason: str = ""
    heartbeat: HeartbeatRecord | None = None
    stdout_path: Path | None = None
    stderr_path: Path | None = None
    error_file: Path | None = None
    restarts: int = 0
    progress_at: float | None = None
    sample: ProcessSample | None = None  # of a task that sends no heartbeats
    sampled_at: float | None = None
    last_step: int | None = None
    peak_rss_bytes: int | None = None
    history: list[dict[str, object]] = field(default_factory=list)

    @property
    def task(self) -> TaskId:
        return self.plan.task


@dataclass(frozen=True)
class Failure:
    """One task failure; the earliest is the job's root cause.

    Attributes:
        task: which task.
        attempt: which attempt.
        exit_code: Popen return code (negative: signal).
        at: orchestrator monotonic seconds when it was seen.
        wall_time: Unix seconds when it was seen.
        message: the exception message from the task's error file, or a reason.
        stderr_tail: last lines of the task's stderr.
        log_path: the task's stderr log.
        peer_error: the peer-consequence error it died of (collective timeout, ...), or "".
        likely_culprit: with a peer error: the task that stopped progressing first, and why.
        peak_rss_bytes: the attempt's peak resident memory seen, bytes (None when unknown).
        likely_oom: it was likely killed for memory (cgroup OOM kill, or RSS near the limit).
        preemption_notice: it exited preempted after receiving the SIGTERM from outside itself
            (not because a peer did).
        after_training: it happened after training had ended (never restarted).
        after_success: it happened after the job had succeeded (``chief`` success policy).
    """

    task: TaskId
    attempt: int
    exit_code: int | None
    at: float
    wall_time: float
    message: str
    stderr_tail: str
    log_path: str
    peer_error: str = ""
    likely_culprit: str = ""
    peak_rss_bytes: int | None = None
    likely_oom: bool = False
    preemption_notice: bool = False
    after_training: bool = False
    after_success: bool = False

    def headline(self) -> str:
        """``worker-1 (attempt 0) failed: exit code 3: ValueError: boom``."""
        text = f"{self.task.name} (attempt {self.attempt}) failed: {describe_exit(self.exit_code)}"
        return f"{text}: {self.message}" if self.message else text

    def to_dict(self) -> dict[str, object]:
        return {
            "task": str(self.task),
            "attempt": self.attempt,
            **exit_fields(self.exit_code),
            "message": self.message,
            "wall_time": self.wall_time,
            "stderr_tail": self.stderr_tail,
            "log_path": self.log_path,
            "peer_error": self.peer_error or None,
            "likely_culprit": self.likely_culprit or None,
            "peak_rss_bytes": self.peak_rss_bytes,
            "likely_oom": self.likely_oom,
            "after_training": self.after_training,
            "after_success": self.after_success,
        }
