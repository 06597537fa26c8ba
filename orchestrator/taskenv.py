"""The one builder of a task's environment: what every process the orchestrator plans gets
(:mod:`orchestrator.env` names and documents each variable).

Two callers, one function: :func:`orchestrator.plan.make_plan` (local, docker, Slurm: tasks that
report to this orchestrator) and :func:`orchestrator.render.kubernetes.pod_env` (TFJob and
JobSet pods: no orchestrator to report to, so no health address and no token). What differs
between them is a parameter here, never a second copy of the list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from orchestrator import env
from orchestrator.rundir import RunDir
from orchestrator.spec.elastic import batch_facts
from orchestrator.spec.model import JobSpec, Strategy, TaskId
from orchestrator.spec.tfconfig import ClusterConfig


def common_env(
    spec: JobSpec,
    *,
    run_id: str,
    run_dir: str,
    training_json: str | None,
    threads: int | None,
    health_address: str | None = None,
    token: str | None = None,
    orchestrator_pid: int = 0,
    tls_dir: str | None = None,
) -> dict[str, str]:
    """The variables every task of the job gets (TF_CONFIG, faults and devices are per task).

    Args:
        spec: the validated spec.
        run_id: the run id (a Kubernetes rendering: the object's name).
        run_dir: the run directory as the tasks see it.
        training_json: the built-in program's options (``ORCH_TRAINING``); None for a user's
            program, whose own options they are not.
        threads: intra-op threads per task (``TF_NUM_INTRAOP_THREADS``, ``OMP_NUM_THREADS``;
            inter-op: at least 2); None leaves TensorFlow's own default.
        health_address: ``host:port`` of the health endpoint; None: tasks report nowhere.
        token: the job token (with ``health_address``).
        orchestrator_pid: the pid tasks must not outlive (local backend); 0: none.
        tls_dir: the run's certificates (:mod:`orchestrator.tls`); None: plaintext (``--insecure``).

    Returns:
        Variable -> value.
    """
    out: dict[str, str] = {env.RUN_ID: run_id, env.RUN_DIR: run_dir}
    if health_address is not None:
        out[env.HEALTH_ADDRESS] = health_address
        out[env.JOB_TOKEN] = token or ""
        if tls_dir:
            out[env.TLS_DIR] = tls_dir
    out[env.HEARTBEAT_INTERVAL_S] = repr(float(spec.heartbeat_interval_s))
    out[env.STRATEGY] = spec.strategy.value
    if training_json is not None:
        out[env.TRAINING] = training_json
    out[env.BACKUP_DIR] = str(RunDir(Path(run_dir)).backup)
    out[env.MODEL_DIR] = str(RunDir(Path(run_dir)).model)
    if threads is not None:
        out["TF_NUM_INTRAOP_THREADS"] = str(threads)
        out["TF_NUM_INTEROP_THREADS"] = str(max(2, threads))
        out["OMP_NUM_THREADS"] = str(threads)
    out["TF_USE_LEGACY_KERAS"] = "1"
    out["TF_CPP_MIN_LOG_LEVEL"] = "1"
    out["PYTHONUNBUFFERED"] = "1"
    if orchestrator_pid:
        out[env.ORCHESTRATOR_PID] = str(orchestrator_pid)
    if spec.strategy is Strategy.PARAMETER_SERVER:
        out["GRPC_FAIL_FAST"] = "use_caller"
    out.update(elastic_env(spec))
    return out


def elastic_env(spec: JobSpec) -> dict[str, str]:
    """The batch facts of elastic workers at the spec's size (``ORCH_WORKERS_MIN``, ...,
    ``ORCH_LEARNING_RATE_FACTOR``: :mod:`orchestrator.spec.elastic`); empty without them."""
    if spec.elastic is None:
        return {}
    facts = batch_facts(spec)
    return {env.WORKERS_MIN: str(spec.elastic.min), env.WORKERS_MAX: str(spec.elastic.max),
            env.BATCH_POLICY: spec.elastic.batch_policy, env.GLOBAL_BATCH_SIZE: str(facts.global_batch_size),
            env.PER_REPLICA_BATCH_SIZE: str(facts.per_replica_batch_size),
            env.LEARNING_RATE_FACTOR: repr(facts.learning_rate_factor)}


class TaskEnv(Mapping[str, str]):
    """One task's variables with its ``TF_CONFIG`` made when read (from the job's
    :class:`~orchestrator.spec.tfconfig.ClusterConfig`): a plan of N tasks then holds the
    cluster's text once, not N times (each task's is O(N): ~170 KB at 10,000 tasks).

    Args:
        own: every other variable.
        config: the job's cluster.
        task: whose ``TF_CONFIG`` it is.
    """

    __slots__ = ("_own", "_config", "_task")

    def __init__(self, own: dict[str, str], config: ClusterConfig, task: TaskId) -> None:
        self._own, self._config, self._task = own, config, task

    def __getitem__(self, key: str) -> str:
        if key == "TF_CONFIG":
            return self._config.text(self._task)
        return self._own[key]

    def __contains__(self, key: object) -> bool:
        return key == "TF_CONFIG" or key in self._own

    def __iter__(self) -> Iterator[str]:
        yield from self._own
        yield "TF_CONFIG"

    def __len__(self) -> int:
        return len(self._own) + 1


def data_service_env(spec: JobSpec, addresses: Mapping[TaskId, str], task: TaskId, *, run_id: str,
                     run_dir: str) -> dict[str, str]:
    """The tf.data service's variables of ``task`` (docs/data-service.md); empty without one.

    Every task gets the dispatcher's address, the job name (the run id: a restarted trainer
    re-attaches to the same service job) and the sharding policy; the dispatcher its journal
    directory (``<run dir>/data-service`` unless the spec names one) and job GC timeout; the
    service roles their own address (the port their server binds).

    Raises:
        KeyError: when the dispatcher (or ``task``, a service role) has no address.
    """
    service = spec.data_service
    if service is None:
        return {}
    out = {env.DATA_SERVICE_ADDRESS: addresses[TaskId("dispatcher", 0)], env.DATA_SERVICE_JOB: run_id,
           env.DATA_SERVICE_SHARDING: service.sharding}
    if task.task_type in ("dispatcher", "data_worker"):
        out[env.TASK_ADDRESS] = addresses[task]
    if task.task_type == "dispatcher":
        out[env.DATA_SERVICE_WORK_DIR] = service.work_dir or str(Path(run_dir) / "data-service")
        out[env.DATA_SERVICE_JOB_GC_S] = repr(float(service.job_gc_timeout_s))
    return out


def task_env(common: Mapping[str, str], *, tf_config: str | None = None, gpus: Mapping[str, str] | None = None,
             faults: str | None = None, task: str | None = None,
             cluster: tuple[ClusterConfig, TaskId] | None = None,
             extra: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """One task's variables: the job's ``common`` ones plus its own.

    Args:
        common: :func:`common_env`.
        tf_config: its TF_CONFIG (JSON); None where the task computes its own (JobSet pods).
        cluster: the job's cluster and the task, for a ``TF_CONFIG`` made when read
            (:class:`TaskEnv`) instead of ``tf_config``.
        gpus: its device variables (:meth:`orchestrator.resources.placement.Placement.env`:
            ``CUDA_VISIBLE_DEVICES``, ``TF_FORCE_GPU_ALLOW_GROWTH``).
        faults: its injected faults (``ORCH_FAULTS``, JSON), if any.
        task: its name (``worker-1``: ``ORCH_TASK``); None where the task computes it (JobSet pods).
        extra: its other own variables (:func:`data_service_env`).
    """
    from orchestrator.spec.faults import ENV as FAULTS_ENV

    out = dict(common)
    if tf_config is not None:
        out["TF_CONFIG"] = tf_config
    if task is not None:
        out[env.TASK] = task
    out.update(gpus or {})
    out.update(extra or {})
    if faults:
        out[FAULTS_ENV] = faults
    if cluster is not None:
        return TaskEnv(out, *cluster)
    return out
