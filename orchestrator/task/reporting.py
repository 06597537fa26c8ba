"""``report()``, ``training_finished()`` and ``done()`` for a user's own training program,
behind :mod:`orchestrator.client`.

The heartbeat reporter runs only inside an orchestrated task (``ORCH_HEALTH_ADDRESS`` and
``TF_CONFIG`` set); elsewhere every call is a no-op and nothing beyond the standard library
is imported. In a task that trains (chief, MWMS worker, PSS coordinator) :func:`announce`,
called when :mod:`orchestrator.client` is imported, starts it at once in phase
``initializing``, so the supervisor knows the task reports from its start and its start-up
timeout covers a program that hangs before its first step. In other tasks (ps, PSS workers,
the evaluator, which may never report) and in child processes of the program (they inherit
``ORCH_CLIENT_PID``), it starts lazily, on the first call.

Calls with a ``step`` also fire the task's step-triggered injected faults
(``--inject-fault TASK:KIND@step=N``, :class:`orchestrator.task.faults.FaultInjector`):
``raise`` raises :class:`~orchestrator.task.faults.InjectedFault` from :func:`report`.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
from typing import Any

from orchestrator import env
from orchestrator.spec.model import Strategy
from orchestrator.task.faults import FaultInjector
from orchestrator.task.formed import CLUSTER_WORKERS, GLOBAL_BATCH_SIZE, REPLICAS_IN_SYNC, strategy_facts

_lock = threading.Lock()
_reporter = None
_started = False
_faults: FaultInjector | None = None
_non_finite_sent = False
NON_FINITE_STEP = "non_finite_step"
"""The heartbeat field that carries the step of the first non-finite loss or metric this process
reported (typed, not a metric: :mod:`orchestrator.supervisor.rules.training_rules` takes it)."""
"""Whether a non-finite loss or metric was reported (and flushed at once) by this process."""


def _in_task() -> bool:
    return env.is_set(env.HEALTH_ADDRESS) and env.is_set("TF_CONFIG")


def _get():
    global _reporter, _started
    with _lock:
        if not _started:
            _started = True
            if _in_task():
                # grpc and psutil (~20 MB) load only inside an orchestrated task, not in a script run by hand
                from orchestrator.task.context import TaskContext
                from orchestrator.task.reporter import HeartbeatReporter

                context = TaskContext.from_env()
                _reporter = HeartbeatReporter.from_context(context)
                if os.getppid() != context.orchestrator_pid:  # a child of the task: no watchdog
                    _reporter._orchestrator_pid = 0
                _reporter.start()
                # the interpreter is exiting: say so, the rest of its teardown may take seconds
                atexit.register(_reporter.close, exiting=True)
                _on_main_return(_reporter.main_returned)
        return _reporter


def _on_main_return(hook) -> None:
    """Call ``hook`` when the main thread is done, before the interpreter joins its non-daemon
    threads (which ``atexit`` handlers wait for: a thread that never ends blocks them all).
    ``threading._register_atexit`` (CPython 3.9+, what ``concurrent.futures`` uses) is the one
    place that runs then; without it (another interpreter) the ``atexit`` heartbeat is all."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return
    try:
        register(hook)
    except RuntimeError:  # the interpreter is already shutting down
        pass


def _trains(task_type: str) -> bool:
    """Whether this task runs a training loop: chief, worker (not under PSS, where workers
    only serve). A ps, a PSS worker and the evaluator may never report training."""
    if task_type == "chief":
        return True
    return task_type == "worker" and env.read(env.STRATEGY) != Strategy.PARAMETER_SERVER.value


def announce() -> None:
    """Start the heartbeat stream now, in phase ``initializing``, when this process is the
    main process of a training task (see the module docstring); otherwise do nothing."""
    if not _in_task() or env.read(env.CLIENT_PID, str(os.getpid())) != str(os.getpid()):
        return
    import json

    try:
        task = json.loads(env.read("TF_CONFIG")).get("task") or {}
    except ValueError:
        return
    if not _trains(str(task.get("type", ""))):
        return
    os.environ[env.CLIENT_PID] = str(os.getpid())  # children of the program do not announce themselves
    _get()


def _on_step(step: int | None) -> None:
    """Fire the step-triggered injected faults whose step has come, and hand over those of tasks
    that report no step when this task is the job's gate (cheap when there are none)."""
    global _faults
    if step is None:
        return
    if _faults is None:
        _faults = FaultInjector.from_env()
    _faults.on_step(int(step), lambda: _send_step(int(step)))


