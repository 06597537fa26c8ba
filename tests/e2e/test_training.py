"""End to end with real TensorFlow: the CLI trains on the digits and cleans up after itself."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_no_process_left, orchestrator_cmd, test_env

pytestmark = pytest.mark.e2e


def launch(tmp_path: Path, run_id: str, *args: str, timeout_s: float = 300) -> tuple[subprocess.CompletedProcess, dict]:
    result = subprocess.run(
        # no restart to speed up here: warm spares would only take CPU from these short jobs
        orchestrator_cmd("launch", "--plain", "--runs-dir", str(tmp_path), "--run-id", run_id, "--spares", "0", *args),
        capture_output=True, text=True, timeout=timeout_s, cwd=REPO, env=test_env(),
    )
    summary = json.loads((tmp_path / run_id / "summary.json").read_text())
    assert_no_process_left([t["pid"] for t in summary["tasks"]])
    return result, summary


def test_mwms_two_workers_train_to_high_accuracy(tmp_path):
    result, summary = launch(tmp_path, "mwms", "--workers", "2", "--epochs", "5")
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary["status"] == "Succeeded"
    assert summary["metrics"]["test_accuracy"] >= 0.85
    assert summary["metrics"]["steps"] == 5 * summary["metrics"]["steps_per_epoch"]
    assert summary["training"]["global_batch_size"] == 32
    assert [t["state"] for t in summary["tasks"]] == ["Succeeded", "Succeeded"]
    assert summary["cluster_check"]["formed"] == {f"worker-{i}": {"replicas_in_sync": 2, "cluster_workers": 2}
                                                  for i in range(2)}  # formed as planned (issue 21)
    run_dir = tmp_path / "mwms"
    assert (run_dir / "model" / "saved_model.pb").exists()
    assert not (run_dir / "attempt-0" / "worker-1" / "scratch-model").exists()
    for t in summary["tasks"]:
        hb = t["last_heartbeat"]
        assert hb["phase"] == "done" and hb["rss_bytes"] > 100e6 and hb["heartbeats"] >= 3
    assert "test accuracy" in result.stdout and "Job Succeeded" in result.stdout


def test_pss_chief_worker_ps_train_and_the_servers_are_stopped(tmp_path):
    result, summary = launch(tmp_path, "pss", "--strategy", "parameter_server", "--workers", "1", "--ps", "1",
                             "--epochs", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary["metrics"]["test_accuracy"] >= 0.85
    states = {t["task"]: (t["state"], t["signal"]) for t in summary["tasks"]}
    assert states == {"chief:0": ("Succeeded", None), "worker:0": ("Stopped", "SIGTERM"),
                      "ps:0": ("Stopped", "SIGTERM")}
    ps = next(t for t in summary["tasks"] if t["task"] == "ps:0")
    assert ps["last_heartbeat"]["phase"] == "serving"
    check = summary["cluster_check"]  # the coordinator's resolver sees the planned chief + worker (issue 21)
    assert check["formed"]["chief-0"]["cluster_workers"] == 2 and not check["mismatches"], check
    assert (tmp_path / "pss" / "model" / "saved_model.pb").exists()


def test_a_task_exiting_with_code_3_fails_the_job_naming_it(tmp_path):
    result, summary = launch(tmp_path, "exit3", "--workers", "2", "--epochs", "3",
                             "--inject-fault", "worker:1:exit=3@step=5")
    assert result.returncode == 1
    assert summary["status"] == "Failed"
    assert (summary["root_cause"]["task"], summary["root_cause"]["exit_code"]) == ("worker:1", 3)
    assert "worker-1 (attempt 0) failed: exit code 3" in result.stdout
    assert "last lines of its stderr" in result.stdout and "injecting fault: exit at step=5" in result.stdout


def test_two_launches_at_the_same_moment_do_not_collide(tmp_path):
    procs = [
        subprocess.Popen(
            orchestrator_cmd("launch", "--quiet", "--runs-dir", str(tmp_path), "--run-id", f"twin{i}", "--workers", "2",
                             "--epochs", "1", "--spares", "0"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=test_env(),
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    summaries = [json.loads((tmp_path / f"twin{i}" / "summary.json").read_text()) for i in range(2)]
    for p, (out, err), s in zip(procs, outputs, summaries):
        assert p.returncode == 0, out + err
        assert_no_process_left([t["pid"] for t in s["tasks"]])
    ports = [{a.rsplit(":", 1)[1] for a in s["cluster"]["worker"]} for s in summaries]
    assert not ports[0] & ports[1]


RESOLVE = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
out = []
for cfg in json.load(sys.stdin):
    os.environ["TF_CONFIG"] = json.dumps(cfg)
    r = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    out.append({"type": r.task_type, "id": r.task_id, "cluster": r.cluster_spec().as_dict(), "rpc": r.rpc_layer})
print(json.dumps(out))
"""


def test_rendered_tf_configs_parse_with_tfconfigclusterresolver(tmp_path):
    plans = []
    for args in (["--workers", "3"], ["--strategy", "parameter_server", "--workers", "2", "--ps", "2"]):
        result = subprocess.run(orchestrator_cmd("launch", "--dry-run", *args), capture_output=True, text=True,
                                timeout=60, cwd=REPO, env=test_env())
        assert result.returncode == 0, result.stderr
        plans.append(json.loads(result.stdout))
    configs = [t["tf_config"] for p in plans for t in p["tasks"]]
    resolved = subprocess.run([sys.executable, "-c", RESOLVE], input=json.dumps(configs), capture_output=True,
                              text=True, timeout=120)
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    for cfg, got in zip(configs, json.loads(resolved.stdout)):
        assert (got["type"], got["id"], got["rpc"]) == (cfg["task"]["type"], cfg["task"]["index"], "grpc")
        assert got["cluster"] == cfg["cluster"]


def test_ctrl_c_stops_every_task_and_exits_130(tmp_path):
    proc = subprocess.Popen(
        orchestrator_cmd("launch", "--plain", "--runs-dir", str(tmp_path), "--run-id", "int", "--workers", "2",
                         "--epochs", "50"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=test_env(),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=120)
            if "Running/training" in line:
                break
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    summary = json.loads((tmp_path / "int" / "summary.json").read_text())
    assert (summary["status"], summary["reason"]) == ("Interrupted", "interrupted by SIGINT")
    assert [t["state"] for t in summary["tasks"]] == ["Stopped", "Stopped"]
    assert_no_process_left([t["pid"] for t in summary["tasks"]])
