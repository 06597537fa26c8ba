"""Every strategy x loop, the user's own programs, other data, the evaluator (real TensorFlow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env

pytestmark = pytest.mark.e2e


def launch(tmp_path: Path, run_id: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    result = subprocess.run(
        # no restart to speed up here: warm spares would only take CPU from these short jobs
        orchestrator_cmd("launch", "--plain", "--runs-dir", str(tmp_path), "--run-id", run_id, "--spares", "0", *args),
        capture_output=True, text=True, timeout=300, cwd=REPO, env=test_env(),
    )
    summary = json.loads((tmp_path / run_id / "summary.json").read_text())
    assert_no_process_left(all_pids(summary))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result, summary


def test_a_users_mwms_script_runs_unchanged_and_its_reported_steps_land_in_the_summary(tmp_path):
    result, summary = launch(tmp_path, "user", "--workers", "2", "--",
                             sys.executable, str(REPO / "examples" / "mwms_train.py"), "--epochs", "3")
    assert summary["program"][-4:] == [sys.executable, str(REPO / "examples" / "mwms_train.py"), "--epochs", "3"]
    assert summary["training"] is None
    assert summary["metrics"]["steps"] > 0 and summary["metrics"]["accuracy"] > 0.5
    assert all(t["last_heartbeat"]["rss_bytes"] > 100e6 for t in summary["tasks"])
    assert "program" in result.stdout


def test_a_users_pss_script_handles_every_role_and_the_servers_are_stopped(tmp_path):
    _, summary = launch(tmp_path, "user-pss", "--strategy", "parameter_server", "--workers", "1", "--ps", "1", "--",
                        sys.executable, str(REPO / "examples" / "pss_train.py"), "--steps", "200")
    assert summary["metrics"]["steps"] == 200
    states = {t["task"]: t["state"] for t in summary["tasks"]}
    assert states == {"chief:0": "Succeeded", "worker:0": "Stopped", "ps:0": "Stopped"}
    ps = next(t for t in summary["tasks"] if t["task"] == "ps:0")
    assert ps["last_heartbeat"] is None and ps["process_sample"]["rss_bytes"] > 100e6  # watched without a change


def test_a_script_that_does_not_report_is_watched_by_its_process(tmp_path):
    _, summary = launch(tmp_path, "plain", "--workers", "1", "--", sys.executable, "-c", "print('hello')")
    assert summary["tasks"][0]["state"] == "Succeeded"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    for fmt, target in (("npz", out / "digits.npz"), ("tfrecord", out / "tfrecords")):
        subprocess.run([sys.executable, "-m", "worker.data", "export", "--format", fmt, "--out", str(target),
                        "--shards", "2"], check=True, cwd=REPO, env=test_env(), timeout=120, capture_output=True)
    return out


def test_mirrored_fit_on_an_npz_file_trains_to_high_accuracy(tmp_path, exported):
    # MWMS and PSS with fit are covered by test_training.py; the custom loop of each strategy by the test in
    # test_preemption.py that runs the same job (same topology, 4 epochs) with its fault: mirrored by the custom
    # loop's preemption, MWMS by the SIGKILL with --checkpoint-every 10, PSS by the preempted PSS worker
    _, summary = launch(tmp_path, "npz", "--strategy", "mirrored", "--replicas", "2", "--loop", "fit", "--epochs", "4",
                        "--data", str(exported / "digits.npz"))
    assert summary["training"]["data"].endswith("digits.npz")
    assert summary["metrics"]["test_accuracy"] >= 0.85
    assert summary["training"]["loop"] == "fit"
    assert summary["metrics"]["steps"] == 4 * summary["metrics"]["steps_per_epoch"]
    assert summary["metrics"]["replicas"] == 2 and summary["training"]["global_batch_size"] == 32


@pytest.fixture(scope="module")
def tfrecord_with_evaluator(tmp_path_factory, exported) -> tuple[dict, Path]:
    """One MWMS job for two tests: 2 workers on the TFRecord directory, 4 epochs, and an evaluator
    SIGKILLed 2 s after its start. Returns (summary.json, run dir)."""
    runs = tmp_path_factory.mktemp("tfr-eval")
    _, summary = launch(runs, "tfr-eval", "--workers", "2", "--epochs", "4", "--data", str(exported / "tfrecords"),
                        "--evaluator", "--inject-fault", "evaluator:0:kill@time=2")
    return summary, runs / "tfr-eval"


def test_a_tfrecord_directory_trains_sharded_by_file(tfrecord_with_evaluator):
    summary, run_dir = tfrecord_with_evaluator
    assert summary["training"]["data"].endswith("tfrecords")
    assert summary["metrics"]["test_accuracy"] >= 0.85
    log = (run_dir / "attempt-0" / "worker-1" / "stdout.log").read_text()
    assert "dataset sharded by FILE (2 train files for 2 worker(s))" in log


def test_the_evaluator_reports_metrics_and_its_failure_does_not_fail_the_job(tfrecord_with_evaluator):
    summary, run_dir = tfrecord_with_evaluator
    evaluator = next(t for t in summary["tasks"] if t["task"] == "evaluator:0")
    assert evaluator["restarts"] == 1 and evaluator["earlier_attempts"][0]["exit"] == "signal SIGKILL"
    assert summary["restarts"] == 0
    assert summary["evaluation"]["eval_accuracy"] >= 0.85
    assert summary["evaluation"]["evaluated_step"] == summary["metrics"]["steps"]
    assert (run_dir / "tensorboard").is_dir()
