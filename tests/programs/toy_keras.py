"""The small tf-keras model and synthetic data the user-program tests train (``user_mwms.py``,
``user_backup_resume.py``, ``user_own_cluster.py``): a linear classifier of whether a row of
normal features sums above 0, batched by the global batch, sharded by data across the workers
(as a user's MWMS script does, TF's multi-worker tutorial)."""


def toy_fit_setup(tf, keras, strategy, examples: int, features: int, per_replica: int = 8):
    """``(dataset, compiled model, x, y, global_batch)`` under ``strategy``: ``examples`` rows of
    ``features`` features, ``per_replica`` x replicas in sync per batch."""
    import numpy as np

    global_batch = per_replica * strategy.num_replicas_in_sync
    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, features)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((features,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return ds, model, x, y, global_batch
