"""GPUs end to end, on a machine without one: the fake inventory of our own (``ORCH_FAKE_GPUS``),
real orchestrator processes, real task processes (a user's program, no TensorFlow), real gRPC.

What a task gets (its devices by UUID, disjoint), what ``status --json`` and ``summary.json``
show of them (the task's heartbeat samples them; for a silent program the backend does), and a
GPU out-of-memory named as the root cause and not retried under ``exit-code`` although its
SIGABRT would be. ``tests/gpu/check.py`` is the same on a real GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.resources.gpus import FAKE_ENV
from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env, wait_until

PROGRAM = str(REPO / "tests" / "programs" / "gpu_user.py")
GIB = 2**30


@pytest.fixture
def fake_gpus(tmp_path) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps([
        {"uuid": "GPU-11111111-aaaa", "name": "Fake L4", "memory_total_bytes": 24 * GIB,
         "memory_used_bytes": 5 * GIB, "utilization_percent": 61.0},
        {"uuid": "GPU-22222222-bbbb", "name": "Fake L4", "memory_total_bytes": 24 * GIB,
         "memory_used_bytes": 23 * GIB, "utilization_percent": 97.0},
    ]))
    return path


def _env(fake: Path) -> dict[str, str]:
    environ = test_env()
    environ[FAKE_ENV] = str(fake)
    return environ


def _status(runs: Path, run_id: str, environ: dict[str, str]) -> dict:
    result = subprocess.run(orchestrator_cmd("status", run_id, "--runs-dir", str(runs), "--json"), env=environ,
                            capture_output=True, text=True, timeout=30, check=False)
    return json.loads(result.stdout) if result.returncode == 0 and result.stdout.strip() else {}


@pytest.mark.parametrize("mode", ["report", "silent"])
def test_each_task_gets_its_own_device_and_status_shows_it(tmp_path, fake_gpus, mode):
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    environ = _env(fake_gpus)
    args = ["launch", "--workers", "2", "--runs-dir", str(runs), "--run-id", "gpu", "--quiet", "--deadline", "60",
            "--heartbeat-interval", "0.2", "--", sys.executable, PROGRAM, str(out),
            *(["report"] if mode == "report" else [])]
    launcher = subprocess.Popen(orchestrator_cmd(*args), env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        wait_until(lambda: all(t.get("gpus", {}).get("memory_used_bytes") is not None
                               for t in _status(runs, "gpu", environ).get("tasks", [{}])), 30,
                   interval_s=0.2, what="GPU samples of both tasks in status --json")
        live = _status(runs, "gpu", environ)
    finally:
        (out / "go").write_text("")
        _, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 0, stderr
    seen = {name: json.loads((out / f"{name}.json").read_text()) for name in ("worker-0", "worker-1")}
    assert seen["worker-0"]["CUDA_VISIBLE_DEVICES"] == "GPU-11111111-aaaa"
    assert seen["worker-1"]["CUDA_VISIBLE_DEVICES"] == "GPU-22222222-bbbb"
    assert all(s["ORCH_GPUS"] == "1" and s["TF_FORCE_GPU_ALLOW_GROWTH"] is None for s in seen.values())
    assert not any(s["tensorflow_imported"] for s in seen.values())
    tasks = {t["name"]: t["gpus"] for t in live["tasks"]}
    assert tasks["worker-1"]["devices"] == ["GPU-22222222-bbbb"]
    assert (tasks["worker-1"]["utilization_percent"], tasks["worker-1"]["memory_used_bytes"],
            tasks["worker-1"]["memory_total_bytes"]) == (97.0, 23 * GIB, 24 * GIB)
    summary = json.loads((runs / "gpu" / "summary.json").read_text())
    assert summary["peak_gpu_memory_bytes"] == 23 * GIB
    assert summary["tasks"][0]["gpus"]["peak_memory_bytes"] == 5 * GIB
    plan = json.loads((runs / "gpu" / "plan.json").read_text())
    assert [t["gpus"]["devices"][0]["uuid"] for t in plan["tasks"]] == ["GPU-11111111-aaaa", "GPU-22222222-bbbb"]
    if mode == "report":
        assert summary["tasks"][1]["last_heartbeat"]["step"] >= 1  # the samples came with the heartbeats
    assert_no_process_left(all_pids(summary))


def test_a_gpu_out_of_memory_is_the_root_cause_and_is_not_retried(tmp_path, fake_gpus):
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    environ = _env(fake_gpus)
    args = ["launch", "--workers", "2", "--runs-dir", str(runs), "--run-id", "oom", "--json", "--deadline", "60",
            "--restart-policy", "exit-code", "--max-restarts", "3", "--heartbeat-interval", "0.2",
            "--", sys.executable, PROGRAM, str(out), "oom"]
    launcher = subprocess.Popen(orchestrator_cmd(*args), env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        wait_until(lambda: any(t["name"] == "worker-1" and t.get("gpus", {}).get("memory_used_bytes") is not None
                               for t in _status(runs, "oom", environ).get("tasks", [])), 30,
                   interval_s=0.2, what="worker-1's device sampled")
    finally:
        (out / "oom-now").write_text("")
        stdout, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 1, stderr
    summary = json.loads(stdout)
    cause = summary["root_cause"]
    assert cause["task"] == "worker:1" and cause["signal"] == "SIGABRT"
    assert summary["restarts"] == 0  # SIGABRT alone is retryable under exit-code; a GPU OOM is not
    assert cause["gpu_oom"]["uuid"] == "GPU-22222222-bbbb"
    assert (cause["gpu_oom"]["memory_used_bytes"], cause["gpu_oom"]["memory_total_bytes"]) == (23 * GIB, 24 * GIB)
    assert "GPU out of memory on GPU 0 (GPU-22222222-bbbb): 23.0 of 24.0 GiB used" in cause["message"]
    assert "lower the program's per-replica batch" in cause["message"]
    assert "does not retry a GPU out-of-memory" in summary["reason"]
    assert_no_process_left(all_pids(summary))


def test_a_user_programs_gpu_job_runs_where_tensorflow_cannot_be_imported(tmp_path, fake_gpus):
    """What the GPU check machine is (no TensorFlow): neither the orchestrator nor a user's
    program's task side imports it, so a ``tensorflow`` that fails to import changes nothing."""
    shadow = tmp_path / "shadow" / "tensorflow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no TensorFlow on this machine')\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "go").write_text("")
    environ = _env(fake_gpus)
    environ["PYTHONPATH"] = str(shadow.parent) + os.pathsep + environ["PYTHONPATH"]
    result = subprocess.run(orchestrator_cmd("launch", "--workers", "2", "--runs-dir", str(tmp_path / "runs"), "--json",
                                             "--deadline", "60", "--", sys.executable, PROGRAM, str(out), "report"),
                            env=environ, capture_output=True, text=True, timeout=90, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert [t["gpus"]["devices"] for t in summary["tasks"]] == [["GPU-11111111-aaaa"], ["GPU-22222222-bbbb"]]
    assert not any(json.loads((out / f"worker-{i}.json").read_text())["tensorflow_imported"] for i in range(2))


def test_mig_instances_are_dealt_by_their_uuids_and_a_busy_gpu_last_with_a_warning(tmp_path):
    """Issue 36 item 4 with real processes: a GPU in MIG mode (the fake inventory's ``mig`` list)
    is dealt as its instances, named by their ``MIG-`` UUIDs in the tasks' ``CUDA_VISIBLE_DEVICES``;
    a busy whole GPU (another user's process on it) is dealt last, and the plan warns of it."""
    fake = tmp_path / "gpus.json"
    fake.write_text(json.dumps([
        {"uuid": "GPU-busy", "name": "Fake L4", "memory_total_bytes": 24 * GIB, "memory_used_bytes": 23 * GIB,
         "utilization_percent": 99.0},
        {"uuid": "GPU-a100", "name": "Fake A100", "memory_total_bytes": 40 * GIB, "mig": [
            {"uuid": "MIG-aaaa-0", "name": "Fake A100 MIG 3g.20gb", "memory_total_bytes": 20 * GIB},
            {"uuid": "MIG-aaaa-1", "name": "Fake A100 MIG 3g.20gb", "memory_total_bytes": 20 * GIB}]},
    ]))
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    (out / "go").write_text("")  # the tasks record what they got and exit
    result = subprocess.run(orchestrator_cmd("launch", "--workers", "3", "--gpus-per-task", "1", "--runs-dir",
                                             str(runs), "--run-id", "mig", "--plain", "--deadline", "60", "--",
                                             sys.executable, PROGRAM, str(out)),
                            env=_env(fake), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = {n: json.loads((out / f"worker-{n}.json").read_text())["CUDA_VISIBLE_DEVICES"] for n in range(3)}
    assert seen == {0: "MIG-aaaa-0", 1: "MIG-aaaa-1", 2: "GPU-busy"}
    assert "GPU 0 (GPU-busy) is busy: 99 % utilised, 23.0 of 24.0 GiB used" in result.stdout + result.stderr
