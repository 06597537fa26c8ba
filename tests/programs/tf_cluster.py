"""A tiny hand-started TensorFlow task: reads TF_CONFIG (pasted from ``render``) and nothing else.

* ``mwms``: every worker all-reduces ``index + 1`` with MultiWorkerMirroredStrategy.
* ``pss``: worker and ps serve; the chief schedules 6 increments of a ps-held variable on the
  workers through a ClusterCoordinator.

Prints one ``RESULT {json}`` line. No orchestrator involved: this is what a user's own
script does with a rendered TF_CONFIG.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)


def mwms(task: dict) -> dict:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    @tf.function
    def step():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(float(task["index"] + 1)))

    total = strategy.experimental_local_results(strategy.run(step))[0]
    return {"replicas": strategy.num_replicas_in_sync, "sum": float(total)}


def pss(task: dict) -> dict:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if task["type"] in ("worker", "ps"):
        print("SERVING", flush=True)
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=task["type"], task_index=task["index"],
                                      protocol="grpc", start=True)
        server.join()
        return {}
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        counter = tf.Variable(0.0)

    @tf.function
    def bump():
        counter.assign_add(1.0)
        return counter.read_value()

    for _ in range(6):
        coordinator.schedule(bump)
    coordinator.join()
    return {"counter": float(counter.numpy()), "variable_device": counter.device}


if __name__ == "__main__":
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    result = {"mwms": mwms, "pss": pss}[sys.argv[1]](task)
    print("RESULT " + json.dumps({"task": f"{task['type']}:{task['index']}", **result}), flush=True)
