"""Warm spares with real processes (no TensorFlow): a restart takes ready spares instead of new processes."""

from __future__ import annotations

import dataclasses
import json
import sys

from orchestrator.api import Job, run
from orchestrator.backends.local import LocalBackend
from orchestrator.health.server import HealthServer, HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.spec import JobSpec
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import Supervisor
from tests.conftest import REPO, all_pids, assert_no_process_left

PROGRAM = (sys.executable, "-m", "tests.programs.task")


def job_with_spares(tmp_path, spares: int | None) -> Job:
    """A job whose tasks run the tiny test program as if it were the built-in one (it reports
    heartbeats), so the supervisor keeps spares for it."""
    spec = JobSpec.create(workers=2, supervision=SupervisionSpec.create(deadline_s=30.0, spares=spares))
    backend = LocalBackend()
    store = HeartbeatStore()
    server = HealthServer("t0ken", store, backend.release_port).start()
    plan = make_plan(spec, backend.allocate(spec), run_id="r", run_dir=tmp_path / "r", health_address=server.address,
                     token="t0ken", orchestrator_pid=__import__("os").getpid())
    plan = dataclasses.replace(plan, tasks=tuple(dataclasses.replace(tp, argv=PROGRAM) for tp in plan.tasks))
    plan.run_dir.mkdir(parents=True)
    return Job(plan, Supervisor(plan, backend, store, stop_timeout_s=5.0), server, store)


def test_a_group_restart_takes_the_ready_spares(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    # attempt 0: worker-1 waits until two spares exist, then dies like a SIGKILLed task (137)
    monkeypatch.setenv("TEST_BEHAVIOR_worker_0_0", "serve")
    monkeypatch.setenv("TEST_BEHAVIOR_worker_1_0", "exit-when:spares/spare-*.log:2:137")
    monkeypatch.setenv("TEST_BEHAVIOR", "succeed")
    job = job_with_spares(tmp_path, spares=None)  # default: the MWMS group, 2
    result, summary = run(job)
    spare_pids = [s["pid"] for s in summary["spares"]]
    assert_no_process_left(all_pids(summary) + spare_pids)
    assert result.exit_code == 0, summary["reason"]
    used = {s["task"]: s["pid"] for s in summary["spares"] if s["state"] == "used"}
    assert sorted(used) == ["worker-0", "worker-1"]
    tasks = {t["task"]: t for t in summary["tasks"]}
    assert {name: tasks[name.replace("-", ":")]["pid"] for name in used} == used  # attempt 1 ran in the spares
    assert all(t["attempts"] == 2 for t in tasks.values())
    out = (job.plan.run_dir / "attempt-1" / "worker-1" / "stdout.log").read_text()
    assert "worker-1 behavior=succeed" in out  # the spare became worker-1, attempt 1, and logged where it should
    assert json.loads((job.plan.run_dir / "summary.json").read_text())["spares"] == summary["spares"]


def test_spares_zero_starts_none_and_unused_spares_are_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TEST_BEHAVIOR", "succeed")
    result, summary = run(job_with_spares(tmp_path / "none", spares=0))
    assert result.exit_code == 0 and summary["spares"] == []
    monkeypatch.setenv("TEST_BEHAVIOR_worker_0", "succeed-when:spares/spare-*.log:1")
    monkeypatch.setenv("TEST_BEHAVIOR_worker_1", "succeed-when:spares/spare-*.log:1")
    result, summary = run(job_with_spares(tmp_path / "one", spares=1))
    assert result.exit_code == 0, summary["reason"]
    assert [s["state"] for s in summary["spares"]] == ["stopped"]
    assert_no_process_left([s["pid"] for s in summary["spares"]])


PARENT = """
import os, sys, time
from pathlib import Path
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.base import SpareRequest
b = LocalBackend()
b.keep_spares(SpareRequest(1, (sys.executable, "-m", "tests.programs.task"),
                           {"ORCH_ORCHESTRATOR_PID": str(os.getpid())}, ("tests.programs.slow_import",), Path(sys.argv[1])))
print(b.spares()[0].pid, flush=True)
time.sleep(60)
"""


def test_a_spare_still_importing_dies_with_the_orchestrator(tmp_path):
    import subprocess

    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    try:
        spare = int(parent.stdout.readline())
        parent.kill()  # SIGKILL: no cleanup runs; the spare is in its 30 s import
        parent.wait(10)
        assert_no_process_left([spare], timeout_s=5.0)
    finally:
        if parent.poll() is None:
            parent.kill()
