"""One TensorFlow CPU all-reduce between two processes of this machine: the floor under the
co-located MWMS step (issue 23, item 1: "the physical limit is 1.0 minus the all-reduce").

    python -m bench.allreduce [--floats 17226] [--calls 400]

Starts two MultiWorkerMirroredStrategy workers (this module again, TF_CONFIG on two free loopback
ports), each placed as ``launch --workers 2`` places them on this machine (its own core when there
are two or more, ``TF_NUM_INTRAOP_THREADS=1``, ``TF_NUM_INTEROP_THREADS=2``; ring all-reduce, TF's
only CPU collective). Each times ``calls`` calls of a ``tf.function`` that all-reduces one
``floats``-float tensor (17,226: the built-in model's gradients, one pack), and as many calls of
the same function without the collective (its dispatch, which a ``fit`` step pays anyway). Worker 0
prints one JSON line: ``{"allreduce_ms": per call less the dispatch, "dispatch_ms": ..., "floats":
N}``. Exits non-zero when a worker fails or takes longer than 240 s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--floats", type=int, default=17226)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    holders = [socket.socket() for _ in range(2)]
    for s in holders:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in holders]
    for s in holders:
        s.close()
    workers = [subprocess.Popen([sys.executable, "-m", "bench.allreduce", "--worker", str(i), str(args.floats),
                                 str(args.calls), *map(str, ports)]) for i in range(2)]
    try:
        return max(w.wait(timeout=240) for w in workers)
    finally:
        for w in workers:
            w.kill()
            w.wait()


def worker(index: int, floats: int, calls: int, ports: list[str]) -> None:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) >= 2:  # as the orchestrator pins two workers on this machine (orchestrator.resources.cores)
        half = len(cores) // 2
        os.sched_setaffinity(0, cores[index * half:(index + 1) * half])
    os.environ.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2", TF_CPP_MIN_LOG_LEVEL="3")
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
    import tensorflow as tf

    ring = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=ring)
    x = tf.ones([floats])

    @tf.function
    def reduce():
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, x)

    @tf.function
    def alone():
        return x * 1.0

    def per_call_s(fn) -> float:
        for _ in range(20):  # traced, and the collective's group resolved
            strategy.run(fn)
        start = time.perf_counter()
        for _ in range(calls):
            out = strategy.run(fn)
        float(tf.reduce_sum(strategy.experimental_local_results(out)[0]))  # the last call is done
        return (time.perf_counter() - start) / calls

    dispatch = per_call_s(alone)
    total = per_call_s(reduce)
    if index == 0:
        print(json.dumps({"allreduce_ms": round((total - dispatch) * 1000, 3), "dispatch_ms":
                          round(dispatch * 1000, 3), "floats": floats, "calls": calls}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
    else:
        sys.exit(main())
