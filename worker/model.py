"""The built-in model: a small multilayer perceptron (features -> 128 -> 64 -> classes)."""

from __future__ import annotations


def build_model(keras, learning_rate: float, seed: int, num_features: int = 64, num_classes: int = 10,
                steps_per_execution: int = 1, compile: bool = True):
    """Build and compile the classifier with tf-keras.

    Args:
        keras: the ``tf_keras`` module (passed in so this module does not import TensorFlow).
        learning_rate: Adam learning rate.
        seed: seed of the initial weights, identical in every task.
        num_features: input features (64 for the 8x8 digits).
        num_classes: output classes.
        steps_per_execution: steps run per ``tf.function`` call.
        compile: compile with Adam, sparse categorical cross-entropy and accuracy.

    Returns:
        A ``keras.Model`` mapping ``(batch, num_features)`` to ``(batch, num_classes)`` logits.
    """
    init = keras.initializers.GlorotUniform(seed=seed)
    model = keras.Sequential(
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
    return model
