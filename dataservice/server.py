"""Serve a tf.data service dispatcher or data worker until stopped.

TF's ``tf.data.experimental.service`` servers: one ``DispatchServer`` (its journal in
``ORCH_DATA_SERVICE_WORK_DIR`` with ``fault_tolerant_mode=True``, so a restarted dispatcher on
the same port recovers its jobs and workers) and N ``WorkerServer`` s registered with it, each
advertising the address the backend gave it (``worker_address``; ``ORCH_TASK_ADDRESS``). Their
``join()`` never returns, as a ps's: the orchestrator stops them when training ends.

Heartbeats: phase ``serving`` once the server is up; a data worker says ``serving, registered``
only after ``WorkerServer`` started, which returns once its first heartbeat reached the
dispatcher (TF's ``DataServiceWorkerImpl::Start`` retries it). Metrics, sampled every heartbeat
interval from the servers' own counters: ``data_workers`` (the dispatcher's registered
workers), ``data_tasks`` (a data worker's tasks: one per job it serves).
"""

from __future__ import annotations

import os
import threading

from orchestrator import env
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.resources.pinning import pin_self
from orchestrator.task.sigterm import route_sigterm
from ps.server import configure_threads


def own_port(reporter) -> tuple[str, int]:
    """This task's host and port: ``ORCH_TASK_ADDRESS``, the port released by the orchestrator
    right before the server binds it (the local backend holds it until then).

    Raises:
        ValueError: when ``ORCH_TASK_ADDRESS`` is not ``host:port``.
    """
    address = env.read(env.TASK_ADDRESS)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{env.TASK_ADDRESS}={address!r} is not host:port; start tasks with "
                         "`python -m orchestrator launch --data-service N`")
    released = reporter.release_port()
    return host, released or int(port)


def serve(context, reporter) -> None:
    """Start this task's tf.data service server and report it until stopped.

    Args:
        context: the task's :class:`orchestrator.task.context.TaskContext`.
        reporter: its :class:`orchestrator.task.reporter.HeartbeatReporter`.

    Raises:
        ValueError: not a tf.data service task, or its environment lacks the address.
    """
    import tensorflow as tf

    env.bench_mark("imported")
    pin_self(all_threads=True)  # the service cores (ORCH_CPUS), never the trainers'
    configure_threads(tf)
    service = tf.data.experimental.service
    host, port = own_port(reporter)
    if context.task_type == "dispatcher":
        work_dir = env.read(env.DATA_SERVICE_WORK_DIR)
        os.makedirs(work_dir, exist_ok=True)
        gc_s = float(env.read(env.DATA_SERVICE_JOB_GC_S, "300"))
        server = service.DispatchServer(service.DispatcherConfig(
            port=port, work_dir=work_dir, fault_tolerant_mode=True, job_gc_timeout_ms=int(gc_s * 1000)))
        route_sigterm()
        message = f"serving {server.target}, journal {work_dir}"

        def sample() -> dict[str, float]:
            return {"data_workers": float(server._num_workers())}  # TF's own counter (tests use it)
    elif context.task_type == "data_worker":
        dispatcher = env.read(env.DATA_SERVICE_ADDRESS)
        server = service.WorkerServer(service.WorkerConfig(  # returns once registered with the dispatcher
            dispatcher_address=dispatcher, worker_address=f"{host}:%port%", port=port))
        route_sigterm()
        message = f"serving, registered with {dispatcher} as {host}:{port}"

        def sample() -> dict[str, float]:
            return {"data_tasks": float(server._num_tasks())}
    else:
        raise ValueError(f"task type {context.task_type!r} is not a tf.data service role (dispatcher, data_worker)")
    env.bench_mark("serving")
    reporter.update(phase=pb.PHASE_SERVING, message=message, **sample())
    print(f"{context.name}: {message}", flush=True)
    stop = threading.Event()  # never set: the orchestrator's SIGTERM ends the process (route_sigterm)
    while not stop.wait(max(0.2, context.heartbeat_interval_s)):
        reporter.update(**sample())
