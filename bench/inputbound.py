"""An input-bound training program for the tf.data service bench rows (``bench/dataservice.py``).

Each element costs an expensive ``map`` (``--work`` rounds of sin/cos over 4,096 floats, ~ms of
CPU) and the training step is one small dense layer, so the input pipeline bounds the step rate.
With ``ORCH_DATA_SERVICE_ADDRESS`` set (``launch --data-service N``) the map runs in the data
workers (``distribute(DYNAMIC, job_name=ORCH_DATA_SERVICE_JOB)``), else in this process. It trains
``--steps`` steps of ``--batch`` elements under ``MultiWorkerMirroredStrategy`` and prints one JSON
line ``{"examples_per_second": ...}`` measured over the steps after the first ``--warmup``.

    python -m orchestrator launch --workers 1 [--data-service N] -- python bench/inputbound.py
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--work", type=int, default=40, help="sin/cos rounds per element")
    args = p.parse_args(argv)
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def expensive(i):
        x = tf.random.stateless_uniform([4096], seed=tf.stack([i, tf.constant(0, tf.int64)]))
        for _ in range(args.work):
            x = tf.sin(x) + tf.cos(x)
        return x[:64], i % 10

    ds = tf.data.Dataset.range(10**9).map(expensive).batch(args.batch, drop_remainder=True)
    address = os.environ.get("ORCH_DATA_SERVICE_ADDRESS")
    if address:
        svc = tf.data.experimental.service
        ds = ds.apply(svc.distribute(processing_mode=svc.ShardingPolicy.DYNAMIC, service=f"grpc://{address}",
                                     job_name=os.environ.get("ORCH_DATA_SERVICE_JOB", "bench")))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(options).prefetch(2)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(10)])
        model.build((None, 64))
        optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return strategy.run(replica, args=(x, y))

    iterator = iter(strategy.experimental_distribute_dataset(ds))
    started = None
    for n in range(args.steps):
        if n == args.warmup:
            started = time.monotonic()
        step(*next(iterator))
    elapsed = time.monotonic() - started if started else float("nan")
    rate = (args.steps - args.warmup) * args.batch / elapsed
    print(json.dumps({"examples_per_second": round(rate, 1), "through_service": bool(address)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
