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
    """A tf-keras callback reporting step, epoch, loss and examples/s (imports tf_keras).

    Args:
        interval_s: least seconds between two loss fetches.
    """
    import tf_keras as keras
    from tf_keras.src.utils import tf_utils
    import time

    class ReportCallback(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True  # fetch logs only when due (RemoteValues under PSS)
            self._epoch = 0
            self._steps = None
            self._last = (time.monotonic(), 0)

        def on_train_begin(self, logs=None):
            self._steps = self.params.get("steps") or 0

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            step = self._epoch * (self._steps or 0) + int(batch) + 1
            now = time.monotonic()
            if now - self._last[0] < interval_s:
                return
            logs = tf_utils.sync_to_numpy_or_python_type(logs or {})
            batch_size = self.params.get("batch_size") or 0
            rate = (step - self._last[1]) * batch_size / (now - self._last[0]) if batch_size else None
            report(step=step, loss=float(logs["loss"]) if "loss" in logs else None, examples_per_second=rate)
            self._last = (now, step)

        def on_epoch_end(self, epoch, logs=None):
            logs = tf_utils.sync_to_numpy_or_python_type(logs or {})
            extra = {k: float(v) for k, v in logs.items() if k != "loss"}
            report(step=(epoch + 1) * (self._steps or 0) or None, epoch=epoch + 1,
                   loss=float(logs["loss"]) if "loss" in logs else None, **extra)

    return ReportCallback()
