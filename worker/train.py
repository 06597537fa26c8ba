"""The built-in training program of chief, worker and evaluator tasks.

Strategies (``ORCH_STRATEGY``):

* ``mirrored``: one task, ``replicas`` logical CPU devices
  (``tf.config.set_logical_device_configuration``), synchronous gradient averaging.
* ``multi_worker_mirrored``: every chief/worker trains (all-reduce); DATA/FILE sharding.
* ``parameter_server``: the chief runs the ``ClusterCoordinator``; workers and ps only
  serve (:func:`ps.server.serve`).

Loops (``training.loop``): ``fit`` (tf-keras ``Model.fit`` with ``BackupAndRestore``) or
``custom`` (``strategy.run`` + ``strategy.reduce``; ``ClusterCoordinator.schedule`` with
per-worker datasets under PSS; a ``tf.train.CheckpointManager`` per epoch). Both resume
from the job's backup directory after a restart and report the mean loss per epoch.

When training ends every training task reports phase ``finishing`` at once; then the
chief evaluates test accuracy on a plain copy of the trained weights and exports a
SavedModel; under MWMS every worker must call ``save`` (collectives), so non-chief workers
save into their own scratch directory and delete it (TF multi-worker guide). The chief
also writes per-epoch weight checkpoints (``checkpoints/ckpt-<epoch>``) that the sidecar
evaluator follows, and TensorBoard logs (``tensorboard/``).
"""

from __future__ import annotations

import math
import os
import shutil
import time

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.task.runtime import restore_sigterm
from ps.server import configure_threads, serve
from worker import data as datasets
from worker.progress import Progress


def train(context, reporter) -> None:
    """Run this task's part of the job. Raises whatever TensorFlow raises."""
    if context.strategy == "parameter_server" and context.task_type in ("worker", "ps"):
        serve(context, reporter)
        return
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    configure_threads(tf)
    options = dict(context.training)
    seed = int(options.get("seed", 0))
    keras.utils.set_random_seed(seed)
    if context.task_type == "evaluator":
        _evaluate_sidecar(context, reporter, tf, keras, datasets.load(options.get("data"), seed), options)
        return
    Job(context, reporter, tf, keras, options).run()


