"""The built-in model: a small multilayer perceptron (features -> 128 -> 64 -> classes)."""

from __future__ import annotations


def build_model(keras, learning_rate: float, seed: int, num_features: int = 64, num_classes: int = 10,
                steps_per_execution: int = 1, compile: bool = True, local_logs: bool = False):
    """Build and compile the classifier with tf-keras.

    Args:
        keras: the ``tf_keras`` module (passed in so this module does not import TensorFlow).
        learning_rate: Adam learning rate.
        seed: seed of the initial weights, identical in every task.
        num_features: input features (64 for the 8x8 digits).
        num_classes: output classes.
        steps_per_execution: steps run per ``tf.function`` call.
        compile: compile with Adam, sparse categorical cross-entropy and accuracy.
        local_logs: ``fit``'s per-step logs (loss, accuracy) are this replica's own running
            means, read without an all-reduce (:func:`local_logs_model`); for
            MultiWorkerMirroredStrategy, where tf-keras otherwise all-reduces every metric
            every step.

    Returns:
        A ``keras.Model`` mapping ``(batch, num_features)`` to ``(batch, num_classes)`` logits.
    """
    init = keras.initializers.GlorotUniform(seed=seed)
    model = (local_logs_model(keras) if local_logs else keras.Sequential)(
        [
            keras.layers.Input(shape=(num_features,)),
            keras.layers.Dense(128, activation="relu", kernel_initializer=init),
            keras.layers.Dense(64, activation="relu", kernel_initializer=init),
            keras.layers.Dense(num_classes, kernel_initializer=init),
        ]
    )
    if not compile:
        return model
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    if local_logs:
        model.distribute_reduction_method = "first"  # this worker's own replica: no all-reduce of the logs
    return model


def local_logs_model(keras):
    """A ``keras.Sequential`` whose ``train_step`` all-reduces the gradients and nothing else.

    tf-keras's ``train_step`` returns ``metric.result()`` for every metric, and under
    MultiWorkerMirroredStrategy each result reads its sync-on-read ``total`` and ``count``
    through an all-reduce (``metrics_utils.result_wrapper``); ``fit`` then all-reduces the
    returned logs too (``distribute_reduction_method`` ``"auto"``). With loss and accuracy
    that is 6 small collectives per step besides the gradients' one (counted in the traced
    ``train_function``: 7 ``CollectiveReduceV2``), each a round trip between the workers. Here
    the metrics' states are updated as before and each step's logs (what batch-level callbacks
    and heartbeats see) are the replica's own running means over its shard of the global batch
    (``total / count`` read in replica context, no sync), the convention of PyTorch Lightning's
    ``self.log(sync_dist=False)`` default. The epoch's logs (History, the progress line, every
    ``on_epoch_end``) are still global: ``fit`` replaces the last step's logs with
    ``get_metrics_result()`` at each epoch's end (tf-keras ``_validate_and_get_metrics_result``),
    one all-reduce per metric per epoch. The weights and the optimizer's updates are those of
    the standard step.

    Args:
        keras: the ``tf_keras`` module.

    Returns:
        The ``keras.Sequential`` subclass.
    """
    import tensorflow as tf

    class LocalLogsSequential(keras.Sequential):
        def train_step(self, data):
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x, y, y_pred, sample_weight)  # updates the loss tracker too
            self._validate_target_and_loss(y, loss)
            self.optimizer.minimize(loss, self.trainable_variables, tape=tape)  # the one all-reduce
            self.compiled_metrics.update_state(y, y_pred, sample_weight)
            logs = {}
            for metric in self.metrics:
                if hasattr(metric, "total") and hasattr(metric, "count"):  # Mean-like: local, no sync
                    logs[metric.name] = tf.math.divide_no_nan(tf.identity(metric.total), tf.identity(metric.count))
                else:
                    result = metric.result()
                    logs.update(result if isinstance(result, dict) else {metric.name: result})
            return logs

    return LocalLogsSequential
