"""One simulated task as a real OS process: the real ``HeartbeatReporter`` reporting TRAINING
with a new step every heartbeat, no TensorFlow. Reads the orchestrator's variables.

``python -m bench.simtask`` (task env from the plan). With ``--bare`` it imports nothing
but the standard library and sleeps (the baseline of the health client's cost); with
``--idle`` it imports the client but starts no reporter.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    seconds = float(os.environ.get("BENCH_SIM_SECONDS", "1e9"))
    end = time.monotonic() + seconds
    if "--bare" in sys.argv:
        while time.monotonic() < end:
            time.sleep(0.5)
        return
    from orchestrator.proto import supervisor_pb2 as pb
    from orchestrator.task.context import TaskContext
    from orchestrator.task.lifetime import install
    from orchestrator.task.reporter import HeartbeatReporter

    if "--idle" in sys.argv:
        while time.monotonic() < end:
            time.sleep(0.5)
        return
    context = TaskContext.from_env()
    install(context)
    reporter = HeartbeatReporter.from_context(context).start()
    reporter.update(phase=pb.PHASE_TRAINING, step=0)
    step = 0
    while time.monotonic() < end:
        time.sleep(context.heartbeat_interval_s)
        step += 1
        reporter.update(step=step, loss=0.5, examples_per_second=1000.0)
    reporter.close(pb.PHASE_DONE)


if __name__ == "__main__":
    main()
