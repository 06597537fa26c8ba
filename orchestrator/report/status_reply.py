"""The gRPC ``GetStatus`` reply, typed, from the job's snapshot.

:func:`status_reply` fills a ``tfcluster.v1.StatusReply`` from the run record
(:func:`orchestrator.report.summary.run_summary`, a :class:`~orchestrator.report.schema.RunSummary`)
and the snapshot's live fields, as :func:`orchestrator.report.status.status_dict` does for the
dictionary; :func:`orchestrator.health.status_wire.status_of` reads the reply back into that same
dictionary (``tests/integration/test_health.py`` checks the round trip). The open-ended sections
(training options, metrics, failures, lives, faults, the cluster check, the data service) travel
as typed :class:`pb.Record` values; everything ``status`` shows per task is a typed field.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.health.status_wire import record, records, value
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.report.schema import HeartbeatEntry, TaskEntry
from orchestrator.report.summary import run_summary
from orchestrator.supervisor.records.snapshot import JobSnapshot, RecoveryRecord, TaskSnapshot


def status_reply(snapshot: JobSnapshot | None, history: dict[str, Any] | None = None) -> pb.StatusReply:
    """The reply for ``snapshot`` (no ``job`` before the job started: None), with ``history``
    (:meth:`orchestrator.report.history.Recorder.history`) when given."""
    reply = pb.StatusReply()
    if snapshot is not None:
        reply.job.CopyFrom(job_status(snapshot))
    if history is not None:
        reply.history.CopyFrom(history_message(history))
    return reply


def job_status(snapshot: JobSnapshot) -> pb.JobStatus:
    """The job's ``summary.json`` fields and its live fields."""
    s = run_summary(snapshot)
    j = pb.JobStatus(
        run_id=s.run_id, run_dir=s.run_dir, status=s.status, exit_code=s.exit_code, reason=s.reason,
        wall_time_s=s.wall_time_s, started_at=s.started_at, strategy=s.strategy,
        topology=pb.Topology(**s.topology),
        cluster=[pb.Addresses(task_type=k, addresses=v) for k, v in s.cluster.items()],
        threads_per_task=s.threads_per_task,
        program=s.program if isinstance(s.program, list) else [],
        training=value(s.training), metrics=record(s.metrics), evaluation=value(s.evaluation),
        model_dir=s.model_dir, tensorboard_dir=s.tensorboard_dir, root_cause=value(s.root_cause),
        restarts=s.restarts, max_restarts=s.max_restarts,
        restart_policy=[pb.NamedText(name=k, text=v) for k, v in s.restart_policy.items()],
        recoveries=[recovery(r) for r in snapshot.recoveries],
        failures=records(s.failures), lives=records(s.lives),
        segments=records(s.segments), elastic=value(s.elastic), late_failures=records(s.late_failures),
        warnings=s.warnings, faults=records(s.faults), cluster_check=record(s.cluster_check),
        spares=[pb.Spare(pid=sp.pid, state=sp.state, task=sp.task or None) for sp in snapshot.spares],
        tasks=[task_status(entry, t) for entry, t in zip(s.tasks, snapshot.tasks)],
        peak_gpu_memory_bytes=s.peak_gpu_memory_bytes,
        orchestrator=pb.OrchestratorProcess(**s.orchestrator),
        data_service=value(s.data_service),
        live=not snapshot.ended,
        elapsed_s=round(snapshot.elapsed_s, 3),
        global_batch_size=snapshot.plan.spec.global_batch_size if snapshot.plan.user_program is None else None,
        updated_at=time.time(),
    )
    return j


def recovery(r: RecoveryRecord) -> pb.Recovery:
    """One recovery (its fields as :meth:`RecoveryRecord.to_dict` rounds them)."""
    d = r.to_dict()
    return pb.Recovery(cause=r.cause, scope=r.scope, tasks=r.tasks, detected_at_s=d["detected_at_s"],  # type: ignore[arg-type]
                       restarted_at_s=d["restarted_at_s"], resumed_at_s=d["resumed_at_s"],  # type: ignore[arg-type]
                       detection_to_resumed_training_s=d["detection_to_resumed_training_s"],  # type: ignore[arg-type]
                       resumed_from_step=r.resumed_from_step)


def task_status(e: TaskEntry, t: TaskSnapshot) -> pb.TaskStatus:
    """One task: its run-record entry ``e`` and the live fields of ``t``."""
    sample = e.process_sample
    gpus = e.gpus
    return pb.TaskStatus(
        task=e.task, state=e.state, address=e.address, attempts=e.attempts, restarts=e.restarts, pid=e.pid,
        exit_code=e.exit_code, signal=e.signal, exit=e.exit, reason=e.reason, stdout=e.stdout, stderr=e.stderr,
        last_heartbeat=heartbeat(e.last_heartbeat) if e.last_heartbeat is not None else None,
        process_sample=pb.ProcessSample(cpu_percent=sample["cpu_percent"], rss_bytes=sample["rss_bytes"])
        if sample is not None else None,
        earlier_attempts=records(e.earlier_attempts),
        gpus=pb.TaskGpus(count=gpus["count"], devices=gpus["devices"], utilization_percent=gpus["utilization_percent"],
                         memory_used_bytes=gpus["memory_used_bytes"], memory_total_bytes=gpus["memory_total_bytes"],
                         peak_memory_bytes=gpus["peak_memory_bytes"], samples=records(gpus["samples"]))
        if gpus is not None else None,
        left_behind=records(e.left_behind),
        name=t.name, task_type=t.task.task_type, task_index=t.task.task_index, attempt=t.attempt,
        heartbeat_age_s=round(t.heartbeat.age_s, 3) if t.heartbeat is not None else None,
    )


def heartbeat(h: HeartbeatEntry) -> pb.LastHeartbeat:
    """A task's last heartbeat as the run record keeps it."""
    return pb.LastHeartbeat(
        phase=h.phase, cpu_percent=h.cpu_percent, rss_bytes=h.rss_bytes, heartbeats=h.heartbeats, step=h.step,
        epoch=h.epoch, loss=h.loss, examples_per_second=h.examples_per_second, metrics=h.metrics,
        formed=pb.Formed(**h.formed) if h.formed else None, first_step_s=h.first_step_s,
    )


def history_message(h: dict[str, Any]) -> pb.StatusHistory:
    """:meth:`orchestrator.report.history.Recorder.history` as a message."""
    return pb.StatusHistory(seq=h["seq"], samples=[pb.Sample(**s) for s in h["samples"]],
                            events=[pb.Event(**e) for e in h["events"]])
