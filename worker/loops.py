"""The built-in program's own training loops (:class:`CustomLoops`, which :class:`worker.train.Job`
holds): ``training.loop: custom`` under MirroredStrategy / MWMS (``strategy.run`` +
``strategy.reduce``, each step through TF's ``PreemptionCheckpointHandler``) and
ParameterServerStrategy (``ClusterCoordinator.schedule`` over per-worker datasets), and the
``hogwild`` strategy's lock-free threads. ``Model.fit`` is :meth:`worker.train.Job.fit`.

What the loops read of their job is declared by :class:`Trainer` (``Job`` is one)."""

from __future__ import annotations

import shutil
import signal
import threading
from typing import Any, Callable, Protocol

from orchestrator.spec.model import TrainingSpec
from orchestrator.task.context import TaskContext
from orchestrator.task.sigterm import exit_preempted, route_sigterm
from worker import data as datasets
from worker.progress import Progress


class Trainer(Protocol):
    """What :class:`CustomLoops` reads of the job it trains for (:class:`worker.train.Job`)."""

    tf: Any
    keras: Any
    context: TaskContext
    options: TrainingSpec
    strategy: Any
    data: datasets.Data
    gpus: list[Any]
    threads: int
    global_batch: int
    steps_per_epoch: int
    is_chief: bool
    backup_dir: str
    progress: Progress

    def scratch(self, name: str) -> str: ...

    def termination_config(self, cleanup: Callable[[], None] | None = None) -> Any: ...

    def dataset(self, shuffle_seed: int | None) -> tuple[Any, str]: ...

    def pss_dataset_fn(self, input_context: Any = None) -> Any: ...

    def log_policy(self, policy: str | None) -> None: ...


