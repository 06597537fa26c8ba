"""Job and task states, and the runtime record of one task.

Job: Pending -> Starting -> Running -> (Restarting -> Running)* -> Succeeded | Failed | Preempted | Interrupted.
Task: Pending -> Starting -> Running -> Succeeded | Failed | Stopped. Terminal states
are terminal: a restart is a new attempt of the task.
"""

from __future__ import annotations

import dataclasses
import enum
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.backends.base import ProcessSample, TaskHandle
from orchestrator.env import PREEMPTED_EXIT_CODE
from orchestrator.health.store import HeartbeatRecord
from orchestrator.plan import TaskPlan
from orchestrator.resources.gpus import GpuUsage
from orchestrator.spec.model import TaskId

EXIT_SUCCEEDED = 0
"""The CLI's exit codes by how the job ended (bad input is 2, before any job)."""
EXIT_FAILED = 1
EXIT_PREEMPTED = 75
"""The CLI's exit code for a job that ended ``Preempted``: ``EX_TEMPFAIL`` of BSD's ``sysexits.h``
("a temporary failure: the user is invited to retry"), distinct from a failure (1), bad input (2)
and Ctrl-C (130). Its state is saved; ``launch --resume RUN_ID`` continues it."""
EXIT_INTERRUPTED = 130
EXIT_UNTESTED = 3
"""The CLI's exit code for a rehearsal that tested nothing: the job succeeded, but one of its
injected faults (``--inject-fault``) never fired (:mod:`~orchestrator.supervisor.rules.rehearsal`)."""


class JobState(str, enum.Enum):
    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"  # saved and left on a preemption (SIGTERM to the orchestrator): exit 75, resumable
    INTERRUPTED = "Interrupted"  # stopped on request (Ctrl-C, SIGHUP, SIGQUIT): exit 130

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.PREEMPTED, JobState.INTERRUPTED)


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
class Attempt:
    """One attempt of one task: a fresh record per start (spec vs instance, as torch
    elastic's ``WorkerSpec`` / ``Worker``). Times are orchestrator ``time.monotonic()`` seconds.

    Attributes:
        number: the attempt number (0 first; a resumed run counts on).
        state: its state.
        process: the backend's handle once started.
        pid: its pid once started.
        started_at, running_at, ended_at: when it started, was first seen running, ended.
        exit_code: Popen return code once ended (negative: signal).
        stop_requested: the orchestrator asked it to stop (its exit is then Stopped).
        reason: why it is in its state (one line).
        heartbeat: its latest heartbeat.
        stdout_path, stderr_path, error_file: its log and JSON error files.
        progress_at: when it last made progress (a new phase or step).
        sample, sampled_at: the backend's CPU/RSS sample of a task that sends no heartbeats.
        last_step: the last training step it reported.
        first_step: the first training step it reported when that was 0 (``on_train_begin``) or
            the step it resumed at, -1 when its first report was already past its first step;
            while ``last_step`` is still this, it is in its first step.
        training_at: when it first reported ``training``.
        peak_rss_bytes: the highest resident memory seen, bytes.
        finished_at: when it first said its work is over (phase ``done``, or exiting after
            training ended); None until then.
    """

    number: int = 0
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
    progress_at: float | None = None
    sample: ProcessSample | None = None
    sampled_at: float | None = None
    last_step: int | None = None
    first_step: int | None = None
    training_at: float | None = None
    peak_rss_bytes: int | None = None
    finished_at: float | None = None

    def took_sample(self, sample: ProcessSample | None, now: float) -> None:
        """The backend sampled this attempt (a task that sends no heartbeats) at ``now``: a
        sample is a sign of life, so a starting attempt counts as running."""
        self.sample, self.sampled_at = sample, now
        if sample is not None:
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, sample.rss_bytes)
        if self.state is TaskState.STARTING:
            self.state, self.running_at = TaskState.RUNNING, now

    def history_entry(self) -> dict[str, object]:
        """``{"attempt", "pid", "state", "exit", "reason"}``: what reports keep of an ended attempt."""
        return {
            "attempt": self.number,
            "pid": self.pid,
            "state": self.state.value,
            "exit": describe_exit(self.exit_code) if self.exit_code is not None else None,
            "reason": self.reason,
        }


