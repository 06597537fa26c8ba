"""Progress reporting for your own training program: ``report()`` and a Keras callback.

A program launched with ``python -m orchestrator launch ... -- python train.py`` runs in
every task with ``TF_CONFIG`` set; the orchestrator watches its process (alive, CPU, RSS)
without any change to it. To show steps, loss and metrics in the live view and in
``summary.json`` (and to get stall detection), opt in::

    from orchestrator.client import report, keras_callback

    model.fit(..., callbacks=[keras_callback()])          # tf-keras
    report(step=step, loss=float(loss), accuracy=acc)     # or from any loop

Outside an orchestrated task (no ``ORCH_HEALTH_ADDRESS``) both are no-ops, so the same
script still runs by hand. This module does not import TensorFlow until
:func:`keras_callback` is called.
"""

from __future__ import annotations

import atexit
import os
import threading

from orchestrator import env

_lock = threading.Lock()
_reporter = None
_started = False


def _get():
    global _reporter, _started
    with _lock:
        if not _started:
            _started = True
            if os.environ.get(env.HEALTH_ADDRESS) and os.environ.get("TF_CONFIG"):
                from orchestrator.health.client import HeartbeatReporter
                from orchestrator.runtime import TaskContext

                context = TaskContext.from_env()
                _reporter = HeartbeatReporter.from_context(context)
                if os.getppid() != context.orchestrator_pid:  # a child of the task: no watchdog
                    _reporter._orchestrator_pid = 0
                _reporter.start()
                atexit.register(_reporter.close)
        return _reporter


def report(step: int | None = None, loss: float | None = None, *, epoch: int | None = None,
           examples_per_second: float | None = None, **metrics: float) -> None:
    """Report training progress of this task (thread-safe, cheap: sent with the next heartbeat).

    Args:
        step: global training steps completed.
        loss: latest training loss.
        epoch: epochs completed.
        examples_per_second: throughput of this task.
        **metrics: any other numbers (e.g. ``accuracy=0.93``); they land in summary.json.
    """
    from orchestrator.proto import supervisor_pb2 as pb

    reporter = _get()
    if reporter is None:
        return
    reporter.update(phase=pb.PHASE_TRAINING, step=step, loss=loss, epoch=epoch,
                    examples_per_second=examples_per_second, **metrics)


def done(**metrics: float) -> None:
    """Say the task finished its work (optional: exit 0 says it too), with final metrics."""
    from orchestrator.proto import supervisor_pb2 as pb

    reporter = _get()
    if reporter is not None:
        reporter.update(phase=pb.PHASE_DONE, **metrics)


def keras_callback(interval_s: float = 1.0):
    """A tf-keras callback reporting step, epoch, loss and examples/s.

    It lives in the task-side package :mod:`worker.report_callback` (which imports tf_keras),
    so this module stays free of TensorFlow.

    Args:
        interval_s: least seconds between two loss fetches.
    """
    from worker.report_callback import ReportCallback

    return ReportCallback(interval_s)
