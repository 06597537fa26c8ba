"""Count the collectives in one ``fit`` step of the built-in model under MultiWorkerMirroredStrategy.

    python tests/programs/fit_collectives.py

Starts two workers (this program again, ``--index 0`` and ``1``, TF_CONFIG on two free loopback
ports; with one worker MWMS traces no collective at all). Each trains the built-in model
(``worker.model.build_model``) two steps each way, the standard tf-keras step and
``local_logs=True``; worker 0 prints one JSON line: ``{"standard": N, "local_logs": M, ...}``,
the ``CollectiveReduceV2`` ops in each one's traced ``train_function``, and each one's final logs.
Exits non-zero when a worker fails or takes longer than 240 s.
"""

import json
import os
import socket
import subprocess
import sys


def main() -> int:
    ports = []
    holders = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        holders.append(s)
        ports.append(s.getsockname()[1])
    for s in holders:
        s.close()
    workers = [subprocess.Popen([sys.executable, __file__, "--index", str(i), *map(str, ports)]) for i in range(2)]
    try:
        return max(w.wait(timeout=240) for w in workers)
    finally:
        for w in workers:
            w.kill()
            w.wait()


def worker(index: int, ports: list[str]) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from worker.model import build_model

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    data = tf.data.Dataset.from_tensor_slices((rng.random((64, 64), dtype=np.float32),
                                               rng.integers(0, 10, 64))).repeat().batch(16)
    out = {}
    for name, local in (("standard", False), ("local_logs", True)):
        with strategy.scope():
            model = build_model(keras, 0.005, 0, local_logs=local)
        history = model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)
        graphs = [f.graph for f in model.train_function._list_all_concrete_functions()]
        # the most in one traced function (tf.function lists a concrete function twice)
        out[name] = max(sum(op.type == "CollectiveReduceV2" for op in g.get_operations()) for g in graphs)
        out[f"{name}_logs"] = {k: float(v[-1]) for k, v in history.history.items()}
    if index == 0:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        worker(int(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit(main())
