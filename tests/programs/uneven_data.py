"""A user's MWMS program whose workers have uneven data (no TensorFlow: the all-reduce is played):
each worker trains as many steps as its share of the data gives it, ``STEPS`` by task index, and
reports each; a worker that ran out of data ends ``fit`` and exits 0, as Keras does; a worker with
steps left waits in the next step's all-reduce for the one that left, forever (heartbeats go on),
as MultiWorkerMirroredStrategy's collective does.

    python tests/programs/uneven_data.py 44,40     # worker-0: 44 steps, then waits; worker-1: 40, exits 0
"""

import json
import os
import sys
import time

from orchestrator.client import report


def main() -> None:
    steps = [int(n) for n in sys.argv[1].split(",")]
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    mine, most = steps[index], max(steps)
    for step in range(1, mine + 1):
        report(step=step, loss=1.0 / step)
        time.sleep(0.02)
    if mine < most:
        print(f"worker {index}: dataset exhausted after {mine} steps; fit ends", flush=True)
        return
    print(f"worker {index}: step {mine + 1} waits in the all-reduce", flush=True)
    time.sleep(600)  # the collective that never completes (the orchestrator ends it)


if __name__ == "__main__":
    main()
