"""A real Slurm cluster of 3 simulated nodes for the tests in this directory.

The session fixture runs ``.ci/slurm-setup`` (network namespaces osl0..osl2 on a bridge,
munged, slurmctld, 3 slurmd) the first time a Slurm test of a pytest run needs it; the run's
controller (the one process without ``-n``) runs ``.ci/slurm-teardown`` at its very end when a test
of the run was the one that set the cluster up (``set-up-by-tests`` in the cluster's directory). A
developer's ``python -m pytest tests/slurm`` and CI's ``python -m pytest -q`` get the same cluster,
set up only when a Slurm test is selected and removed even when a test fails; a cluster that was up
before the run (started by hand) is left up.

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

import pytest

from tests.conftest import REPO, wait_until

SLURM_DIR = os.environ.get("ORCH_SLURM_DIR", "/tmp/orch-slurm-ci")
NODES = ("osl0", "osl1", "osl2")
SUBNET = "10.250.79."
LOCK = SLURM_DIR + ".lock"  # beside the cluster's directory, which the teardown removes
SET_UP_BY_TESTS = os.path.join(SLURM_DIR, "set-up-by-tests")
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


def teardown_if_set_up_by_tests() -> float | None:
    """``.ci/slurm-teardown`` when a test set the cluster up; returns the seconds it took (None: nothing done).
    Called once per pytest run, by its controller, after every test (``tests/conftest.py``)."""
    if not os.path.exists(SET_UP_BY_TESTS):
        return None
    started = time.monotonic()
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
                mark.write(f"{os.getpid()}\n")
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
