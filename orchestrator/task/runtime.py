"""The frame of every task entrypoint (:func:`run_task`; never imports TensorFlow): the context
(:mod:`orchestrator.task.context`), the process's lifetime (:mod:`orchestrator.task.lifetime`),
injected faults, the heartbeat stream, the JSON error file (:mod:`orchestrator.task.errorfile`) and,
on Slurm, the address registration (:func:`take_cluster`). What a SIGTERM means is
:mod:`orchestrator.task.sigterm`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any, Callable

from orchestrator import env
from orchestrator.task.context import TaskContext
from orchestrator.task.errorfile import record_errors
from orchestrator.task.faults import FaultInjector
from orchestrator.task.lifetime import install

_task_health = None


def run_task(body: Callable[[TaskContext, Any], None]) -> int:
    """The common frame of every task entrypoint (``python -m worker``, ``python -m ps``).

    Sets ``TF_CONFIG`` from the JobSet environment when it is absent (Kubernetes,
    :func:`orchestrator.task.jobset.ensure_tf_config`), reads the context, waits (bounded) for a
    JobSet pod's peers' names (:func:`orchestrator.task.jobset.wait_for_jobset_peers`), installs the runtime
    (parent-death signal, stack dumps), starts the heartbeat stream, runs ``body(context, reporter)``,
    records an uncaught exception in the error file, and sends a final DONE heartbeat on success.

    Returns:
        0 on success, 2 when the environment is not a task's (no TF_CONFIG, or an
        inconsistent JobSet environment: one line on stderr naming the variable), 1 when a JobSet
        pod's peers' names never resolved (one line naming them); an exception propagates
        (Python exits 1 with the traceback on stderr).
    """
    # grpc, protobuf and psutil (~20 MB) load here, not when the module is imported: execwrap
    # imports this module and stays resident as the parent of a user's program
    from orchestrator.proto import supervisor_pb2 as pb
    from orchestrator.task.jobset import PeersUnresolved, ensure_tf_config, wait_for_jobset_peers
    from orchestrator.task.reporter import HeartbeatReporter

    env.bench_mark("runtime-imported")
    try:
        ensure_tf_config()  # a Kubernetes JobSet pod computes its own TF_CONFIG
        context = TaskContext.from_env()
        wait_for_jobset_peers()  # ... and waits, saying so, until its peers' names resolve
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PeersUnresolved as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    install(context)
    if env.is_set(env.TASK_HEALTH_PORT):  # containers: the healthcheck probes it
        from orchestrator.task.probe import serve_task_health  # grpc_health: containers only

        global _task_health  # keep a reference: a collected grpc.Server stops serving
        _task_health = serve_task_health(env.read_int(env.TASK_HEALTH_PORT))
    reporter = HeartbeatReporter.from_context(context).start()
    FaultInjector.from_env().start(reporter)  # time= faults, and the poll for faults handed over
    env.bench_mark("reporter-started")

    def registered_then_body() -> None:
        ctx = context
        if env.read_flag(env.ADDRESS_FROM_TASK):  # Slurm: bind a port here, register it, get TF_CONFIG
            ctx = take_cluster(context, reporter)
        body(ctx, reporter)

    try:
        record_errors(context, registered_then_body)
    except BaseException:
        reporter.close(timeout_s=2.0)
        raise
    if env.read_flag(env.STAY_UNTIL_STOPPED):
        reporter.update(phase=pb.PHASE_DONE)
        _wait_for_stop(context)
    reporter.close(pb.PHASE_DONE)
    return 0


def take_cluster(context: TaskContext, reporter: Any = None) -> TaskContext:
    """Register this task's address with the orchestrator and wait for the whole cluster
    (:mod:`orchestrator.task.addressing`); sets ``TF_CONFIG`` in the environment to the reply's,
    and the tf.data service's registered addresses the reply carries (``ORCH_DATA_SERVICE_ADDRESS``;
    a service role's ``ORCH_TASK_ADDRESS``) over the plan's placeholders.

    Args:
        context: the task's context (its TF_CONFIG names the task only).
        reporter: the task's heartbeat reporter; it then holds the bound port until
            ``release_port()``, right before TensorFlow binds. Without one the socket is
            closed at once (a user's program binds its port when it wants).

    Returns:
        The context with the cluster's TF_CONFIG.

    Raises:
        RuntimeError: the registration was refused or timed out.
    """
    import dataclasses

    from orchestrator.task.addressing import register

    tf_config, sock, service_env = register(context)
    os.environ["TF_CONFIG"] = tf_config
    os.environ.update(service_env)
    cluster = json.loads(tf_config)
    mine = cluster["cluster"].get(context.task_type, [])
    where = mine[context.task_index] if context.task_index < len(mine) else "(not in the training cluster)"
    service = f"; tf.data service {json.dumps(service_env, sort_keys=True)}" if service_env else ""
    print(f"{context.name}: registered {where}; cluster {json.dumps(cluster['cluster'], sort_keys=True)}{service}",
          flush=True)
    if reporter is not None:
        reporter.hold(sock)
    elif sock is not None:
        sock.close()
    return dataclasses.replace(context, tf_config=cluster)


def _wait_for_stop(context: TaskContext) -> None:
    """Block until SIGTERM or SIGINT (Compose: a finished task must not end the cluster;
    ``docker compose up --abort-on-container-exit`` stops everything when the chief exits)."""
    print(f"{context.name}: done; waiting to be stopped", file=sys.stderr, flush=True)
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    while not stopped.wait(1.0):
        pass
