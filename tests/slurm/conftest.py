"""A real Slurm cluster of 3 simulated nodes for the tests in this directory.

The session fixture runs ``.ci/slurm-setup`` (network namespaces osl0..osl2 on a bridge,
munged, slurmctld, 3 slurmd) the first time a Slurm test of a pytest run needs it. A
developer's ``python -m pytest tests/slurm`` and CI's ``python -m pytest -q`` get the same cluster,
set up only when a Slurm test is selected and removed even when a test fails; a cluster that was up
before any test run (started by hand) is left up.

The cluster belongs to the pytest runs that use it, never to a run that merely exists. Each run that
uses it registers in ``users/`` (its controller's pid and start time, ``ORCH_TEST_RUN``), under the
cluster lock; at its very end the run's controller (the one process without ``-n``) unregisters and
runs ``.ci/slurm-teardown`` only when tests set the cluster up (``set-up-by-tests``) and no other live
run still uses it. So a ``pytest --co`` or a run without Slurm tests beside a running CI leaves its
cluster alone, a second run that uses it shares the live cluster (its tests wait for the lock), and
the last user removes it. A run killed before its end leaves a dead registration, which is ignored.

The tests share one cluster and each takes the whole of it (a preemption, a lost node), so they run
one at a time even from two xdist lanes (``tests/conftest.py``: the time-limit test runs beside the
machine lane): each holds ``LOCK`` while it runs, and so does the setup. Tests are skipped, with the
reason, when not root or when the cluster cannot be set up (no Slurm packages and no way to install
them).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from contextlib import contextmanager

import psutil
import pytest

from tests.conftest import REPO, wait_until

SLURM_DIR = os.environ.get("ORCH_SLURM_DIR", "/tmp/orch-slurm-ci")
NODES = ("osl0", "osl1", "osl2")
SUBNET = "10.250.79."
LOCK = SLURM_DIR + ".lock"  # beside the cluster's directory, which the teardown removes
SET_UP_BY_TESTS = os.path.join(SLURM_DIR, "set-up-by-tests")
USERS = os.path.join(SLURM_DIR, "users")  # one file per pytest run using the cluster: "<pid> <start time>"
RUN_VAR = "ORCH_TEST_RUN"  # "<pid> <start time>" of this pytest run's controller (tests/conftest.py)
LOCK_WAIT_S = 900.0  # the longest Slurm test takes ~2 min alone; a bound, not a guess of how long


@contextmanager
def cluster_lock(timeout_s: float = LOCK_WAIT_S, path: str = LOCK):
    """Hold the cluster for one test (or its setup) against every other process of the run: an exclusive
    ``flock`` on ``path``, waited for at most ``timeout_s`` seconds (then the test fails, naming the lock)."""
    with open(path, "a") as handle:

        def taken() -> bool:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

        wait_until(taken, timeout_s, interval_s=0.2, what=f"the Slurm cluster lock {path}, held by another test")
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def this_run() -> str:
    """``"<pid> <start time>"`` of this pytest run's controller: set by ``tests/conftest.py`` before xdist starts
    its workers, so every process of one run gives the same answer (this process's own when it is unset)."""
    return os.environ.get(RUN_VAR) or run_id(os.getpid())


def run_id(pid: int) -> str:
    """``"<pid> <start time>"`` of a live process (the start time tells a reused pid apart)."""
    return f"{pid} {psutil.Process(pid).create_time():.2f}"


def live_users(exclude: str = "", users: str = USERS) -> list[str]:
    """The runs registered in ``users`` whose controller still runs, ``exclude`` left out."""
    found = []
    for name in os.listdir(users) if os.path.isdir(users) else ():
        with open(os.path.join(users, name)) as handle:
            user = handle.read().strip()
        pid = int(user.split()[0])
        try:
            if user != exclude and run_id(pid) == user:
                found.append(user)
        except psutil.NoSuchProcess:
            pass
    return found


def register(run: str, users: str = USERS) -> None:
    """Record in ``users`` that ``run`` uses the cluster (call with the cluster lock held)."""
    os.makedirs(users, exist_ok=True)
    with open(os.path.join(users, run.split()[0]), "w") as handle:
        handle.write(run + "\n")


def should_tear_down(run: str, directory: str = SLURM_DIR) -> bool:
    """Unregister ``run`` from the cluster in ``directory``; True when the cluster is to be removed now: ``run``
    used it, tests set it up (not a developer by hand), and no other live run still uses it (call with the
    cluster lock held)."""
    users = os.path.join(directory, "users")
    mine = os.path.join(users, run.split()[0])
    if not os.path.exists(mine):
        return False  # this run never used the cluster (pytest --co, no Slurm test selected): not ours to remove
    os.remove(mine)
    return os.path.exists(os.path.join(directory, "set-up-by-tests")) and not live_users(exclude=run, users=users)


def teardown_if_set_up_by_tests() -> float | None:
    """``.ci/slurm-teardown`` when this run is the last live user of a cluster that tests set up; returns the
    seconds it took (None: nothing done). Called once per pytest run, by its controller, after every test
    (``tests/conftest.py``); waits for the cluster lock, so a test of another run is never cut short."""
    if not os.path.exists(os.path.join(USERS, this_run().split()[0])):
        return None
    started = time.monotonic()
    with cluster_lock(timeout_s=LOCK_WAIT_S):
        if not should_tear_down(this_run()):
            return None
        subprocess.run(["bash", str(REPO / ".ci" / "slurm-teardown")], capture_output=True, timeout=120)
    return time.monotonic() - started


@pytest.fixture(scope="session")
def slurm_env():
    """Environment for Slurm clients (``SLURM_CONF``) with the cluster up; skips when it cannot be."""
    if os.geteuid() != 0:
        pytest.skip("Slurm tests need root (network namespaces and Slurm daemons)")
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("Slurm tests need iproute2 and util-linux (ip, nsenter)")
    started = time.monotonic()
    with cluster_lock(timeout_s=LOCK_WAIT_S + 300):
        was_up = os.path.exists(os.path.join(SLURM_DIR, "env"))
        result = subprocess.run(["bash", str(REPO / ".ci" / "slurm-setup")], capture_output=True, text=True,
                                timeout=300)
        if result.returncode != 0:
            pytest.skip(f"no Slurm cluster: .ci/slurm-setup failed: {(result.stderr or result.stdout).strip()[-400:]}")
        if not was_up:
            with open(SET_UP_BY_TESTS, "w") as mark:
                mark.write(this_run() + "\n")
        register(this_run())
    print(f"\nslurm-setup: {time.monotonic() - started:.1f} s")
    env = dict(os.environ)
    env["SLURM_CONF"] = os.path.join(SLURM_DIR, "slurm.conf")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(autouse=True)
def one_slurm_test_at_a_time(slurm_env):
    """Each Slurm test has the cluster to itself, whichever lane it runs in."""
    with cluster_lock():
        yield
