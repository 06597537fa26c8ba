"""A GPU out-of-memory is named as the root cause, with its device and memory, and is permanent under
``exit-code``; an NCCL collective error is a peer's failure. Tables over the pure functions of
:mod:`orchestrator.supervisor.rules.gpu` and :mod:`orchestrator.supervisor.rules.decisions`; then the status,
table and ``/metrics`` columns a task's GPUs give (issue 20)."""

from __future__ import annotations

import re

import pytest

from orchestrator.report.status import COLUMNS, GPU_COLUMNS, columns, format_table, row
from orchestrator.resources.gpus import GpuUsage
from orchestrator.spec.supervision import RestartPolicy
from orchestrator.supervisor.rules import decisions
from orchestrator.supervisor.rules.gpu import batch_hint, describe, device_usage, gpu_oom, peak
from orchestrator.web.metrics import job_metrics

GIB = 2**30
TF_OOM = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node __wrapped__MatMul}} "
          "OOM when allocating tensor with shape[65536,65536] and type float on "
          "/job:worker/replica:0/task:1/device:GPU:{i} by allocator GPU_{i}_bfc [Op:MatMul]")


@pytest.mark.parametrize("text, index", [
    (TF_OOM.format(i=0), 0),
    (TF_OOM.format(i=1), 1),
    ("RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[8,1024] by allocator GPU_0_bfc", 0),
    (("Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
      "capacity of 79.19 GiB of which 1.2 GiB is free."), 0),
    ("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 85,899,345,920 bytes (allocated so far: 0 bytes).",
     None),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00GiB.", None),
    ("F external/xla/xla/stream_executor/cuda/cuda_driver.cc: CUDA_ERROR_OUT_OF_MEMORY: out of memory", None),
    ("RuntimeError: CUDA error: out of memory", None),
])
def test_gpu_out_of_memory_is_recognised_with_its_device(text, index):
    found = gpu_oom("some output before\n" + text + "\nand after")
    assert found is not None and found.device_index == index
    assert "\n" not in found.error and found.error.strip()


@pytest.mark.parametrize("text", [
    "",
    "ValueError: boom",
    # TensorFlow's OOM on a CPU device is host memory: the RSS / cgroup diagnosis names it
    ("ResourceExhaustedError: OOM when allocating tensor with shape[1000000,100000] and type float on "
     "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"),
    "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: NCCL error",
    "MemoryError",
])
def test_other_failures_are_not_a_gpu_out_of_memory(text):
    assert gpu_oom(text) is None


def test_the_devices_sample_and_the_hint_make_the_root_cause():
    usages = (GpuUsage("GPU-a", 2, 10.0, 1 * GIB, 80 * GIB), GpuUsage("GPU-b", 3, 99.0, 79 * GIB, 80 * GIB))
    oom = gpu_oom(TF_OOM.format(i=1))
    assert oom is not None
    usage = device_usage(oom, ["GPU-a", "GPU-b"], usages)  # GPU:1 is the task's second device
    assert usage is not None and usage.uuid == "GPU-b"
    text = describe(oom, usage, batch_hint(True, 512))
    assert text == ("GPU out of memory on GPU 1 (GPU-b): 79.0 of 80.0 GiB used at the last sample; "
                    "lower the per-replica batch (--batch-size, now 512)")
    assert describe(oom, None, batch_hint(False, 16)).startswith("GPU out of memory on GPU 1; lower the program's")
    unnamed = gpu_oom("CUDA out of memory")
    assert unnamed is not None and device_usage(unnamed, ["GPU-a", "GPU-b"], usages) == usages[1]  # the fullest
    assert device_usage(unnamed, [], ()) is None


@pytest.mark.parametrize("previous, usages, expected", [
    (None, (), None),
    (None, (GpuUsage("a", 0, 0, 5, 10), GpuUsage("b", 1, 0, 3, 10)), 8),
    (10, (GpuUsage("a", 0, 0, 5, 10),), 10),
])
def test_peak_gpu_memory(previous, usages, expected):
    assert peak(previous, usages) == expected