class CustomLoops:
    """The custom loops of one job.

    Args:
        job: the job whose strategy, data, options and progress the loops use.
    """

    def __init__(self, job: Trainer) -> None:
        self.job = job

    def parts(self, model: Any) -> tuple[Any, Any, Any, Any]:
        """``(optimizer, loss_fn, step_var, checkpoint)`` under the strategy's scope."""
        job = self.job
        tf, keras = job.tf, job.keras
        with job.strategy.scope():
            optimizer = keras.optimizers.Adam(learning_rate=job.options.learning_rate)
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 reduction=keras.losses.Reduction.NONE)
            # global steps done: a checkpoint taken mid-epoch (preemption, checkpoint_every)
            # resumes at exactly this step
            step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                   aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=step_var)
        return optimizer, loss_fn, step_var, checkpoint

    def step_fn(self, model: Any, optimizer: Any, loss_fn: Any, global_batch: int) -> Callable[[Any, Any], Any]:
        """One replica's step: forward, loss averaged over ``global_batch`` examples, gradients applied."""
        tf = self.job.tf

        def step_fn(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return step_fn

    def train_step(self, model: Any, optimizer: Any, loss_fn: Any) -> Any:
        """``train_step(iterator)``: one step on every replica, the loss summed across them."""
        tf, strategy = self.job.tf, self.job.strategy
        step_fn = self.step_fn(model, optimizer, loss_fn, self.job.global_batch)

        @tf.function
        def train_step(it: Any) -> Any:
            x, y = next(it)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(x, y)), axis=None)

        return train_step

    def custom_sync(self, model: Any) -> float | None:
        """Mirrored / MWMS: ``strategy.run`` per step, ``strategy.reduce`` of the replica losses,
        each step through TF's ``PreemptionCheckpointHandler.run`` (a preemption saves at the
        next step and exits); a checkpoint at every epoch end and every ``checkpoint_every`` steps.
        """
        job = self.job
        tf, strategy, progress, every = job.tf, job.strategy, job.progress, job.options.checkpoint_every
        optimizer, loss_fn, step_var, checkpoint = self.parts(model)
        with strategy.scope():  # the global batch of the saved step: a keep-per-replica resize changes it
            global_batch = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_batch")
        checkpoint.global_batch = global_batch
        manager = tf.train.CheckpointManager(checkpoint, job.scratch("backup"), max_to_keep=1)
        # restores the latest checkpoint in the job's backup directory on every worker; the
        # chief saves there at a preemption, the others into a temp dir they delete
        handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, checkpoint, checkpoint_dir=job.backup_dir,
            termination_config=job.termination_config())
        route_sigterm()  # ours before TF's handler
        start_step = self.converted(step_var, global_batch)
        ds, policy = job.dataset(job.options.seed)
        job.log_policy(policy)
        iterator = iter(strategy.experimental_distribute_dataset(ds))
        train_step = self.train_step(model, optimizer, loss_fn)

        progress.begin(start_step)
        mean = None
        spe, epochs = job.steps_per_epoch, job.options.epochs
        for epoch in range(start_step // spe, epochs):
            total, first = 0.0, (start_step - epoch * spe if epoch == start_step // spe else 0)
            for i in range(first, spe):
                loss = float(handler.run(train_step, iterator))
                step_var.assign_add(1)
                step = epoch * spe + i + 1
                total += loss
                progress.step(step, loss)
                if every and step % every == 0 and i + 1 < spe:
                    manager.save()
            mean = total / max(1, spe - first)
            manager.save()
            print(f"epoch {epoch + 1}/{epochs}: mean loss {mean:.4f}", flush=True)
            progress.report(mean, epoch=epoch + 1)
        if not job.is_chief:
            shutil.rmtree(job.scratch("backup"), ignore_errors=True)
        progress.finished()  # before this frame's traced functions are torn down (see custom_pss)
        return mean

    def converted(self, step_var: Any, global_batch: Any) -> int:
        """The restored step, converted through the examples seen when the checkpoint's global batch differs from
        this life's (``keep-per-replica`` at another size: :func:`worker.elastic.converted_step`, as the ``fit``
        loop converts its index); ``global_batch`` (checkpointed with the step) then holds this life's."""
        from worker.elastic import converted_step

        job, restored = self.job, int(step_var.numpy())
        saved = int(global_batch.numpy())
        step = converted_step(restored, saved, job.global_batch)
        if step != restored:
            print(f"elastic: the checkpoint at step {restored} (global batch {saved}) continues at step {step} "
                  f"(global batch {job.global_batch}): the same examples seen", flush=True)
            step_var.assign(step)
        global_batch.assign(job.global_batch)
        return step

    def custom_pss(self, model: Any) -> float | None:
        """PSS: the coordinator schedules steps on workers with per-worker datasets; every
        ``checkpoint_every`` steps it waits for them (``join``) and saves. TF has no preemption
        handler under PSS, so the coordinator is its own: a SIGTERM from outside makes it wait for
        the steps in flight, save, and exit preempted (the variables live on the ps, which the
        orchestrator stops only after the coordinator has left)."""
        job = self.job
        tf, strategy, progress, every = job.tf, job.strategy, job.progress, job.options.checkpoint_every
        preempted = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: preempted.set())
        route_sigterm()  # chains the handler above: the orchestrator's own stop still ends the task at once
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        optimizer, loss_fn, step_var, checkpoint = self.parts(model)
        manager = tf.train.CheckpointManager(checkpoint, job.backup_dir, max_to_keep=1)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint)
        start_step = int(step_var.numpy())
        job.log_policy(None)
        iterator = iter(coordinator.create_per_worker_dataset(job.pss_dataset_fn))
        train_step = self.train_step(model, optimizer, loss_fn)

        progress.begin(start_step)
        mean = None
        spe, epochs = job.steps_per_epoch, job.options.epochs
        for epoch in range(start_step // spe, epochs):
            results = []
            first = start_step - epoch * spe if epoch == start_step // spe else 0
            for i in range(first, spe):
                results.append(coordinator.schedule(train_step, args=(iterator,)))
                step = epoch * spe + i + 1
                progress.step(step)
                if preempted.is_set():
                    coordinator.join()
                    step_var.assign(step)
                    manager.save()
                    progress.report(flush=True)  # the step saved: the last report may be older
                    exit_preempted(f"checkpoint saved after step {step}")
                if every and step % every == 0 and i + 1 < spe:
                    coordinator.join()
                    step_var.assign(step)
                    manager.save()
            coordinator.join()
            mean = sum(float(r.fetch()) for r in results) / max(1, len(results))
            step_var.assign((epoch + 1) * spe)
            manager.save()
            print(f"epoch {epoch + 1}/{epochs}: mean loss {mean:.4f}", flush=True)
            progress.report(mean, epoch=epoch + 1)
        # `finishing` is sent before this returns: the return drops the coordinator, the per-worker
        # dataset and the traced step, and TensorFlow's teardown of them (context.remove_function,
        # on every worker) can hold the GIL, and so the heartbeats, past the heartbeat timeout
        # (measured: a CI run's coordinator was killed as hung there after its last step)
        progress.finished()
        return mean

    # -- hogwild -----------------------------------------------------------------------
    def hogwild(self, model: Any) -> float | None:
        """Hogwild!: ``threads`` Python threads each run one compiled train step (a
        ``tf.function`` traced once) on the shared model and optimizer, with no lock around the
        updates (TF runs each step's ops with the GIL released, so the threads' reads and
        writes of the variables interleave), each thread with its own shuffled stream of the
        training data. Per epoch the threads share ``steps_per_epoch`` steps; a checkpoint at
        each epoch end (all threads joined).

        Raises:
            Whatever a thread raised (the first one), after every thread has stopped.
        """
        job = self.job
        tf, progress, threads, per_replica = job.tf, job.progress, job.threads, job.options.batch_size_per_replica
        optimizer, loss_fn, step_var, checkpoint = self.parts(model)
        optimizer.build(model.trainable_variables)  # slots exist before the threads race
        manager = tf.train.CheckpointManager(checkpoint, job.backup_dir, max_to_keep=1)
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint)
        step_fn = self.step_fn(model, optimizer, loss_fn, per_replica)
        spec_x = tf.TensorSpec([per_replica, job.data.num_features], tf.float32)
        spec_y = tf.TensorSpec([per_replica], tf.int64)
        if job.gpus:  # one step function per GPU, traced under its device: each thread computes there
            steps = []
            for k in range(threads):
                with tf.device(f"/GPU:{k}"):
                    steps.append(tf.function(step_fn).get_concrete_function(spec_x, spec_y))
        else:
            steps = [tf.function(step_fn).get_concrete_function(spec_x, spec_y)] * threads  # traced once, shared
        streams = []
        for k in range(threads):
            ds, _ = datasets.train_dataset(tf, job.data, per_replica, job.options.seed * 1000 + k + 1)
            streams.append(iter(ds))
        where = f", thread k on GPU:k of {len(job.gpus)}" if job.gpus else ""
        print(f"{job.context.name}: hogwild, {threads} threads on one model, no locks{where}", flush=True)

        start_step = int(step_var.numpy())
        spe, epochs = job.steps_per_epoch, job.options.epochs
        progress.begin(start_step)
        done = [0] * threads  # steps each thread finished (each writes its own slot)
        losses = [0.0] * threads
        errors: list[BaseException] = []
        mean = None

        def work(k: int, count: int) -> None:
            try:
                it, train_step = streams[k], steps[k]
                for _ in range(count):
                    x, y = next(it)
                    losses[k] += float(train_step(tf.cast(x, tf.float32), tf.cast(y, tf.int64)))
                    done[k] += 1
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                errors.append(exc)

        for epoch in range(start_step // spe, epochs):
            base = sum(done)
            epoch_steps = spe - (start_step - epoch * spe if epoch == start_step // spe else 0)
            losses[:] = [0.0] * threads
            shares = [epoch_steps // threads + (1 if k < epoch_steps % threads else 0) for k in range(threads)]
            workers = [threading.Thread(target=work, args=(k, n), name=f"hogwild-{k}", daemon=True)
                       for k, n in enumerate(shares)]
            for t in workers:
                t.start()
            step0 = epoch * spe + (spe - epoch_steps)
            while alive := [t for t in workers if t.is_alive()]:
                alive[0].join(timeout=job.context.heartbeat_interval_s / 2)  # report between waits
                count = sum(done) - base
                # the lambda runs inside step(), in this iteration
                progress.step(step0 + count, lambda: sum(losses) / max(1, sum(done) - base))  # noqa: B023
            if errors:
                raise errors[0]
            mean = sum(losses) / max(1, epoch_steps)
            step_var.assign((epoch + 1) * spe)
            manager.save()
            print(f"epoch {epoch + 1}/{epochs}: mean loss {mean:.4f}", flush=True)
            progress.report(mean, epoch=epoch + 1)
        progress.finished()  # before this frame's traced functions are torn down (see custom_pss)
        return mean
