"""A user's program whose loss turns NaN at a known step (a learning rate too high, a log of 0):
it reports every step, as a Keras callback would, and trains on to the end as ``fit`` does.

    python tests/programs/user_nan.py STEPS NAN_STEP [HOLD_FILE]

Steps 1..STEPS are reported (one per 20 ms; no TensorFlow); from NAN_STEP on the loss is NaN and
the metric ``grad_norm`` is infinite; the final metrics (``training_finished``) carry both too,
so that ``summary.json``'s ``metrics`` and every heartbeat record hold non-finite numbers. With
HOLD_FILE, it waits after its last step (at most 30 s, still heartbeating) until that file exists:
a test reads the live status meanwhile.
"""

import os
import sys
import time

from orchestrator.client import report, training_finished


def main() -> None:
    steps, nan_step = int(sys.argv[1]), int(sys.argv[2])
    loss = 1.0
    for step in range(1, steps + 1):
        bad = step >= nan_step
        loss = float("nan") if bad else 1.0 / step
        report(step=step, loss=loss, grad_norm=float("inf") if bad else 0.5, lr=float("-inf") if bad else 0.1)
        time.sleep(0.02)
    if len(sys.argv) > 3:
        deadline = time.monotonic() + 30
        while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:
            time.sleep(0.05)
    training_finished(step=steps, loss=loss, final_loss=loss, grad_norm=float("inf"))
    time.sleep(0.3)
    print(f"trained {steps} steps", flush=True)


if __name__ == "__main__":
    main()
