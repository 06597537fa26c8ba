"""Experiment: can a ParameterServerStrategy coordinator restarted with a larger cluster (one more
worker) train through the ps and worker servers that were started with the smaller cluster and kept
up through the restart (issue 34 item 4, docs/elastic.md)?

One ps and one worker ``tf.distribute.Server`` are started with a 1-worker cluster spec
(``{chief, worker: [w0], ps: [p0]}``). Coordinator A (the chief, the same 1-worker cluster)
creates two variables on the ps, trains ``--steps-a`` closures through ``ClusterCoordinator``,
saves a checkpoint and is SIGKILLed (it leaves without closing its remote eager contexts, as a
chief stopped by the orchestrator would). A second worker is then started with the 2-worker
cluster spec, and coordinator B (``{chief, worker: [w0, w1], ps: [p0]}``) restores the checkpoint
and trains ``--steps-b`` closures. Each closure adds 1 to both variables; the coordinator counts the
closures each of its worker threads ran (``cluster_coordinator.Worker._process_closure``).

    python -m bench.pss_new_coordinator [--steps-a 20] [--steps-b 200]
    python -m bench.pss_new_coordinator --absent-s 30

``--absent-s S`` asks the other question: can a coordinator be started with a cluster that names a
worker not up yet (a cluster planned at MAX, the workers above the start size left out)? Coordinator
B then starts with the 2-worker cluster while worker 1 is not running, and the experiment waits ``S``
seconds for its result before starting worker 1.

Prints one JSON line: whether B trained, the closures per worker under A and B, the step and
variable after each, whether the ps and the first worker are the same processes throughout, and the
seconds each coordinator took from its start to its last step.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile

SERVER = r"""
import os, tensorflow as tf
r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
s = tf.distribute.Server(r.cluster_spec(), job_name=r.task_type, task_index=r.task_id, protocol="grpc", start=True)
print("serving", r.task_type, r.task_id, "pid", os.getpid(), flush=True)
s.join()
"""

COORDINATOR = r"""
import collections, json, os, sys, time
import tensorflow as tf
from tensorflow.python.distribute.coordinator import cluster_coordinator as cc
steps, ckpt, restore = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "restore"
started = time.monotonic()
strategy = tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
ran = collections.Counter()
process = cc.Worker._process_closure
def counting(self, closure):
    ran[self.worker_index] += 1
    return process(self, closure)
cc.Worker._process_closure = counting
with strategy.scope():
    v = tf.Variable(0.0, name="v")
    step = tf.Variable(0, dtype=tf.int64, name="step")
checkpoint = tf.train.Checkpoint(v=v, step=step)
if restore:
    checkpoint.restore(tf.train.latest_checkpoint(ckpt)).assert_existing_objects_matched()
restored = int(step.numpy())
@tf.function
def train():
    v.assign_add(1.0)
    step.assign_add(1)
    return step.read_value()
for _ in range(steps):
    coordinator.schedule(train)
coordinator.join()
checkpoint.save(os.path.join(ckpt, "ckpt"))
print(json.dumps({"workers": len(coordinator._cluster.workers), "closures": {str(k): n for k, n in sorted(ran.items())},
                  "restored_step": restored, "step": int(step.numpy()), "v": float(v.numpy()),
                  "seconds": round(time.monotonic() - started, 1)}), flush=True)
sys.stdout.flush()
time.sleep(3600)  # SIGKILLed by the experiment: no clean shutdown of its remote contexts
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-a", type=int, default=20)
    parser.add_argument("--steps-b", type=int, default=200)
    parser.add_argument("--absent-s", type=float, default=0.0,
                        help="start coordinator B this many seconds before worker 1 (0: worker 1 first)")
    args = parser.parse_args()
    chief, ps, w0, w1 = (f"127.0.0.1:{_port()}" for _ in range(4))
    workdir = tempfile.mkdtemp(prefix="pss-new-coordinator-")
    ckpt = os.path.join(workdir, "ckpt")
    procs: list[subprocess.Popen[str]] = []

    def start(task: str, index: int, workers: list[str], code: str, *argv: str) -> subprocess.Popen[str]:
        config = {"cluster": {"chief": [chief], "worker": workers, "ps": [ps]}, "task": {"type": task, "index": index}}
        log = open(os.path.join(workdir, f"{task}{index}-{len(workers)}.log"), "w")
        proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "TF_CONFIG": json.dumps(config), "TF_CPP_MIN_LOG_LEVEL": "2"})
        procs.append(proc)
        return proc

    def result(proc: subprocess.Popen[str], within_s: float | None = None) -> dict:
        assert proc.stdout is not None
        if within_s is not None and not select.select([proc.stdout], [], [], within_s)[0]:
            return {"no_result_within_s": within_s}  # still connecting: left running
        line = proc.stdout.readline()  # its one JSON line once it has saved (or "" if it died)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        return json.loads(line) if line.startswith("{") else {"error": f"no result; see {workdir}"}

    try:
        ps_proc, w0_proc = start("ps", 0, [w0], SERVER), start("worker", 0, [w0], SERVER)
        a = result(start("chief", 0, [w0], COORDINATOR, str(args.steps_a), ckpt, "fresh"))
        absent: dict = {}
        if args.absent_s:
            b_proc = start("chief", 0, [w0, w1], COORDINATOR, str(args.steps_b), ckpt, "restore")
            absent = result(b_proc, within_s=args.absent_s)
            w1_proc = start("worker", 1, [w0, w1], SERVER)
            b = result(b_proc) if "no_result_within_s" in absent else absent
        else:
            w1_proc = start("worker", 1, [w0, w1], SERVER)
            b = result(start("chief", 0, [w0, w1], COORDINATOR, str(args.steps_b), ckpt, "restore"))
        kept = ps_proc.poll() is None and w0_proc.poll() is None and w1_proc.poll() is None
        trained = b.get("step") == args.steps_a + args.steps_b and len(b.get("closures", {})) == 2
        print(json.dumps({"b_trained_with_both_workers": trained, "servers_kept_up": kept, "a": a, "b": b,
                          **({"b_while_worker_1_absent": absent} if args.absent_s else {}),
                          "pids": {"ps": ps_proc.pid, "worker-0": w0_proc.pid, "worker-1": w1_proc.pid}}))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


if __name__ == "__main__":
    main()
