"""A user's own MultiWorkerMirroredStrategy script, as you would write it by hand.

    python -m orchestrator launch --workers 2 -- python examples/mwms_train.py --epochs 3

The orchestrator sets TF_CONFIG in every task; this script only opts in to progress
reporting with ``orchestrator.client.keras_callback()`` (it runs by hand too, without it).
"""

import argparse
import json
import os
import shutil
import tempfile

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from orchestrator.client import keras_callback  # noqa: E402
from worker.data import DIGITS_FILE  # noqa: E402  (1,797 handwritten digits shipped with the orchestrator)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    table = np.loadtxt(DIGITS_FILE, delimiter=",", dtype="float32")  # 64 pixels (0-16), then the label
    x, y = table[:, :-1] / 16.0, table[:, -1].astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).repeat().batch(global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(options)

    with strategy.scope():
        model = keras.Sequential([keras.layers.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(ds, epochs=args.epochs, steps_per_epoch=len(x) // global_batch,
                        callbacks=[keras_callback(batch_size=global_batch)], verbose=2)

    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    is_chief = task.get("type", "worker") == "chief" or (task.get("type") == "worker" and task.get("index", 0) == 0)
    # every worker saves (collectives); only the chief keeps its copy (TF multi-worker guide)
    # ORCH_MODEL_DIR is runs/<run-id>/model when launched by the orchestrator
    target = os.environ.get("ORCH_MODEL_DIR", "saved_model") if is_chief else tempfile.mkdtemp()
    model.save(target)
    if not is_chief:
        shutil.rmtree(target, ignore_errors=True)
    print("final accuracy", np.round(history.history["accuracy"][-1], 4))


if __name__ == "__main__":
    main()
