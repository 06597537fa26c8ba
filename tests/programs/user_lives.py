"""A user's program that takes a known number of lives whatever the machine's speed: for the Slurm
time-limit test (``sbatch --time-limit 1 --continue``), where a job sized in epochs fits in fewer
lives on a fast machine than on a slow one.

    python tests/programs/user_lives.py LIVES STEPS

A paced step counter (one step per 20 ms; no TensorFlow). Every start is a life: its count and the
last step are kept in ``$ORCH_RUN_DIR/user-lives.json``, saved on SIGTERM (the orchestrator's
save-and-requeue notice, as a preemption sends it), after which the program exits 143 as a
preempted task does. Before its LIVES-th life it trains until that notice; in that life it trains
STEPS more steps and ends. Each step is reported, and a life that resumed says from which step
(``resumed_from_step``).
"""

import json
import os
import signal
import sys
import time

from orchestrator.client import report


def main() -> None:
    lives, steps = int(sys.argv[1]), int(sys.argv[2])
    path = os.path.join(os.environ["ORCH_RUN_DIR"], "user-lives.json")
    state = json.load(open(path)) if os.path.exists(path) else {"life": 0, "step": 0}
    state["life"] += 1
    start = step = state["step"]

    def save() -> None:
        state["step"] = step
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)

    save()
    notice: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: notice.append(1))
    print(f"life {state['life']}: resumed from step {start}", flush=True)
    report(step=start, **({"resumed_from_step": start} if start else {}))
    end = start + steps if state["life"] >= lives else None
    while end is None or step < end:
        if notice:
            save()
            print(f"life {state['life']}: saved at step {step} on SIGTERM", flush=True)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.02)
        step += 1
        report(step=step, loss=1.0 / step)
    save()
    print(f"life {state['life']}: done at step {step}", flush=True)


if __name__ == "__main__":
    main()
