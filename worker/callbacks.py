"""tf-keras callbacks that feed the heartbeat stream."""

from __future__ import annotations

import tf_keras as keras
from tf_keras.src.utils import tf_utils


def _loss(logs) -> float | None:
    if logs is None:
        return None
    logs = tf_utils.sync_to_numpy_or_python_type(logs)  # a RemoteValue under PSS
    return float(logs["loss"]) if isinstance(logs, dict) and "loss" in logs else None


class HeartbeatCallback(keras.callbacks.Callback):
    """Reports training progress through a :class:`worker.progress.Progress`.

    Batch-level logs are fetched only when a report is due: under ParameterServerStrategy
    they are ``RemoteValue`` s, and fetching each one would serialize the asynchronous
    workers behind the coordinator.

    Args:
        progress: the task's progress reporter.
        steps_per_epoch: training steps per epoch.
    """

    def __init__(self, progress, steps_per_epoch: int) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self._progress = progress
        self._steps_per_epoch = steps_per_epoch
        self._epoch = 0
        self._begun = False

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None) -> None:
        if not self._begun:  # the first batch tells where BackupAndRestore resumed
            self._begun = True
            self._progress.begin(self._epoch * self._steps_per_epoch)
        self._progress.step(self._epoch * self._steps_per_epoch + int(batch) + 1, lambda: _loss(logs))

    def on_epoch_end(self, epoch, logs=None) -> None:
        self._progress.report(_loss(logs), epoch=epoch + 1)


class EvaluationCallback(keras.callbacks.Callback):
    """Reports the metrics of each evaluation of the sidecar evaluator."""

    def __init__(self, reporter) -> None:
        super().__init__()
        self._reporter = reporter

    def on_test_end(self, logs=None) -> None:
        logs = tf_utils.sync_to_numpy_or_python_type(logs or {})
        step = int(self.model.optimizer.iterations.numpy()) if self.model.optimizer is not None else None
        metrics = {f"eval_{k}": float(v) for k, v in logs.items()}
        self._reporter.update(step=step, message=f"evaluated checkpoint at step {step}", evaluated_step=step, **metrics)
        print(f"evaluated checkpoint at step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
