"""Each task runs on the cores its plan gives it (orchestrator.resources.cpus), with real processes: tiny
programs, no TensorFlow, started through ``execwrap`` as any user's program is (the built-in
``python -m worker`` and ``ps`` pin every thread of theirs the same way, right after importing
TensorFlow: ``test_pin_self_all_threads_moves_the_floating_threads_and_leaves_a_pinned_one``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import api
from orchestrator.resources.pinning import parse_cpus
from orchestrator.spec import JobSpec
from orchestrator.spec.model import TaskId
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, all_pids, assert_no_process_left

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")

PROGRAM = ("import json, os; print('seen ' + json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
           "'intra': os.environ.get('TF_NUM_INTRAOP_THREADS'), 'planned': os.environ.get('ORCH_CPUS')}), flush=True)")
MINE = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)


def seen(run_dir: Path, task: str) -> dict:
    out = (run_dir / "attempt-0" / task / "stdout.log").read_text()
    return json.loads(next(line for line in out.splitlines() if line.startswith("seen "))[5:])


@pytest.mark.skipif(len(MINE) < 2, reason="two tasks pinned apart need two cores")
def test_each_task_runs_on_the_cores_it_was_planned_with_and_threads_follow(tmp_path):
    spec = JobSpec.create(workers=2, heartbeat_interval_s=0.2,
                          supervision=SupervisionSpec.create(deadline_s=20.0, backoff_s=0.1))
    job = api.prepare(spec, runs_dir=tmp_path, commands={"worker": [sys.executable, "-c", PROGRAM]})
    result, summary = api.run(job)
    assert_no_process_left(all_pids(summary))
    assert result.exit_code == 0, summary["reason"]
    assert job.plan.cpus.pinned
    per = len(MINE) // 2
    for i in range(2):
        planned = job.plan.cpus.tasks[TaskId("worker", i)]
        assert len(planned) == per
        got = seen(job.plan.run_dir, f"worker-{i}")
        assert got["cpus"] == sorted(planned) and got["intra"] == str(per)
    assert not set(job.plan.cpus.tasks[TaskId("worker", 0)]) & set(job.plan.cpus.tasks[TaskId("worker", 1)])


LAUNCH = """
import os, sys
os.sched_setaffinity(0, {cores})  # the user's own restriction (taskset -c ...) before the orchestrator starts
from orchestrator.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _launch(tmp_path: Path, cores: set[int], *flags: str) -> Path:
    argv = [sys.executable, "-c", LAUNCH.format(cores=sorted(cores)), "launch", "--plain", "--runs-dir",
            str(tmp_path), "--run-id", "r", "--workers", "1", "--deadline", "20", *flags, "--",
            sys.executable, "-c", PROGRAM]
    done = subprocess.run(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "r"


@pytest.mark.skipif(len(MINE) < 2, reason="a restricted affinity needs a core left out")
def test_pinning_stays_within_the_orchestrators_own_affinity_and_no_pin_sets_none(tmp_path):
    last = {MINE[-1]}
    run_dir = _launch(tmp_path / "pinned", last)
    got = seen(run_dir, "worker-0")
    assert got["cpus"] == sorted(last) and list(parse_cpus(got["planned"])) == sorted(last)
    run_dir = _launch(tmp_path / "off", set(MINE[:2]), "--no-pin")
    got = seen(run_dir, "worker-0")
    assert got["planned"] is None and got["cpus"] == MINE[:2]  # inherited, nothing set
    assert json.loads((run_dir / "plan.json").read_text())["cpus"]["reason"] == "--no-pin"


THREADS = """
import json, os, threading
from orchestrator.resources.pinning import pin_self
service = threading.Event(); other = threading.Event(); stop = threading.Event(); seen = {}

def reporter():  # the heartbeat reporter's thread: pinned to the service cores first
    pin_self(variable="ORCH_SERVICE_CPUS"); seen["reporter"] = threading.get_native_id(); service.set(); stop.wait()

def loader():  # a thread started before the pinning (an import's, a data loader's): floating
    seen["loader"] = threading.get_native_id(); other.set(); stop.wait()

threads = [threading.Thread(target=f) for f in (reporter, loader)]
for t in threads:
    t.start()
service.wait(10); other.wait(10)
pin_self(all_threads=True)
print(json.dumps({name: sorted(os.sched_getaffinity(tid)) for name, tid in
                  {**seen, "main": threading.get_native_id()}.items()}))
stop.set()
for t in threads:
    t.join()
"""


@pytest.mark.skipif(len(MINE) < 2, reason="a task's cores and service cores apart need two cores")
def test_pin_self_all_threads_moves_the_floating_threads_and_leaves_a_pinned_one():
    task, service = MINE[:1], MINE[1:2]
    env = {**os.environ, "PYTHONPATH": str(REPO), "ORCH_CPUS": str(task[0]), "ORCH_SERVICE_CPUS": str(service[0])}
    done = subprocess.run([sys.executable, "-c", THREADS], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"main": task, "loader": task, "reporter": service}, got
