"""Elastic workers beside another run of the machine (issue 34 item 1), with real orchestrators and a
fake inventory of 4 GPUs (``ORCH_FAKE_GPUS``): while run ``a`` leases 2 of them, an elastic run
``--workers 2:4`` starts at once at 2 workers on the other 2 (with the warning line naming both sizes)
instead of waiting for 4; a third elastic run, for which not even MIN is free, waits (here: is
refused at once with ``--wait-for-resources 0``, exit 2, nothing started).

No TensorFlow: the tasks are ``tests.programs.task``, held at a known point (they wait for a file
the test writes). ``--no-pin``: only GPUs are leased, so the test means the same on any core count.
The ledger is the test's own (``ORCH_LEASES_DIR``, tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.resources.gpus import FAKE_ENV
from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env, wait_until

PROGRAM = [sys.executable, "-m", "tests.programs.task"]
GIB = 2**30
UUIDS = [f"GPU-{i}{i}{i}{i}-fake" for i in range(4)]
TWO = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []


@pytest.fixture
def environ(tmp_path) -> dict[str, str]:
    fake = tmp_path / "gpus.json"
    fake.write_text(json.dumps([{"uuid": u, "name": "Fake L4", "memory_total_bytes": 24 * GIB,
                                 "memory_used_bytes": 0, "utilization_percent": 0.0} for u in UUIDS]))
    return {**test_env(), FAKE_ENV: str(fake), "TEST_BEHAVIOR": "succeed-when:go:1"}


def _cmd(runs: Path, run_id: str, workers: str, *flags: str) -> list[str]:
    return orchestrator_cmd("launch", "--runs-dir", str(runs), "--run-id", run_id, "--workers", workers,
                            "--gpus-per-task", "1", "--batch-size", "12", "--no-pin", "--spares", "0", "--plain",
                            *flags, "--", *PROGRAM)


def _devices(runs: Path, run_id: str) -> list[str]:
    plan = json.loads((runs / run_id / "plan.json").read_text())
    return [g["uuid"] for t in plan["tasks"] for g in t["gpus"]["devices"]]


def _started(runs: Path, run_id: str, tasks: int) -> bool:
    return len([p for p in (runs / run_id).glob("attempt-0/*/stdout.log") if "behavior=" in p.read_text()]) >= tasks


def _start(procs: dict[str, subprocess.Popen], runs: Path, run_id: str, proc: subprocess.Popen, tasks: int) -> None:
    """Keep ``proc`` (the launch of run ``run_id``) in ``procs`` and wait until ``tasks`` of its tasks
    started, or it exited."""
    procs[run_id] = proc
    wait_until(lambda: _started(runs, run_id, tasks) or proc.poll() is not None, 60,
               what=f"run {run_id}'s {tasks} task(s)")


def _popen(runs: Path, run_id: str, workers: str, environ, *flags: str) -> subprocess.Popen:
    """A launch of :func:`_cmd`, its output piped."""
    return subprocess.Popen(_cmd(runs, run_id, workers, *flags), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=REPO, env=environ)


def test_an_elastic_run_starts_at_min_beside_a_run_holding_the_rest_and_waits_only_below_min(tmp_path, environ):
    runs = tmp_path / "runs"
    procs: dict[str, subprocess.Popen] = {}
    try:
        _start(procs, runs, "a", _popen(runs, "a", "2", environ), 2)
        assert procs["a"].poll() is None, procs["a"].communicate()
        # the elastic run: 2 of 4 GPUs are free; today it waited for 4 (here: 20 s, then exit 2)
        _start(procs, runs, "b", _popen(runs, "b", "2:4", environ, "--wait-for-resources", "20"), 2)
        assert procs["b"].poll() is None, procs["b"].communicate()
        assert _devices(runs, "a") == UUIDS[:2] and _devices(runs, "b") == UUIDS[2:]  # disjoint, 2 workers

        refused = subprocess.run(_cmd(runs, "c", "2:4", "--wait-for-resources", "0"), capture_output=True, text=True,
                                 timeout=60, cwd=REPO, env=environ)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        line = refused.stderr.strip().splitlines()[-1]
        assert line.startswith("error: wait-for-resources=0: waiting for GPUs 0 (") and "held by run a (pid" in line \
            and "run b (pid" in line, refused.stderr
        assert not (runs / "c").exists()

        for name in ("a", "b"):
            (runs / name / "go").write_text("")
        outputs = {n: p.communicate(timeout=60) for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert {n: p.returncode for n, p in procs.items()} == {"a": 0, "b": 0}, outputs
    warned = [w for w in outputs["b"][1].splitlines() if "elastic workers:" in w]
    assert len(warned) == 1 and warned[0].startswith("warning: elastic workers: 4 cannot be placed (GPUs 0 (")
    assert "held by run a (pid" in warned[0] and warned[0].endswith("the job starts at 2 (its range 2..4)")
    summary = json.loads((runs / "b" / "summary.json").read_text())
    assert summary["status"] == "Succeeded" and summary["elastic"]["workers"] == 2
    assert [s["workers"] for s in summary["segments"]] == [2]
    plan = json.loads((runs / "b" / "plan.json").read_text())
    assert plan["spec"]["workers"]["start"] == 2 and warned[0].removeprefix("warning: ") in plan["warnings"]
    assert {(t["env"]["ORCH_GLOBAL_BATCH_SIZE"], t["env"]["ORCH_PER_REPLICA_BATCH_SIZE"]) for t in plan["tasks"]} \
        == {("48", "24")}  # keep-global: the global batch of 4 workers, split among 2
    assert_no_process_left(all_pids(summary))


@pytest.mark.skipif(len(TWO) < 2, reason="two runs pinned apart need two cores")
def test_an_elastic_run_pinned_beside_another_starts_on_the_core_left(tmp_path):
    """The same with cores (no GPU): on two cores, run ``a`` pins one (``--threads-per-task 1``),
    and ``--workers 1:2`` starts at once at 1 worker on the other instead of waiting for both."""
    runs = tmp_path / "runs"
    environ = {**test_env(), "TEST_BEHAVIOR": "succeed-when:go:1"}

    def launch(run_id: str, workers: str, *flags: str) -> subprocess.Popen:
        return subprocess.Popen(
            orchestrator_cmd("launch", "--runs-dir", str(runs), "--run-id", run_id, "--workers", workers,
                             "--threads-per-task", "1", "--spares", "0", "--plain", *flags, "--", *PROGRAM),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=environ,
            preexec_fn=lambda: os.sched_setaffinity(0, TWO))

    procs: dict[str, subprocess.Popen] = {}
    try:
        _start(procs, runs, "a", launch("a", "1"), 1)
        _start(procs, runs, "b", launch("b", "1:2", "--wait-for-resources", "20"), 1)
        assert all(p.poll() is None for p in procs.values()), {n: p.communicate() for n, p in procs.items()}
        for name in procs:
            (runs / name / "go").write_text("")
        outputs = {n: p.communicate(timeout=60) for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert {n: p.returncode for n, p in procs.items()} == {"a": 0, "b": 0}, outputs
    plans = {n: json.loads((runs / n / "plan.json").read_text()) for n in procs}
    assert len(plans["b"]["tasks"]) == 1 and plans["b"]["spec"]["workers"]["start"] == 1
    cores = {n: plans[n]["cpus"]["tasks"]["worker-0"] for n in procs}
    assert cores["a"] != cores["b"] and {cores["a"], cores["b"]} == {str(c) for c in TWO}, cores
    warned = [w for w in outputs["b"][1].splitlines() if "elastic workers:" in w]
    assert len(warned) == 1, outputs["b"]
    assert warned[0].startswith(f"warning: elastic workers: 2 cannot be placed (cores {cores['a']}, held by run a "
                                f"(pid {procs['a'].pid}, ports "), warned
    assert warned[0].endswith("); the job starts at 1 (its range 1..2)")
    assert warned[0].removeprefix("warning: ") in plans["b"]["warnings"]


def _tasks_started(runs: Path, run_id: str) -> set[str]:
    """The tasks of any life whose program started (said its behavior)."""
    return {p.parent.name for p in (runs / run_id).glob("attempt-*/*/stdout.log") if "behavior=" in p.read_text()}


def test_an_elastic_run_started_below_max_grows_back_when_the_other_run_ends(tmp_path, environ):
    """Grow-back (``--grow-back 2``): run ``b`` (``--workers 2:4``) starts at 2 beside run ``a`` holding
    2 of the 4 GPUs; ``a`` ends and returns its lease; ``b``, 2 s or more after its start, sees the room
    and grows back to 4 by itself through the coordinated save (a new life of 4 workers on all 4
    GPUs, segment cause ``grew back``), then succeeds."""
    runs = tmp_path / "runs"
    procs: dict[str, subprocess.Popen] = {}
    try:
        _start(procs, runs, "a", _popen(runs, "a", "2", environ), 2)
        assert procs["a"].poll() is None, procs["a"].communicate()
        _start(procs, runs, "b", _popen(runs, "b", "2:4", environ, "--wait-for-resources", "20", "--grow-back", "2"), 2)
        assert procs["b"].poll() is None, procs["b"].communicate()
        assert _devices(runs, "b") == UUIDS[2:]  # 2 workers beside a

        (runs / "a" / "go").write_text("")  # a ends: its lease is returned
        outputs = {"a": procs["a"].communicate(timeout=60)}
        wait_until(lambda: len(_tasks_started(runs, "b")) >= 4 or procs["b"].poll() is not None, 90,
                   what="run b grown back to 4 workers")
        assert procs["b"].poll() is None, procs["b"].communicate()
        (runs / "b" / "go").write_text("")
        outputs["b"] = procs["b"].communicate(timeout=60)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert {n: p.returncode for n, p in procs.items()} == {"a": 0, "b": 0}, outputs
    assert "grew back: 2 -> 4 worker(s) (the machine has room for 4 again" in outputs["b"][0], outputs["b"]
    summary = json.loads((runs / "b" / "summary.json").read_text())
    assert summary["status"] == "Succeeded" and summary["elastic"]["workers"] == 4, summary
    assert [(s["workers"], s["cause"]) for s in summary["segments"]] == [(2, "launched"), (4, "grew back")]
    assert sorted(_devices(runs, "b")) == UUIDS  # the next life leased all 4
    assert [(life["ended"], life["cause"]) for life in summary["lives"]][:1] == [("Preempted", "grew back")]
    plan = json.loads((runs / "b" / "plan.json").read_text())
    assert plan["spec"]["workers"]["start"] == 4 and plan["spec"]["workers"]["grow_back"] == 2.0
    assert_no_process_left(all_pids(summary))
