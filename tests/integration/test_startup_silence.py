"""A task silent for longer than the heartbeat timeout while still initializing (importing
TensorFlow holds the GIL, and so its heartbeat thread, for seconds: ``bench/heartbeat_gaps.py``)
is not hung: start-up is judged by the startup timeout; past start-up the heartbeat timeout
holds (issue 23 item 6). Real processes, real runtime and gRPC, no TensorFlow."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from orchestrator import api
from orchestrator.spec import JobSpec
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, all_pids, assert_no_process_left


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)


def test_a_task_silent_while_initializing_is_not_hung_by_the_heartbeat_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("SILENT_START_S", "3")  # three times the heartbeat timeout below
    spec = JobSpec.create(workers=1, heartbeat_interval_s=0.2)
    spec = dataclasses.replace(spec, supervision=SupervisionSpec.create(
        heartbeat_timeout_s=1.0, startup_timeout_s=60.0, deadline_s=30.0, restart_policy={"all": "never"}))
    program = [sys.executable, "-m", "tests.programs.silent_start"]
    job = api.prepare(spec, runs_dir=tmp_path, commands={"worker": program})
    result, summary = api.run(job)
    assert_no_process_left(all_pids(summary))
    assert (result.exit_code, summary["status"]) == (0, "Succeeded"), summary["reason"]
    assert summary["failures"] == []
    assert "awake after a silence of 3 s" in (job.plan.run_dir / "attempt-0" / "worker-0" / "stdout.log").read_text()
