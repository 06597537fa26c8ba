"""The project's top-level docker/ folder must not pass for the Docker SDK when the SDK is missing."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, test_env

# what Python finds for `import docker` in a checkout without the SDK: the docker/ folder as a namespace package
SHADOW = f"""
import importlib.machinery, importlib.util, sys, runpy
spec = importlib.machinery.ModuleSpec("docker", None, is_package=True)
spec.submodule_search_locations = [{str(REPO / "docker")!r}]
sys.modules["docker"] = importlib.util.module_from_spec(spec)
sys.argv = ["orchestrator", *sys.argv[1:]]
runpy.run_module("orchestrator", run_name="__main__")
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SHADOW, *args], cwd=REPO, env=test_env(), capture_output=True,
                          text=True, timeout=60)


def test_dry_run_needs_no_sdk(tmp_path):
    result = run("launch", "--backend", "docker", "--dry-run", "--workers", "2", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert '"worker-1:2222"' in result.stdout


def test_launch_without_the_sdk_says_to_install_it(tmp_path):
    result = run("launch", "--backend", "docker", "--workers", "1", "--runs-dir", str(tmp_path))
    assert result.returncode != 0
    assert "Docker SDK, which is not installed" in result.stderr and "ModuleNotFoundError" not in result.stderr
