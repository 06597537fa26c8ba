"""A real Slurm cluster of 3 simulated nodes for the tests in this directory.

The session fixture runs ``.ci/slurm-setup`` (network namespaces osl0..osl2 on a bridge,
munged, slurmctld, 3 slurmd) and, at the end of the session, ``.ci/slurm-teardown`` when it was
the one that set the cluster up: a developer's ``python -m pytest tests/slurm`` and CI's
``python -m pytest -q`` get the same cluster, set up only when a Slurm test is selected, and
removed even when a test fails. Tests are skipped, with the reason, when not root or when the
cluster cannot be set up (no Slurm packages and no way to install them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.conftest import REPO

SLURM_DIR = os.environ.get("ORCH_SLURM_DIR", "/tmp/orch-slurm-ci")
NODES = ("osl0", "osl1", "osl2")
SUBNET = "10.250.79."


@pytest.fixture(scope="session")
def slurm_env():
    """Environment for Slurm clients (``SLURM_CONF``) with the cluster up; skips when it cannot be."""
    if os.geteuid() != 0:
        pytest.skip("Slurm tests need root (network namespaces and Slurm daemons)")
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("Slurm tests need iproute2 and util-linux (ip, nsenter)")
    was_up = os.path.exists(os.path.join(SLURM_DIR, "env"))
    started = time.monotonic()
    result = subprocess.run(["bash", str(REPO / ".ci" / "slurm-setup")], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.skip(f"no Slurm cluster: .ci/slurm-setup failed: {(result.stderr or result.stdout).strip()[-400:]}")
    print(f"\nslurm-setup: {time.monotonic() - started:.1f} s")
    env = dict(os.environ)
    env["SLURM_CONF"] = os.path.join(SLURM_DIR, "slurm.conf")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    yield env
    if not was_up:
        started = time.monotonic()
        subprocess.run(["bash", str(REPO / ".ci" / "slurm-teardown")], capture_output=True, timeout=120)
        print(f"\nslurm-teardown: {time.monotonic() - started:.1f} s")