class Job:
    """One task's training run (chief or worker)."""

    def __init__(self, context, reporter, tf, keras, options) -> None:
        self.context, self.reporter, self.tf, self.keras = context, reporter, tf, keras
        self.seed = int(options.get("seed", 0))
        self.epochs = int(options.get("epochs", 10))
        self.per_replica = int(options.get("batch_size_per_replica", 16))
        self.learning_rate = float(options.get("learning_rate", 0.005))
        self.loop = options.get("loop", "fit")
        # the strategy first: MWMS and logical devices must be set before TF's runtime starts,
        # and reading TFRecord files starts it
        self.strategy = self._strategy(int(options.get("replicas", 2)))
        self.data = data = datasets.load(options.get("data"), self.seed)
        self.replicas = self.strategy.num_replicas_in_sync
        self.global_batch = self.per_replica * self.replicas
        self.steps_per_epoch = int(options.get("steps_per_epoch") or math.ceil(data.num_train / self.global_batch))
        self.is_chief = context.is_chief or context.strategy == "mirrored"
        run_dir = context.run_dir or context.task_dir
        self.backup_dir = context.backup_dir or os.path.join(context.task_dir, "backup")
        self.checkpoint_dir = os.path.join(run_dir, "checkpoints")
        self.tensorboard_dir = os.path.join(run_dir, "tensorboard")
        self.progress = Progress(reporter, self.global_batch, context.heartbeat_interval_s)

    def _strategy(self, replicas: int):
        tf, strategy_name = self.tf, self.context.strategy
        if strategy_name == "mirrored":
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
            return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.reporter.release_port()
        if strategy_name == "parameter_server":
            strategy = tf.distribute.ParameterServerStrategy(resolver)
        else:
            strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
        restore_sigterm()  # TF's preemption notifier caught SIGTERM: stops must stay prompt
        return strategy

    def _scratch(self, name: str) -> str:
        """The chief's real directory, or this worker's own scratch one (TF multi-worker guide)."""
        real = {"backup": self.backup_dir, "checkpoints": self.checkpoint_dir, "tensorboard": self.tensorboard_dir}[name]
        if self.is_chief:
            return real
        return os.path.join(self.context.task_dir or ".", f"scratch-{name}")

    def run(self) -> None:
        ctx = self.context
        print(
            f"{ctx.name}: {type(self.strategy).__name__}, {self.replicas} replica(s) in sync, per-replica batch "
            f"{self.per_replica}, global batch {self.global_batch}, {self.steps_per_epoch} steps/epoch, {self.epochs} "
            f"epochs, {self.loop} loop, data {self.data.source}: {self.data.num_train} train examples, "
            f"{self.data.num_features} features, {self.data.num_classes} classes",
            flush=True,
        )
        self.reporter.update(
            message="building model",
            global_batch_size=self.global_batch,
            batch_size_per_replica=self.per_replica,
            replicas=self.replicas,
            steps_per_epoch=self.steps_per_epoch,
            epochs=self.epochs,
        )
        with self.strategy.scope():
            model = self._build(compile=self.loop == "fit")
        if self.loop == "fit":
            final_loss = self._fit(model)
        elif ctx.strategy == "parameter_server":
            final_loss = self._custom_pss(model)
        else:
            final_loss = self._custom_sync(model)
        # training ended: what follows (evaluation, export) is never a training stall, and a
        # failure in it must not re-run the training
        self.reporter.update(phase=pb.PHASE_FINISHING, message="training finished",
                             step=self.progress.step_now or None, loss=final_loss)
        self._finish(model, final_loss)

    def _build(self, compile: bool = True):
        from worker.model import build_model

        return build_model(self.keras, self.learning_rate, self.seed, self.data.num_features, self.data.num_classes,
                           compile=compile)

    def _dataset(self, shuffle_seed: int | None):
        """The training dataset (global batches) and its auto-shard policy across the
        MWMS input pipelines (one per chief / worker task)."""
        cluster = self.context.tf_config.get("cluster", {})
        pipelines = len(cluster.get("chief", [])) + len(cluster.get("worker", [])) or 1
        return datasets.train_dataset(self.tf, self.data, self.global_batch, shuffle_seed, pipelines)

    # -- Model.fit ---------------------------------------------------------------------
    def _fit(self, model) -> float | None:
        keras = self.keras
        from worker.callbacks import HeartbeatCallback

        if self.context.strategy == "parameter_server":
            data = keras.utils.experimental.DatasetCreator(self._pss_dataset_fn)
            self._log_policy(None)
        else:
            data, policy = self._dataset(self.seed)
            self._log_policy(policy)
        callbacks = [
            keras.callbacks.BackupAndRestore(backup_dir=self.backup_dir),
            HeartbeatCallback(self.progress, self.steps_per_epoch),
            keras.callbacks.ModelCheckpoint(os.path.join(self._scratch("checkpoints"), "ckpt-{epoch}"),
                                            save_weights_only=True),
            keras.callbacks.TensorBoard(log_dir=self._scratch("tensorboard"), update_freq="epoch"),
        ]
        history = model.fit(data, epochs=self.epochs, steps_per_epoch=self.steps_per_epoch, callbacks=callbacks,
                            verbose=2)
        losses = history.history.get("loss") or []
        return float(losses[-1]) if losses else self.progress.loss

    def _pss_dataset_fn(self, input_context=None):
        """A PSS worker's dataset. Under ParameterServerStrategy every worker reads the whole
        data set (its input context is always pipeline 0 of 1) with its own shuffle order
        (TF parameter-server tutorial), so the shuffle is not seeded here."""
        ds, _ = self._dataset(shuffle_seed=None)
        return ds

    def context_workers(self) -> int:
        return len(self.context.tf_config.get("cluster", {}).get("worker", [])) or 1

    def _log_policy(self, policy: str | None) -> None:
        """Say in the log how the training data is split across workers."""
        if self.context.strategy == "mirrored":
            return
        if policy is None:
            text = "not sharded: every PSS worker reads the whole dataset in its own shuffle order"
        else:
            files = len(self.data.train_files)
            why = f"{files} train files for {self.context_workers()} worker(s)" if files else "in-memory data"
            text = f"sharded by {policy} ({why})"
        print(f"{self.context.name}: dataset {text}", flush=True)
        self.reporter.update(message=f"dataset {text}")

    # -- custom loops ------------------------------------------------------------------
    def _custom_parts(self, model):
        tf, keras = self.tf, self.keras
        with self.strategy.scope():
            optimizer = keras.optimizers.Adam(learning_rate=self.learning_rate)
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
            epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var)
        return optimizer, loss_fn, epoch_var, checkpoint

    def _step_fn(self, model, optimizer, loss_fn, global_batch: int):
        tf = self.tf

        def step_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return step_fn

    def _train_step(self, model, optimizer, loss_fn):
        """``train_step(iterator)``: one step on every replica, the loss summed across them."""
        tf, strategy = self.tf, self.strategy
        step_fn = self._step_fn(model, optimizer, loss_fn, self.global_batch)

        @tf.function
        def train_step(it):
            x, y = next(it)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(x, y)), axis=None)

        return train_step

    def _custom_sync(self, model) -> float | None:
        """Mirrored / MWMS: ``strategy.run`` per step, ``strategy.reduce`` of the replica losses."""
        tf, strategy = self.tf, self.strategy
        optimizer, loss_fn, epoch_var, checkpoint = self._custom_parts(model)
        manager = tf.train.CheckpointManager(checkpoint, self._scratch("backup"), max_to_keep=1)
        restored = tf.train.latest_checkpoint(self.backup_dir)  # every worker reads the chief's copy
        if restored:
            checkpoint.restore(restored)
        start_epoch = int(epoch_var.numpy())
        ds, policy = self._dataset(self.seed)
        self._log_policy(policy)
        iterator = iter(strategy.experimental_distribute_dataset(ds))
        train_step = self._train_step(model, optimizer, loss_fn)

        self.progress.begin(start_epoch * self.steps_per_epoch)
        mean = None
        for epoch in range(start_epoch, self.epochs):
            total = 0.0
            for i in range(self.steps_per_epoch):
                loss = train_step(iterator)
                total += float(loss)
                self.progress.step(epoch * self.steps_per_epoch + i + 1, float(loss))
            mean = total / self.steps_per_epoch
            epoch_var.assign(epoch + 1)
            manager.save()
            print(f"epoch {epoch + 1}/{self.epochs}: mean loss {mean:.4f}", flush=True)
            self.progress.report(mean, epoch=epoch + 1)
        if not self.is_chief:
            shutil.rmtree(self._scratch("backup"), ignore_errors=True)
        return mean

    def _custom_pss(self, model) -> float | None:
        """PSS: the coordinator schedules steps on workers with per-worker datasets."""
        tf, strategy = self.tf, self.strategy
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        optimizer, loss_fn, epoch_var, checkpoint = self._custom_parts(model)
        manager = tf.train.CheckpointManager(checkpoint, self.backup_dir, max_to_keep=1)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint)
        start_epoch = int(epoch_var.numpy())
        self._log_policy(None)
        iterator = iter(coordinator.create_per_worker_dataset(self._pss_dataset_fn))
        train_step = self._train_step(model, optimizer, loss_fn)

        self.progress.begin(start_epoch * self.steps_per_epoch)
        mean = None
        for epoch in range(start_epoch, self.epochs):
            results = []
            for i in range(self.steps_per_epoch):
                results.append(coordinator.schedule(train_step, args=(iterator,)))
                self.progress.step(epoch * self.steps_per_epoch + i + 1)
            coordinator.join()
            mean = sum(float(r.fetch()) for r in results) / len(results)
            epoch_var.assign(epoch + 1)
            manager.save()
            print(f"epoch {epoch + 1}/{self.epochs}: mean loss {mean:.4f}", flush=True)
            self.progress.report(mean, epoch=epoch + 1)
        return mean

    # -- the end -----------------------------------------------------------------------
    def _finish(self, model, final_loss: float | None) -> None:
        ctx = self.context
        if self.is_chief:
            self.reporter.update(phase=pb.PHASE_EVALUATING, message="evaluating on the test split")
            plain = self._build()
            plain.set_weights(model.get_weights())
            x_test, y_test = self.data.test_arrays
            test_loss, test_accuracy = plain.evaluate(x_test, y_test, batch_size=256, verbose=0)
            print(f"{ctx.name}: test accuracy {test_accuracy:.4f}, test loss {test_loss:.4f}", flush=True)
            self.reporter.update(test_accuracy=test_accuracy, test_loss=test_loss)
        if final_loss is not None:
            self.reporter.update(final_loss=final_loss)
        self.reporter.update(phase=pb.PHASE_SAVING, message="saving the model", loss=final_loss)
        started = time.monotonic()
        if self.is_chief or ctx.strategy == "parameter_server":
            target = ctx.model_dir or os.path.join(ctx.task_dir, "model")
            model.save(target)
            print(f"{ctx.name}: SavedModel written to {target} in {time.monotonic() - started:.1f} s", flush=True)
        else:
            target = os.path.join(ctx.task_dir or ".", "scratch-model")
            model.save(target)
            shutil.rmtree(target, ignore_errors=True)
            print(f"{ctx.name}: saved into its scratch directory (MWMS: every worker saves) in "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            for name in ("checkpoints", "tensorboard"):
                shutil.rmtree(self._scratch(name), ignore_errors=True)


def _evaluate_sidecar(context, reporter, tf, keras, data, options) -> None:
    """Follow the chief's per-epoch checkpoints and evaluate each on the test split
    (``tf_keras.utils.SidecarEvaluator``); ends after the last epoch's checkpoint."""
    from worker.callbacks import EvaluationCallback
    from worker.model import build_model

    model = build_model(keras, float(options.get("learning_rate", 0.005)), int(options.get("seed", 0)),
                        data.num_features, data.num_classes)
    x_test, y_test = data.test_arrays
    checkpoint_dir = os.path.join(context.run_dir or context.task_dir, "checkpoints")
    os.makedirs(checkpoint_dir, exist_ok=True)
    reporter.update(phase=pb.PHASE_EVALUATING, message=f"waiting for checkpoints in {checkpoint_dir}")
    print(f"{context.name}: following checkpoints in {checkpoint_dir}", flush=True)
    evaluator = keras.utils.SidecarEvaluator(
        model,
        data=tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(256),
        checkpoint_dir=checkpoint_dir,
        max_evaluations=int(options.get("epochs", 10)),
        callbacks=[EvaluationCallback(reporter)],
    )
    evaluator.start()
