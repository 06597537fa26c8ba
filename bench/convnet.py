"""A compute-bound user program for the co-located bench (issue 23, item 1): a small
convolutional net on synthetic 32x32x3 images, trained with tf-keras ``fit`` under
MultiWorkerMirroredStrategy (one worker or several: the same program, only TF_CONFIG differs).

    python -m orchestrator launch --workers 2 -- python bench/convnet.py --global-batch 64

Its step is compute-bound (about 150 MFLOP per example forward and backward, 66,000 weights,
one 0.26 MB gradient all-reduce per step; nothing saved), unlike the built-in digits MLP, whose ~2 ms step is
shorter than one TF CPU collective (~5.5 ms, ``bench/results/NOTES.md``). It prints the bench's
markers (``global batch N``, ``bench: epoch E done at step S (unix T)``) that
``bench.tfjobs.TaskLog`` reads, and reports progress with ``orchestrator.client.keras_callback``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from orchestrator.client import keras_callback  # noqa: E402


class Markers(keras.callbacks.Callback):
    """The bench's epoch-end markers: global step and Unix time at each epoch's end."""

    def __init__(self, steps_per_epoch: int) -> None:
        super().__init__()
        self.steps_per_epoch = steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        print(f"bench: epoch {epoch + 1} done at step {(epoch + 1) * self.steps_per_epoch} (unix {time.time():.3f})",
              flush=True)


def build(classes: int) -> keras.Model:
    """(batch, 32, 32, 3) images -> (batch, classes) logits; 66,000 weights."""
    init = keras.initializers.GlorotUniform(seed=0)
    conv = dict(kernel_size=3, padding="same", activation="relu", kernel_initializer=init)
    return keras.Sequential([
        keras.layers.Input((32, 32, 3)),
        keras.layers.Conv2D(32, **conv), keras.layers.Conv2D(32, **conv), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, **conv), keras.layers.Conv2D(64, **conv),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(classes, kernel_initializer=init),
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--steps-per-epoch", type=int, default=8)
    parser.add_argument("--global-batch", type=int, default=64, help="examples per step over all replicas")
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if args.global_batch % strategy.num_replicas_in_sync:
        raise SystemExit(f"--global-batch {args.global_batch} is not a multiple of "
                         f"{strategy.num_replicas_in_sync} replicas")
    rng = np.random.default_rng(0)
    x = rng.random((1024, 32, 32, 3), dtype=np.float32)
    y = rng.integers(0, 10, size=1024).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(options).prefetch(2)
    with strategy.scope():
        model = build(10)
        model.compile(keras.optimizers.Adam(0.001), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    print(f"global batch {args.global_batch}, {strategy.num_replicas_in_sync} replica(s)", flush=True)
    model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2,
              callbacks=[Markers(args.steps_per_epoch), keras_callback(batch_size=args.global_batch)])


if __name__ == "__main__":
    main()
