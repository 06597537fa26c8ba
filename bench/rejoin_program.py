"""Experiment program: an MWMS trainer that reads ``range(N)`` through the tf.data service and
prints the element ids of every step, for ``docs/data-service.md``'s group-restart experiment.

    python -m orchestrator launch --workers 2 --data-service 1 --inject-fault worker:1:kill@step=30 \\
        -- python bench/rejoin_program.py

Each step prints ``step S attempt A ids FIRST..LAST``; after the group restart (attempt 1) the
first ids show whether the re-attached job went on from where it was or started again.
"""

from __future__ import annotations

import os

from orchestrator.client import report, training_finished


def main() -> int:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.range(10**6).batch(8, drop_remainder=True)
    ds = ds.apply(svc.distribute(processing_mode=svc.ShardingPolicy.DYNAMIC,
                                 service="grpc://" + os.environ["ORCH_DATA_SERVICE_ADDRESS"],
                                 job_name=os.environ["ORCH_DATA_SERVICE_JOB"]))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(options)
    attempt = os.environ.get("ORCH_ATTEMPT", "0")
    total = tf.Variable(0, dtype=tf.int64)

    @tf.function
    def step(x):
        def replica(x):
            return tf.reduce_sum(x)
        return strategy.reduce("SUM", strategy.run(replica, args=(x,)), axis=None)

    it = iter(ds)  # each worker's own ids (no strategy rebatching: the ids stay readable)
    for s in range(1, 61):
        batch = next(it)
        total.assign_add(step(batch))  # a collective: the workers stay in step
        print(f"step {s} attempt {attempt} ids {int(batch[0])}..{int(batch[-1])}", flush=True)
        report(step=s)
    training_finished()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
