"""The tf.data service part of a job spec: a dispatcher and data workers as task types.

TensorFlow's tf.data service (``tf.data.experimental.service``) moves input preprocessing out
of the trainers into a ``DispatchServer`` (one) and ``WorkerServer`` s (N) that "should be
brought up alongside your training jobs, then brought down when the jobs are finished" (TF's
``tf.data.experimental.service`` docs); like a ps, their ``join()`` never returns. The
orchestrator runs them as two task types outside the training cluster (never in TF_CONFIG's
``cluster``): ``dispatcher`` and ``data_worker``, on the service cores, started before the
trainers, restarted alone, stopped when training ends.

Rules (bad set-ups are :class:`~orchestrator.errors.SpecError`):

* only under ``multi_worker_mirrored`` and ``parameter_server``: ``mirrored`` and ``hogwild``
  run one task whose input is local (checked by :class:`~orchestrator.spec.model.JobSpec`);
* ``workers`` >= 1 (a dispatcher with no data worker serves nothing);
* ``sharding``: ``off`` (``ShardingPolicy.OFF``: every trainer's job reads the whole dataset,
  split among the data workers dynamically as TF's ``parallel_epochs`` / ``distributed_epoch``
  modes say) or ``dynamic`` (``ShardingPolicy.DYNAMIC``: the dispatcher hands out splits, each
  element seen at most once per epoch; the default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from orchestrator.errors import SpecError

SERVICE_TASK_TYPES = ("dispatcher", "data_worker")
"""Task types of the tf.data service: outside the training cluster, serving until stopped."""

SHARDING = ("off", "dynamic")
"""Sharding policies the built-in program takes (``tf.data.experimental.service.ShardingPolicy``)."""

KEYS = ("workers", "sharding", "work_dir", "job_gc_timeout_s")
"""Keys of the spec file's ``data_service`` mapping."""

def dns_name(task_type: str) -> str:
    """A task type as a DNS label (a JobSet replicated job, a pod hostname): ``data_worker`` ->
    ``data-worker`` (Kubernetes names have no ``_``); every other type is its own."""
    return task_type.replace("_", "-")


def task_type_of(name: str) -> str:
    """The task type a DNS label names (the inverse of :func:`dns_name`)."""
    return name.replace("-", "_")


def start_wave(task_type: str) -> int:
    """The wave a task of ``task_type`` starts in: 0 the dispatcher, 1 the data workers, 2 every
    other task (chief, worker, ps, evaluator): the tf.data service serves before the trainers read."""
    return {"dispatcher": 0, "data_worker": 1}.get(task_type, 2)


def registration_needs(task_type: str, service: bool) -> tuple[str, ...]:
    """What a task registering its own address (Slurm: :mod:`orchestrator.backends.addresses`)
    waits for before its reply is ready, as the start waves order them (:func:`start_wave`):
    the dispatcher waits for nobody (it starts first, and a trainer's TF_CONFIG does not name
    it); a data worker for the dispatcher (its ``dispatcher_address``); every other task for the
    training cluster (its TF_CONFIG) and, with a service, the dispatcher (its
    ``ORCH_DATA_SERVICE_ADDRESS``).

    Args:
        task_type: the registering task's type.
        service: the job has a tf.data service.

    Returns:
        ``"training"`` (every chief, worker and ps registered) and/or ``"dispatcher"``.
    """
    if task_type == "dispatcher":
        return ()
    if task_type == "data_worker":
        return ("dispatcher",)
    return ("training", "dispatcher") if service else ("training",)


@dataclass(frozen=True)
class DataServiceSpec:
    """The tf.data service of a job.

    Attributes:
        workers: data workers (``WorkerServer`` s), >= 1.
        sharding: ``dynamic`` (default) or ``off``: the built-in program's
            ``distribute(processing_mode=...)``.
        work_dir: the dispatcher's journal directory (``DispatcherConfig.work_dir``, with
            ``fault_tolerant_mode=True``) so that a restarted dispatcher recovers its jobs;
            None: ``<run dir>/data-service``. It must be reachable from the dispatcher's every
            node (a Slurm restart may land on another node).
        job_gc_timeout_s: how long the dispatcher keeps a job no trainer reads from
            (``DispatcherConfig.job_gc_timeout_ms`` / 1000), seconds; default 300: past a
            trainer group restart, so that the restarted group re-attaches to the same job
            (``job_name`` = the run id).
    """

    workers: int = 1
    sharding: str = "dynamic"
    work_dir: str | None = None
    job_gc_timeout_s: float = 300.0

    @classmethod
    def from_raw(cls, raw: object) -> "DataServiceSpec | None":
        """A spec file's ``data_service`` (a mapping, or a count of workers; None or 0: none).

        Raises:
            SpecError: not a mapping or count, an unknown key, a bad value.
        """
        if raw is None or raw == 0:
            return None
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = {"workers": raw}
        if not isinstance(raw, Mapping):
            raise SpecError("data_service", raw, "must be a mapping or a count of data workers",
                            "e.g. data_service: {workers: 2, sharding: dynamic}, or --data-service 2")
        unknown = [k for k in raw if k not in KEYS]
        if unknown:
            raise SpecError(f"data_service.{unknown[0]}", raw[unknown[0]], "unknown key",
                            "use " + ", ".join(KEYS))
        fields: dict[str, Any] = {k: v for k, v in raw.items() if v is not None}
        if fields.get("workers") == 0:
            return None
        spec = cls(**fields)
        spec.validate()
        return spec

    def validate(self) -> None:
        """Raises SpecError naming the first bad field."""
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise SpecError("data_service.workers", self.workers, "must be a whole number >= 1",
                            "e.g. --data-service 2")
        if self.sharding not in SHARDING:
            raise SpecError("data_service.sharding", self.sharding, "unknown sharding policy",
                            "use off or dynamic, e.g. --data-service-sharding dynamic")
        if self.work_dir is not None and (not isinstance(self.work_dir, str) or not self.work_dir.strip()):
            raise SpecError("data_service.work_dir", self.work_dir, "must be a directory path",
                            "e.g. work_dir: /shared/dispatcher, or leave it out for the run directory")
        value = self.job_gc_timeout_s
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 1 <= float(value) <= 86400:
            raise SpecError("data_service.job_gc_timeout_s", value, "must be between 1 and 86400 seconds",
                            "e.g. job_gc_timeout_s: 300")

    def to_fields(self) -> dict[str, Any]:
        """Spec-file fields (JSON-ready), what :meth:`from_raw` builds the same spec from."""
        return {"workers": self.workers, "sharding": self.sharding, "work_dir": self.work_dir,
                "job_gc_timeout_s": self.job_gc_timeout_s}


def check_data_service(service: object, strategy: str) -> None:
    """Check a job's ``data_service`` (None: no service) under its ``strategy`` (its value:
    ``multi_worker_mirrored``...): the tf.data service only under MWMS and PSS (mirrored and
    hogwild run one task).

    Raises:
        SpecError: not a :class:`DataServiceSpec`, another strategy, or a bad option.
    """
    if service is None:
        return
    if not isinstance(service, DataServiceSpec):
        raise SpecError("data_service", service, "must be a mapping of data service options",
                        "e.g. data_service: {workers: 2}")
    if strategy not in ("multi_worker_mirrored", "parameter_server"):
        raise SpecError("data_service", strategy, f"the tf.data service feeds several trainers; {strategy} runs one "
                        "task", "drop --data-service, or use --strategy multi_worker_mirrored or parameter_server")
    service.validate()
