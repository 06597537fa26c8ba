"""End to end with real TensorFlow: the CLI trains on the digits and cleans up after itself."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_no_process_left, orchestrator_cmd, test_env

pytestmark = pytest.mark.e2e


TWINS = {  # started at the same moment (test_two_launches_at_the_same_moment_do_not_collide)
    "mwms": ("--workers", "2", "--epochs", "3"),
    "exit3": ("--workers", "2", "--epochs", "3", "--inject-fault", "worker:1:exit=3@step=5"),
}


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> dict[str, tuple[int, str, dict, Path, str]]:
    """Two MWMS launches started at the same moment, run once for three tests: the 3-epoch training
    and the job whose worker-1 exits with code 3 at step 5 (each reached training: neither
    collided with the other's ports). Per run id: (exit code, stdout, summary.json, run dir,
    stderr)."""
    runs = tmp_path_factory.mktemp("twins")
    procs = {
        run_id: subprocess.Popen(
            # no restart to speed up here: warm spares would only take CPU from these short jobs
            orchestrator_cmd("launch", "--plain", "--runs-dir", str(runs), "--run-id", run_id, "--spares", "0", *args),
            # each its own lease ledger: both start at once, as two launches did before the leases (the port race)
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**test_env(), "ORCH_LEASES_DIR": str(runs / f"leases-{run_id}")})
        for run_id, args in TWINS.items()
    }
    try:
        # the two outputs are read in parallel: a full pipe must not stall either launch
        with ThreadPoolExecutor(2) as pool:
            outputs = dict(zip(procs, pool.map(lambda p: p.communicate(timeout=300), procs.values())))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
    result = {}
    for run_id, p in procs.items():
        summary = json.loads((runs / run_id / "summary.json").read_text())
        assert_no_process_left([t["pid"] for t in summary["tasks"]])
        out, err = outputs[run_id]
        result[run_id] = (p.returncode, out, summary, runs / run_id, err)
    return result


def test_mwms_two_workers_train_to_high_accuracy(twins):
    code, out, summary, run_dir, err = twins["mwms"]
    assert code == 0, out + err
    assert summary["status"] == "Succeeded"
    assert summary["metrics"]["test_accuracy"] >= 0.85
    assert summary["metrics"]["steps"] == 3 * summary["metrics"]["steps_per_epoch"]
    assert summary["training"]["global_batch_size"] == 32
    assert [t["state"] for t in summary["tasks"]] == ["Succeeded", "Succeeded"]
    assert summary["cluster_check"]["formed"] == {f"worker-{i}": {"replicas_in_sync": 2, "cluster_workers": 2}
                                                  for i in range(2)}  # formed as planned (issue 21)
    assert (run_dir / "model" / "saved_model.pb").exists()
    assert not (run_dir / "attempt-0" / "worker-1" / "scratch-model").exists()
    for t in summary["tasks"]:
        hb = t["last_heartbeat"]
        assert hb["phase"] == "done" and hb["rss_bytes"] > 100e6 and hb["heartbeats"] >= 3
    assert "test accuracy" in out and "Job Succeeded" in out


def test_a_task_exiting_with_code_3_fails_the_job_naming_it(twins):
    code, out, summary, _, err = twins["exit3"]
    assert code == 1, out + err
    assert summary["status"] == "Failed"
    assert (summary["root_cause"]["task"], summary["root_cause"]["exit_code"]) == ("worker:1", 3)
    assert "worker-1 (attempt 0) failed: exit code 3" in out
    assert "last lines of its stderr" in out and "injecting fault: exit at step=5" in out


def test_two_launches_at_the_same_moment_do_not_collide(twins):
    # both trained (the 3 epochs; worker-1 of the other reached step 5 before its fault), on ports of their own
    (code, out, summary, _, err), (_, out3, summary3, _, err3) = twins["mwms"], twins["exit3"]
    assert code == 0 and summary["metrics"]["steps"] > 0, out + err
    assert "injecting fault: exit at step=5" in out3, out3 + err3
    ports = [{a.rsplit(":", 1)[1] for a in s["cluster"]["worker"]} for s in (summary, summary3)]
    assert len(ports[0]) == len(ports[1]) == 2 and not ports[0] & ports[1]


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
