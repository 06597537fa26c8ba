"""Shared test helpers: bounded waits and the check that no task process survives."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent

# The machine-wide lease ledger (orchestrator.resources.leases, ORCH_LEASES_DIR): each test process (an xdist lane, or
# a run with -n 0) has its own, and each test its own below it (`own_lease_ledger`), so no launch of the suite ever
# waits for another lane's, another test's, or another checkout's tests on this machine: CI is no slower than before
# the leases. Launches of one test share its ledger (two runs side by side lease disjoint cores).
LEDGER_ROOT = tempfile.mkdtemp(prefix=f"orch-leases-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")
os.environ["ORCH_LEASES_DIR"] = LEDGER_ROOT
atexit.register(shutil.rmtree, LEDGER_ROOT, True)


@pytest.fixture(autouse=True)
def own_lease_ledger(request, monkeypatch):
    """This test's own lease ledger (module fixtures started before it use the process's)."""
    monkeypatch.setenv("ORCH_LEASES_DIR", tempfile.mkdtemp(prefix="t-", dir=LEDGER_ROOT))


# Two lanes (pyproject.toml: -n 2). The tests that run real TensorFlow jobs, containers or Slurm jobs are each
# sized for the whole machine (up to ~6 TF processes on 2 cores) and some time what they see (detection within a
# heartbeat timeout): they are one unit of work for xdist, run one after another in one lane, as without xdist.
# Every other test (unit, integration, docs, and the quick bench, whose figures are smoke values and not checked)
# runs in the other lane, beside them.
MACHINE_LANE = ("e2e", "slurm", "docker", "browser")
# ... but for these (test functions, every parameter of each), each case a unit of its own, run beside the machine lane
# as the other tests are. They time nothing and fit beside it: the machine lane leaves most of a core idle (a CI run
# used 1.15 cores on average while pytest ran), waiting on heartbeats, restarts and engines.
# - The time-limit test's program is a paced step counter that waits for Slurm's time-limit checks (every 30 s) in
#   three lives: 51 s, of which 8 CPU-seconds, measured alone. Slurm tests still run one at a time whatever their lane
#   (tests/slurm/conftest.py: cluster_lock).
# - Each example spec file launched for 5 steps: it succeeds or not, however long its start takes (~80 s in all).
BESIDE_THE_MACHINE_LANE = (
    "tests/slurm/test_slurm_preemption.py::test_a_run_longer_than_its_time_limit_continues_in_three_lives",
    "tests/e2e/test_render_cluster.py::test_every_example_spec_launches",
)


def lane_scope(nodeid: str) -> str:
    """The xdist unit of work a test belongs to: ``"machine"`` for the machine lane, else the test's own id."""
    parts = nodeid.split("/", 2)
    if nodeid.split("[", 1)[0] in BESIDE_THE_MACHINE_LANE:
        return nodeid
    return "machine" if len(parts) == 3 and parts[0] == "tests" and parts[1] in MACHINE_LANE else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's load-scope scheduler with the scopes of :func:`lane_scope` (its ``xdist_group`` marks do not reach
    the test ids under pytest 9.2: xdist sets ``item._nodeid``)."""
    from xdist.scheduler import LoadScopeScheduling

    class MachineLane(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane_scope(nodeid)

    return MachineLane(config, log)


def pytest_configure(config) -> None:
    """The run's controller names the run (``ORCH_TEST_RUN``: its pid and start time) before xdist starts its
    workers, which inherit it: shared test services (the Slurm cluster) know which run uses them."""
    if not hasattr(config, "workerinput"):
        os.environ["ORCH_TEST_RUN"] = f"{os.getpid()} {psutil.Process().create_time():.2f}"


def pytest_sessionfinish(session) -> None:
    """The run's controller (not an xdist worker) removes the Slurm test cluster once every test is done,
    when tests set it up and this run is its last live user (tests/slurm/conftest.py)."""
    if hasattr(session.config, "workerinput"):
        return
    from tests.slurm.conftest import teardown_if_set_up_by_tests

    took_s = teardown_if_set_up_by_tests()
    if took_s is not None:
        print(f"\nslurm-teardown: {took_s:.1f} s")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (zombies count as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value or ``timeout_s`` passes (then fail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def assert_no_process_left(pids, timeout_s: float = 5.0) -> None:
    """Fail if any of ``pids`` is still running after ``timeout_s`` seconds (checked by pid)."""
    pids = [p for p in pids if p]
    assert pids, "no pids to check: the test did not record its task processes"
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in pids if alive(p)]
    for pid in left:  # do not leak into later tests, but still fail this one
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, f"task processes still running: {left}"


def all_pids(summary: dict) -> list[int]:
    """Pids of every attempt of every task and of every warm spare in a summary.json."""
    pids = [t["pid"] for t in summary["tasks"]]
    pids += [a["pid"] for t in summary["tasks"] for a in t.get("earlier_attempts", [])]
    pids += [s["pid"] for s in summary.get("spares") or []]
    pids += [e["pid"] for t in summary["tasks"] for e in t.get("left_behind") or []]  # what the tasks left running
    return [p for p in pids if p]


def orchestrator_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def test_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


test_env.__test__ = False  # not a test
