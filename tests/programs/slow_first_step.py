"""A user's program whose first step is slow (graph tracing, a large model, a cold cache): it says
training began at step 0, as the Keras callback's ``on_train_begin`` does, then spends its first
step until HOLD_FILE exists (at most 60 s, heartbeating all along), then trains STEPS quick steps.

    python tests/programs/slow_first_step.py STEPS HOLD_FILE
"""

import os
import sys
import time

from orchestrator.client import report


def main() -> None:
    steps, hold = int(sys.argv[1]), sys.argv[2]
    report(step=0)
    deadline = time.monotonic() + 60
    while not os.path.exists(hold) and time.monotonic() < deadline:  # the first step
        time.sleep(0.05)
    for step in range(1, steps + 1):
        report(step=step, loss=1.0 / step)
        time.sleep(0.02)
    print(f"trained {steps} steps", flush=True)


if __name__ == "__main__":
    main()
