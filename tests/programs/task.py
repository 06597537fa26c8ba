"""A tiny task program (no TensorFlow) for supervisor tests.

Behaviour comes from ``TEST_BEHAVIOR_<type>_<index>_<attempt>``, else
``TEST_BEHAVIOR_<type>_<index>``, else ``TEST_BEHAVIOR``: ``succeed``, ``exit:<code>``, ``raise``,
``serve`` (never exits), ``ignore-term`` (never exits and ignores SIGTERM), ``stall`` (training,
step never moves), ``exit-when:<glob under the run dir>:N:<code>``, ``freeze`` (SIGSTOP itself),
``never-start`` (heartbeats but never trains or serves), ``spawn-child`` (serves with a child
process in its group), ``succeed-when-ready:N`` (succeeds once N serving tasks wrote
their ``ready`` file), ``succeed-when:<glob under the run dir>:N``, ``train:<steps>:<seconds per step>[:<exit code>]``
(trains: step, falling loss and examples/s reported every step, one stdout line per step, then succeeds, or exits
with the code; ``steps`` 0: forever).
It uses the real runtime and heartbeat client.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.task.runtime import run_task


def body(context, reporter) -> None:
    behavior = (
        os.environ.get(f"TEST_BEHAVIOR_{context.task_type}_{context.task_index}_{context.attempt}")
        or os.environ.get(f"TEST_BEHAVIOR_{context.task_type}_{context.task_index}")
        or os.environ.get("TEST_BEHAVIOR", "succeed")
    )
    if behavior == "never-start":  # heartbeats, but never reaches training or serving
        forever = threading.Event()
        forever.wait()
    reporter.update(phase=pb.PHASE_TRAINING, step=1, loss=0.5)
    port = reporter.release_port()
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0)))) if hasattr(os, "sched_getaffinity") else ""
    print(f"{context.name} behavior={behavior} port={port} cpus={cpus} "
          f"policy={os.sched_getscheduler(0) if hasattr(os, 'sched_getscheduler') else ''}", flush=True)
    forever = threading.Event()
    if behavior.startswith("succeed-when-ready:"):  # N serving peers wrote their ready file
        behavior = "succeed-when:attempt-*/*/ready:" + behavior.split(":")[1]
    if behavior.startswith("succeed-when:"):  # wait (bounded) until N files match a glob
        _, pattern, wanted = behavior.split(":")
        deadline = time.monotonic() + 30
        while len(glob.glob(os.path.join(context.run_dir, pattern))) < int(wanted):
            if time.monotonic() > deadline:
                raise TimeoutError("peers never became ready")
            time.sleep(0.05)
        behavior = "succeed"
    if behavior.startswith("exit-when:"):  # exit with a code once N files match a glob (bounded wait)
        _, pattern, wanted, code = behavior.split(":")
        deadline = time.monotonic() + 30
        while len(glob.glob(os.path.join(context.run_dir, pattern))) < int(wanted) and time.monotonic() < deadline:
            time.sleep(0.05)
        behavior = f"exit:{code}"
    if behavior == "succeed":
        reporter.update(step=2, loss=0.25, test_accuracy=0.9)
        return
    if behavior.startswith("train:"):  # a training loop without TensorFlow: steps, loss, throughput
        _, steps, period, *code = behavior.split(":")
        step, period_s = 0, float(period)
        while int(steps) == 0 or step < int(steps):
            step += 1
            loss = 2.0 / (1.0 + 0.05 * step) + 0.01 * (context.task_index + 1)
            reporter.update(step=step, epoch=step // 10, loss=loss, examples_per_second=32 / period_s)
            print(f"{context.name} step {step} loss {loss:.4f}", flush=True)
            forever.wait(period_s)  # the pace of the fake training
        if code:
            print(f"about to exit {code[0]}", file=sys.stderr, flush=True)
            os._exit(int(code[0]))
        reporter.update(test_accuracy=0.9)
        return
    if behavior.startswith("exit:"):
        print("about to exit", file=sys.stderr, flush=True)
        os._exit(int(behavior.split(":")[1]))
    if behavior == "raise":
        raise ValueError("boom from the test program")
    if behavior == "stall":  # heartbeats go on, the step never moves
        forever.wait()
    if behavior == "freeze":  # SIGSTOP itself: heartbeats stop too
        # first let a few heartbeats out (bounded), so the orchestrator knows this task reports
        deadline = time.monotonic() + 30
        while reporter._sequence < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGSTOP)
    if behavior == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if behavior == "spawn-child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child pid {child.pid}", flush=True)
        with open(os.path.join(context.task_dir, "child.pid"), "w") as fh:
            fh.write(str(child.pid))
    reporter.update(phase=pb.PHASE_SERVING)
    if context.task_dir:
        open(os.path.join(context.task_dir, "ready"), "w").close()
    forever.wait()


if __name__ == "__main__":
    raise SystemExit(run_task(body))
