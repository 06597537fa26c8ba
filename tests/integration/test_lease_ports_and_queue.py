"""Several runs on one machine (issue 36), with real orchestrators: each local run leases a block of
ports disjoint from every other live run's and its tasks bind ports only inside it, a dead run's block
is reclaimed; and a run that waits first is served first, even when a later run asks at the moment
the resources free.

No TensorFlow: the tasks are ``tests.programs.task``, held at a known point (they wait for a file the
test writes). The ledger is the test's own (``ORCH_LEASES_DIR``, tests/conftest.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.resources.leases import LOCK_FILE, Ledger
from tests.conftest import REPO, assert_no_process_left, orchestrator_cmd, test_env, wait_until

TWO = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []
PROGRAM = [sys.executable, "-m", "tests.programs.task"]


def _cmd(runs: Path, run_id: str, *flags: str) -> list[str]:
    return orchestrator_cmd("launch", "--runs-dir", str(runs), "--run-id", run_id, "--spares", "0", "--plain", *flags,
                            "--", *PROGRAM)


def _launch(runs: Path, run_id: str, *flags: str, behavior: str = "succeed-when:go:1") -> subprocess.Popen:
    return subprocess.Popen(
        _cmd(runs, run_id, *flags),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**test_env(), "TEST_BEHAVIOR": behavior},
        preexec_fn=(lambda: os.sched_setaffinity(0, TWO)) if TWO else None)


def _ports(runs: Path, run_id: str, tasks: int) -> dict[str, int] | None:
    """Task -> its port (the plan's address: what the orchestrator held for it and its TF_CONFIG
    names), once every task has started (its stdout line)."""
    started = [log for log in (runs / run_id).glob("attempt-0/*/stdout.log")
               if re.search(r"^\S+ behavior=", log.read_text(), re.M)]
    if len(started) < tasks:
        return None
    plan = json.loads((runs / run_id / "plan.json").read_text())
    ports = {t["task"]: int(t["address"].rsplit(":", 1)[1]) for t in plan["tasks"]}
    for t in plan["tasks"]:  # the address each task's cluster names is its own
        me = t["tf_config"]["task"]
        assert t["tf_config"]["cluster"][me["type"]][me["index"]] == t["address"]
    return ports


def _list(runs: Path) -> dict[str, dict]:
    out = subprocess.run(orchestrator_cmd("list", "--runs-dir", str(runs), "--json"), capture_output=True, text=True,
                         timeout=60, cwd=REPO, env=test_env())
    assert out.returncode == 0, out.stderr
    return {r["run_id"]: r for r in json.loads(out.stdout)}


def _end(procs: dict[str, subprocess.Popen]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


def test_two_runs_side_by_side_lease_disjoint_blocks_of_ports_and_a_dead_runs_block_is_reclaimed(tmp_path):
    runs, ledger = tmp_path / "runs", Ledger(Path(os.environ["ORCH_LEASES_DIR"]))
    procs = {name: _launch(runs, name, "--workers", "2", "--no-pin") for name in ("a", "b")}
    try:
        bound = {n: wait_until(lambda n=n: _ports(runs, n, 2) or procs[n].poll() is not None, 60,
                               what=f"run {n}'s tasks to start") for n in procs}
        assert all(p.poll() is None for p in procs.values()), {n: p.communicate() for n, p in procs.items()}
        entries = {h.run_id: h for h in ledger.read()}
        blocks = {n: entries[n].ports for n in procs}
        assert all(blocks.values()), entries  # each run leases a block ...
        (a_low, a_high), (b_low, b_high) = blocks["a"], blocks["b"]
        assert a_high <= b_low or b_high <= a_low, blocks  # ... disjoint from the other's
        for n in procs:  # its tasks bound only ports of its block, each its own
            low, high = blocks[n]
            assert all(low <= port < high for port in bound[n].values()) and len(set(bound[n].values())) == 2, \
                (blocks, bound)
        listed = _list(runs)
        assert {n: listed[n]["ports"] for n in procs} == {n: f"{lo}-{hi - 1}" for n, (lo, hi) in blocks.items()}

        children = [c.pid for c in psutil.Process(procs["a"].pid).children(recursive=True)]
        procs["a"].send_signal(signal.SIGKILL)  # a dead run: its entry stays in the file until the next transaction
        procs["a"].communicate(timeout=30)
        assert_no_process_left(children, timeout_s=30)
        assert "a" in {h.run_id for h in ledger.read()}
        with ledger.transaction() as live:  # what the next launch sees: a's block is free again
            assert {h.run_id for h in live} == {"b"}
        assert {h.run_id for h in ledger.read()} == {"b"}  # and written back without it
        assert _list(runs)["a"]["ports"] is None

        again = subprocess.run(_cmd(runs, "c", "--workers", "1", "--no-pin", "--wait-for-resources", "0"),
                               capture_output=True, text=True, timeout=120, cwd=REPO,
                               env={**test_env(), "TEST_BEHAVIOR": "succeed"})
        assert again.returncode == 0, again.stderr
        c_port = _ports(runs, "c", 1)
        assert c_port and all(not b_low <= port < b_high for port in c_port.values())  # never in the live run's block
        (runs / "b" / "go").write_text("")
        out = procs["b"].communicate(timeout=60)
        assert procs["b"].returncode == 0, out
        assert {h.run_id for h in ledger.read()} == set()  # every lease returned
    finally:
        _end(procs)


def _lock_free(directory: Path) -> bool:
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _stop_between_polls(proc: subprocess.Popen, directory: Path) -> None:
    """SIGSTOP ``proc`` while it does not hold the ledger's lock (a waiter stopped between two polls)."""
    deadline = time.monotonic() + 30
    while True:
        proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, 10, what="the waiter to stop")
        if _lock_free(directory):
            return
        proc.send_signal(signal.SIGCONT)  # stopped inside a transaction: let it finish, try again
        assert time.monotonic() < deadline, "the waiter held the ledger's lock at every stop"
        time.sleep(0.02)


