"""Several runs on one machine (issue 36 item 1), with real orchestrators: launches side by side
lease disjoint cores, a third waits (or, with ``--wait-for-resources 0``, is refused at once
naming the runs that hold them), ``list`` shows it waiting, and it starts once they end.

Every orchestrator runs on the same two cores (its affinity, as ``taskset -c`` sets it), so the
test means the same on a machine with more. No TensorFlow: the tasks are ``tests.programs.task``,
held at a known point (they wait for a file the test writes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.resources.pinning import parse_cpus
from tests.conftest import REPO, orchestrator_cmd, test_env, wait_until

TWO = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []
PROGRAM = [sys.executable, "-m", "tests.programs.task"]
pytestmark = pytest.mark.skipif(len(TWO) < 2, reason="two runs pinned apart need two cores")


def _cmd(runs: Path, run_id: str, *extra: str) -> list[str]:
    return orchestrator_cmd("launch", "--runs-dir", str(runs), "--run-id", run_id, "--workers", "1",
                            "--threads-per-task", "1", "--spares", "0", "--plain", *extra, "--", *PROGRAM)


def _launch(runs: Path, run_id: str, *extra: str, behavior: str = "succeed-when:go:1") -> subprocess.Popen:
    return subprocess.Popen(
        _cmd(runs, run_id, *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**test_env(), "TEST_BEHAVIOR": behavior}, preexec_fn=lambda: os.sched_setaffinity(0, TWO))


def _cpus_seen(runs: Path, run_id: str) -> tuple[int, ...] | None:
    log = runs / run_id / "attempt-0" / "worker-0" / "stdout.log"
    found = re.search(r"cpus=([0-9,]+)", log.read_text()) if log.exists() else None
    return parse_cpus(found.group(1)) if found else None


def _list(runs: Path) -> list[dict]:
    out = subprocess.run(orchestrator_cmd("list", "--runs-dir", str(runs), "--json"), capture_output=True, text=True,
                         timeout=60, cwd=REPO, env=test_env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_two_launches_side_by_side_pin_disjoint_cores_and_a_third_waits_for_them(tmp_path):
    runs = tmp_path / "runs"
    procs = {name: _launch(runs, name) for name in ("a", "b")}
    try:
        seen = {name: wait_until(lambda n=name: _cpus_seen(runs, n) or procs[n].poll() is not None, 60,
                                 what=f"run {name}'s task to start") for name in procs}
        assert all(p.poll() is None for p in procs.values()), {n: p.communicate() for n, p in procs.items()}
        assert len(seen["a"]) == len(seen["b"]) == 1 and not set(seen["a"]) & set(seen["b"]), seen  # never overlap
        planned = {n: json.loads((runs / n / "plan.json").read_text())["cpus"]["tasks"]["worker-0"] for n in procs}
        assert {n: parse_cpus(c) for n, c in planned.items()} == seen

        refused = subprocess.run(_cmd(runs, "c", "--wait-for-resources", "0"), capture_output=True,
                                 text=True, timeout=60, cwd=REPO, env=test_env(),
                                 preexec_fn=lambda: os.sched_setaffinity(0, TWO))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: wait-for-resources=0: waiting for cores "
                                                       f"{TWO[0]}-{TWO[1]}, held by run "), lines
        assert all(f"run {n} (pid {p.pid}, ports " in lines[0] for n, p in procs.items()), lines  # with its block
        assert not (runs / "c").exists()  # nothing started, nothing written

        waiter = _launch(runs, "d", behavior="succeed")  # waits until free (the default)
        procs["d"] = waiter
        rows = wait_until(lambda: [r for r in _list(runs) if r["run_id"] == "d"], 60, what="list to show d waiting")
        assert rows[0]["status"] == "Waiting" and rows[0]["pid"] == waiter.pid
        assert rows[0]["waiting"].startswith(f"cores {TWO[0]}-{TWO[1]}, held by run ")
        assert all(f"run {n} (pid {procs[n].pid}, ports " in rows[0]["waiting"] for n in ("a", "b")), rows
        assert waiter.poll() is None and not (runs / "d").exists()
        for name in ("a", "b"):
            (runs / name / "go").write_text("")
        outputs = {n: p.communicate(timeout=60) for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert {n: p.returncode for n, p in procs.items()} == {"a": 0, "b": 0, "d": 0}, outputs
    waits = [line for line in outputs["d"][1].splitlines() if "waiting for cores" in line]
    assert len(waits) == 1 and waits[0].startswith("run d: waiting for cores"), outputs["d"][1]
    assert json.loads((runs / "d" / "summary.json").read_text())["status"] == "Succeeded"
