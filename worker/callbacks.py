"""tf-keras callbacks that feed the heartbeat stream."""

from __future__ import annotations

import os

import tf_keras as keras
from tf_keras.src.utils import tf_utils

from worker.progress import mark


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

    def on_train_begin(self, logs=None) -> None:
        mark("fit")

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None) -> None:
        if not self._begun:  # the first batch tells where BackupAndRestore resumed (mid-epoch too)
            self._begun = True
            self._progress.begin(self._epoch * self._steps_per_epoch + int(batch))
        self._progress.step(self._epoch * self._steps_per_epoch + int(batch) + 1, lambda: _loss(logs))

    def on_epoch_end(self, epoch, logs=None) -> None:
        # sent before the backup callback (after this one) saves the epoch: a notice during that save
        # exits at once (PSS: nothing to checkpoint), and the step saved must have been said first
        self._progress.report(_loss(logs), epoch=epoch + 1, flush=True)

    def on_train_end(self, logs=None) -> None:
        """Training ended: say ``finishing`` now and wait (<= 1 s) until it went out. What ``fit``
        does next, TF's teardown of its traced functions (a PSS coordinator removes them from
        every worker), can hold the GIL for seconds on a loaded machine, and the heartbeats with it."""
        self._progress.finished()


class PreemptionBackupAndRestore(keras.callbacks.BackupAndRestore):
    """tf-keras ``BackupAndRestore(save_before_preemption=True)`` that works on any platform.

    tf-keras turns ``save_before_preemption`` on only on Google Cloud under MWMS
    (``distributed_file_utils.support_on_demand_checkpoint_callback``); elsewhere it is
    silently off. This callback does what ``WorkerTrainingState`` does there, here too
    (MirroredStrategy and MWMS): it creates TF's
    ``tf.distribute.experimental.PreemptionCheckpointHandler`` on the callback's own checkpoint
    managers, with ``termination_config`` (SIGTERM is the notice, no grace period, our
    ``exit_fn``), and ``BackupAndRestore.on_train_batch_end`` then checks for a preemption
    after every batch: the whole cluster saves ``(model, optimizer, epoch, batch)`` at the next
    step and runs ``exit_fn``. After a restart ``fit`` resumes at the batch after the saved one.

    Args:
        backup_dir: the job's backup directory (shared by every worker).
        save_freq: ``"epoch"``, or save every this many batches as well.
        termination_config: ``termination_config(cleanup)`` -> a
            ``tf.distribute.experimental.TerminationConfig`` whose ``exit_fn`` calls
            ``cleanup()`` first.
        batch_facts: elastic workers under ``keep-per-replica``: ``(global batch, steps per epoch)``
            now; a checkpoint of another global batch is continued at the index that has seen the
            same examples (:func:`worker.elastic.converted_position`). None: as restored.
        chief: this task writes the backup (it records ``batch_facts`` beside it).
    """

    def __init__(self, backup_dir: str, save_freq, termination_config, batch_facts=None, chief: bool = False) -> None:
        super().__init__(backup_dir, save_freq=save_freq, save_before_preemption=True)
        self._termination_config = termination_config
        self._batch_facts = batch_facts  # keep-per-replica elastic workers: (global batch, steps/epoch) now
        self._facts_written = not chief  # the chief records them, once

    def on_train_begin(self, logs=None) -> None:
        self._remove_temp_dir()  # before tf-keras makes its managers: a non-chief must restore the chief's state
        super().on_train_begin(logs)  # restores (model, epoch, batch) from the chief's backup
        mark("restored")
        state = self._training_state
        self._install_handler(state)
        if self._batch_facts is not None:  # after the handler: making it restores the checkpoint again
            self._convert_position(state)

    def _remove_temp_dir(self) -> None:
        """Removes this non-chief worker's temp checkpoint directory (``backup/workertemp_<i>``).

        A non-chief saves its copy there (every worker takes part in a save under MWMS; only the
        chief's is kept: tf-keras ``distributed_file_utils.write_dirpath``), and TF's
        ``PreemptionCheckpointHandler`` restores a non-chief from its *write* manager. tf-keras never
        removes the directory (its ``back_up`` passes the temp directory itself to
        ``remove_temp_dirpath``, which removes ``workertemp_<i>/workertemp_<i>``), so an attempt
        after a restart found the last one's copy: a step other than the chief's (replicas
        that diverge silently), or, after a SIGKILL during a save, a ``checkpoint`` file that names
        files never written (``NotFoundError`` at the restart). The chief's directory is kept.
        """
        import tensorflow as tf
        from tf_keras.src.distribute import distributed_file_utils

        path = distributed_file_utils.write_dirpath(self.backup_dir, self.model.distribute_strategy)
        if os.path.normpath(path) != os.path.normpath(self.backup_dir):
            try:
                tf.io.gfile.rmtree(path)
            except tf.errors.NotFoundError:
                pass

    def _install_handler(self, state) -> None:
        """TF's ``PreemptionCheckpointHandler`` on the callback's checkpoint managers (not on Google
        Cloud, where tf-keras made its own)."""
        if state._enable_save_before_preemption:
            return  # Google Cloud: tf-keras made its own handler
        import tensorflow as tf

        strategy = self.model.distribute_strategy
        writer = state.write_checkpoint_manager
        cleanup = self._remove_temp_dir
        handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, writer, termination_config=self._termination_config(cleanup))
        handler._read_checkpoint_manager = state.read_checkpoint_manager  # as worker_training_state.py does
        handler._run_counter = 0  # its step count must agree on every worker; they all start here
        state.preemption_handler = handler
        state._enable_save_before_preemption = True  # backup_if_preempted() and batch-level resume
        self.model._preemption_handler = handler
        from orchestrator.task.sigterm import route_sigterm

        route_sigterm()  # the orchestrator's own SIGTERM before TF's handler

    def _convert_position(self, state) -> None:
        """Elastic workers under keep-per-replica resumed at another size: the restored (epoch,
        batch) index counted in the old global batch becomes the index that has seen the same
        examples (:func:`worker.elastic.converted_position`)."""
        from worker.elastic import converted_position, read_saved_facts

        before = read_saved_facts(self.backup_dir)
        epoch, batch = int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())
        if before is None or before == tuple(self._batch_facts) or epoch < 0:
            return
        if batch < 0:  # an epoch-end save: every batch of it done
            batch = before[1] - 1
        new_epoch, new_batch = converted_position(epoch, batch, before, tuple(self._batch_facts))
        state._ckpt_saved_epoch.assign(new_epoch)
        state._ckpt_saved_batch.assign(new_batch)
        print(f"elastic: the checkpoint at epoch {epoch} batch {batch} (global batch {before[0]}) continues at "
              f"epoch {new_epoch} batch {new_batch} (global batch {self._batch_facts[0]}): the same examples seen",
              flush=True)

    def on_train_batch_end(self, batch, logs=None) -> None:
        super().on_train_batch_end(batch, logs)
        if self._batch_facts is not None and not self._facts_written:
            # after the first step every worker is past its restore (the step's all-reduce waited for them)
            self._facts_written = True
            from worker.elastic import write_saved_facts

            write_saved_facts(self.backup_dir, *self._batch_facts)


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
        print(f"evaluated checkpoint at step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
              flush=True)
