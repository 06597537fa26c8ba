"""Issue 21 item 8: ``resumed_from_step`` is the step ``fit`` really resumed at. A user's tf-keras
program with ``BackupAndRestore(save_freq=10)`` (25 steps per epoch) killed at step 33 resumes at
step 30, inside epoch 1, not at its boundary (25). Real TensorFlow, one MWMS worker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, orchestrator_cmd, test_env

pytest.importorskip("tf_keras")


def test_a_fit_resumed_inside_an_epoch_reports_the_step_it_resumed_at(tmp_path):
    result = subprocess.run(
        orchestrator_cmd("launch", "--plain", "--workers", "1", "--runs-dir", str(tmp_path), "--deadline", "240",
                         "--spares", "0", "--inject-fault", "worker:0:kill@step=33",
                         "--", sys.executable, "tests/programs/user_backup_resume.py"),
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    (recovery,) = summary["recoveries"]
    assert recovery["resumed_from_step"] == 30, (recovery, out)
    assert summary["metrics"]["resumed_from_step"] == 30 and summary["metrics"]["steps"] == 50
