"""The user program of the GPU check (``tests/gpu/check.py``): no TensorFlow, CuPy or PyTorch.

    python alloc.py DIR LIBRARY BYTES    allocate BYTES on the task's GPU, record, hold until DIR/go
    python alloc.py DIR LIBRARY oom      allocate twice the device's memory: the library's OOM, uncaught

Writes ``DIR/<task>.json``: its ``CUDA_VISIBLE_DEVICES``, how many devices the library sees and
whether ``tensorflow`` is imported in this process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    out, library, amount = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    name = f"{task['type']}-{task['index']}"
    if library == "cupy":
        import cupy

        devices = cupy.cuda.runtime.getDeviceCount()
        total = cupy.cuda.Device(0).mem_info[1]

        def allocate(n: int):
            return cupy.empty(n, dtype=cupy.uint8)
    else:
        import torch

        devices = torch.cuda.device_count()
        total = torch.cuda.get_device_properties(0).total_memory

        def allocate(n: int):
            return torch.empty(n, dtype=torch.uint8, device="cuda")
    held = allocate(2 * total if amount == "oom" else int(amount))  # the OOM: raised here, uncaught
    record = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "devices": devices,
              "tensorflow_imported": "tensorflow" in sys.modules, "allocated_bytes": int(amount)}
    (out / f"{name}.json").write_text(json.dumps(record))
    deadline = time.monotonic() + 120
    while not (out / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    del held


if __name__ == "__main__":
    main()
