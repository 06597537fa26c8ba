"""Containers' /dev/shm on a real Docker engine (issue 35, item 4): a program that fills more shared
memory than the container has dies of SIGBUS and fails the job at once, named; with --shm-size it
fits. Skipped, with the reason, when no engine is reachable (as tests/docker/test_containers.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env
from tests.docker.test_containers import engine, image  # noqa: F401 - the session fixtures

pytestmark = pytest.mark.docker

FILL = ("import mmap, os\n"  # tests/programs/fill_shm.py, inline: the image holds the package, not the tests
        "size = 200 << 20\n"
        "fd = os.open('/dev/shm/fill', os.O_RDWR | os.O_CREAT, 0o600); os.ftruncate(fd, size)\n"
        "m = mmap.mmap(fd, size)\n"
        "for offset in range(0, size, mmap.PAGESIZE): m[offset] = 1\n"
        "print('filled', size >> 20, 'MiB', flush=True)\n")


def launch(tmp_path, image_name: str, *flags: str) -> tuple[int, dict]:
    result = subprocess.run(
        orchestrator_cmd("launch", "--backend", "docker", "--image", image_name, "--workers", "1", "--runs-dir",
                         str(tmp_path), "--json", "--max-restarts", "3", *flags, "--", "python", "-c", FILL),
        capture_output=True, text=True, timeout=300, cwd=REPO, env=test_env())
    summary = json.loads(result.stdout)
    assert_no_process_left(all_pids(summary))
    return result.returncode, summary


def test_a_full_dev_shm_is_a_sigbus_named_and_not_restarted(tmp_path, engine, image):  # noqa: F811
    code, summary = launch(tmp_path, image, "--shm-size", "64M")
    assert code == 1 and summary["restarts"] == 0, summary["reason"]
    assert "SIGBUS" in summary["reason"] and "/dev/shm" in summary["reason"] and "--shm-size" in summary["reason"]


def test_the_default_dev_shm_holds_what_64_mb_does_not(tmp_path, engine, image):  # noqa: F811
    code, summary = launch(tmp_path, image)
    assert code == 0, summary["reason"]


def test_a_container_past_its_memory_limit_is_named_out_of_memory(tmp_path, engine, image):  # noqa: F811
    hog = "x = bytearray(600 << 20); x[::4096] = b'1' * len(x[::4096]); print('allocated', flush=True)"
    result = subprocess.run(
        orchestrator_cmd("launch", "--backend", "docker", "--image", image, "--workers", "1", "--runs-dir",
                         str(tmp_path), "--json", "--memory", "256M", "--restart-policy", "never", "--",
                         "python", "-c", hog),
        capture_output=True, text=True, timeout=300, cwd=REPO, env=test_env())
    summary = json.loads(result.stdout)
    assert result.returncode == 1 and summary["root_cause"]["likely_oom"] is True, summary["root_cause"]
