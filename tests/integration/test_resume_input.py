"""``launch --resume`` bad input: one line naming the field, exit 2, nothing started, nothing in
the run directory changed (no TensorFlow: the run directories are written as a life leaves them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.spec.fields import spec_fields
from orchestrator.spec.loader import build_spec
from tests.conftest import REPO, orchestrator_cmd, test_env


def _run_dir(runs: Path, name: str, *, status: str | None = None, pid: int | None = None,
             program: list[str] | None = None) -> Path:
    """A run directory as a first life leaves it: plan.json (with the run's spec), run.json, and
    summary.json once ended, or endpoint.json while its orchestrator runs."""
    run = runs / name
    (run / "attempt-0" / "worker-0").mkdir(parents=True)
    spec = build_spec({"workers": 2, "training": {"epochs": 3}}, {})
    plan = {"run_id": name, "spec": spec_fields(spec), "program": program,
            "tasks": [{"task": "worker:0"}, {"task": "worker:1"}]}
    (run / "plan.json").write_text(json.dumps(plan))
    (run / "run.json").write_text(json.dumps({"version": 1, "run_id": name, "lives": [
        {"life": 1, "started_at_unix": 1.0, "ended": status, "last_step": 50}], "restarts_used": 1}))
    if status is not None:
        (run / "summary.json").write_text(json.dumps({"run_id": name, "status": status}))
    if pid is not None:
        (run / "endpoint.json").write_text(json.dumps({"run_id": name, "pid": pid, "address": "127.0.0.1:1",
                                                       "token": "x"}))
    return run


def _state(run: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime) for p in sorted(run.rglob("*"))}


@pytest.mark.parametrize("setup, args, fragment", [
    (dict(), ["--resume", "nosuch"], "resume='nosuch': no such run"),
    (dict(status="Succeeded"), [], "already succeeded: there is nothing left to train"),
    (dict(pid=os.getpid()), [], "its orchestrator (pid {pid}) is still running"),  # the same id in every xdist worker
    (dict(status="Preempted"), ["--workers", "3"], "workers=3: differs from the resumed run's 2"),
    (dict(status="Preempted"), ["--epochs", "5"], "training.epochs=5: differs from the resumed run's 3"),
    (dict(status="Preempted"), ["--run-id", "other"], "run-id='other': differs from --resume r"),
    (dict(status="Preempted"), ["--", sys.executable, "-c", "pass"], "differs from the resumed run's program"),
    (dict(status="Preempted"), ["--resume", "../r"], "resume='../r': must be a plain directory name"),
])
def test_bad_resume_input_is_one_line_exit_2_and_changes_nothing(tmp_path, setup, args, fragment):
    runs = tmp_path / "runs"
    run = _run_dir(runs, "r", **setup)
    before = _state(run)
    resume = [] if "--resume" in args else ["--resume", "r"]
    result = subprocess.run(orchestrator_cmd("launch", "--runs-dir", str(runs), *resume, *args),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment.format(pid=os.getpid()) in lines[0], result.stderr
    assert result.stdout == ""
    assert _state(run) == before and sorted(p.name for p in runs.iterdir()) == ["r"]


def test_a_resume_may_change_the_deadline_and_keeps_the_runs_own_spec(tmp_path):
    runs = tmp_path / "runs"
    _run_dir(runs, "r", status="Preempted")
    result = subprocess.run(orchestrator_cmd("launch", "--runs-dir", str(runs), "--resume", "r", "--deadline", "60",
                                             "--dry-run"),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["run_id"] == "r" and plan["spec"]["workers"] == 2 and plan["spec"]["training"]["epochs"] == 3
    assert plan["spec"]["supervision"]["deadline_s"] == 60
