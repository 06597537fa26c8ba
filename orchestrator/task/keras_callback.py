"""The tf-keras callback behind :func:`orchestrator.client.keras_callback` (task side; imports tf_keras).

Imported only by :func:`orchestrator.client.keras_callback` when it is called, so
``import orchestrator.client`` stays free of TensorFlow.
"""

from __future__ import annotations

import time

import tf_keras as keras
from tf_keras.src.utils import tf_utils

from orchestrator.task import reporting
from orchestrator.task.formed import strategy_facts


def _loss(logs) -> float | None:
    return float(logs["loss"]) if isinstance(logs, dict) and logs.get("loss") is not None else None


class ReportCallback(keras.callbacks.Callback):
    """Reports step, epoch, loss and throughput through :func:`orchestrator.client.report`.

    The global step is a running count of the batches done: ``on_train_batch_end`` gets the
    index of the last batch of what ran (with ``steps_per_execution`` > 1 the index jumps by
    that many), counted from 0 in each epoch, so each call adds the batches since the last
    one. After a ``BackupAndRestore`` resume it starts from ``initial epoch x steps`` when
    ``fit`` knows its steps per epoch, else from 0, and reports ``resumed_from_step``: where
    ``fit`` really resumed, the initial epoch's steps plus the index of its first batch (a
    ``save_freq=N`` backup resumes inside an epoch: ``fit`` passes that index to
    ``on_train_batch_begin``).

    When training begins it reports what the model's strategy formed (``replicas_in_sync``,
    ``cluster_workers``: :func:`orchestrator.task.formed.strategy_facts`) and the global
    batch size when it knows one.

    Args:
        interval_s: least seconds between two loss fetches (RemoteValues under PSS).
        batch_size: global batch size (examples per step) for examples/s; default
            ``params["batch_size"]`` when ``fit`` has one. Without either, a
            ``steps_per_second`` metric is reported instead.
    """

    def __init__(self, interval_s: float = 1.0, batch_size: int | None = None) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._batch_size = batch_size
        self._supports_tf_logs = True  # fetch logs only when due (RemoteValues under PSS)
        self._epoch = 0
        self._step = 0  # global steps done
        self._epoch_batches = 0  # batches done in the current epoch
        self._begun = False
        self._resume_pending = False  # the first batch of this fit is still to come
        self._last = (time.monotonic(), 0)

    def _global_batch(self) -> int | None:
        if self._batch_size:
            return int(self._batch_size)
        size = (self.params or {}).get("batch_size")
        return int(size) if size else None

    def _throughput(self, now: float) -> dict:
        """examples/s (or steps/s when the batch size is unknown) since the last report."""
        last_time, last_step = self._last
        self._last = (now, self._step)
        if self._step <= last_step or now <= last_time:
            return {}
        steps_per_s = (self._step - last_step) / (now - last_time)
        batch = self._global_batch()
        if batch:
            return {"examples_per_second": steps_per_s * batch}
        return {"steps_per_second": steps_per_s}

    def _formed(self) -> dict:
        """What the model's strategy formed, and the global batch when known."""
        model = getattr(self, "model", None)
        facts: dict = strategy_facts(getattr(model, "distribute_strategy", None)) if model is not None else {}
        batch = self._global_batch()
        if batch:
            facts["global_batch_size"] = batch
        return facts

    def on_train_begin(self, logs=None):
        self._begun = False
        self._resume_pending = True
        self._step, self._epoch_batches = 0, 0
        self._last = (time.monotonic(), 0)
        # phase training, sent at once: a hang in the first steps is a stall
        reporting.report(step=0, **self._formed())

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_batches = 0
        if not self._begun:  # the first epoch tells where BackupAndRestore resumed
            self._begun = True
            steps = (self.params or {}).get("steps")
            if epoch and steps:
                self._step = epoch * int(steps)
                self._last = (time.monotonic(), self._step)

    def on_train_batch_begin(self, batch, logs=None):
        if not self._resume_pending:
            return
        self._resume_pending = False
        # fit's first batch index after a mid-epoch BackupAndRestore (save_freq=N) is the
        # number of batches of this epoch the backup had done
        resumed = self._step + int(batch)
        if resumed:
            self._step, self._epoch_batches = resumed, int(batch)
            self._last = (time.monotonic(), self._step)
            reporting.report(step=resumed, resumed_from_step=resumed)

    def on_train_batch_end(self, batch, logs=None):
        done = int(batch) + 1
        self._step += max(done - self._epoch_batches, 0)
        self._epoch_batches = max(done, self._epoch_batches)
        now = time.monotonic()
        if now - self._last[0] < self._interval_s:
            reporting._on_step(self._step)  # injected step faults fire at their step, not when due
            return
        logs = tf_utils.sync_to_numpy_or_python_type(logs or {})
        reporting.report(step=self._step, loss=_loss(logs), **self._throughput(now))

    def on_epoch_end(self, epoch, logs=None):
        logs = tf_utils.sync_to_numpy_or_python_type(logs or {})
        extra = {k: float(v) for k, v in logs.items() if k != "loss" and v is not None}
        reporting.report(step=self._step, epoch=epoch + 1, loss=_loss(logs), **extra)

    def on_train_end(self, logs=None):
        logs = tf_utils.sync_to_numpy_or_python_type(logs or {})
        extra = {k: float(v) for k, v in logs.items() if k != "loss" and v is not None}
        reporting.training_finished(step=self._step, loss=_loss(logs), **extra)
