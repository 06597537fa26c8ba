"""A task silent for ``SILENT_START_S`` seconds (default 3) while still initializing, as one
whose ``import tensorflow`` holds the GIL (its heartbeat thread with it) for seconds: after its
first heartbeats it SIGSTOPs itself, a child it started SIGCONTs it that much later; then it
trains one step and succeeds. Uses the real runtime and heartbeat client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.task.runtime import run_task


def body(context, reporter) -> None:
    deadline = time.monotonic() + 30  # let a few heartbeats out first (bounded): the orchestrator knows it reports
    while reporter._sequence < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    silent_s = float(os.environ.get("SILENT_START_S", "3"))
    waker = subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time; time.sleep(float(sys.argv[1])); "
                              "os.kill(int(sys.argv[2]), signal.SIGCONT)", str(silent_s), str(os.getpid())])
    os.kill(os.getpid(), signal.SIGSTOP)
    waker.wait(60)
    print(f"{context.name}: awake after a silence of {silent_s:g} s while initializing", flush=True)
    reporter.update(phase=pb.PHASE_TRAINING, step=1, loss=0.5)


if __name__ == "__main__":
    raise SystemExit(run_task(body))