@pytest.mark.parametrize("policy, code, retry", [
    (RestartPolicy.EXIT_CODE, 1, False),
    (RestartPolicy.EXIT_CODE, -6, False),  # a CUDA abort (SIGABRT) would be retryable; a GPU OOM is not
    (RestartPolicy.EXIT_CODE, 134, False),
    (RestartPolicy.ON_FAILURE, 1, True),  # on-failure retries every failure, as it says
    (RestartPolicy.NEVER, -6, False),
])
def test_a_gpu_out_of_memory_is_permanent_under_exit_code(policy, code, retry):
    verdict = decisions.retry_verdict(policy, "worker", code, restarts_used=0, max_restarts=3, task_name="worker-1",
                                      attempt=0, gpu_oom=True)
    assert verdict.retry is retry
    if policy is RestartPolicy.EXIT_CODE:
        assert "GPU out-of-memory" in verdict.why_not
    plain = decisions.retry_verdict(policy, "worker", code, restarts_used=0, max_restarts=3, task_name="worker-1",
                                    attempt=0)
    assert plain.retry is (policy is not RestartPolicy.NEVER and (policy is RestartPolicy.ON_FAILURE or code < 0
                                                                  or code >= 128))


@pytest.mark.parametrize("text, peer", [
    ("tensorflow.python.framework.errors_impl.InternalError: NCCL error: unhandled system error", "NCCL error"),
    ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
     "ncclRemoteError"),
    ("NCCL communicator was aborted on rank 1", "NCCL communicator was aborted"),
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed", "ncclSystemError"),
    ("NCCL WARN Cuda failure 'out of memory'", ""),  # a warning line alone is no peer's failure
])
def test_an_nccl_collective_error_is_a_peer_failure(text, peer):
    assert decisions.peer_error(text) == peer


# -- the columns -------------------------------------------------------------------------------------------
def _task(name: str, gpus: dict | None) -> dict:
    task_type, index = name.split("-")
    out = {"task": f"{task_type}:{index}", "name": name, "task_type": task_type, "task_index": int(index),
           "state": "Running", "restarts": 0, "attempt": 0, "pid": 10, "heartbeat_age_s": 0.2,
           "last_heartbeat": {"phase": "training", "cpu_percent": 90.0, "rss_bytes": 500e6, "heartbeats": 3, "step": 7}}
    if gpus is not None:
        out["gpus"] = gpus
    return out


GPUS = {"count": 1, "devices": ["GPU-a"], "utilization_percent": 87.0, "memory_used_bytes": 41_000_000_000,
        "memory_total_bytes": 85_000_000_000, "peak_memory_bytes": 42_000_000_000, "samples": []}


def test_gpu_columns_appear_when_a_task_holds_a_gpu():
    status = {"run_id": "r", "strategy": "multi_worker_mirrored", "status": "Running", "elapsed_s": 3.0, "live": True,
              "tasks": [_task("worker-0", GPUS), _task("ps-0", {"count": 0, "devices": []})]}
    assert columns(status) == COLUMNS[:10] + GPU_COLUMNS + COLUMNS[10:]
    cells = row(status["tasks"][0])
    assert (cells["gpus"], cells["gpu%"], cells["gpu MB"]) == ("1", "87", "41000/85000")
    assert (row(status["tasks"][1])["gpus"], row(status["tasks"][1])["gpu MB"]) == ("-", "-")
    header = format_table(status).splitlines()[1]
    assert re.search(r"rss MB\s+gpus\s+gpu%\s+gpu MB\s+restarts", header), header
    assert columns({"tasks": [_task("worker-0", None)]}) == COLUMNS  # no GPU: the table as before


def test_metrics_carry_the_gpu_family():
    status = {"run_id": "r", "strategy": "multi_worker_mirrored", "status": "Running", "live": True,
              "tasks": [_task("worker-0", GPUS), _task("worker-1", None)]}
    samples = {(m.name, s.name, s.labels.get("task_index")): s.value for m in job_metrics(status) for s in m.samples}
    assert samples[("tfjob_task_gpus", "tfjob_task_gpus", "0")] == 1
    assert samples[("tfjob_task_gpu_utilization_ratio", "tfjob_task_gpu_utilization_ratio", "0")] == pytest.approx(0.87)
    assert samples[("tfjob_task_gpu_memory_used_bytes", "tfjob_task_gpu_memory_used_bytes", "0")] == 41e9
    assert samples[("tfjob_task_gpu_memory_total_bytes", "tfjob_task_gpu_memory_total_bytes", "0")] == 85e9
    assert samples[("tfjob_task_gpu_memory_peak_bytes", "tfjob_task_gpu_memory_peak_bytes", "0")] == 42e9
    assert not any(key[2] == "1" and key[0].startswith("tfjob_task_gpu") for key in samples)  # no made-up zeros
