"""The built-in model: a small multilayer perceptron for 8x8 digits (64 -> 128 -> 64 -> 10)."""

from __future__ import annotations


def build_model(keras, learning_rate: float, seed: int, steps_per_execution: int = 1):
    """Build and compile the classifier with tf-keras.

    Args:
        keras: the ``tf_keras`` module (passed in so this module does not import TensorFlow).
        learning_rate: Adam learning rate.
        seed: seed of the initial weights, identical in every task.
        steps_per_execution: steps run per ``tf.function`` call (PSS benefits from > 1).

    Returns:
        A compiled ``keras.Model`` with sparse categorical cross-entropy loss and accuracy.
    """
    init = keras.initializers.GlorotUniform(seed=seed)
    model = keras.Sequential(
        [
            keras.layers.Input(shape=(64,)),
            keras.layers.Dense(128, activation="relu", kernel_initializer=init),
            keras.layers.Dense(64, activation="relu", kernel_initializer=init),
            keras.layers.Dense(10, kernel_initializer=init),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model
