"""The built-in training program of chief, worker and evaluator tasks.

Strategies (``ORCH_STRATEGY``):

* ``mirrored``: one task, ``replicas`` logical CPU devices
  (``tf.config.set_logical_device_configuration``), synchronous gradient averaging.
* ``multi_worker_mirrored``: every chief/worker trains (all-reduce); DATA/FILE sharding.
* ``parameter_server``: the chief runs the ``ClusterCoordinator``; workers and ps only
  serve (:func:`ps.server.serve`).

* ``hogwild``: one task, ``threads`` Python threads each run a compiled train step on one
  shared model and optimizer without locks (Hogwild!), each with its own shuffled stream.

GPUs (the devices of ``CUDA_VISIBLE_DEVICES``, which the orchestrator assigns per task): the
mirrored strategy mirrors over every visible GPU instead of logical CPUs; MWMS all-reduces with
NCCL on GPUs and ring on CPUs; hogwild runs one thread per GPU, each step traced under its
device (the tower pattern). A task given GPUs that TensorFlow cannot see says so on stderr.

Loops (``training.loop``): ``fit`` (tf-keras ``Model.fit`` with ``BackupAndRestore``) or
``custom`` (``strategy.run`` + ``strategy.reduce``; ``ClusterCoordinator.schedule`` with
per-worker datasets under PSS; a ``tf.train.CheckpointManager`` per epoch). Both resume
from the job's backup directory after a restart, at the global step of the checkpoint, and
report the mean loss per epoch. ``checkpoint_every`` adds a checkpoint every N steps.

Preemption (a SIGTERM from outside, :func:`orchestrator.task.runtime.route_sigterm`):
under MirroredStrategy and MWMS both loops save a checkpoint at the next step with TF's
``tf.distribute.experimental.PreemptionCheckpointHandler`` (the custom loop runs each step
through ``PreemptionCheckpointHandler.run``; ``fit`` through
:class:`worker.callbacks.PreemptionBackupAndRestore`), then exit with
:data:`orchestrator.env.PREEMPTED_EXIT_CODE`. TF has no such handler under
ParameterServerStrategy (``PreemptionCheckpointHandler`` raises ``NotImplementedError`` with a
ps in the cluster; ``BackupAndRestore`` skips batch hooks under PSS): there, and under hogwild,
a preempted task exits with that code at once.

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
import sys
import time

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.resources.pinning import pin_self
from orchestrator.task.formed import strategy_facts
from orchestrator.task.runtime import exit_preempted, route_sigterm
from ps.server import configure_threads, serve
from worker import data as datasets
from worker.loops import CustomLoops
from worker.peers import wait_for_coordination_leader, wait_for_servers
from worker.progress import Progress, mark

PEER_SAVE_TIMEOUT_S = 30.0
"""Bound on the wait, after a preemption checkpoint, for every trainer to confirm its save."""


LEAVE_TIMEOUT_S = 10.0
"""Bound on the leader's wait, once every trainer saved, for the others to have said their last word."""


