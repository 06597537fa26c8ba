"""The ``data_service`` section of ``summary.json``: the tf.data service of a job run with
``--data-service N`` (docs/data-service.md), from the job's final snapshot; None without one.

What it holds: the dispatcher's address, the job name the trainers shared, the sharding policy,
the journal directory, each service task's restarts and what the servers last reported over
their heartbeats (the dispatcher's registered ``data_workers``, each data worker's ``data_tasks``:
jobs it serves). TF's servers count no elements or bytes that Python can read, so neither is
reported. With ``dynamic`` sharding the service delivers each split at most once: a restart of a
data worker, of the dispatcher or of the trainers may skip the splits in flight (TF's
``ShardingPolicy.DYNAMIC`` docs; ``python -m bench.data_service_rejoin`` measured 1-3 elements);
``note`` says so when such a restart happened.

Addresses are the plan's, except where the tasks registered their own (Slurm: the plan reads
``NODE:0``): there they are the last ones on record in the run's ``cluster.json``.
"""

from __future__ import annotations

from typing import Any

from orchestrator import env
from orchestrator.rundir import RunDir, read_json
from orchestrator.supervisor.records.snapshot import JobSnapshot

DATA_SERVICE_FIELDS: dict[str, str] = {
    "address": "the dispatcher's `host:port` (`ORCH_DATA_SERVICE_ADDRESS`; on Slurm the one it registered)",
    "job_name": "the tf.data service job every trainer read from (the run id)",
    "sharding": "`dynamic` or `off`",
    "work_dir": "the dispatcher's journal directory",
    "workers": "data workers planned",
    "restarts": "service task -> restarts (each restarted alone)",
    "dispatcher": "what the dispatcher last reported: `data_workers` registered",
    "data_workers": "per data worker: `task`, `address` (on Slurm the one it registered), `data_tasks` (jobs it "
                    "served, last reported), `restarts`",
    "note": "with dynamic sharding, after a restart of a service task or of the trainers: splits in flight may "
            "have been skipped (at most once); else `null`",
}
"""Every field of the ``data_service`` section -> what it holds."""


def data_service_section(snapshot: JobSnapshot) -> dict[str, Any] | None:
    """The ``data_service`` section of ``summary.json``, or None for a job without the service."""
    plan = snapshot.plan
    service = plan.spec.data_service
    if service is None:
        return None
    tasks = [t for t in snapshot.tasks if t.task.task_type in ("dispatcher", "data_worker")]
    dispatcher = next(t for t in tasks if t.task.task_type == "dispatcher")
    first = plan.task_plan(dispatcher.task).env
    registered: dict[str, str] = {}
    if plan.task_plan(dispatcher.task).address.endswith(":0"):  # the tasks registered their own (Slurm)
        registered = (read_json(RunDir(plan.run_dir).cluster) or {}).get("addresses") or {}
    metrics = dispatcher.heartbeat.metrics if dispatcher.heartbeat else {}
    restarts = {str(t.task): t.restarts for t in tasks}
    restarted = any(restarts.values()) or bool(snapshot.recoveries)
    return {
        "address": registered.get(dispatcher.task.name) or first.get(env.DATA_SERVICE_ADDRESS, ""),
        "job_name": first.get(env.DATA_SERVICE_JOB, plan.run_id),
        "sharding": service.sharding,
        "work_dir": first.get(env.DATA_SERVICE_WORK_DIR, ""),
        "workers": service.workers,
        "restarts": restarts,
        "dispatcher": {"data_workers": int(metrics["data_workers"]) if "data_workers" in metrics else None},
        "data_workers": [{"task": str(t.task),
                          "address": registered.get(t.task.name) or plan.task_plan(t.task).address,
                          "data_tasks": int(t.heartbeat.metrics["data_tasks"])
                          if t.heartbeat and "data_tasks" in t.heartbeat.metrics else None,
                          "restarts": t.restarts} for t in tasks if t.task.task_type == "data_worker"],
        "note": ("restarts happened under dynamic sharding: splits in flight may have been skipped (the service "
                 "delivers each at most once)") if restarted and service.sharding == "dynamic" else None,
    }
