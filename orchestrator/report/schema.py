"""The run record's schema as types: ``summary.json`` is a :class:`RunSummary`, each of its
``tasks`` a :class:`TaskEntry`, a task's ``last_heartbeat`` a :class:`HeartbeatEntry`.

Each field says what it holds (its ``doc``, read by the docs site's summary reference and
checked by ``tests/unit/test_docs_reference.py``); :func:`orchestrator.report.summary.build_summary`
fills them from the job's snapshot, ``to_dict`` gives the JSON object (field order kept). The JSON
is what every reader takes (``list``, ``status``, ``history``, the page): a finished run's
``summary.json`` of an earlier version reads the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping


def _doc(text: str) -> Mapping[str, str]:
    return {"doc": text}


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> what it holds, in declaration order (the docs site's summary reference)."""
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class HeartbeatEntry:
    """A task's ``last_heartbeat`` in ``summary.json``; the progress fields are written only when reported."""

    phase: str = field(metadata=_doc(
        '`initializing`, `serving`, `training`, `finishing`, `evaluating`, `saving` or `done`'))
    cpu_percent: float = field(metadata=_doc("CPU of the task's process, % of one core"))
    rss_bytes: int = field(metadata=_doc("resident memory of the task's process"))
    heartbeats: int = field(metadata=_doc('heartbeats received from the task'))
    step: int | None = field(default=None, metadata=_doc('global step (absent when never reported)'))
    epoch: int | None = field(default=None, metadata=_doc('epoch (absent when never reported)'))
    loss: float | None = field(default=None, metadata=_doc('last loss (absent when never reported)'))
    examples_per_second: float | None = field(default=None, metadata=_doc('throughput (absent when never reported)'))
    metrics: dict[str, float] | None = field(default=None, metadata=_doc(
        'every other metric the task reported (`accuracy`, `eval_accuracy`, ...)'))
    formed: dict[str, int] | None = field(default=None, metadata=_doc(
        'what its `tf.distribute` strategy formed: `replicas_in_sync`, `cluster_workers` (absent when'
        ' never reported)'))
    first_step_s: float | None = field(default=None, metadata=_doc(
        'seconds the task has been in its first training step (judged by the startup timeout, not the'
        ' stall timeout); absent once past it'))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; a progress field never reported is left out."""
        return {f.name: value for f in dataclasses.fields(self)
                if (value := getattr(self, f.name)) is not None or f.default is not None}


@dataclass(frozen=True)
class TaskEntry:
    """One entry of ``summary.json``'s ``tasks``."""

    task: str = field(metadata=_doc('`worker:1`'))
    state: str = field(metadata=_doc(
        "the task's final state: `Succeeded`, `Failed`, `Stopped` (by the orchestrator), or `Pending` /"
        ' `Starting` / `Running`'))
    address: str | None = field(metadata=_doc('`host:port` of its `tf.distribute` server'))
    attempts: int = field(metadata=_doc('attempts started (1 + restarts)'))
    restarts: int = field(metadata=_doc('restarts of this task'))
    pid: int | None = field(metadata=_doc(
        "pid of its last attempt (a container's host pid, a Slurm task's local `srun`)"))
    exit_code: int | None = field(metadata=_doc('exit code of its last attempt, or `null` when it died of a signal'))
    signal: str | None = field(metadata=_doc('the signal it died of (`SIGKILL`), or `null`'))
    exit: str | None = field(metadata=_doc('the exit in words (`exit code 0`, `signal SIGTERM`)'))
    reason: str = field(metadata=_doc('why it ended (`stopped after chief-0 succeeded (it serves until stopped)`)'))
    stdout: str | None = field(metadata=_doc("path of its last attempt's stdout log"))
    stderr: str | None = field(metadata=_doc("path of its last attempt's stderr log"))
    last_heartbeat: HeartbeatEntry | None = field(metadata=_doc(
        'its last heartbeat (below), or `null` for a program that never reported'))
    process_sample: dict[str, Any] | None = field(metadata=_doc(
        'the last CPU / RSS sample of a task that does not report (`cpu_percent`, `rss_bytes`)'))
    earlier_attempts: list[dict[str, Any]] = field(metadata=_doc(
        'each earlier attempt: `attempt`, `pid`, `state`, `exit`, `reason`'))
    gpus: dict[str, Any] | None = field(metadata=_doc(
        "its GPUs, or `null` for none: `count`, `devices` (UUIDs), the last sample's"
        ' `utilization_percent` (mean), `memory_used_bytes` and `memory_total_bytes` (its devices'
        ' together), `peak_memory_bytes` over the job, `samples` per device'))
    left_behind: list[dict[str, Any]] = field(metadata=_doc(
        'processes its attempts left running that were ended for it (a daemon in its own session): `pid`,'
        ' `cmdline`, `by` (`wrapper` or `backend`), `attempt`; empty when none'))


    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.last_heartbeat is not None:
            out["last_heartbeat"] = self.last_heartbeat.to_dict()
        return out


