"""What the built-in program's custom loops report before their traced functions are torn down.

    python tests/programs/loop_endings.py TMPDIR

Runs :class:`worker.train.Job`'s custom loop under MirroredStrategy (one CPU replica) and its
hogwild loop (two threads), each one epoch of 3 steps, with a reporter that records what it is
given (a fake of our own ``HeartbeatReporter`` interface). The mirrored loop's traced step gets a
``weakref.finalize`` that records its teardown. Prints one JSON line per loop: ``{"loop": NAME,
"events": [...]}``, the events in order: ``update:PHASE`` (a phase change), ``flush``,
``returned`` (the loop method returned) and ``torn-down``.
"""

import json
import os
import sys
import weakref

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.spec.model import Strategy, TrainingSpec
from orchestrator.task.context import TaskContext


class RecordingReporter:
    """The parts of ``HeartbeatReporter`` a Job calls, recording phase changes and flushes."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def update(self, **fields) -> None:
        if "phase" in fields:
            self.events.append(f"update:{pb.Phase.Name(fields['phase'])}")

    def flush(self, timeout_s: float = 1.0) -> bool:
        self.events.append("flush")
        return True

    def release_port(self) -> None:
        pass


def run(loop: str, tmp: str, tf, keras) -> list[str]:
    from worker.train import Job

    strategy = Strategy.HOGWILD if loop == "hogwild" else Strategy.MIRRORED
    task_dir = os.path.join(tmp, loop)
    os.makedirs(task_dir, exist_ok=True)
    training = TrainingSpec(epochs=1, steps_per_epoch=3, loop="custom", replicas=1,
                            threads=2 if strategy is Strategy.HOGWILD else None)
    context = TaskContext(task_type="worker", task_index=0, tf_config={}, task_dir=task_dir, run_dir=task_dir,
                          strategy=strategy, training=training)
    events: list[str] = []
    job = Job(context, RecordingReporter(events), tf, keras)
    traced = job.loops.train_step

    def train_step(*args):
        fn = traced(*args)
        weakref.finalize(fn, events.append, "torn-down")
        return fn

    job.loops.train_step = train_step
    with job.strategy.scope():
        model = job.build(compile=False)
    (job.loops.hogwild if loop == "hogwild" else job.loops.custom_sync)(model)
    events.append("returned")
    job.loops.train_step = traced  # the wrapper's closure no longer holds anything
    del job, model
    import gc

    gc.collect()
    return events


def main(tmp: str) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as keras

    for loop in ("mirrored", "hogwild"):
        print(json.dumps({"loop": loop, "events": run(loop, tmp, tf, keras)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
