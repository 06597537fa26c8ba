"""TF_CONFIG inside a Kubernetes JobSet pod, computed by the pod itself (never imports TensorFlow).

``render --format jobset`` (:mod:`orchestrator.render.jobset`) gives no pod a ``TF_CONFIG``:
unlike Kubeflow's TFJob operator, JobSet knows nothing of TensorFlow (and Kubeflow Trainer
v2, which runs on JobSet, has no TensorFlow policy that would set it). What JobSet does give
is stable names: with ``network.enableDNSHostnames`` every pod of the set is reachable at
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`` (jobset
``api/jobset/v1alpha2/jobset_types.go``, ``Network``), through a headless Service named
``<subdomain>`` the controller creates. The renderer makes one replicated job per task type,
named after it (``chief``, ``worker``, ``ps``, ``evaluator``), each one Indexed Job
(``replicas: 1``) of as many pods as tasks, so a task is the pod
``<jobset>-<type>-0-<index>`` and every pod can write the whole cluster from:

* its JobSet's name and its replicated job's name and index (pod labels, through the
  downward API: :data:`orchestrator.env.JOBSET_LABELS`);
* its index in its Indexed Job: ``JOB_COMPLETION_INDEX``, which Kubernetes sets;
* the task counts, the subdomain and the port, written by the renderer
  (``ORCH_JOBSET_CLUSTER``, ``ORCH_JOBSET_SUBDOMAIN``, ``ORCH_JOBSET_PORT``).

:func:`tf_config_from_jobset` is that computation, pure; :func:`ensure_tf_config` puts its
result in the environment of a task that has no ``TF_CONFIG`` (``python -m worker``,
``python -m ps`` and :mod:`orchestrator.task.execwrap` call it first), so TensorFlow's
``TFConfigClusterResolver`` reads it as if an operator had set it.
"""

from __future__ import annotations

import json
import os
from typing import Mapping, MutableMapping

from orchestrator import env
from orchestrator.spec.model import TASK_TYPES, TaskId
from orchestrator.spec.tfconfig import tf_config

DEFAULT_PORT = 2222
"""The port of every task's ``tf.distribute`` server when ``ORCH_JOBSET_PORT`` is unset
(the one Kubeflow's TFJob operator uses)."""


def pod_hostname(jobset: str, replicated_job: str, job_index: int, pod_index: int, subdomain: str) -> str:
    """The stable DNS name of a JobSet pod (jobset ``Network.enableDNSHostnames``).

    Returns:
        ``<jobset>-<replicated_job>-<job_index>-<pod_index>.<subdomain>``; resolvable from
        every pod of the set's namespace through the headless Service ``<subdomain>``.
    """
    return f"{jobset}-{replicated_job}-{job_index}-{pod_index}.{subdomain}"


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name, "")
    if raw == "" and default is not None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer; the JobSet manifest sets it "
                         "(render it again with `python -m orchestrator render --format jobset`)") from None
    if value < 0:
        raise ValueError(f"{name}={value} is negative; it is an index or a port")
    return value


def tf_config_from_jobset(environ: Mapping[str, str]) -> dict | None:
    """The TF_CONFIG of this pod, from the JobSet environment (pure).

    Args:
        environ: the pod's environment: ``JOBSET_NAME``, ``JOBSET_REPLICATED_JOB_NAME``
            (the task type), ``JOBSET_JOB_INDEX`` (0; absent means 0), ``JOB_COMPLETION_INDEX``
            (the task index), ``ORCH_JOBSET_CLUSTER`` (JSON task type -> count),
            ``ORCH_JOBSET_SUBDOMAIN`` (default: the JobSet's name, as JobSet defaults it) and
            ``ORCH_JOBSET_PORT`` (default 2222). See :mod:`orchestrator.env`.

    Returns:
        ``{"cluster": ..., "task": {"type": ..., "index": ...}, "rpc_layer": "grpc"}`` with
        every address ``<jobset>-<type>-0-<index>.<subdomain>:<port>`` (the evaluator is left
        out of the cluster, as everywhere: tensorflow#46169); None when ``JOBSET_NAME`` is not
        set (not a JobSet pod).

    Raises:
        ValueError: a JobSet pod whose environment is incomplete or inconsistent: a missing
            variable, a replicated job that is not a task type, a Job index other than 0,
            a pod index out of range, counts that are not a JSON object of task type -> count,
            a port outside 1..65535. The message names the variable.
    """
    name = environ.get(env.JOBSET_NAME, "")
    if not name:
        return None
    task_type = environ.get(env.JOBSET_REPLICATED_JOB, "")
    if task_type not in TASK_TYPES:
        raise ValueError(f"{env.JOBSET_REPLICATED_JOB}={task_type!r} is not a task type; replicated jobs must be "
                         f"named {', '.join(TASK_TYPES)}")
    if env.JOB_COMPLETION_INDEX not in environ:
        raise ValueError(f"{env.JOB_COMPLETION_INDEX} is not set; the replicated job's Job must have "
                         "completionMode: Indexed")
    job_index = _int(environ, env.JOBSET_JOB_INDEX, default=0)
    if job_index != 0:
        raise ValueError(f"{env.JOBSET_JOB_INDEX}={job_index}: every task type must be one Job (replicas: 1) whose "
                         "pods are the tasks")
    pod_index = _int(environ, env.JOB_COMPLETION_INDEX)
    try:
        counts = json.loads(environ.get(env.JOBSET_CLUSTER, ""))
    except json.JSONDecodeError:
        counts = None
    if not isinstance(counts, dict) or not all(
            k in TASK_TYPES and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in counts.items()):
        raise ValueError(f"{env.JOBSET_CLUSTER}={environ.get(env.JOBSET_CLUSTER, '')!r} is not a JSON object of "
                         'task type -> count, e.g. {"worker": 2}')
    if pod_index >= counts.get(task_type, 0):
        raise ValueError(f"{env.JOB_COMPLETION_INDEX}={pod_index} is out of range: {env.JOBSET_CLUSTER} has "
                         f"{counts.get(task_type, 0)} {task_type} task(s)")
    subdomain = environ.get(env.JOBSET_SUBDOMAIN, "") or name
    port = _int(environ, env.JOBSET_PORT, default=DEFAULT_PORT)
    if not 1 <= port <= 65535:
        raise ValueError(f"{env.JOBSET_PORT}={port} is not a port (1..65535)")
    addresses = {TaskId(t, i): f"{pod_hostname(name, t, 0, i, subdomain)}:{port}"
                 for t in TASK_TYPES for i in range(counts.get(t, 0))}
    return tf_config(addresses, TaskId(task_type, pod_index))


def ensure_tf_config(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``TF_CONFIG`` from the JobSet environment when it is absent.

    Args:
        environ: the environment to read and update (default ``os.environ``, so that
            TensorFlow in this process and every child sees the result).

    Returns:
        True when ``TF_CONFIG`` was set here; False when it was already set (an operator,
        the orchestrator or the user set it: never overridden) or this is not a JobSet pod.

    Raises:
        ValueError: from :func:`tf_config_from_jobset`.
    """
    environ = os.environ if environ is None else environ
    if environ.get("TF_CONFIG"):
        return False
    config = tf_config_from_jobset(environ)
    if config is None:
        return False
    environ["TF_CONFIG"] = json.dumps(config, separators=(",", ":"))
    return True
