"""A user's MWMS program (no TensorFlow: the collective is played) where one worker's input gets
stuck: both workers train STEPS steps in lockstep, then worker STUCK blocks reading its next record
(a stuck input pipeline: a dead NFS mount, a reader thread that died) while every other worker
waits in the next step's all-reduce for it. The steps tie; only the stacks tell them apart.

    python tests/programs/stuck_input.py STEPS STUCK [LAST_S]
"""

import json
import os
import sys
import threading
import time

from orchestrator.client import report

_never = threading.Event()


def read_shard_record(shard: int) -> bytes:
    _never.wait(600)  # the read that never returns
    return b""


def collective_all_reduce(values: list) -> list:
    _never.wait(600)  # waits for every worker's contribution, the stuck one's too
    return values


def main() -> None:
    steps, stuck = int(sys.argv[1]), int(sys.argv[2])
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    last_s = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    for step in range(1, steps + 1):
        if step == steps and index == stuck:
            time.sleep(last_s)
        report(step=step, loss=1.0 / step)
        time.sleep(0.02)
    if index == stuck:
        read_shard_record(index)
    else:
        collective_all_reduce([0.0])


if __name__ == "__main__":
    main()
