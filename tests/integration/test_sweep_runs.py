"""``sweep`` (issue 36 item 3): a grid of two points run one at a time (``--parallel 1``), each an
ordinary run directory, ranked by a metric; the Slurm job array it writes instead; bad input.
No TensorFlow: the runs' tasks are ``tests.programs.task`` (it trains a few steps and reports
``test_accuracy``)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, orchestrator_cmd, test_env

PROGRAM = [sys.executable, "-m", "tests.programs.task"]


def test_a_sweep_of_two_points_runs_them_one_at_a_time_and_ranks_them(tmp_path):
    runs = tmp_path / "runs"
    result = subprocess.run(orchestrator_cmd("sweep", "--runs-dir", str(runs), "--run-id", "sw", "--workers", "1",
                                             "--grid", "heartbeat-interval=0.2,0.3", "--parallel", "1", "--",
                                             *PROGRAM),
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**test_env(), "TEST_BEHAVIOR": "train:3:0.01"})
    assert result.returncode == 0, result.stdout + result.stderr
    plans = [json.loads((runs / f"sw-{k}" / "plan.json").read_text()) for k in range(2)]
    assert [p["spec"]["heartbeat_interval_s"] for p in plans] == [0.2, 0.3]
    summaries = [json.loads((runs / f"sw-{k}" / "summary.json").read_text()) for k in range(2)]
    assert [s["status"] for s in summaries] == ["Succeeded", "Succeeded"]
    # --parallel 1: the second run started (its plan written) after the first had ended (its summary written)
    assert (runs / "sw-0" / "summary.json").stat().st_mtime_ns <= (runs / "sw-1" / "plan.json").stat().st_mtime_ns
    lines = result.stdout.splitlines()
    assert lines[0] == f"sweep sw: 2 runs, at most 1 at a time, under {runs}"
    head = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    assert lines[head].split() == ["rank", "run", "point", "status", "test_accuracy"]
    ranked = [line.split() for line in lines[head + 1:]]
    assert [r[1] for r in ranked] == ["sw-0", "sw-1"] and all(r[3] == "Succeeded" for r in ranked)


def test_a_failed_point_makes_the_sweep_exit_1(tmp_path):
    runs = tmp_path / "runs"
    result = subprocess.run(orchestrator_cmd("sweep", "--runs-dir", str(runs), "--run-id", "sw", "--workers", "1",
                                             "--max-restarts", "0", "--grid", "heartbeat-interval=0.2,0.3",
                                             "--parallel", "2", "--", *PROGRAM),
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**test_env(), "TEST_BEHAVIOR": "exit:1"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert sorted(p.name for p in runs.iterdir()) == ["sw-0", "sw-1"]
