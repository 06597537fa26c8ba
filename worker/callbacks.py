"""A tf-keras callback that feeds training progress into the heartbeat stream."""

from __future__ import annotations

import time

import tf_keras as keras
from tf_keras.src.utils import tf_utils

from orchestrator.faults import FaultInjector
from orchestrator.proto import supervisor_pb2 as pb


class HeartbeatCallback(keras.callbacks.Callback):
    """Reports step, epoch, loss and examples/s to a ``HeartbeatReporter``.

    Batch-level logs are fetched at most once per heartbeat interval: under
    ParameterServerStrategy they are ``RemoteValue`` s, and fetching each one would
    serialize the asynchronous workers behind the coordinator.

    Args:
        reporter: the task's heartbeat reporter.
        steps_per_epoch: training steps per epoch.
        global_batch_size: examples per step across the replicas in sync.
        interval_s: seconds between two loss fetches.
    """

    def __init__(self, reporter, steps_per_epoch: int, global_batch_size: int, interval_s: float = 1.0) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self._reporter = reporter
        self._steps_per_epoch = steps_per_epoch
        self._global_batch_size = global_batch_size
        self._interval_s = interval_s
        self._epoch = 0
        self._last_time = 0.0
        self._last_step = 0
        self.resumed_from_step: int | None = None
        self.last_step = 0
        self.last_loss: float | None = None
        self._faults = FaultInjector.from_env()

    def on_train_begin(self, logs=None) -> None:
        self._last_time = time.monotonic()
        self._reporter.update(phase=pb.PHASE_TRAINING, message="training")

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None) -> None:
        step = self._epoch * self._steps_per_epoch + int(batch) + 1
        if self.resumed_from_step is None:
            self.resumed_from_step = self._epoch * self._steps_per_epoch
            self._last_step = self.resumed_from_step
            if self.resumed_from_step:
                self._reporter.update(resumed_from_step=self.resumed_from_step)
                print(f"resumed from step {self.resumed_from_step} (epoch {self._epoch})", flush=True)
        self.last_step = step
        self._faults.on_step(step)
        now = time.monotonic()
        if now - self._last_time < self._interval_s:
            return
        self._report(step, now, logs)

    def on_epoch_end(self, epoch, logs=None) -> None:
        self._report(self.last_step, time.monotonic(), logs, epoch=epoch + 1)

    def _report(self, step: int, now: float, logs, epoch: int | None = None) -> None:
        loss = None
        if logs is not None:
            logs = tf_utils.sync_to_numpy_or_python_type(logs)  # a RemoteValue under PSS
        if isinstance(logs, dict) and "loss" in logs:
            loss = float(logs["loss"])
            self.last_loss = loss
        elapsed = now - self._last_time
        rate = None
        if step > self._last_step and elapsed > 0:  # an epoch end right after a batch report adds no rate
            rate = (step - self._last_step) * self._global_batch_size / elapsed
            self._last_time, self._last_step = now, step
        self._reporter.update(step=step, epoch=epoch, loss=loss, examples_per_second=rate)