class SaveBarrier:
    """The trainers' rendezvous after a preemption checkpoint, through the key-value store of
    TF's coordination service (``context.set_config_key_value`` / ``get_config_key_value``).

    The service runs inside its leader, the first trainer (``chief:0``, else ``worker:0``: TF's
    ``multi_worker_util.coordination_leader`` without a ps), so the leader leaves the rendezvous
    last: had it gone on to exit first, a peer still reading a key would fail with "Connection
    reset by peer" and exit without reporting its save. Both waits are bounded; a peer gone or
    late only costs a log line (the chief's checkpoint is what the restart resumes from). The
    heartbeats go on through them: this runs before the task's last report.

    Args:
        name: this trainer, ``worker-1``.
        peers: every trainer of the cluster, the leader first (``chief-0``, ``worker-0``, ...).
        attempt: the job attempt, so that keys of an earlier attempt never count.
    """

    def __init__(self, name: str, peers: list[str], attempt: int) -> None:
        from tensorflow.python.eager import context as tf_context

        self._ctx, self.name, self.peers = tf_context.context(), name, peers
        self._prefix = f"orchestrator/preemption/{attempt}"

    def meet(self, step: int | None) -> None:
        """Say this trainer saved after ``step`` and wait (:data:`PEER_SAVE_TIMEOUT_S`) until every
        trainer did; then the others say they are leaving, and the leader waits
        (:data:`LEAVE_TIMEOUT_S`) until they all did."""
        self._wait("saved", self.peers, PEER_SAVE_TIMEOUT_S, mine=str(step))
        if self.name == self.peers[0]:
            self._wait("leaving", self.peers[1:], LEAVE_TIMEOUT_S)
        else:
            self._wait("leaving", [], 0.0, mine="1")

    def _wait(self, what: str, names: list[str], timeout_s: float, mine: str | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        try:
            if mine is not None:
                self._ctx.set_config_key_value(f"{self._prefix}/{what}/{self.name}", mine)
            for name in names:
                left_ms = int(max(1.0, deadline - time.monotonic()) * 1000)
                self._ctx.get_config_key_value(f"{self._prefix}/{what}/{name}", timeout_in_ms=left_ms)
        except Exception as exc:  # noqa: BLE001 - a peer gone or late: exit anyway, the chief saved
            print(f"{self.name}: the trainers' rendezvous after the preemption save ({what}) did not complete: {exc}",
                  flush=True)


def train(context, reporter) -> None:
    """Run this task's part of the job. Raises whatever TensorFlow raises."""
    if context.strategy == "parameter_server" and context.task_type in ("worker", "ps"):
        serve(context, reporter)
        return
    mark("train")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    mark("imported")
    pin_self(all_threads=True)  # the task's cores (ORCH_CPUS), from here on: see orchestrator.resources.pinning
    configure_threads(tf)
    options = dict(context.training)
    seed = int(options.get("seed", 0))
    keras.utils.set_random_seed(seed)
    if context.task_type == "evaluator":
        _evaluate_sidecar(context, reporter, tf, keras, datasets.load(options.get("data"), seed), options)
        return
    Job(context, reporter, tf, keras, options).run()


class Job(CustomLoops):
    """One task's training run (chief or worker)."""

    def __init__(self, context, reporter, tf, keras, options) -> None:
        self.context, self.reporter, self.tf, self.keras = context, reporter, tf, keras
        self.seed = int(options.get("seed", 0))
        self.epochs = int(options.get("epochs", 10))
        self.per_replica = int(options.get("batch_size_per_replica", 16))
        self.learning_rate = float(options.get("learning_rate", 0.005))
        self.loop = options.get("loop", "fit")
        self.checkpoint_every = int(options.get("checkpoint_every") or 0) or None
        self.threads = int(options.get("threads") or 2)
        # the strategy first: MWMS and logical devices must be set before TF's runtime starts,
        # and reading TFRecord files starts it
        self.strategy = self._strategy(int(options.get("replicas", 2)))
        mark("strategy")
        self.data = data = datasets.load(options.get("data"), self.seed)
        mark("data")
        self.replicas = self.strategy.num_replicas_in_sync
        self.global_batch = self.per_replica * self.replicas
        self.steps_per_epoch = int(options.get("steps_per_epoch") or math.ceil(data.num_train / self.global_batch))
        self.is_chief = context.is_chief or context.strategy in ("mirrored", "hogwild")
        run_dir = context.run_dir or context.task_dir
        self.backup_dir = context.backup_dir or os.path.join(context.task_dir, "backup")
        self.checkpoint_dir = os.path.join(run_dir, "checkpoints")
        self.tensorboard_dir = os.path.join(run_dir, "tensorboard")
        self.progress = Progress(reporter, self.global_batch, context.heartbeat_interval_s)

    def _gpus(self) -> list:
        """The GPUs TensorFlow sees (those of ``CUDA_VISIBLE_DEVICES``: the orchestrator's
        placement); a warning when the orchestrator gave the task GPUs TensorFlow cannot see."""
        gpus = self.tf.config.list_physical_devices("GPU")
        given = self.context.gpus
        if given and len(gpus) < given:
            print(f"warning: {self.context.name} holds {given} GPU(s) but TensorFlow sees {len(gpus)}; "
                  "install TensorFlow with CUDA: pip install 'tensorflow[and-cuda]' (docs/gpus.md)",
                  file=sys.stderr, flush=True)
        return gpus

    def _strategy(self, replicas: int):
        tf, strategy_name = self.tf, self.context.strategy
        self.gpus = self._gpus()
        if strategy_name == "hogwild":
            route_sigterm()
            if self.gpus:  # one thread per GPU, each pinned to its device (the towers of the seed)
                self.threads = len(self.gpus)
            return tf.distribute.get_strategy()  # the default strategy: the threads share one model
        if strategy_name == "mirrored" and self.gpus:
            route_sigterm()
            return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(len(self.gpus))])  # every visible GPU
        if strategy_name == "mirrored":
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
            route_sigterm()
            return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.reporter.release_port()
        mark("port-released")
        if strategy_name == "multi_worker_mirrored":
            wait_for_coordination_leader(self.context.tf_config)
            mark("leader-up")
        if strategy_name == "parameter_server":
            from worker import rotation

            rotation.watch(tf, self.reporter)  # the coordinator's word on when a restarted worker trains again
            wait_for_servers(self.context.tf_config)  # not gRPC's 1 s reconnect backoff for a late peer
            mark("servers-up")
            strategy = tf.distribute.ParameterServerStrategy(resolver)
        else:
            # all-reduce over NCCL between GPUs, ring (gRPC) between CPUs (TF's CollectiveCommunication)
            implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if self.gpus
                              else tf.distribute.experimental.CommunicationImplementation.RING)
            options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
            strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                                 communication_options=options)
        route_sigterm()  # TF's preemption notifier caught SIGTERM: ours stay prompt, preemptions exit 143
        return strategy

    def _scratch(self, name: str) -> str:
        """The chief's real directory, or this worker's own scratch one (TF multi-worker guide)."""
        real = {"backup": self.backup_dir, "checkpoints": self.checkpoint_dir,
                "tensorboard": self.tensorboard_dir}[name]
        if self.is_chief:
            return real
        return os.path.join(self.context.task_dir or ".", f"scratch-{name}")

    def run(self) -> None:
        ctx = self.context
        print(
            f"{ctx.name}: {type(self.strategy).__name__}, {self.replicas} replica(s) in sync, per-replica batch "
            f"{self.per_replica}, global batch {self.global_batch}, {self.steps_per_epoch} steps/epoch, {self.epochs} "
            f"epochs, {self._loop_name()}, checkpoint {self._checkpoint_name()}, data {self.data.source}: "
            f"{self.data.num_train} train examples, "
            f"{self.data.num_features} features, {self.data.num_classes} classes",
            flush=True,
        )
        self.reporter.update(
            message="building model",
            global_batch_size=self.global_batch,
            batch_size_per_replica=self.per_replica,
            replicas=self.replicas,
            **strategy_facts(self.strategy),  # what it formed, compared with the plan (orchestrator.supervisor.formed)
            steps_per_epoch=self.steps_per_epoch,
            epochs=self.epochs,
        )
        with self.strategy.scope():
            model = self._build(compile=self.loop == "fit" and ctx.strategy != "hogwild",
                                local_logs=ctx.strategy == "multi_worker_mirrored")
        mark("model")
        if ctx.strategy == "hogwild":
            final_loss = self._hogwild(model)
        elif self.loop == "fit":
            final_loss = self._fit(model)
        elif ctx.strategy == "parameter_server":
            final_loss = self._custom_pss(model)
        else:
            final_loss = self._custom_sync(model)
        mark("trained")
        # training ended: what follows (evaluation, export) is never a training stall, and a
        # failure in it must not re-run the training
        self.reporter.update(phase=pb.PHASE_FINISHING, message="training finished",
                             step=self.progress.step_now or None, loss=final_loss)
        self._finish(model, final_loss)

    def _loop_name(self) -> str:
        return (f"hogwild loop with {self.threads} threads" if self.context.strategy == "hogwild"
                else f"{self.loop} loop")

    def _checkpoint_name(self) -> str:
        return f"every {self.checkpoint_every} steps and every epoch" if self.checkpoint_every else "every epoch"

    @property
    def preemption_supported(self) -> bool:
        """Whether TF's ``PreemptionCheckpointHandler`` works here: MirroredStrategy and MWMS
        (it raises ``NotImplementedError`` with a ps in the cluster)."""
        return self.context.strategy in ("mirrored", "multi_worker_mirrored")

    def _termination_config(self, cleanup=None):
        """TF's ``TerminationConfig`` for this platform: SIGTERM is the preemption notice (no
        ``termination_watcher_fn``), no grace period (save at the next step, then exit), and
        :meth:`_exit_preempted` as ``exit_fn``."""
        def exit_fn() -> None:
            if cleanup is not None:
                cleanup()
            self._exit_preempted()

        return self.tf.distribute.experimental.TerminationConfig(exit_fn=exit_fn, grace_period=0)

    def _exit_preempted(self) -> None:
        """``TerminationConfig.exit_fn``: every trainer runs it right after its part of the
        preemption checkpoint. Waits (bounded) until every trainer has saved, so that none
        exits first and has the orchestrator stop a peer, the chief above all, in the middle
        of its save; then exits with :data:`orchestrator.env.PREEMPTED_EXIT_CODE`
        (:class:`SaveBarrier`: the coordination service's leader leaves it last)."""
        step = self.progress.step_now
        peers = self._trainer_names()
        if len(peers) > 1:
            SaveBarrier(self.context.name, peers, self.context.attempt).meet(step)
        self.reporter.update(message=f"preempted: checkpoint saved after step {step}", preempted_after_step=step)
        self.reporter.close(timeout_s=1.0)
        exit_preempted(f"checkpoint saved after step {step}")

    def _trainer_names(self) -> list[str]:
        cluster = self.context.tf_config.get("cluster", {})
        return [f"{t}-{i}" for t in ("chief", "worker") for i in range(len(cluster.get(t, [])))]

    def _build(self, compile: bool = True, local_logs: bool = False):
        from worker.model import build_model

        return build_model(self.keras, self.learning_rate, self.seed, self.data.num_features, self.data.num_classes,
                           compile=compile, local_logs=local_logs)

    def _dataset(self, shuffle_seed: int | None):
        """The training dataset (global batches) and its auto-shard policy across the
        MWMS input pipelines (one per chief / worker task)."""
        cluster = self.context.tf_config.get("cluster", {})
        pipelines = len(cluster.get("chief", [])) + len(cluster.get("worker", [])) or 1
        return datasets.train_dataset(self.tf, self.data, self.global_batch, shuffle_seed, pipelines)

    # -- Model.fit ---------------------------------------------------------------------
    def _fit(self, model) -> float | None:
        keras = self.keras
        from worker.callbacks import HeartbeatCallback, PreemptionBackupAndRestore

        if self.context.strategy == "parameter_server":
            data = keras.utils.experimental.DatasetCreator(self._pss_dataset_fn)
            self._log_policy(None)
        else:
            data, policy = self._dataset(self.seed)
            self._log_policy(policy)
        save_freq = self.checkpoint_every or "epoch"
        if self.preemption_supported:
            backup = PreemptionBackupAndRestore(self.backup_dir, save_freq, self._termination_config)
        else:  # PSS: BackupAndRestore saves per epoch only; TF has no preemption handler
            backup = keras.callbacks.BackupAndRestore(backup_dir=self.backup_dir, save_freq=save_freq)
        callbacks = [
            # progress first: the step it counts is done when the backup callback saves after it
            HeartbeatCallback(self.progress, self.steps_per_epoch),
            backup,
            keras.callbacks.ModelCheckpoint(os.path.join(self._scratch("checkpoints"), "ckpt-{epoch}"),
                                            save_weights_only=True),
            keras.callbacks.TensorBoard(log_dir=self._scratch("tensorboard"), update_freq="epoch"),
        ]
        mark("callbacks")
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