@dataclass(frozen=True)
class RunSummary:
    """``runs/<run-id>/summary.json``: the run record once the job has ended (and, with the live
    fields of :func:`orchestrator.report.status.status_dict`, what ``status`` and the page show)."""

    run_id: str = field(metadata=_doc('the run id, also the name of the run directory'))
    run_dir: str = field(metadata=_doc('absolute path of the run directory'))
    status: str = field(metadata=_doc(
        '`Succeeded`, `Failed`, `Preempted` (saved and left; `launch --resume` continues it) or'
        ' `Interrupted`'))
    exit_code: int | None = field(metadata=_doc(
        "the orchestrator's exit code: 0 succeeded, 1 failed, 3 succeeded but an injected fault never"
        ' fired, 75 preempted, 130 interrupted'))
    reason: str = field(metadata=_doc('one line: why the job ended (`chief-0 exited 0`, the failure that ended it)'))
    wall_time_s: float = field(metadata=_doc('seconds from the start to the end of the job'))
    started_at: str = field(metadata=_doc('local start time, ISO 8601 with the UTC offset'))
    strategy: str = field(metadata=_doc('`multi_worker_mirrored`, `parameter_server`, `mirrored` or `hogwild`'))
    topology: dict[str, int] = field(metadata=_doc('task type -> task count (`chief`, `worker`, `ps`, `evaluator`)'))
    cluster: dict[str, list[str]] = field(metadata=_doc(
        'the training cluster of TF_CONFIG: task type -> list of `host:port`'))
    threads_per_task: int | None = field(metadata=_doc('TF intra-op threads each task was given'))
    program: str | list[str] = field(metadata=_doc("`built-in`, or your program's argv (the command after `--`)"))
    training: dict[str, Any] | None = field(metadata=_doc(
        "the built-in program's options (loop, threads, checkpoint_every, data, epochs, batch sizes,"
        ' replicas, steps_per_epoch); `null` for your own program'))
    metrics: dict[str, Any] = field(metadata=_doc(
        "the coordinator's last report: `steps`, `final_loss`, `test_accuracy`, `test_loss`, batch sizes,"
        ' `resumed_from_step`; every metric your program reported'))
    evaluation: dict[str, Any] | None = field(metadata=_doc(
        "the evaluator's last `eval_*` metrics and `evaluated_step`, or `null`"))
    model_dir: str | None = field(metadata=_doc('the SavedModel the chief exported, or `null`'))
    tensorboard_dir: str | None = field(metadata=_doc("the chief's TensorBoard logs, or `null`"))
    root_cause: dict[str, Any] | None = field(metadata=_doc(
        'the failure that ended a failed job (task, attempt, exit code or signal, message, log path,'
        ' stderr tail, likely culprit, peak RSS, likely OOM; `gpu_oom` for a GPU out-of-memory: error,'
        ' device, memory used / total, hint), or `null`'))
    restarts: int = field(metadata=_doc('restarts used (each group or task restart counts one)'))
    max_restarts: int = field(metadata=_doc('restarts allowed (`--max-restarts`)'))
    restart_policy: dict[str, str] = field(metadata=_doc('role -> restart policy in force'))
    recoveries: list[dict[str, Any]] = field(metadata=_doc(
        'each recovery: cause, scope, tasks, `detected_at_s`, `restarted_at_s`, `resumed_at_s`,'
        ' `detection_to_resumed_training_s`, `resumed_from_step` (seconds since the start)'))
    failures: list[dict[str, Any]] = field(metadata=_doc(
        'every failure seen, recovered or not, in order (the fields of `root_cause`)'))
    lives: list[dict[str, Any]] = field(metadata=_doc(
        'each orchestrator lifetime of the run (`launch --resume` adds one): `life`, `started_at`,'
        ' `ended_at`, `started_at_unix`, `ended_at_unix`, `ended` (its final state), `cause`,'
        ' `resumed_from_step`, `last_step`, `steps_lost`, `pid`, `global_batch_size` (as the coordinator'
        ' reported it), `held` (a PSS job started below MAX: the workers planned and not started yet)'))
    segments: list[dict[str, Any]] = field(metadata=_doc(
        'one per size the run trained at, in order (docs/elastic.md): `workers`, `global_batch_size`,'
        ' `per_replica_batch_size`, `learning_rate_factor`, `first_step` (the step it resumed from; 0 for a'
        ' fresh start, or the last step before a change within a life), `last_step`, `cause` (`launched`,'
        ' `resumed at another size`, `resize asked`, `slot lost`, `node lost`, `grew back`, `parked worker`),'
        ' `steps_lost` (steps trained in it that the next one'
        ' trained again), `lives` (the lives it spans), `tasks` (a change within a life: the workers it'
        ' concerns, e.g. the parked one)'))
    elastic: dict[str, Any] | None = field(metadata=_doc(
        'elastic workers (`--workers MIN:MAX`): `min`, `max`, `workers` (the size now: the workers training,'
        ' parked and held ones left out), `parked` (the PSS workers parked, not restarted: docs/elastic.md),'
        ' `batch_policy`, `lr_scaling`; `null` for a fixed count'))
    late_failures: list[dict[str, Any]] = field(metadata=_doc(
        'failures after the job had succeeded (a warning, not a failure of the job)'))
    warnings: list[str] = field(metadata=_doc(
        'what the job lost or cut off without failing, one line each: an evaluator stopped before its'
        ' last evaluation (`final evaluation lost`), a finished task stuck in its exit (the thread it was'
        ' stuck in), an evaluator that never evaluated (a crash loop: `the same error N times`), a'
        ' non-finite loss (the task and the first step; `--on-nan`), a log cut by `--max-log-size` (how much)'))
    faults: list[dict[str, Any]] = field(metadata=_doc(
        'each injected fault (`--inject-fault`) and whether it fired (one that never fired in a job that'
        ' succeeded: exit code 3, the rehearsal tested nothing); while the job runs, `fired` is known once'
        ' the attempt the fault targets has ended'))
    cluster_check: dict[str, Any] = field(metadata=_doc(
        'what the training tasks formed vs the plan: `checked` (MWMS and PSS), `planned_workers` (chief +'
        ' workers), `formed` (task -> `replicas_in_sync`, `cluster_workers` it reported), `mismatches`'
        ' (one line each), `allowed` (`--allow-cluster-mismatch`)'))
    spares: list[dict[str, Any]] = field(metadata=_doc(
        'each warm spare: pid, state (`used`, `stopped`, `died`, ...), the task it became'))
    tasks: list[TaskEntry] = field(metadata=_doc('one entry per task (below)'))
    peak_gpu_memory_bytes: int | None = field(metadata=_doc(
        "the most GPU memory any task's devices held together during the job, or `null` without GPU"
        ' samples (docs/gpus.md)'))
    orchestrator: dict[str, int] = field(metadata=_doc('the orchestrator process: `pid`, `peak_rss_bytes`'))
    data_service: dict[str, Any] | None = field(metadata=_doc(
        'the tf.data service with `--data-service N` (address, job name, sharding, restarts, what the'
        ' servers reported: :mod:`orchestrator.report.dataservice`), or `null`'))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``summary.json``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["tasks"] = [t.to_dict() for t in self.tasks]
        return out
