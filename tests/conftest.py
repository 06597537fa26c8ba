"""Shared test helpers: bounded waits and the check that no task process survives."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent


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
