"""A user's program for the GPU tests (no TensorFlow): records the devices it was given, then
waits for the test's ``go`` file, or fails the way a GPU out-of-memory does.

    python gpu_user.py DIR [report] [oom]

* writes ``DIR/<task>.json``: its ``CUDA_VISIBLE_DEVICES``, ``ORCH_GPUS``, ``TF_FORCE_GPU_ALLOW_GROWTH``
  and whether ``tensorflow`` is imported (it must not be: nothing of the orchestrator's imports it);
* ``report``: reports steps through ``orchestrator.client`` (heartbeats, which carry GPU samples);
* ``oom``: worker 1 waits for ``DIR/oom-now``, then prints TensorFlow's GPU out-of-memory error
  and aborts (SIGABRT, as a CUDA abort does): retryable by its exit, permanent by what it says;
* then waits (at most 60 s) for ``DIR/go`` and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

OOM = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
       "shape[65536,65536] and type float on /job:worker/replica:0/task:1/device:GPU:0 by allocator GPU_0_bfc")


def main() -> None:
    out = Path(sys.argv[1])
    modes = set(sys.argv[2:])
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    name = f"{task['type']}-{task['index']}"
    if "report" in modes:
        from orchestrator.client import report
    else:
        report = None
    record = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "ORCH_GPUS", "TF_FORCE_GPU_ALLOW_GROWTH")}
    record["tensorflow_imported"] = "tensorflow" in sys.modules
    (out / f"{name}.json").write_text(json.dumps(record))
    deadline = time.monotonic() + 60
    if "oom" in modes and name == "worker-1":  # once the test saw its device sampled
        while not (out / "oom-now").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print(OOM, file=sys.stderr, flush=True)
        os.abort()
    step = 0
    while not (out / "go").exists() and time.monotonic() < deadline:
        if report is not None:
            step += 1
            report(step=step, loss=1.0 / step)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
