"""A user's MWMS custom loop that leaves preemption to TensorFlow's own handler, as TF's guide
shows it: ``PreemptionCheckpointHandler`` with its default ``TerminationConfig`` (off Google
Cloud: save at the next step, then ``sys.exit(42)``).

    python tests/programs/user_preempt.py STEPS [--slow-exit]

Each step is a real all-reduce; the step counter is in the checkpoint, so a restarted attempt
prints ``resumed from step N`` and reports it (``resumed_from_step``). The first attempt of
every task writes ``at-step-3`` into its task directory and waits (bounded) at step 3 until
``$ORCH_RUN_DIR/go`` exists, so a test can signal it while it is known to be training. With
``--slow-exit`` the first attempt of worker 1 takes (bounded: 30 s) to exit after TF's handler
saved (an ``atexit`` hook): its peers' preempted exits are seen first, as they can be anyway.
"""

import atexit
import json
import os
import sys
import time

import tensorflow as tf

from orchestrator.client import report


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    index = int(json.loads(os.environ["TF_CONFIG"])["task"]["index"])
    if "--slow-exit" in sys.argv and index == 1 and os.environ.get("ORCH_ATTEMPT") == "0":
        atexit.register(time.sleep, 30)  # runs after TF's handler's sys.exit(42)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        total = tf.Variable(0.0)
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(total=total, step=step)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint, checkpoint_dir=os.path.join(os.environ["ORCH_RUN_DIR"], "user-ckpt"))
    start = int(step.numpy())
    print(f"resumed from step {start}", flush=True)
    report(step=start, **({"resumed_from_step": start} if start else {}))

    @tf.function
    def train_step():
        summed = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", 1.0))
        total.assign_add(strategy.reduce("sum", summed, axis=None))

    go = os.path.join(os.environ["ORCH_RUN_DIR"], "go")
    while int(step.numpy()) < steps:
        handler.run(train_step)
        step.assign_add(1)
        now = int(step.numpy())
        report(step=now, loss=1.0 / now)
        if now == 3 and os.environ.get("ORCH_ATTEMPT") == "0":
            open(os.path.join(os.environ["ORCH_TASK_DIR"], "at-step-3"), "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(0.05)  # a paced loop: the preemption notice is taken at a step boundary
    print(f"done at step {int(step.numpy())}", flush=True)


if __name__ == "__main__":
    main()