@pytest.mark.skipif(len(TWO) < 2, reason="the runs take both of two cores")
def test_the_run_that_waited_first_is_served_first_even_when_a_later_one_asks_as_they_free(tmp_path):
    runs, directory = tmp_path / "runs", Path(os.environ["ORCH_LEASES_DIR"])
    procs = {"a": _launch(runs, "a", "--workers", "1")}  # every free core: both
    try:
        wait_until(lambda: (runs / "a" / "plan.json").exists() or procs["a"].poll() is not None, 60,
                   what="run a to start")
        procs["b"] = _launch(runs, "b", "--workers", "1", behavior="succeed")  # waits for a's cores
        rows = wait_until(lambda: _list(runs).get("b"), 60, what="list to show b waiting")
        assert rows["status"] == "Waiting" and "held by run a" in rows["waiting"], rows
        _stop_between_polls(procs["b"], directory)  # b has not polled again when the cores free
        (runs / "a" / "go").write_text("")
        out = procs["a"].communicate(timeout=60)
        assert procs["a"].returncode == 0, out
        assert "a" not in {h.run_id for h in Ledger(directory).read()}

        later = subprocess.run(_cmd(runs, "c", "--workers", "1", "--wait-for-resources", "0"),
                               capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env(),
                               preexec_fn=lambda: os.sched_setaffinity(0, TWO))
        assert later.returncode == 2, later.stdout + later.stderr  # free cores, but b asked first
        lines = later.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"error: wait-for-resources=0: waiting for cores {TWO[0]}-{TWO[1]}, first in line: run b "
            f"(pid {procs['b'].pid})"), lines
        assert not (runs / "c").exists()

        procs["b"].send_signal(signal.SIGCONT)
        out = procs["b"].communicate(timeout=60)
        assert procs["b"].returncode == 0, out
        assert json.loads((runs / "b" / "summary.json").read_text())["status"] == "Succeeded"
        waits = [line for line in out[1].splitlines() if "waiting for" in line]
        assert len(waits) == 1 and waits[0].startswith("run b: waiting for cores"), out[1]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
        _end(procs)
