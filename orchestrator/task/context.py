"""What a task knows about itself and its job (:class:`TaskContext`), read from the environment
the orchestrator set (:mod:`orchestrator.env`); the one place of the task side that reads
``os.environ`` directly (``tests/unit/test_env_reads.py``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from orchestrator import env
from orchestrator.spec.model import Strategy, TrainingSpec


def training_options(raw: Mapping[str, Any]) -> TrainingSpec:
    """The built-in program's options from ``ORCH_TRAINING`` (the spec's ``training`` as a dict):
    every field left out takes :class:`~orchestrator.spec.model.TrainingSpec`'s default; a key
    that is not a field is ignored (a newer orchestrator's)."""
    names = TrainingSpec.__dataclass_fields__
    return TrainingSpec(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class TaskContext:
    """What a task knows about itself and its job, read from the environment.

    Attributes:
        task_type: ``chief``, ``worker``, ``ps`` or ``evaluator`` (from ``ORCH_TASK``, else TF_CONFIG).
        task_index: index within the task type (likewise).
        tf_config: the parsed TF_CONFIG.
        attempt: 0 for the first attempt.
        health_address: ``host:port`` of the orchestrator's health endpoint, or ``""``.
        token: the job token, or ``""``.
        tls_dir: the run's certificates (``ORCH_TLS_DIR``), or ``""`` (``--insecure``: plaintext).
        orchestrator_pid: pid the task must not outlive, or 0 when not local.
        orphan_timeout_s: when > 0 (containers), the task kills itself once the orchestrator
            it reached has been unreachable this long.
        heartbeat_interval_s: seconds between heartbeats.
        run_dir, task_dir, error_file, backup_dir, model_dir: paths (``""`` when unset).
        strategy: the job's strategy (``ORCH_STRATEGY``).
        training: the built-in program's options (``ORCH_TRAINING``; the spec's defaults for
            what it leaves out).
        gpus: GPUs the orchestrator gave the task (``ORCH_GPUS``; 0 when none or not said).
    """

    task_type: str
    task_index: int
    tf_config: Mapping[str, Any]
    attempt: int = 0
    health_address: str = ""
    token: str = ""
    tls_dir: str = ""
    orchestrator_pid: int = 0
    orphan_timeout_s: float = 0.0
    heartbeat_interval_s: float = 1.0
    run_dir: str = ""
    task_dir: str = ""
    error_file: str = ""
    backup_dir: str = ""
    model_dir: str = ""
    strategy: Strategy = Strategy.MULTI_WORKER_MIRRORED
    training: TrainingSpec = field(default_factory=TrainingSpec)
    gpus: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "TaskContext":
        """Read the context from ``environ`` (default ``os.environ``).

        Raises:
            ValueError: when TF_CONFIG is missing or has no task.
        """
        environ = os.environ if environ is None else environ
        raw = environ.get("TF_CONFIG", "")
        if not raw:
            raise ValueError("TF_CONFIG is not set; start tasks with `python -m orchestrator launch`")
        tf_config = json.loads(raw)
        task = tf_config.get("task") or {}
        if "type" not in task or "index" not in task:
            raise ValueError(f"TF_CONFIG has no task type and index: {raw}")
        task_type, task_index = str(task["type"]), int(task["index"])
        planned = environ.get(env.TASK, "")  # the orchestrator's name for it: a program may rewrite TF_CONFIG
        if planned.rpartition("-")[2].isdigit():
            task_type, task_index = planned.rpartition("-")[0], int(planned.rpartition("-")[2])
        return cls(
            task_type=task_type,
            task_index=task_index,
            tf_config=tf_config,
            attempt=int(environ.get(env.ATTEMPT, "0")),
            health_address=environ.get(env.HEALTH_ADDRESS, ""),
            token=environ.get(env.JOB_TOKEN, ""),
            tls_dir=environ.get(env.TLS_DIR, ""),
            orchestrator_pid=int(environ.get(env.ORCHESTRATOR_PID, "0") or 0),
            orphan_timeout_s=float(environ.get(env.ORPHAN_TIMEOUT_S, "0") or 0),
            heartbeat_interval_s=float(environ.get(env.HEARTBEAT_INTERVAL_S, "1.0")),
            run_dir=environ.get(env.RUN_DIR, ""),
            task_dir=environ.get(env.TASK_DIR, ""),
            error_file=environ.get(env.ERROR_FILE, ""),
            backup_dir=environ.get(env.BACKUP_DIR, ""),
            model_dir=environ.get(env.MODEL_DIR, ""),
            strategy=Strategy.parse(environ.get(env.STRATEGY, "") or Strategy.MULTI_WORKER_MIRRORED.value),
            training=training_options(json.loads(environ.get(env.TRAINING, "") or "{}")),
            gpus=int(environ.get(env.GPUS, "0") or 0),
        )

    @property
    def name(self) -> str:
        """``worker-1``."""
        return f"{self.task_type}-{self.task_index}"

    @property
    def is_chief(self) -> bool:
        """The chief, or worker 0 when the cluster has no chief (TF multi_worker_util.is_chief)."""
        if self.task_type == "chief":
            return True
        cluster = self.tf_config.get("cluster", {})
        return self.task_type == "worker" and self.task_index == 0 and not cluster.get("chief")