def _send_step(step: int) -> None:
    """Send ``step`` at once (before the gate hands a fault over at it)."""
    reporter = _get()
    if reporter is not None:
        from orchestrator.proto import supervisor_pb2 as pb

        reporter.update(phase=pb.PHASE_TRAINING, step=step, now=True)
        reporter.flush()


def report(step: int | None = None, loss: float | None = None, *, epoch: int | None = None,
           examples_per_second: float | None = None, strategy: Any = None, replicas_in_sync: int | None = None,
           cluster_workers: int | None = None, global_batch_size: int | None = None,
           resumed_from_step: int | None = None, evaluated_step: int | None = None, **metrics: float) -> None:
    """Report training progress of this task (thread-safe, cheap: sent with the next heartbeat;
    the first report, which moves the task to phase ``training``, is sent at once).

    Args:
        step: global training steps completed.
        loss: latest training loss.
        epoch: epochs completed.
        examples_per_second: throughput of this task (examples/s).
        strategy: the ``tf.distribute`` strategy the program trains with: sends its
            ``replicas_in_sync`` and ``cluster_workers`` (:func:`orchestrator.task.formed.strategy_facts`),
            which the orchestrator compares with its plan (docs/failure-handling.md).
        replicas_in_sync: ``strategy.num_replicas_in_sync``, when not passing ``strategy``.
        cluster_workers: the chief and workers in the cluster the strategy resolved.
        global_batch_size: examples per step across all replicas; kept in ``summary.json`` and
            ``run.json``, and a resume that trains with another one is warned about.
        resumed_from_step: after a restart, the step training really resumed at (what the
            restored checkpoint had done); a typed field of the heartbeat, not a metric.
        evaluated_step: an evaluator: the checkpoint step its latest evaluation was of (with its
            ``eval_*`` metrics); a typed field of the heartbeat, not a metric.
        **metrics: any other numbers (e.g. ``accuracy=0.93``, ``steps_per_second=12.5``);
            they land in summary.json.

    Raises:
        InjectedFault: when a ``raise@step=N`` fault of this task fires (``--inject-fault``).
    """
    if strategy is not None:
        facts = strategy_facts(strategy)
        replicas_in_sync = facts.get(REPLICAS_IN_SYNC, replicas_in_sync) if replicas_in_sync is None \
            else replicas_in_sync
        cluster_workers = facts.get(CLUSTER_WORKERS, cluster_workers) if cluster_workers is None else cluster_workers
    for name, value in ((REPLICAS_IN_SYNC, replicas_in_sync), (CLUSTER_WORKERS, cluster_workers),
                        (GLOBAL_BATCH_SIZE, global_batch_size)):
        if value is not None:
            metrics[name] = int(value)
    _on_step(step)
    reporter = _get()
    if reporter is None:
        return
    from orchestrator.proto import supervisor_pb2 as pb  # protobuf: only once there is a reporter

    global _non_finite_sent
    first_nan = not _non_finite_sent and ((loss is not None and not math.isfinite(loss))
                                          or not all(math.isfinite(v) for v in metrics.values()))
    control = {name: int(value) for name, value in (("resumed_from_step", resumed_from_step),
                                                    ("evaluated_step", evaluated_step)) if value is not None}
    if first_nan and step is not None:
        control[NON_FINITE_STEP] = int(step)  # the supervisor names this step, not the one it sees first
    reporter.update(phase=pb.PHASE_TRAINING, step=step, loss=loss, epoch=epoch,
                    examples_per_second=examples_per_second, **control, **metrics)
    if first_nan:
        _non_finite_sent = True  # and it goes out at once
        reporter.flush()


def training_finished(step: int | None = None, loss: float | None = None, **metrics: float) -> None:
    """Say training ended and post-training work (evaluation, export) is under way: phase
    ``finishing``, sent at once. The supervisor never counts that work as a training stall and
    never re-runs finished training when it fails.

    Args:
        step: global training steps completed.
        loss: final training loss.
        **metrics: any other numbers (e.g. ``accuracy=0.93``); they land in summary.json.
    """
    reporter = _get()
    if reporter is None:
        return
    from orchestrator.proto import supervisor_pb2 as pb  # protobuf: only once there is a reporter

    reporter.update(phase=pb.PHASE_FINISHING, step=step, loss=loss, **metrics)
    reporter.flush()  # before what follows (TF's teardown, an export) holds the GIL and pauses the heartbeats


def done(**metrics: float) -> None:
    """Say the task finished its work (optional: exit 0 says it too), with final metrics."""
    reporter = _get()
    if reporter is not None:
        from orchestrator.proto import supervisor_pb2 as pb  # protobuf: only once there is a reporter

        reporter.update(phase=pb.PHASE_DONE, **metrics)
