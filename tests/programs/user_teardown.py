"""A user's program that is still tearing down after its training ended when a SIGTERM from
outside reaches it (a late preemption notice: a spot reclaim, a Slurm time limit).

    python tests/programs/user_teardown.py

Every task reports a few steps and ``training_finished()``. Worker 0 then exits 0; the others
write ``teardown`` into their task directory and wait (bounded: 60 s) in their teardown, with
Python's default SIGTERM action: the notice kills them (signal SIGTERM). No TensorFlow.
"""

import json
import os
import time

from orchestrator.client import report, training_finished


def main() -> int:
    index = int(json.loads(os.environ["TF_CONFIG"])["task"]["index"])
    for step in range(1, 4):
        report(step=step, loss=1.0 / step)
    training_finished(step=3, loss=0.3)
    if index == 0:
        return 0
    open(os.path.join(os.environ["ORCH_TASK_DIR"], "teardown"), "w").close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
