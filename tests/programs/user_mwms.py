"""A user's small MWMS script (tf-keras ``fit``, synthetic data) for the warm-spare tests.

    python tests/programs/user_mwms.py --steps-per-epoch 8 --epochs 2 [--wait-for-spares 2]

It prints one JSON line first, before importing anything else: how it was run (``sys.argv``,
``__name__``, ``__file__``, ``sys.path[0]``, its pid and parent) and whether TensorFlow was
already imported (``preloaded``: true only in a warm spare). With ``--wait-for-spares N``,
the first attempt of every task waits at its third step (bounded, 120 s) until N warm spares
of the job say they are ready, so a fault after that step always finds them warm.
"""

import json
import os
import sys

print("program " + json.dumps({
    "argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0], "pid": os.getpid(),
    "ppid": os.getppid(), "preloaded": "tensorflow" in sys.modules, "stdin": os.path.realpath("/proc/self/fd/0"),
}), flush=True)

import argparse  # noqa: E402
import glob  # noqa: E402
import time  # noqa: E402

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from orchestrator.client import keras_callback, report  # noqa: E402
from tests.programs.toy_keras import toy_fit_setup  # noqa: E402


class WaitForSpares(keras.callbacks.Callback):
    """On attempt 0, after the third batch: wait until ``count`` spare logs say ``ready``."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    def on_train_batch_end(self, batch, logs=None):
        if batch != 2 or self.count <= 0 or os.environ.get("ORCH_ATTEMPT") != "0":
            return
        # spares start once the supervisor saw a step > 0: say it now (the callback's own reports
        # are paced by the heartbeat interval, and three quick batches may not have sent one)
        report(step=batch + 1)
        pattern = os.path.join(os.environ["ORCH_RUN_DIR"], "spares", "spare-*.log")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready = [p for p in glob.glob(pattern) if ": ready" in open(p, errors="replace").read()]
            if len(ready) >= self.count:
                print(f"{len(ready)} spares ready", flush=True)
                return
            time.sleep(0.1)
        print("spares never became ready", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=8)
    parser.add_argument("--wait-for-spares", type=int, default=0)
    args = parser.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ds, model, _, _, global_batch = toy_fit_setup(tf, keras, strategy, examples=256, features=8)
    history = model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0,
                        callbacks=[keras_callback(batch_size=global_batch), WaitForSpares(args.wait_for_spares)])
    print("final loss", round(float(history.history["loss"][-1]), 4), flush=True)


if __name__ == "__main__":
    main()
