"""A user's own ParameterServerStrategy script that handles every role itself.

    python -m orchestrator launch --strategy parameter_server --workers 2 --ps 1 -- python examples/pss_train.py

Workers and ps run ``tf.distribute.Server.join()`` (the orchestrator stops them when the
chief is done); the chief runs a custom loop with ``ClusterCoordinator.schedule`` and
reports each step with ``orchestrator.client.report``.
"""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from orchestrator.client import report  # noqa: E402
from worker.data import DIGITS_FILE  # noqa: E402  (1,797 handwritten digits shipped with the orchestrator)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc", start=True)
        server.join()
        return

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    table = np.loadtxt(DIGITS_FILE, delimiter=",", dtype="float32")  # 64 pixels (0-16), then the label
    x, y = table[:, :-1] / 16.0, table[:, -1].astype("int32")

    def dataset_fn():
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).repeat().batch(args.batch_size)

    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.Adam(0.005)
        accuracy = keras.metrics.SparseCategoricalAccuracy()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(it):
        def fn(xb, yb):
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(yb, logits), global_batch_size=args.batch_size)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            accuracy.update_state(yb, logits)
            return loss

        xb, yb = next(it)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(fn, args=(xb, yb)), axis=None)

    for i in range(1, args.steps + 1):
        loss = coordinator.schedule(step, args=(iterator,))
        if i % 50 == 0:
            coordinator.join()
            report(step=i, loss=float(loss.fetch()), accuracy=float(accuracy.result()))
    coordinator.join()
    print(f"done: {args.steps} steps, training accuracy {float(accuracy.result()):.4f}")


if __name__ == "__main__":
    main()
