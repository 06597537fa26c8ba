"""The status reply on the wire: ``tfcluster.v1.StatusReply`` (typed messages) back into the status
dictionary that ``status --json``, the web page and ``/metrics`` read.

The reply is built by :func:`orchestrator.report.status_reply.status_reply` from the job's snapshot;
:func:`status_of` gives the same dictionary as :func:`orchestrator.report.status.status_dict` (with
``history`` when asked), strict-JSON ready: a non-finite float is None and the top level notes it
(:func:`orchestrator.jsontext.strict`), as when the reply was JSON text. The open-ended parts of
the run record (a failure's fields, a life, a user's metrics) travel as :class:`pb.Record`:
:func:`record` / :func:`plain` convert them (an integer stays an integer, fields keep their order).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from orchestrator import jsontext
from orchestrator.proto import supervisor_pb2 as pb

# -- open-ended values ---------------------------------------------------------------------


def value(data: Any) -> pb.Value:
    """``data`` (None, bool, int, float, str, a list / tuple or a mapping of those) as a
    :class:`pb.Value`. Raises TypeError for anything else."""
    if data is None:
        return pb.Value(null=True)
    if isinstance(data, bool):
        return pb.Value(bool_value=data)
    if isinstance(data, int):
        return pb.Value(int_value=data)
    if isinstance(data, float):
        return pb.Value(double_value=data)
    if isinstance(data, str):
        return pb.Value(string_value=data)
    if isinstance(data, Mapping):
        return pb.Value(record_value=record(data))
    if isinstance(data, (list, tuple)):
        return pb.Value(list_value=pb.Values(items=[value(v) for v in data]))
    raise TypeError(f"a status value must be JSON-shaped, not {type(data).__name__}")


def record(data: Mapping[Any, Any] | None) -> pb.Record:
    """A mapping as a :class:`pb.Record` (its keys as text, in order); None: an empty one."""
    return pb.Record(fields=[pb.Field(name=str(k), value=value(v)) for k, v in (data or {}).items()])


def records(items: Any) -> list[pb.Record]:
    """Each mapping of ``items`` as a :class:`pb.Record`."""
    return [record(item) for item in items]


def plain(v: pb.Value) -> Any:
    """The Python value of ``v`` (:func:`value`'s inverse; a tuple comes back a list)."""
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null":
        return None
    if kind == "record_value":
        return mapping(v.record_value)
    if kind == "list_value":
        return [plain(item) for item in v.list_value.items]
    return getattr(v, kind)


def mapping(r: pb.Record) -> dict[str, Any]:
    """The dictionary of ``r`` (:func:`record`'s inverse)."""
    return {f.name: plain(f.value) for f in r.fields}


def _opt(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


# -- the reply -----------------------------------------------------------------------------


def status_of(reply: pb.StatusReply) -> dict[str, Any]:
    """The status dictionary of ``reply``: ``{}`` before the job started; ``history`` added when
    the reply carries it. Non-finite floats become None, noted under ``non_finite``."""
    if not reply.HasField("job"):
        return {}
    out = job_dict(reply.job)
    if reply.HasField("history"):
        out["history"] = history_dict(reply.history)
    try:  # C speed: any non-finite float raises (walking the dictionary in Python cost 3x as much)
        json.dumps(out, allow_nan=False)
    except ValueError:
        return jsontext.strict(out)
    return out


def job_dict(j: pb.JobStatus) -> dict[str, Any]:
    """The fields of ``summary.json`` and the live ones, in their order."""
    topo = j.topology
    return {
        "run_id": j.run_id,
        "run_dir": j.run_dir,
        "status": j.status,
        "exit_code": _opt(j, "exit_code"),
        "reason": j.reason,
        "wall_time_s": j.wall_time_s,
        "started_at": j.started_at,
        "strategy": j.strategy,
        "topology": {"chief": topo.chief, "worker": topo.worker, "ps": topo.ps, "evaluator": topo.evaluator},
        "cluster": {a.task_type: list(a.addresses) for a in j.cluster},
        "threads_per_task": _opt(j, "threads_per_task"),
        "program": list(j.program) if j.program else "built-in",
        "training": plain(j.training),
        "metrics": mapping(j.metrics),
        "evaluation": plain(j.evaluation),
        "model_dir": _opt(j, "model_dir"),
        "tensorboard_dir": _opt(j, "tensorboard_dir"),
        "root_cause": plain(j.root_cause),
        "restarts": j.restarts,
        "max_restarts": j.max_restarts,
        "restart_policy": {p.name: p.text for p in j.restart_policy},
        "recoveries": [recovery_dict(r) for r in j.recoveries],
        "failures": [mapping(r) for r in j.failures],
        "lives": [mapping(r) for r in j.lives],
        "segments": [mapping(r) for r in j.segments],
        "elastic": plain(j.elastic),
        "late_failures": [mapping(r) for r in j.late_failures],
        "warnings": list(j.warnings),
        "faults": [mapping(r) for r in j.faults],
        "cluster_check": mapping(j.cluster_check),
        "spares": [{"pid": s.pid, "state": s.state, "task": _opt(s, "task")} for s in j.spares],
        "tasks": [task_dict(t) for t in j.tasks],
        "peak_gpu_memory_bytes": _opt(j, "peak_gpu_memory_bytes"),
        "orchestrator": {"pid": j.orchestrator.pid, "peak_rss_bytes": j.orchestrator.peak_rss_bytes},
        "data_service": plain(j.data_service),
        "live": j.live,
        "elapsed_s": j.elapsed_s,
        "global_batch_size": _opt(j, "global_batch_size"),
        "updated_at": j.updated_at,
    }


def recovery_dict(r: pb.Recovery) -> dict[str, Any]:
    """One recovery (:meth:`orchestrator.supervisor.records.snapshot.RecoveryRecord.to_dict`)."""
    return {
        "cause": r.cause,
        "scope": r.scope,
        "tasks": list(r.tasks),
        "detected_at_s": r.detected_at_s,
        "restarted_at_s": _opt(r, "restarted_at_s"),
        "resumed_at_s": _opt(r, "resumed_at_s"),
        "detection_to_resumed_training_s": _opt(r, "detection_to_resumed_training_s"),
        "resumed_from_step": _opt(r, "resumed_from_step"),
    }


def task_dict(t: pb.TaskStatus) -> dict[str, Any]:
    """One task: its ``summary.json`` entry, then its live fields."""
    sample = t.process_sample
    return {
        "task": t.task,
        "state": t.state,
        "address": _opt(t, "address"),
        "attempts": t.attempts,
        "restarts": t.restarts,
        "pid": _opt(t, "pid"),
        "exit_code": _opt(t, "exit_code"),
        "signal": _opt(t, "signal"),
        "exit": _opt(t, "exit"),
        "reason": t.reason,
        "stdout": _opt(t, "stdout"),
        "stderr": _opt(t, "stderr"),
        "last_heartbeat": heartbeat_dict(t.last_heartbeat) if t.HasField("last_heartbeat") else None,
        "process_sample": {"cpu_percent": sample.cpu_percent, "rss_bytes": _opt(sample, "rss_bytes")}
        if t.HasField("process_sample") else None,
        "earlier_attempts": [mapping(r) for r in t.earlier_attempts],
        "gpus": gpus_dict(t.gpus) if t.HasField("gpus") else None,
        "left_behind": [mapping(r) for r in t.left_behind],
        "name": t.name,
        "task_type": t.task_type,
        "task_index": t.task_index,
        "attempt": t.attempt,
        "heartbeat_age_s": _opt(t, "heartbeat_age_s"),
    }


def heartbeat_dict(hb: pb.LastHeartbeat) -> dict[str, Any]:
    """A task's ``last_heartbeat`` (:meth:`orchestrator.report.schema.HeartbeatEntry.to_dict`): a
    progress field never reported is left out."""
    out: dict[str, Any] = {"phase": hb.phase, "cpu_percent": hb.cpu_percent, "rss_bytes": hb.rss_bytes,
                           "heartbeats": hb.heartbeats}
    for name in ("step", "epoch", "loss", "examples_per_second"):
        if hb.HasField(name):
            out[name] = getattr(hb, name)
    if hb.metrics:
        out["metrics"] = dict(hb.metrics.items())
    if hb.HasField("formed"):
        out["formed"] = {name: getattr(hb.formed, name) for name in ("replicas_in_sync", "cluster_workers")
                         if hb.formed.HasField(name)}
    if hb.HasField("first_step_s"):
        out["first_step_s"] = hb.first_step_s
    return out


def gpus_dict(g: pb.TaskGpus) -> dict[str, Any]:
    """A task's ``gpus`` (:func:`orchestrator.report.summary.gpus_dict`)."""
    return {
        "count": g.count,
        "devices": list(g.devices),
        "utilization_percent": _opt(g, "utilization_percent"),
        "memory_used_bytes": _opt(g, "memory_used_bytes"),
        "memory_total_bytes": _opt(g, "memory_total_bytes"),
        "peak_memory_bytes": _opt(g, "peak_memory_bytes"),
        "samples": [mapping(r) for r in g.samples],
    }


def history_dict(h: pb.StatusHistory) -> dict[str, Any]:
    """The charted samples and the events (:meth:`orchestrator.report.history.Recorder.history`)."""
    return {
        "seq": h.seq,
        "samples": [{"seq": s.seq, "t": s.t, "task": s.task, "attempt": s.attempt, "step": _opt(s, "step"),
                     "loss": _opt(s, "loss"), "examples_per_second": _opt(s, "examples_per_second"),
                     "cpu_percent": s.cpu_percent, "rss_bytes": s.rss_bytes} for s in h.samples],
        "events": [{"seq": e.seq, "t": e.t, "text": e.text, "kind": e.kind} for e in h.events],
    }
