"""The tf-keras callback behind :func:`orchestrator.client.keras_callback` (task side; imports tf_keras).

Imported only by :func:`orchestrator.client.keras_callback` when it is called, so
``import orchestrator.client`` stays free of TensorFlow.
"""

from __future__ import annotations

import time

import tf_keras as keras
from tf_keras.src.utils import tf_utils

from orchestrator.task.reporting import report


class ReportCallback(keras.callbacks.Callback):
    """Reports step, epoch, loss and examples/s through :func:`orchestrator.client.report`.

    Args:
        interval_s: least seconds between two loss fetches (RemoteValues under PSS).
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        super().__init__()
        self._interval_s = interval_s
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
        if now - self._last[0] < self._interval_s:
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

