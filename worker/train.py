"""The built-in training program of chief and worker tasks.

* MultiWorkerMirroredStrategy: every chief/worker runs ``model.fit`` (synchronous
  all-reduce). The data set is sharded by DATA (in-memory data: TF guide, tensorflow#35878).
* ParameterServerStrategy: the chief runs the ``ClusterCoordinator`` through ``model.fit``
  with a ``DatasetCreator``; workers and ps only serve (:func:`ps.server.serve`).

Checkpoints: ``BackupAndRestore`` in the job's backup directory (each epoch). At the end
the chief evaluates test accuracy on a plain copy of the trained weights and exports a
SavedModel; under MWMS every worker must call ``save`` (collectives), so non-chief
workers save into their own scratch directory and delete it (TF multi-worker guide).
"""

from __future__ import annotations

import math
import os
import shutil

from orchestrator.proto import supervisor_pb2 as pb
from ps.server import configure_threads, serve
from worker.data import load_digits_split


def train(context, reporter) -> None:
    """Run this task's part of the job. Raises whatever TensorFlow raises."""
    if context.task_type == "evaluator":
        raise ValueError("the evaluator task is not supported by the built-in program yet")
    if context.strategy == "parameter_server" and context.task_type != "chief":
        serve(context, reporter)
        return

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from worker.callbacks import HeartbeatCallback
    from worker.model import build_model

    configure_threads(tf)
    options = dict(context.training)
    seed = int(options.get("seed", 0))
    epochs = int(options.get("epochs", 10))
    per_replica = int(options.get("batch_size_per_replica", 16))
    learning_rate = float(options.get("learning_rate", 0.005))
    x_train, y_train, x_test, y_test = load_digits_split(seed)
    keras.utils.set_random_seed(seed)

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    reporter.release_port()
    if context.strategy == "parameter_server":
        strategy = tf.distribute.ParameterServerStrategy(resolver)
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    replicas = strategy.num_replicas_in_sync
    global_batch = per_replica * replicas
    steps_per_epoch = int(options.get("steps_per_epoch") or math.ceil(len(x_train) / global_batch))
    print(
        f"{context.name}: {type(strategy).__name__}, {replicas} replica(s) in sync, "
        f"per-replica batch {per_replica}, global batch {global_batch}, {steps_per_epoch} steps/epoch, "
        f"{epochs} epochs, {len(x_train)} train / {len(x_test)} test examples",
        flush=True,
    )
    reporter.update(
        message="building model",
        global_batch_size=global_batch,
        batch_size_per_replica=per_replica,
        replicas=replicas,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
    )

    with strategy.scope():
        model = build_model(keras, learning_rate, seed)

    if context.strategy == "parameter_server":

        def dataset_fn(input_context):
            batch = input_context.get_per_replica_batch_size(global_batch)
            ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            return ds.shuffle(len(x_train), seed=seed).repeat().batch(batch, drop_remainder=True).prefetch(2)

        data = keras.utils.experimental.DatasetCreator(dataset_fn)
    else:
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        ds = ds.shuffle(len(x_train), seed=seed).repeat().batch(global_batch, drop_remainder=True)
        data_options = tf.data.Options()
        data_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        data = ds.with_options(data_options).prefetch(2)

    heartbeat = HeartbeatCallback(reporter, steps_per_epoch, global_batch, context.heartbeat_interval_s)
    callbacks = [keras.callbacks.BackupAndRestore(backup_dir=context.backup_dir or os.path.join(context.task_dir, "backup"))]
    callbacks.append(heartbeat)
    history = model.fit(data, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=2)
    final_loss = float(history.history["loss"][-1]) if history.history.get("loss") else heartbeat.last_loss

    is_chief = context.is_chief
    if is_chief:
        reporter.update(phase=pb.PHASE_EVALUATING, message="evaluating on the test split")
        plain = build_model(keras, learning_rate, seed)
        plain.set_weights(model.get_weights())
        test_loss, test_accuracy = plain.evaluate(x_test, y_test, batch_size=256, verbose=0)
        print(f"{context.name}: test accuracy {test_accuracy:.4f}, test loss {test_loss:.4f}", flush=True)
        reporter.update(test_accuracy=test_accuracy, test_loss=test_loss, final_loss=final_loss)

    reporter.update(phase=pb.PHASE_SAVING, message="saving the model", step=heartbeat.last_step, loss=final_loss)
    if context.strategy == "parameter_server" or is_chief:
        target = context.model_dir or os.path.join(context.task_dir, "model")
        model.save(target)
        print(f"{context.name}: SavedModel written to {target}", flush=True)
    else:
        target = os.path.join(context.task_dir or ".", "scratch-model")
        model.save(target)
        shutil.rmtree(target, ignore_errors=True)
