"""Issue 11 through the CLI and real processes (no TensorFlow): signals, fault reports, the final report."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.report.summary import format_final
from tests.conftest import REPO, orchestrator_cmd, test_env, wait_until

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _run_dir(runs: Path) -> Path:
    wait_until(lambda: any(runs.glob("*/plan.json")), 30, what="plan.json")
    return next(runs.glob("*/plan.json")).parent


def test_sighup_and_sigquit_stop_the_job_and_keep_the_summary(tmp_path):
    for signum in (signal.SIGHUP, signal.SIGQUIT):
        runs = tmp_path / signum.name
        proc = subprocess.Popen(orchestrator_cmd("launch", "--quiet", "--workers", "2", "--runs-dir", str(runs),
                                                 "--", *SLEEPER),
                                cwd=REPO, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            run_dir = _run_dir(runs)
            # the lambda is called within this iteration, so the loop variable cannot go stale
            wait_until(lambda: len(list(run_dir.glob("attempt-0/*/stdout.log"))) == 2,  # noqa: B023
                       30, what="both tasks started")
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, out + err
        summary = json.loads((run_dir / "summary.json").read_text())
        assert (summary["status"], summary["reason"]) == ("Interrupted", f"interrupted by {signum.name}")


def test_a_fault_that_did_not_fire_is_reported(tmp_path):
    result = subprocess.run(
        orchestrator_cmd("launch", "--plain", "--workers", "1", "--runs-dir", str(tmp_path),
                         "--inject-fault", "worker:0:kill@time=300", "--", sys.executable, "-c", "pass"),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr  # the rehearsal tested nothing (issue 21)
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["faults"] == [{"fault": "worker:0:kill@time=300", "fired": False}]
    assert "the injected fault worker:0:kill@time=300 did not fire" in result.stdout


def test_a_hang_at_a_time_for_a_users_program_is_refused(tmp_path):
    result = subprocess.run(
        orchestrator_cmd("launch", "--workers", "1", "--runs-dir", str(tmp_path),
                         "--inject-fault", "worker:0:hang@time=3",
                         "--", sys.executable, "-c", "pass"),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "cannot be caused from outside a user's program" in result.stderr and not list(tmp_path.iterdir())


def test_a_users_program_job_shows_its_program_not_the_builtin_settings(tmp_path):
    result = subprocess.run(
        orchestrator_cmd("launch", "--dry-run", "--workers", "2", "--runs-dir", str(tmp_path), "--", *SLEEPER),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    plan = json.loads(result.stdout)
    assert "global_batch_size" not in plan and plan["program"] == SLEEPER
    assert all("ORCH_TRAINING" not in t["env"] for t in plan["tasks"])


def test_the_final_report_fits_120_columns():
    long = "x" * 60
    failure = {"task": "worker:1", "attempt": 2, "exit_code": None, "signal": "SIGKILL",
               "message": f"hung: no training progress for 61.0 s at step 10 (stall timeout 60 s); "
                          f"stack dump in /{long}/"
                          f"attempt-2/worker-1/stacks.txt", "stderr_tail": "Traceback\n" + "y" * 300,
               "log_path": f"/{long}/{long}/attempt-2/worker-1/stderr.log", "peer_error": "Collective has timed out",
               "likely_culprit": "worker-0 (last step 9, no progress for 40.0 s)", "after_success": False,
               "after_training": True}
    summary = {"status": "Failed", "wall_time_s": 99.0, "reason": "worker-1 (attempt 2) failed: " + failure["message"],
               "run_dir": f"/{long}/{long}", "program": ["py", "-m", "x", "--", "python", long, long],
               "strategy": "multi_worker_mirrored", "training": None, "metrics": {}, "evaluation": None,
               "tasks": [{"task": "worker:1", "state": "Failed", "exit": "signal SIGKILL", "reason": summary_reason,
                          "restarts": 2} for summary_reason in [failure["message"]]],
               "recoveries": [{"scope": "group", "tasks": ["worker-0", "worker-1"], "cause": failure["message"],
                               "detection_to_resumed_training_s": 3.0, "resumed_from_step": 45}],
               "late_failures": [failure], "faults": [{"fault": "worker:0:kill@time=300", "fired": False}],
               "root_cause": failure, "model_dir": None, "tensorboard_dir": None}
    text = format_final(summary)
    assert max(len(line) for line in text.splitlines()) <= 120, text
    assert "likely culprit worker-0" in text and "stacks.txt" in text.replace("\n", "").replace(" ", "")


def test_more_tasks_than_one_machine_can_run_is_bad_input(tmp_path):
    result = subprocess.run(
        orchestrator_cmd("launch", "--dry-run", "--workers", "5000", "--runs-dir", str(tmp_path), "--",
                         sys.executable, "-c", "pass"),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: workers=5000: 5000 tasks on this one machine") and "Slurm" in result.stderr


def test_a_script_that_does_not_exist_is_bad_input(tmp_path):
    result = subprocess.run(
        orchestrator_cmd("launch", "--workers", "2", "--runs-dir", str(tmp_path),
                         "--", sys.executable, "no_such_train.py"),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "no_such_train.py: no such file" in result.stderr and not list(tmp_path.iterdir())


@pytest.mark.parametrize("program", [["bash", "{shell}"], ["{shell}"], [sys.executable, "-c", "pass"]],
                         ids=["bash-script", "shell-script", "python-c"])
def test_launch_refuses_spares_for_a_program_a_spare_cannot_become_and_starts_nothing(tmp_path, program):
    shell = tmp_path / "train.sh"
    shell.write_text("#!/bin/sh\npython train.py\n")
    shell.chmod(0o755)
    runs = tmp_path / "runs"
    result = subprocess.run(
        orchestrator_cmd("launch", "--spares", "2", "--workers", "2", "--runs-dir", str(runs), "--",
                         *(arg.format(shell=shell) for arg in program)),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: spares=2: --spares") and "drop --spares" in lines[0], lines
    assert not runs.exists() or not list(runs.iterdir())  # nothing started, no run directory
