"""mypy over orchestrator/ and worker/, strict on backends/ and supervisor/ (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_the_orchestrator_and_the_worker_type_check():
    pytest.importorskip("mypy")
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
