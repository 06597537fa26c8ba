"""An immutable picture of a job: what reports, status queries and pages read.

The supervisor builds a :class:`JobSnapshot` (:meth:`Supervisor.snapshot`) from its live
records; nothing outside the supervisor reads those records. A snapshot holds plain values
(strings, numbers, frozen dataclasses, the immutable :class:`~orchestrator.plan.Plan`), so it
can be handed to another thread, rendered, or turned into JSON at any time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol

from orchestrator.backends.base import SpareInfo
from orchestrator.plan import Plan
from orchestrator.proto import phases
from orchestrator.proto.phases import phase_name as phase_name  # re-exported: the supervisor's parts read it here
from orchestrator.resources.gpus import GpuUsage
from orchestrator.spec.model import TaskId
from orchestrator.supervisor.records.lives import Life
from orchestrator.supervisor.records.states import Failure, JobState, TaskRuntime, TaskState
from orchestrator.supervisor.rules.formed import CLUSTER_WORKERS, REPLICAS_IN_SYNC
from orchestrator.supervisor.rules.gpu import usages_of
from orchestrator.supervisor.rules.rehearsal import FaultRecord

if TYPE_CHECKING:
    from orchestrator.proto import supervisor_pb2 as pb


@dataclass(frozen=True)
class LastHeartbeat:
    """The latest heartbeat of a task attempt.

    Attributes:
        phase: ``initializing``, ``serving``, ``training``, ``evaluating``, ``saving``, ``done``.
        step, epoch, loss, examples_per_second: training progress, when reported.
        cpu_percent: percent of one core.
        rss_bytes: resident memory, bytes.
        metrics: other numbers the task reported (``test_accuracy``, ...).
        formed: what its strategy formed (:func:`formed_of`), ``{}`` until it said.
        count: heartbeats received from this attempt.
        age_s: seconds since it arrived (orchestrator clock), at snapshot time.
        message: free text from the task.
        gpus: its GPUs as the task sampled them (NVML on its node).
        first_step_s: seconds it has been in its first training step (tracing, a cold cache: judged
            by the startup timeout, not the stall timeout); None once past it, or not training.
        resumed_from_step: after a restart, the step its training really resumed at, when it said
            (the heartbeat's typed field, never among ``metrics``).
        evaluated_step: an evaluator: the checkpoint step of its latest evaluation, when it said.
    """

    phase: str
    cpu_percent: float
    rss_bytes: int
    count: int
    age_s: float
    step: int | None = None
    epoch: int | None = None
    loss: float | None = None
    examples_per_second: float | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    message: str = ""
    gpus: tuple[GpuUsage, ...] = ()
    first_step_s: float | None = None
    formed: Mapping[str, int] = field(default_factory=dict)
    resumed_from_step: int | None = None
    evaluated_step: int | None = None


@dataclass(frozen=True)
class TaskSnapshot:
    """One task (its current attempt, and the history of earlier ones).

    Attributes:
        task: type and index.
        address: ``host:port`` in the cluster spec.
        state: its state.
        attempt: current attempt (0 first).
        restarts: times it was restarted.
        pid: pid of the current attempt, when started.
        exit_code: Popen return code of the attempt once ended (negative: signal).
        reason: why it is in its state (one line).
        stdout_path, stderr_path: log files of the current attempt.
        heartbeat: its latest heartbeat, if any.
        cpu_percent, rss_bytes: sampled by the backend for a task that sends no heartbeats.
        history: earlier attempts: ``{"attempt", "pid", "state", "exit", "reason"}``.
        reports_heartbeats: the built-in program (always reports).
        serves_forever: a ps or PSS worker.
        gpu_count: GPUs it holds (or asked its scheduler for).
        gpu_devices: their UUIDs, when this orchestrator assigned them.
        gpu_sample: its GPUs sampled by the backend, for a task that sends no heartbeats.
        peak_gpu_memory_bytes: the most GPU memory its devices held together in any sample
            of the job, bytes (None: never sampled).
        left_behind: processes its attempts left running, ended for it: ``{"pid", "cmdline",
            "by", "attempt"}`` each (:data:`orchestrator.env.LEFT_BEHIND_FILE`).
    """

    task: TaskId
    address: str
    state: TaskState
    attempt: int
    restarts: int
    pid: int | None
    exit_code: int | None
    reason: str
    stdout_path: Path | None
    stderr_path: Path | None
    heartbeat: LastHeartbeat | None
    cpu_percent: float | None
    rss_bytes: int | None
    history: tuple[Mapping[str, object], ...]
    reports_heartbeats: bool
    serves_forever: bool
    gpu_count: int = 0
    gpu_devices: tuple[str, ...] = ()
    gpu_sample: tuple[GpuUsage, ...] = ()
    peak_gpu_memory_bytes: int | None = None
    left_behind: tuple[Mapping[str, object], ...] = ()

    @property
    def name(self) -> str:
        """``worker-1``."""
        return self.task.name

    @property
    def gpus(self) -> tuple[GpuUsage, ...]:
        """Its GPUs now: from its heartbeat, else from the backend's sample."""
        return self.heartbeat.gpus if self.heartbeat is not None and self.heartbeat.gpus else self.gpu_sample


@dataclass(frozen=True)
class RecoveryRecord:
    """One restart decision; times are seconds since the job started.

    Attributes:
        cause: headline of the failure that triggered it.
        scope: ``group`` or ``task``.
        tasks: names of the restarted tasks.
        detected_at_s, restarted_at_s, resumed_at_s: when the failure was seen, the new
            attempts started, and the first training step (or serving) after it came.
        resumed_from_step: the step training resumed from, when reported.
    """

    cause: str
    scope: str
    tasks: tuple[str, ...]
    detected_at_s: float
    restarted_at_s: float | None
    resumed_at_s: float | None
    resumed_from_step: int | None

    @property
    def detection_to_resumed_s(self) -> float | None:
        """Seconds from the failure to training (or serving) again."""
        return None if self.resumed_at_s is None else self.resumed_at_s - self.detected_at_s

    def to_dict(self) -> dict[str, object]:
        def r(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        resumed = self.detection_to_resumed_s
        return {
            "cause": self.cause,
            "scope": self.scope,
            "tasks": list(self.tasks),
            "detected_at_s": r(self.detected_at_s),
            "restarted_at_s": r(self.restarted_at_s),
            "resumed_at_s": r(self.resumed_at_s),
            "detection_to_resumed_training_s": r(resumed),
            "resumed_from_step": self.resumed_from_step,
        }


@dataclass(frozen=True)
class JobSnapshot:
    """The whole job at one moment.

    Attributes:
        plan: the job's plan (immutable).
        state: the job state.
        reason: why it ended (empty while it runs).
        exit_code: the CLI exit code once ended (0, 1, 130), None while it runs.
        elapsed_s: seconds since the job started (to its end once ended).
        started_wall: Unix seconds when it started.
        ended: True once every task has ended and the result is final.
        restarts_used: restarts counted against ``max_restarts``.
        tasks: every task, in plan order.
        failures: every task failure, earliest first.
        recoveries: every restart decision, earliest first.
        fatal: the failure that ended the job, if one did (the root cause).
        spares: the warm spares started for the job and what became of them.
        lives: every orchestrator lifetime of the run, this one last (:mod:`~orchestrator.supervisor.records.lives`).
        earlier_failures: the failures of earlier lives, as ``summary.json`` records.
        warnings: what the job lost or cut off without failing (an evaluator's final evaluation
            lost, a task stuck in its exit, an evaluator that never evaluated), one line each.
        faults: each injected fault and whether it fired, as recorded so far
            (:meth:`orchestrator.supervisor.rehearsal.Rehearsal.records`).
    """

    plan: Plan
    state: JobState
    reason: str
    exit_code: int | None
    elapsed_s: float
    started_wall: float
    ended: bool
    restarts_used: int
    tasks: tuple[TaskSnapshot, ...]
    failures: tuple[Failure, ...]
    recoveries: tuple[RecoveryRecord, ...]
    fatal: Failure | None = None
    spares: tuple[SpareInfo, ...] = ()
    lives: tuple[Life, ...] = ()
    earlier_failures: tuple[Mapping[str, object], ...] = ()
    warnings: tuple[str, ...] = ()
    faults: tuple[FaultRecord, ...] = ()

    @property
    def root_cause(self) -> Failure | None:
        """The failure that ended the job (recovered failures are history, in ``failures``)."""
        return self.fatal

    @property
    def late_failures(self) -> tuple[Failure, ...]:
        """Failures after training ended or after the job succeeded that did not end the job."""
        return tuple(f for f in self.failures if (f.after_success or f.after_training) and f is not self.fatal
                     and not (self.fatal is not None and f.task == self.fatal.task and f.at == self.fatal.at))

    def task(self, task: TaskId) -> TaskSnapshot:
        """The snapshot of one task. Raises KeyError when the job has no such task."""
        for t in self.tasks:
            if t.task == task:
                return t
        raise KeyError(str(task))


def formed_of(hb: pb.Heartbeat) -> dict[str, int]:
    """What ``hb``'s task says its strategy formed (the heartbeat's typed ``formed``):
    ``{"replicas_in_sync": R, "cluster_workers": W}``, each only when said; ``{}`` for none."""
    if not hb.HasField("formed"):
        return {}
    formed = hb.formed
    out = {}
    if formed.HasField("replicas_in_sync"):
        out[REPLICAS_IN_SYNC] = formed.replicas_in_sync
    if formed.HasField("cluster_workers"):
        out[CLUSTER_WORKERS] = formed.cluster_workers
    return out


def last_heartbeat(rt: TaskRuntime, now: float) -> LastHeartbeat | None:
    """The latest heartbeat of ``rt``'s current attempt as plain values, None without one."""
    record = rt.current.heartbeat
    if record is None:
        return None
    hb, a = record.heartbeat, rt.current
    first = hb.phase == phases.PHASE_TRAINING and a.training_at is not None and a.last_step == a.first_step
    return LastHeartbeat(
        phase=phase_name(hb.phase),
        cpu_percent=hb.cpu_percent,
        rss_bytes=hb.rss_bytes,
        count=record.count,
        age_s=now - record.received_at,
        step=hb.step if hb.HasField("step") else None,
        epoch=hb.epoch if hb.HasField("epoch") else None,
        loss=hb.loss if hb.HasField("loss") else None,
        examples_per_second=hb.examples_per_second if hb.HasField("examples_per_second") else None,
        metrics=dict(hb.metrics.items()) if hb.metrics else {},
        message=hb.message,
        gpus=usages_of(hb) if hb.gpus else (),
        first_step_s=now - a.training_at if first and a.training_at is not None else None,
        formed=formed_of(hb),
        resumed_from_step=hb.resumed_from_step if hb.HasField("resumed_from_step") else None,
        evaluated_step=hb.evaluated_step if hb.HasField("evaluated_step") else None,
    )


def task_snapshot(rt: TaskRuntime, now: float) -> TaskSnapshot:
    """The immutable picture of one task at ``now`` (orchestrator monotonic seconds)."""
    a = rt.current
    return TaskSnapshot(
        task=rt.task,
        address=rt.plan.address,
        state=a.state,
        attempt=a.number,
        restarts=rt.restarts,
        pid=a.pid,
        exit_code=a.exit_code,
        reason=a.reason,
        stdout_path=a.stdout_path,
        stderr_path=a.stderr_path,
        heartbeat=last_heartbeat(rt, now),
        cpu_percent=a.sample.cpu_percent if a.sample else None,
        rss_bytes=a.sample.rss_bytes if a.sample else None,
        history=tuple(dict(h) for h in rt.history) if rt.history else (),
        reports_heartbeats=rt.plan.reports_heartbeats,
        serves_forever=rt.plan.serves_forever,
        gpu_count=rt.plan.gpus.count,
        gpu_devices=tuple(g.uuid for g in rt.plan.gpus.devices),
        gpu_sample=a.sample.gpus if a.sample else (),
        peak_gpu_memory_bytes=rt.peak_gpu_memory_bytes,
        left_behind=tuple(dict(e) for e in rt.left_behind) if rt.left_behind else (),
    )


class View(Protocol):
    """What the supervisor tells the user about: the one protocol of every view (the terminal's
    in :mod:`orchestrator.report.live`, the :class:`orchestrator.report.history.Recorder` that
    serves ``status`` and the page, :class:`NullView`).

    ``interval_s``: least seconds between two snapshots it wants (the supervisor never hands
    them out more often than its own ``view_interval_s``; 0 for each of those); None for none
    until the end (a snapshot costs O(tasks), so a quiet view costs nothing per tick).
    """

    @property
    def interval_s(self) -> float | None: ...

    def update(self, snapshot: JobSnapshot) -> None: ...

    def event(self, elapsed_s: float, text: str) -> None: ...

    def close(self) -> None:
        """The job is over and its final snapshot shown: release what the view holds (a terminal)."""


class NullView:
    """A view that shows nothing."""

    interval_s: float | None = None

    def update(self, snapshot: JobSnapshot) -> None:
        pass

    def event(self, elapsed_s: float, text: str) -> None:
        pass

    def close(self) -> None:
        pass
