"""A user's ParameterServerStrategy program (no TensorFlow: the serving is played): the chief, the
coordinator, trains ``STEPS`` steps of ``STEP_S`` seconds, reports each and prints
``chief: step N (unix T)`` once it reported it; a ps and a worker serve (sleep) until stopped, as
``tf.distribute.Server.join()`` does. A ``--inject-fault ps:0:kill@step=N`` reaches the ps at the
chief's step N (issue 35, item 7): the chief's ``report(step=N)`` hands it over and waits until
the ps's wrapper took it.

    python tests/programs/stepless_faults.py 20 0.05    # 20 steps of 50 ms
"""

import json
import os
import sys
import time

from orchestrator.client import report


def main() -> None:
    steps, step_s = int(sys.argv[1]), float(sys.argv[2])
    role = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
    if role != "chief":
        print(f"{role}: serving", flush=True)
        time.sleep(600)  # join(): until the orchestrator stops it
        return
    for step in range(1, steps + 1):
        time.sleep(step_s)
        report(step=step, loss=1.0 / step)
        print(f"chief: step {step} (unix {time.time():.3f})", flush=True)


if __name__ == "__main__":
    main()
