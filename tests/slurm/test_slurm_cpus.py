"""Co-located tasks on a Slurm node divide its cores (orchestrator.resources.cpus.node_share_env, resolved by
each task over its step's cores): two workers on one node of the real Slurm cluster, a user's program
(no TensorFlow) that prints the cores it runs on and its thread limit."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.slurm.test_slurm import output, run_job

pytestmark = pytest.mark.slurm

PROGRAM = ("import json, os; print('seen ' + json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
           "'intra': os.environ.get('TF_NUM_INTRAOP_THREADS'), 'planned': os.environ.get('ORCH_CPUS')}), flush=True)")


def seen(run_dir, task: str) -> dict:
    out = (run_dir / "attempt-0" / task / "stdout.log").read_text()
    return json.loads(next(line for line in out.splitlines() if line.startswith("seen "))[5:])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two tasks pinned apart need two cores")
def test_two_workers_on_one_node_each_run_on_their_own_cores(slurm_env, tmp_path):
    code, lines, summary, left = run_job(slurm_env, tmp_path, "cpus", "--workers", "2", "--tasks-per-node", "2",
                                         "--", sys.executable, "-c", PROGRAM, nodes=1)
    assert code == 0, output(lines)
    assert "CPU cores: each node's cores divided among the job's tasks on it" in output(lines)
    got = [seen(tmp_path / "cpus", f"worker-{i}") for i in range(2)]
    assert got[0]["cpus"] and got[1]["cpus"] and not set(got[0]["cpus"]) & set(got[1]["cpus"]), got
    for g in got:
        assert g["planned"] and g["intra"] == str(len(g["cpus"])), got
    plan = json.loads((tmp_path / "cpus" / "plan.json").read_text())
    assert plan["cpus"]["nodes"] and left == [], left
