"""A user's MWMS program that builds its own cluster: it overwrites ``TF_CONFIG`` with a hard-coded
single-worker cluster (as a script copied from a one-machine tutorial does), so every task of an
N-worker job trains alone. tf-keras ``fit`` with the orchestrator's Keras callback, synthetic data.

    python tests/programs/user_own_cluster.py [--report]

``--report``: a custom loop that says what it formed with ``report(strategy=...)`` instead of the
callback. Each task prints ``replicas_in_sync N`` once its strategy exists. It imports
``client only after it rewrote ``TF_CONFIG`` (as such a script does, first thing): its heartbeats
still name the task the orchestrator started (``ORCH_TASK``).
"""

import argparse
import json
import os
import socket

os.environ["TF_USE_LEGACY_KERAS"] = "1"


def own_tf_config() -> str:
    """A one-worker cluster on a free port of this machine: the program's own, not the job's."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0}})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    os.environ["TF_CONFIG"] = own_tf_config()

    import tensorflow as tf
    import tf_keras as keras

    from orchestrator.client import keras_callback, report  # after the rewrite: it reports as ORCH_TASK says
    from tests.programs.toy_keras import toy_fit_setup

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print("replicas_in_sync", strategy.num_replicas_in_sync, flush=True)
    ds, model, x, y, global_batch = toy_fit_setup(tf, keras, strategy, examples=64, features=4)
    if args.report:
        report(step=0, strategy=strategy, global_batch_size=global_batch)
        for step in range(1, 5):
            loss = model.train_on_batch(x[:global_batch], y[:global_batch])
            report(step=step, loss=float(loss))
    else:
        model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0, callbacks=[keras_callback(batch_size=global_batch)])
    print("trained", flush=True)


if __name__ == "__main__":
    main()
