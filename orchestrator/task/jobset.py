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

Kubernetes creates a pod's DNS name only once the pod runs, so a pod that starts first finds
its peers' names unknown, and TensorFlow would wait for them silently, up to its own timeouts.
:func:`wait_for_jobset_peers` (called right after, by the same entrypoints) waits instead,
before TensorFlow starts, for every peer's name to resolve, saying on stderr which peer it
waits for and for how long, bounded by ``ORCH_JOBSET_PEER_WAIT_S`` (default
:data:`PEER_WAIT_S`); past it the pod fails, naming the peers that never resolved.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Callable, Mapping, MutableMapping, Sequence

from orchestrator import env
from orchestrator.spec.dataservice import SERVICE_TASK_TYPES, dns_name, task_type_of
from orchestrator.spec.model import TASK_TYPES, TaskId
from orchestrator.spec.tfconfig import tf_config

DEFAULT_PORT = 2222
"""The port of every task's ``tf.distribute`` server when ``ORCH_JOBSET_PORT`` is unset
(the one Kubeflow's TFJob operator uses)."""
PEER_WAIT_S = env.JOBSET_PEER_WAIT_DEFAULT_S
"""Default seconds a JobSet pod waits for its peers' names (``ORCH_JOBSET_PEER_WAIT_S``)."""
REPORT_EVERY_S = 10.0
"""Seconds between two "still waiting" lines."""
POLL_S = 0.5
"""Seconds between two rounds of name look-ups."""


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
    task_type = task_type_of(environ.get(env.JOBSET_REPLICATED_JOB, ""))  # data-worker: data_worker
    if task_type not in TASK_TYPES:
        raise ValueError(f"{env.JOBSET_REPLICATED_JOB}={environ.get(env.JOBSET_REPLICATED_JOB, '')!r} is not a task "
                         f"type; replicated jobs must be named {', '.join(map(dns_name, TASK_TYPES))}")
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
    if isinstance(counts, dict):
        counts = {task_type_of(str(k)): v for k, v in counts.items()}
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
    addresses = {TaskId(t, i): f"{pod_hostname(name, dns_name(t), 0, i, subdomain)}:{port}"
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
    task = config["task"]
    if task["type"] in SERVICE_TASK_TYPES and not environ.get(env.TASK_ADDRESS):  # its server's own address
        port = _int(environ, env.JOBSET_PORT, default=DEFAULT_PORT)
        host = pod_hostname(environ[env.JOBSET_NAME], dns_name(task["type"]), 0, task["index"],
                            environ.get(env.JOBSET_SUBDOMAIN, "") or environ[env.JOBSET_NAME])
        environ[env.TASK_ADDRESS] = f"{host}:{port}"
    return True


class PeersUnresolved(RuntimeError):
    """A pod's peers' names did not resolve within the bound (the message names them)."""


def resolves(host: str) -> bool:
    """Whether ``host`` resolves now (``socket.getaddrinfo``: the system resolver, the one gRPC
    uses by default on Linux), so a connection to it can be attempted."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return True


def peers_of(config: Mapping) -> list[tuple[str, str]]:
    """``(task name, host)`` of every other task in a TF_CONFIG's cluster, in cluster order;
    none for an evaluator (it reads checkpoints: it connects to no peer)."""
    me = config.get("task", {})
    if me.get("type") == "evaluator":
        return []
    out = []
    for task_type, addresses in config.get("cluster", {}).items():
        for index, address in enumerate(addresses):
            if (task_type, index) != (me.get("type"), me.get("index")):
                out.append((f"{task_type}-{index}", address.rsplit(":", 1)[0]))
    return out


def wait_for_peers(peers: Sequence[tuple[str, str]], timeout_s: float, *, resolve: Callable[[str], bool] = resolves,
                   say: Callable[[str], None] | None = None, poll_s: float = POLL_S,
                   report_every_s: float = REPORT_EVERY_S, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> float:
    """Wait until every peer's host name resolves, at most ``timeout_s`` seconds.

    Says (one line each) which peer it waits for when one does not resolve, again every
    ``report_every_s`` seconds with how long it has waited, and when every peer resolves
    after a wait; nothing when all resolve at once.

    Args:
        peers: ``(task name, host)`` pairs (:func:`peers_of`).
        timeout_s: the bound, seconds (``ORCH_JOBSET_PEER_WAIT_S``).
        resolve: host -> whether it resolves now (:func:`resolves`).
        say: where the lines go (default: stderr, flushed).
        poll_s: seconds between two rounds of look-ups.
        report_every_s: seconds between two "still waiting" lines.
        clock, sleep: monotonic seconds and a way to wait (tests pass a fake clock).

    Returns:
        Seconds waited.

    Raises:
        PeersUnresolved: a peer's name still does not resolve after ``timeout_s``.
    """
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    started = clock()
    pending = list(peers)
    reported_at: float | None = None
    while True:
        pending = [(name, host) for name, host in pending if not resolve(host)]
        waited = clock() - started
        if not pending:
            if reported_at is not None:
                say(f"every peer's name resolves, after {waited:.1f} s")
            return waited
        name, host = pending[0]
        more = f" and {len(pending) - 1} more peer(s)" if len(pending) > 1 else ""
        if waited > timeout_s:
            names = ", ".join(f"{n} ({h})" for n, h in pending)
            raise PeersUnresolved(
                f"peer name(s) did not resolve within {timeout_s:g} s ({env.JOBSET_PEER_WAIT_S}): {names}; is each "
                "pod running (kubectl get pods -l jobset.sigs.k8s.io/jobset-name=...), and the JobSet's "
                "network.enableDNSHostnames true? Raise the bound in the manifest when pods start slowly")
        if reported_at is None:
            say(f"waiting for peer {name} ({host}){more} to resolve in DNS (Kubernetes names a pod once it runs); "
                f"at most {timeout_s:g} s ({env.JOBSET_PEER_WAIT_S})")
            reported_at = clock()
        elif clock() - reported_at >= report_every_s:
            say(f"still waiting for peer {name} ({host}){more} after {waited:.0f} s of at most {timeout_s:g} s")
            reported_at = clock()
        sleep(min(poll_s, max(0.0, timeout_s - waited) + 0.01))


def peer_wait_s(environ: Mapping[str, str]) -> float:
    """``ORCH_JOBSET_PEER_WAIT_S`` (default :data:`PEER_WAIT_S`).

    Raises:
        ValueError: not a number of seconds >= 0 (the message names the variable).
    """
    raw = environ.get(env.JOBSET_PEER_WAIT_S, "")
    if raw == "":
        return PEER_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{env.JOBSET_PEER_WAIT_S}={raw!r} is not a number of seconds >= 0 (0: no wait), e.g. 300")
    return value


def wait_for_jobset_peers(environ: Mapping[str, str] | None = None, **kwargs) -> float:
    """In a JobSet pod (``JOBSET_NAME`` set) whose ``TF_CONFIG`` is set: :func:`wait_for_peers`
    for its peers, bounded by :func:`peer_wait_s`; elsewhere, nothing. Returns seconds waited.

    Raises:
        ValueError: a bad ``ORCH_JOBSET_PEER_WAIT_S``.
        PeersUnresolved: from :func:`wait_for_peers`.
    """
    environ = os.environ if environ is None else environ
    if not environ.get(env.JOBSET_NAME) or not environ.get("TF_CONFIG"):
        return 0.0
    timeout_s = peer_wait_s(environ)
    if timeout_s == 0:
        return 0.0
    return wait_for_peers(peers_of(json.loads(environ["TF_CONFIG"])), timeout_s, **kwargs)
