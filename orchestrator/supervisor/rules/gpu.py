"""GPUs in the supervisor: a task's samples, its peak, and the diagnosis of a GPU out-of-memory
(pure functions over plain data; table tests in ``tests/unit/test_gpu_diagnosis.py``).

A GPU out-of-memory is its own root cause, not a crash like any other: the allocation that
failed says which device, the task's last sample says how full it was, and the fix is known
(a smaller per-replica batch, or fewer/larger model replicas per device). The error texts it is
told by:

* TensorFlow: ``ResourceExhaustedError`` / ``RESOURCE_EXHAUSTED`` with ``OOM when allocating
  tensor with shape[...] ... on /job:worker/replica:0/task:1/device:GPU:0 by allocator
  GPU_0_bfc`` (``gpu_bfc_allocator``), or XLA's ``Out of memory while trying to allocate``;
* PyTorch: ``torch.OutOfMemoryError: CUDA out of memory. ... GPU 0 has a total capacity of``;
* CuPy: ``cupy.cuda.memory.OutOfMemoryError: Out of memory allocating ...``;
* CUDA itself: ``CUDA_ERROR_OUT_OF_MEMORY``, ``cudaErrorMemoryAllocation``, ``CUDA error: out of memory``.

The same TensorFlow error on a ``device:CPU`` (allocator ``cpu``) is host memory, and is left
to the host-memory diagnosis (RSS, the cgroup's OOM kills). A retry would fail the same way, so
under the ``exit-code`` policy a GPU out-of-memory is permanent whatever the exit code
(:func:`orchestrator.supervisor.rules.decisions.retry_verdict`). A collective error on GPUs (NCCL:
``NCCL error``, ``ncclRemoteError``, ``ncclSystemError``...) is a consequence of a peer like any
other collective error (:data:`orchestrator.supervisor.rules.decisions.PEER_ERRORS`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.resources.gpus import GpuUsage

_TF_OOM = re.compile(r"OOM when allocating tensor[^\n]*?(?:device:(?P<kind>GPU|CPU):(?P<index>\d+))?"
                     r"(?:[^\n]*?by allocator (?P<allocator>\S+))?", re.IGNORECASE)
_OTHER_OOM = re.compile(
    r"(?:CUDA out of memory|OutOfMemoryError|Out of memory allocating|CUDA_ERROR_OUT_OF_MEMORY"
    r"|cudaErrorMemoryAllocation"
    r"|CUDA error: out of memory|Out of memory while trying to allocate|failed to allocate [^\n]* from device"
    r"|CUBLAS_STATUS_ALLOC_FAILED)", re.IGNORECASE)
_TORCH_GPU = re.compile(r"GPU (\d+) has a total capacity")


@dataclass(frozen=True)
class GpuOom:
    """A GPU out-of-memory, as the error text tells it.

    Attributes:
        error: the matched text (``OOM when allocating tensor ...``), one line, shortened.
        device_index: the device's index among the task's visible devices (TF's ``GPU:0``),
            None when the text does not say.
    """

    error: str
    device_index: int | None = None


def gpu_oom(text: str) -> GpuOom | None:
    """The GPU out-of-memory that ``text`` (an error message and stderr tail) reports, or None
    (also for a TensorFlow OOM on a CPU device: host memory)."""
    text = text or ""
    for m in _TF_OOM.finditer(text):
        allocator = (m.group("allocator") or "").lower()
        if m.group("kind") == "CPU" or allocator.startswith("cpu"):
            continue
        gpu_in_allocator = re.match(r"gpu_(\d+)", allocator)
        index = m.group("index") or (gpu_in_allocator.group(1) if gpu_in_allocator else None)
        if m.group("kind") is None and not gpu_in_allocator and "GPU" not in text and "CUDA" not in text:
            continue  # no word of a GPU anywhere: not ours to name
        return GpuOom(_line(text, m.start()), int(index) if index is not None else None)
    other = _OTHER_OOM.search(text)
    if other is None:
        return None
    torch_gpu = _TORCH_GPU.search(text)
    return GpuOom(_line(text, other.start()), int(torch_gpu.group(1)) if torch_gpu else None)


def _line(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start:end if end >= 0 else len(text)].strip()
    return line if len(line) <= 240 else line[:237] + "..."


def device_usage(oom: GpuOom, devices: Sequence[str], usages: Sequence[GpuUsage]) -> GpuUsage | None:
    """The sample of the device that ran out: the task's ``devices`` (UUIDs in its
    ``CUDA_VISIBLE_DEVICES`` order, which is how TensorFlow and CUDA number them: ``GPU:0`` is
    the first) picked by the error's index; else the task's only, or fullest, device."""
    by_uuid = {u.uuid: u for u in usages}
    if oom.device_index is not None and oom.device_index < len(devices) and devices[oom.device_index] in by_uuid:
        return by_uuid[devices[oom.device_index]]
    if not usages:
        return None
    return max(usages, key=lambda u: u.memory_used_bytes / max(1, u.memory_total_bytes))


def describe(oom: GpuOom, usage: GpuUsage | None, batch_hint: str) -> str:
    """The root cause's words: ``GPU out of memory on GPU 0 (GPU-8f3c...): 79.2 of 80.0 GiB used
    at the last sample; lower the per-replica batch (--batch-size, now 512)``."""
    where = f"GPU {oom.device_index}" if oom.device_index is not None else "a GPU"
    if usage is not None:
        index = oom.device_index if oom.device_index is not None else usage.index
        where = (f"GPU {index} ({usage.uuid}): {usage.memory_used_bytes / 2**30:.1f} of "
                 f"{usage.memory_total_bytes / 2**30:.1f} GiB used at the last sample")
    return f"GPU out of memory on {where}; {batch_hint}"


def batch_hint(builtin: bool, batch_size_per_replica: int) -> str:
    """What to do about it: the built-in program's flag and its value, or a user's program's own batch."""
    if builtin:
        return f"lower the per-replica batch (--batch-size, now {batch_size_per_replica})"
    return "lower the program's per-replica batch (or the model's size per device)"


def gpu_oom_dict(oom: GpuOom, usage: GpuUsage | None, hint: str) -> dict[str, Any]:
    """``summary.json``'s ``gpu_oom`` of a failure."""
    return {
        "error": oom.error,
        "device_index": oom.device_index,
        "uuid": usage.uuid if usage else None,
        "memory_used_bytes": usage.memory_used_bytes if usage else None,
        "memory_total_bytes": usage.memory_total_bytes if usage else None,
        "hint": hint,
    }


def usages_of(heartbeat: Any) -> tuple[GpuUsage, ...]:
    """The :class:`GpuUsage` of a ``supervisor_pb2.Heartbeat``'s ``gpus``."""
    return tuple(GpuUsage(g.uuid, g.index, g.utilization_percent, g.memory_used_bytes, g.memory_total_bytes)
                 for g in heartbeat.gpus)


def peak(previous: int | None, usages: Sequence[GpuUsage]) -> int | None:
    """The peak GPU memory so far (bytes, all the task's devices together) after ``usages``."""
    if not usages:
        return previous
    return max(previous or 0, sum(u.memory_used_bytes for u in usages))
