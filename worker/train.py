"""The built-in training program of chief, worker and evaluator tasks.

Strategies (``ORCH_STRATEGY``):

* ``mirrored``: one task, ``replicas`` logical CPU devices
  (``tf.config.set_logical_device_configuration``), synchronous gradient averaging.
* ``multi_worker_mirrored``: every chief/worker trains (all-reduce); DATA/FILE sharding (DATA
  only with elastic workers: :mod:`worker.elastic`).
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

Preemption (a SIGTERM from outside, :func:`orchestrator.task.sigterm.route_sigterm`):
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
from typing import Any, Callable

from orchestrator import env
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.resources.pinning import pin_self
from orchestrator.spec.model import Strategy, TrainingSpec
from orchestrator.task.context import TaskContext
from orchestrator.task.formed import strategy_facts
from orchestrator.task.sigterm import exit_preempted, route_sigterm
from ps.server import configure_threads, serve
from worker import data as datasets
from worker.elastic import elastic_options, is_elastic
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


def train(context: TaskContext, reporter: Any) -> None:
    """Run this task's part of the job. Raises whatever TensorFlow raises.

    Args:
        context: the task's context (strategy and training options from the spec).
        reporter: its :class:`orchestrator.task.reporter.HeartbeatReporter`.
    """
    if context.strategy is Strategy.PARAMETER_SERVER and context.task_type in ("worker", "ps"):
        serve(context, reporter)
        return
    mark("train")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    mark("imported")
    pin_self(all_threads=True)  # the task's cores (ORCH_CPUS), from here on: see orchestrator.resources.pinning
    configure_threads(tf)
    options = context.training
    keras.utils.set_random_seed(options.seed)
    if context.task_type == "evaluator":
        _evaluate_sidecar(context, reporter, tf, keras, datasets.load(options.data, options.seed), options)
        return
    Job(context, reporter, tf, keras).run()


class Job:
    """One task's training run (chief or worker): the strategy, the data, ``Model.fit``, the end
    (evaluation, export); the custom loops are :class:`worker.loops.CustomLoops` (``self.loops``),
    which read this job through their declared :class:`worker.loops.Trainer`.

    Args:
        context: the task's context; ``context.training`` holds the options.
        reporter: its heartbeat reporter.
        tf, keras: the imported ``tensorflow`` and ``tf_keras`` modules.
    """

    def __init__(self, context: TaskContext, reporter: Any, tf: Any, keras: Any) -> None:
        self.context, self.reporter, self.tf, self.keras = context, reporter, tf, keras
        self.options = options = context.training
        self.threads = options.hogwild_threads
        self.gpus: list[Any] = []
        # the strategy first: MWMS and logical devices must be set before TF's runtime starts,
        # and reading TFRecord files starts it
        self.strategy = self._strategy(options.replicas)
        mark("strategy")
        self.data = data = datasets.load(options.data, options.seed)
        mark("data")
        self.replicas: int = self.strategy.num_replicas_in_sync
        self.options = options = elastic_options(options, self.replicas)  # --workers MIN:MAX: the size's batch
        self.global_batch = options.batch_size_per_replica * self.replicas
        self.steps_per_epoch = options.steps_per_epoch or math.ceil(data.num_train / self.global_batch)
        self.is_chief = context.is_chief or context.strategy in (Strategy.MIRRORED, Strategy.HOGWILD)
        run_dir = context.run_dir or context.task_dir
        self.backup_dir = context.backup_dir or os.path.join(context.task_dir, "backup")
        self.checkpoint_dir = os.path.join(run_dir, "checkpoints")
        self.tensorboard_dir = os.path.join(run_dir, "tensorboard")
        self.progress = Progress(reporter, self.global_batch, context.heartbeat_interval_s)
        self.loops = CustomLoops(self)

    def _gpus(self) -> list[Any]:
        """The GPUs TensorFlow sees (those of ``CUDA_VISIBLE_DEVICES``: the orchestrator's
        placement); a warning when the orchestrator gave the task GPUs TensorFlow cannot see."""
        gpus: list[Any] = self.tf.config.list_physical_devices("GPU")
        given = self.context.gpus
        if given and len(gpus) < given:
            print(f"warning: {self.context.name} holds {given} GPU(s) but TensorFlow sees {len(gpus)}; "
                  "install TensorFlow with CUDA: pip install 'tensorflow[and-cuda]' (docs/gpus.md)",
                  file=sys.stderr, flush=True)
        return gpus

    def _strategy(self, replicas: int) -> Any:
        tf, strategy = self.tf, self.context.strategy
        self.gpus = self._gpus()
        if strategy is Strategy.HOGWILD:
            route_sigterm()
            if self.gpus:  # one thread per GPU, each pinned to its device (the towers of the seed)
                self.threads = len(self.gpus)
            return tf.distribute.get_strategy()  # the default strategy: the threads share one model
        if strategy is Strategy.MIRRORED and self.gpus:
            route_sigterm()
            return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(len(self.gpus))])  # every visible GPU
        if strategy is Strategy.MIRRORED:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
            route_sigterm()
            return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.reporter.release_port()
        mark("port-released")
        if strategy is Strategy.MULTI_WORKER_MIRRORED:
            wait_for_coordination_leader(self.context.tf_config)
            mark("leader-up")
        if strategy is Strategy.PARAMETER_SERVER:
            from worker import rotation

            rotation.watch(tf, self.reporter)  # the coordinator's word on when a restarted worker trains again
            wait_for_servers(self.context.tf_config)  # not gRPC's 1 s reconnect backoff for a late peer
            mark("servers-up")
            formed = tf.distribute.ParameterServerStrategy(resolver)
        else:
            # all-reduce over NCCL between GPUs, ring (gRPC) between CPUs (TF's CollectiveCommunication)
            implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if self.gpus
                              else tf.distribute.experimental.CommunicationImplementation.RING)
            options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
            formed = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                               communication_options=options)
        route_sigterm()  # TF's preemption notifier caught SIGTERM: ours stay prompt, preemptions exit 143
        return formed

    def scratch(self, name: str) -> str:
        """The chief's real directory, or this worker's own scratch one (TF multi-worker guide)."""
        real = {"backup": self.backup_dir, "checkpoints": self.checkpoint_dir,
                "tensorboard": self.tensorboard_dir}[name]
        if self.is_chief:
            return real
        return os.path.join(self.context.task_dir or ".", f"scratch-{name}")

    def run(self) -> None:
        ctx, options, strategy = self.context, self.options, self.context.strategy
        print(
            f"{ctx.name}: {type(self.strategy).__name__}, {self.replicas} replica(s) in sync, per-replica batch "
            f"{options.batch_size_per_replica}, global batch {self.global_batch}, {self.steps_per_epoch} steps/epoch, "
            f"{options.epochs} epochs, {self._loop_name()}, checkpoint {self._checkpoint_name()}, data "
            f"{self.data.source}: {self.data.num_train} train examples, "
            f"{self.data.num_features} features, {self.data.num_classes} classes",
            flush=True,
        )
        self.reporter.update(
            message="building model",
            global_batch_size=self.global_batch,
            batch_size_per_replica=options.batch_size_per_replica,
            replicas=self.replicas,
            **strategy_facts(self.strategy),  # what it formed (supervisor.rules.formed)
            steps_per_epoch=self.steps_per_epoch,
            epochs=options.epochs,
        )
        with self.strategy.scope():
            model = self.build(compile=options.loop == "fit" and strategy is not Strategy.HOGWILD,
                               local_logs=strategy is Strategy.MULTI_WORKER_MIRRORED)
        mark("model")
        if strategy is Strategy.HOGWILD:
            final_loss = self.loops.hogwild(model)
        elif options.loop == "fit":
            final_loss = self.fit(model)
        elif strategy is Strategy.PARAMETER_SERVER:
            final_loss = self.loops.custom_pss(model)
        else:
            final_loss = self.loops.custom_sync(model)
        mark("trained")
        # training ended: what follows (evaluation, export) is never a training stall, and a
        # failure in it must not re-run the training
        self.reporter.update(phase=pb.PHASE_FINISHING, message="training finished",
                             step=self.progress.step_now or None, loss=final_loss)
        self._finish(model, final_loss)

    def _loop_name(self) -> str:
        return (f"hogwild loop with {self.threads} threads" if self.context.strategy is Strategy.HOGWILD
                else f"{self.options.loop} loop")

    def _checkpoint_name(self) -> str:
        every = self.options.checkpoint_every
        return f"every {every} steps and every epoch" if every else "every epoch"

    @property
    def preemption_supported(self) -> bool:
        """Whether TF's ``PreemptionCheckpointHandler`` works here: MirroredStrategy and MWMS
        (it raises ``NotImplementedError`` with a ps in the cluster)."""
        return self.context.strategy in (Strategy.MIRRORED, Strategy.MULTI_WORKER_MIRRORED)

    def termination_config(self, cleanup: Callable[[], None] | None = None) -> Any:
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
        # the step saved is the step reached: the last report (at most one a second) may be older
        self.reporter.update(step=step, message=f"preempted: checkpoint saved after step {step}",
                             preempted_after_step=step)
        self.reporter.close(timeout_s=1.0)
        exit_preempted(f"checkpoint saved after step {step}")

    def _trainer_names(self) -> list[str]:
        cluster = self.context.tf_config.get("cluster", {})
        return [f"{t}-{i}" for t in ("chief", "worker") for i in range(len(cluster.get(t, [])))]

    def build(self, compile: bool = True, local_logs: bool = False) -> Any:
        """The model (:func:`worker.model.build_model`) for this job's data and options."""
        from worker.model import build_model

        return build_model(self.keras, self.options.learning_rate, self.options.seed, self.data.num_features,
                           self.data.num_classes, compile=compile, local_logs=local_logs)

    def dataset(self, shuffle_seed: int | None) -> tuple[Any, str]:
        """The training dataset (global batches) and its auto-shard policy across the
        MWMS input pipelines (one per chief / worker task); with ``--data-service`` read through
        the tf.data service (:func:`worker.data.through_service`: policy ``SERVICE-<sharding>``)."""
        cluster = self.context.tf_config.get("cluster", {})
        pipelines = len(cluster.get("chief", [])) + len(cluster.get("worker", [])) or 1
        ds, policy = datasets.train_dataset(self.tf, self.data, self.global_batch, shuffle_seed, pipelines,
                                            by_file=not is_elastic())  # step k: the same examples at any size
        address = env.read(env.DATA_SERVICE_ADDRESS)
        if address:
            sharding = env.read(env.DATA_SERVICE_SHARDING, "dynamic")
            ds = datasets.through_service(self.tf, ds, address, env.read(env.DATA_SERVICE_JOB, "job"), sharding)
            policy = f"the tf.data service at {address} ({sharding} sharding)"
        return ds, policy

    # -- Model.fit ---------------------------------------------------------------------
    def fit(self, model: Any) -> float | None:
        """``Model.fit`` with the heartbeat, backup, checkpoint and TensorBoard callbacks."""
        keras = self.keras
        from worker.callbacks import HeartbeatCallback, PreemptionBackupAndRestore

        if self.context.strategy is Strategy.PARAMETER_SERVER:
            data = keras.utils.experimental.DatasetCreator(self.pss_dataset_fn)
            self.log_policy(None)
        else:
            data, policy = self.dataset(self.options.seed)
            self.log_policy(policy)
        save_freq = self.options.checkpoint_every or "epoch"
        if self.preemption_supported:
            facts = ((self.global_batch, self.steps_per_epoch)
                     if env.read(env.BATCH_POLICY) == "keep-per-replica" else None)  # docs/elastic.md
            backup = PreemptionBackupAndRestore(self.backup_dir, save_freq, self.termination_config, facts,
                                                chief=self.is_chief)
        else:  # PSS: BackupAndRestore saves per epoch only; TF has no preemption handler
            backup = keras.callbacks.BackupAndRestore(backup_dir=self.backup_dir, save_freq=save_freq)
        callbacks = [
            # progress first: the step it counts is done when the backup callback saves after it
            HeartbeatCallback(self.progress, self.steps_per_epoch),
            backup,
            keras.callbacks.ModelCheckpoint(os.path.join(self.scratch("checkpoints"), "ckpt-{epoch}"),
                                            save_weights_only=True),
            keras.callbacks.TensorBoard(log_dir=self.scratch("tensorboard"), update_freq="epoch"),
        ]
        mark("callbacks")
        history = model.fit(data, epochs=self.options.epochs, steps_per_epoch=self.steps_per_epoch, callbacks=callbacks,
                            verbose=2)
        losses = history.history.get("loss") or []
        return float(losses[-1]) if losses else self.progress.loss

    def pss_dataset_fn(self, input_context: Any = None) -> Any:
        """A PSS worker's dataset. Under ParameterServerStrategy every worker reads the whole
        data set (its input context is always pipeline 0 of 1) with its own shuffle order
        (TF parameter-server tutorial), so the shuffle is not seeded here."""
        ds, _ = self.dataset(shuffle_seed=None)
        return ds

    def context_workers(self) -> int:
        return len(self.context.tf_config.get("cluster", {}).get("worker", [])) or 1

    def log_policy(self, policy: str | None) -> None:
        """Say in the log how the training data is split across workers."""
        if self.context.strategy is Strategy.MIRRORED:
            return
        if policy is None and env.read(env.DATA_SERVICE_ADDRESS):
            text = (f"through the tf.data service at {env.read(env.DATA_SERVICE_ADDRESS)} "
                    f"({env.read(env.DATA_SERVICE_SHARDING, 'dynamic')} sharding)")
        elif policy is None:
            text = "not sharded: every PSS worker reads the whole dataset in its own shuffle order"
        elif policy.startswith("the tf.data service"):
            text = f"read through {policy}"
        else:
            files = len(self.data.train_files)
            why = f"{files} train files for {self.context_workers()} worker(s)" if files else "in-memory data"
            text = f"sharded by {policy} ({why})"
        print(f"{self.context.name}: dataset {text}", flush=True)
        self.reporter.update(message=f"dataset {text}")

    def _finish(self, model: Any, final_loss: float | None) -> None:
        ctx = self.context
        if self.is_chief:
            self.reporter.update(phase=pb.PHASE_EVALUATING, message="evaluating on the test split")
            plain = self.build()
            plain.set_weights(model.get_weights())
            x_test, y_test = self.data.test_arrays
            test_loss, test_accuracy = plain.evaluate(x_test, y_test, batch_size=256, verbose=0)
            print(f"{ctx.name}: test accuracy {test_accuracy:.4f}, test loss {test_loss:.4f}", flush=True)
            self.reporter.update(test_accuracy=test_accuracy, test_loss=test_loss)
        if final_loss is not None:
            self.reporter.update(final_loss=final_loss)
        self.reporter.update(phase=pb.PHASE_SAVING, message="saving the model", loss=final_loss)
        started = time.monotonic()
        if self.is_chief or ctx.strategy is Strategy.PARAMETER_SERVER:
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
                shutil.rmtree(self.scratch(name), ignore_errors=True)


def _evaluate_sidecar(context: TaskContext, reporter: Any, tf: Any, keras: Any, data: datasets.Data,
                      options: TrainingSpec) -> None:
    """Follow the chief's per-epoch checkpoints and evaluate each on the test split
    (``tf_keras.utils.SidecarEvaluator``); ends after the last epoch's checkpoint."""
    from worker.callbacks import EvaluationCallback
    from worker.model import build_model

    model = build_model(keras, options.learning_rate, options.seed, data.num_features, data.num_classes)
    x_test, y_test = data.test_arrays
    checkpoint_dir = os.path.join(context.run_dir or context.task_dir, "checkpoints")
    os.makedirs(checkpoint_dir, exist_ok=True)
    reporter.update(phase=pb.PHASE_EVALUATING, message=f"waiting for checkpoints in {checkpoint_dir}")
    print(f"{context.name}: following checkpoints in {checkpoint_dir}", flush=True)
    evaluator = keras.utils.SidecarEvaluator(
        model,
        data=tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(256),
        checkpoint_dir=checkpoint_dir,
        max_evaluations=options.epochs,
        callbacks=[EvaluationCallback(reporter)],
    )
    evaluator.start()
