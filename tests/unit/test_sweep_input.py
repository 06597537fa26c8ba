"""``sweep``'s grid and its Slurm job array (rendered only, never run), and its bad input: one
line, exit 2, nothing written or started (issue 36 item 3)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.cli.sweep import parse_grid, points
from tests.conftest import REPO, orchestrator_cmd, test_env


def test_the_grid_is_every_combination_in_order():
    grid = parse_grid(["learning-rate=0.1,0.01", "--workers=2,3"], {"--learning-rate", "--workers"})
    assert points(grid) == [["--learning-rate", lr, "--workers", w] for lr in ("0.1", "0.01") for w in ("2", "3")]


def test_the_slurm_job_array_runs_launch_with_each_point(tmp_path):
    script = tmp_path / "sweep.sh"
    result = subprocess.run(orchestrator_cmd("sweep", "--backend", "slurm", "-o", str(script), "--run-id", "lr",
                                             "--runs-dir", str(tmp_path / "runs"), "--workers", "2", "--epochs", "2",
                                             "--grid", "learning-rate=0.1,0.01", "--grid", "batch-size=16,32",
                                             "--parallel", "2"),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    assert "#SBATCH --array=0-3%2" in text.splitlines() and "#SBATCH --nodes=2" in text
    assert "  0) point=(--learning-rate 0.1 --batch-size 16) ;;  # learning-rate=0.1 batch-size=16" in text
    assert "  3) point=(--learning-rate 0.01 --batch-size 32) ;;  # learning-rate=0.01 batch-size=32" in text
    last = [line for line in text.splitlines() if line.startswith("exec ")]
    assert len(last) == 1 and " launch --backend slurm --plain --runs-dir " in last[0]
    assert last[0].endswith('--workers 2 --epochs 2 "${point[@]}" --run-id "lr-${SLURM_ARRAY_TASK_ID}"'), last
    assert "--grid" not in last[0] and "--parallel" not in last[0]
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # the script parses
    assert "a job array of 4 runs, at most 2 at a time" in result.stdout


@pytest.mark.parametrize("args, fragment", [
    ([], "grid='': a sweep needs at least one --grid"),
    (["--grid", "learning-rate"], "grid='learning-rate': must be FLAG=V1,V2"),
    (["--grid", "nosuch=1,2"], "grid='nosuch=1,2': --nosuch is not a flag of launch"),
    (["--grid", "workers=2,zero"], "grid='workers=zero': launch refuses it: argument --workers: invalid int"),
    (["--grid", "workers=2,0"], "workers=0"),
    (["--grid", "workers=1,2", "--parallel", "0"], "parallel=0: must be at least 1"),
    (["--grid", "workers=1,2", "-o", "x.sh"], "output='x.sh': is for --backend slurm"),
])
def test_bad_sweep_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    result = subprocess.run(orchestrator_cmd("sweep", "--runs-dir", str(tmp_path / "runs"), *args, "--", sys.executable,
                                             "-c", "pass"),
                            capture_output=True, text=True, timeout=60, cwd=tmp_path, env=test_env())
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "x.sh").exists()