@dataclass
class TaskRuntime:
    """What the supervisor knows about one task: its plan, its current :class:`Attempt`, and
    what outlives attempts (restarts, the history of earlier attempts). Only the supervisor
    reads or writes it; everyone else reads a :class:`~orchestrator.supervisor.records.snapshot.TaskSnapshot`.
    """

    plan: TaskPlan
    current: Attempt = field(default_factory=Attempt)
    restarts: int = 0
    history: list[dict[str, object]] = field(default_factory=list)
    peak_gpu_memory_bytes: int | None = None
    left_behind: list[dict[str, object]] = field(default_factory=list)
    """Processes its attempts left running and the wrapper or backend ended: ``{"pid", "cmdline", "by", "attempt"}``."""
    """The most GPU memory its devices held together in any sample of the job (every attempt)."""

    @property
    def task(self) -> TaskId:
        return self.plan.task

    @property
    def live(self) -> bool:
        """Started and not ended."""
        return self.current.process is not None and not self.current.state.terminal

    def saw_gpus(self, usages: Sequence[GpuUsage]) -> None:
        """A sample of its GPUs (a heartbeat's, or the backend's): keeps the job's peak."""
        if usages:
            self.peak_gpu_memory_bytes = max(self.peak_gpu_memory_bytes or 0, sum(u.memory_used_bytes for u in usages))

    def next_attempt(self) -> None:
        """Close the current attempt into the history and begin a fresh one (not started)."""
        self.history.append(self.current.history_entry())
        self.current = Attempt(number=self.current.number + 1)
        self.restarts += 1


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
        gpu_oom: it ran out of GPU memory: the error, the device and its memory used / total,
            the hint (:func:`orchestrator.supervisor.rules.gpu.gpu_oom_dict`); None otherwise.
        exception: the exception line the program died of (its error file's message, else the
            last line of the last traceback on its stderr), "" for a kill, a hang or a peer's
            consequence: what the crash-loop rule compares
            (:func:`~orchestrator.supervisor.rules.decisions.crash_loop`).
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
    gpu_oom: Mapping[str, object] | None = None
    exception: str = ""

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
            **({"gpu_oom": dict(self.gpu_oom)} if self.gpu_oom is not None else {}),
        }


class FailureLog:
    """Every task failure of the job, earliest first, and those not yet decided on.

    Failures are frozen; :meth:`mark` replaces one with its flagged copy, and :meth:`current`
    finds the latest copy of a failure seen earlier.
    """

    def __init__(self, earlier: Sequence[Failure] = ()) -> None:
        self.failures: list[Failure] = list(earlier)
        self._new: list[Failure] = []

    def add(self, failure: Failure) -> None:
        self.failures.append(failure)
        self._new.append(failure)

    def pending(self) -> list[Failure]:
        """The failures added since the last :meth:`take_new`, in the order seen (left in place)."""
        return list(self._new)

    def take_new(self) -> list[Failure]:
        """The failures added since the last call, in the order seen."""
        new, self._new = self._new, []
        return new

    def current(self, failure: Failure) -> Failure:
        """The current record of ``failure`` (after :meth:`mark`)."""
        return next(g for g in self.failures if g.task == failure.task and g.attempt == failure.attempt
                    and g.at == failure.at)

    def mark(self, failures: Sequence[Failure], *, after_training: bool = False, after_success: bool = False) -> None:
        """Flag recorded failures as after training / after success."""
        for f in failures:
            i = next(i for i, g in enumerate(self.failures) if g.task == f.task and g.attempt == f.attempt
                     and g.at == f.at)
            self.failures[i] = dataclasses.replace(f, after_training=after_training or f.after_training,
                                                   after_success=after_success or f.after_success)
