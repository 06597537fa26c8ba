"""A user's tf-keras ``fit`` under MWMS with ``BackupAndRestore(save_freq=10)`` in the job's backup
directory: 25 steps per epoch, 2 epochs, synthetic data. A backup every 10 steps means a restart
resumes inside an epoch (after a kill at step 33: epoch 1, batch 5, step 30), not at its boundary.

    python tests/programs/user_backup_resume.py
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from orchestrator.client import keras_callback  # noqa: E402


def main() -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = 8 * strategy.num_replicas_in_sync
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    backup = keras.callbacks.BackupAndRestore(os.environ["ORCH_BACKUP_DIR"], save_freq=10)
    model.fit(ds, epochs=2, steps_per_epoch=25, verbose=0,
              callbacks=[backup, keras_callback(interval_s=0.2, batch_size=global_batch)])
    print("trained", flush=True)


if __name__ == "__main__":
    main()
