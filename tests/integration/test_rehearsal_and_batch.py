"""Issue 21 item 8 through the CLI and real processes (no TensorFlow): a rehearsal whose step
fault can never fire is said when it is known and does not exit 0; a user program's global batch
is recorded, and a resume that trains with another one is warned about."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, orchestrator_cmd, test_env, wait_until

NO_STEPS = "from orchestrator.client import report; report(loss=0.5)"  # reports, but never a step


@pytest.mark.parametrize("program", [NO_STEPS, "pass"], ids=["reports-no-step", "never-reports"])
def test_a_step_fault_that_never_fires_is_said_with_the_fix_and_exits_3(tmp_path, program):
    result = subprocess.run(
        orchestrator_cmd("launch", "--plain", "--workers", "1", "--runs-dir", str(tmp_path),
                         "--inject-fault", "worker:0:kill@step=5", "--", sys.executable, "-c", program),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    out = result.stdout + result.stderr
    assert result.returncode == 3, out
    live, final = result.stdout.split("\nJob Succeeded", 1)
    # said as an event of the run, with how to fix it, not only in the final report
    assert "WARNING: the injected fault kill@step=5 of worker-0 will never fire: worker-0 (attempt 0) ended " \
           "without ever sending a step" in live, out
    assert "@time=SECONDS" in live and "report(step=...)" in live
    assert "the rehearsal tested nothing: worker:0:kill@step=5 never fired" in " ".join(final.split()), out
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert (summary["status"], summary["exit_code"]) == ("Succeeded", 3)
    assert summary["faults"] == [{"fault": "worker:0:kill@step=5", "fired": False}]


def test_a_step_fault_that_fired_exits_as_the_job_did(tmp_path):
    program = "from orchestrator.client import report\nfor s in range(1, 4): report(step=s)"
    result = subprocess.run(
        orchestrator_cmd("launch", "--plain", "--workers", "1", "--runs-dir", str(tmp_path), "--max-restarts", "0",
                         "--inject-fault", "worker:0:exit=3@step=2", "--", sys.executable, "-c", program),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr  # the fault's exit 3 failed the job: tested
    assert "will never fire" not in result.stdout


BATCH = """
import os, time
from orchestrator.client import report
batch = 64 if os.environ["ORCH_ATTEMPT"] == "0" else 96  # the resumed life's program changed its batch
report(step=1, global_batch_size=batch)
if batch == 64:
    time.sleep(60)  # until the preemption notice
"""


def _run_dir(runs: Path) -> Path:
    wait_until(lambda: any(runs.glob("*/plan.json")), 30, what="plan.json")
    return next(runs.glob("*/plan.json")).parent


def test_the_global_batch_is_recorded_and_a_change_at_resume_is_a_warning(tmp_path):
    runs = tmp_path / "runs"
    proc = subprocess.Popen(orchestrator_cmd("launch", "--plain", "--workers", "1", "--runs-dir", str(runs),
                                             "--", sys.executable, "-c", BATCH),
                            cwd=REPO, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run = _run_dir(runs)

        def recorded() -> bool:
            try:
                lives = json.loads((run / "run.json").read_text())["lives"]
            except (OSError, ValueError, KeyError):
                return False
            return lives[-1].get("global_batch_size") == 64

        wait_until(recorded, 30, what="run.json records the global batch 64")
        proc.send_signal(signal.SIGTERM)  # a preemption: save and leave, exit 75
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, out + err
    assert json.loads((run / "summary.json").read_text())["metrics"]["global_batch_size"] == 64
    result = subprocess.run(orchestrator_cmd("launch", "--plain", "--runs-dir", str(runs), "--resume", run.name),
                            cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    live, final = result.stdout.split("\nJob Succeeded", 1)
    assert "WARNING: the global batch changed from 64 (life 1) to 96" in live, result.stdout
    assert "the global batch changed between lives: 64 (life 1), 96 (life 2)" in " ".join(final.split()), final
    summary = json.loads((run / "summary.json").read_text())
    assert [life["global_batch_size"] for life in summary["lives"]] == [64, 96]
    assert summary["metrics"]["global_batch_size"] == 96
