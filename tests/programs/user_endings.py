"""A user's trainer and evaluator (no TensorFlow) for how tasks end: an evaluator's last
evaluation, an evaluator that crashes the same way every time, a trainer that cannot exit.

    python tests/programs/user_endings.py MODE

Modes (every wait is bounded):

* ``train``: reports steps 1-3, writes ``$ORCH_RUN_DIR/final-checkpoint`` (its last
  checkpoint), says training finished and exits 0.
* ``train-until-evaluator-failed:N``: as ``train``, but first waits until ``run.json`` records N
  failures of ``evaluator:0`` (the orchestrator persists it before it decides on a failure).
* ``train-then-stuck-thread``: as ``train``, then starts a non-daemon thread ``loader`` that
  never ends and returns from main: the interpreter's exit waits for it.
* ``train-then-stuck-atexit``: as ``train``, then registers an ``atexit`` handler that never
  returns (``flush_forever``) and returns from main.
* ``evaluate``: reports an evaluation of step 1, waits for the final checkpoint, evaluates it
  (reports ``evaluated_step`` 3, ``eval_accuracy`` 0.75) and exits 0.
* ``evaluate-slowly``: as ``evaluate``, but its last evaluation waits for
  ``$ORCH_RUN_DIR/never`` (which no one writes: up to 60 s), as a long evaluation would.
* ``evaluate-keyerror``: what a program that looks itself up in ``TF_CONFIG``'s cluster does
  in the evaluator (which is not in the training cluster): ``KeyError: 'evaluator'``.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

from orchestrator.client import report, training_finished

RUN_DIR = os.environ.get("ORCH_RUN_DIR", ".")


def wait_for(predicate, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def evaluator_failures() -> int:
    try:
        with open(os.path.join(RUN_DIR, "run.json"), encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return 0
    return sum(1 for f in record.get("failures", []) if f.get("task") == "evaluator:0")


def train() -> None:
    for step in range(1, 4):
        report(step=step, loss=1.0 / step)
    open(os.path.join(RUN_DIR, "final-checkpoint"), "w").close()
    training_finished(step=3, loss=0.3)
    print("trained; model saved", flush=True)


def evaluate(slowly: bool) -> None:
    report(step=1, evaluated_step=1, eval_accuracy=0.5)
    wait_for(lambda: os.path.exists(os.path.join(RUN_DIR, "final-checkpoint")))
    if slowly:
        print("evaluating the last checkpoint", flush=True)
        wait_for(lambda: os.path.exists(os.path.join(RUN_DIR, "never")))
    report(step=3, evaluated_step=3, eval_accuracy=0.75)
    print("evaluated the last checkpoint", flush=True)


def main(mode: str) -> None:
    if mode.startswith("train-until-evaluator-failed:"):
        wanted = int(mode.split(":")[1])
        if not wait_for(lambda: evaluator_failures() >= wanted):
            sys.exit("the evaluator never failed")
        mode = "train"
    if mode.startswith("train"):
        train()
    if mode == "train-then-stuck-thread":
        def load_forever() -> None:
            threading.Event().wait(120)

        threading.Thread(target=load_forever, name="loader").start()
    elif mode == "train-then-stuck-atexit":
        def flush_forever() -> None:
            threading.Event().wait(120)

        atexit.register(flush_forever)
    elif mode in ("evaluate", "evaluate-slowly"):
        evaluate(mode == "evaluate-slowly")
    elif mode == "evaluate-keyerror":
        cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
        print("my address", cluster["evaluator"][0])


if __name__ == "__main__":
    main(sys.argv[1])
