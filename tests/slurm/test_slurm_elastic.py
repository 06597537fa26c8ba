"""Elastic workers on the real simulated Slurm cluster (issue 34, docs/elastic.md): a lost node of
an elastic MWMS job (``--workers 1:2``) shrinks the job instead of moving the task.

The node is lost as in ``test_slurm.py``'s lost-node test (its slurmd SIGKILLed and its link cut
mid-training); there a fixed-count job moves worker-1 to the spare node and restarts at 2 workers.
Here the group continues at 1 worker from its last checkpoint, in a next life of the run, on the
nodes left: ``summary.json`` has a segment of cause ``node lost``.
"""

from __future__ import annotations

import pytest

from tests.slurm.conftest import SUBNET
from tests.slurm.test_slurm import cluster_addresses, run_with_a_lost_node

pytestmark = pytest.mark.slurm


def test_a_lost_node_of_an_elastic_mwms_job_shrinks_it_to_the_workers_left(slurm_env, tmp_path):
    heartbeat_timeout_s = 4.0
    lost_node = "osl1"  # placement: worker-0 on osl0, worker-1 on osl1, osl2 spare
    cut, seen, summary, text = run_with_a_lost_node(
        slurm_env, tmp_path, "shrink", lost_node, 4, "--workers", "1:2",
        "--heartbeat-timeout", str(heartbeat_timeout_s))
    said = [t for t, ln in seen if "worker-1's node osl1 is lost: the group continues at 1 worker(s)" in ln]
    assert said, text
    assert "-> osl2" not in text, text  # not moved to the spare node: the group shrank
    assert summary["status"] == "Succeeded", text
    assert summary["metrics"]["test_accuracy"] >= 0.85
    causes = [(s["workers"], s["cause"]) for s in summary["segments"]]
    assert causes == [(2, "launched"), (1, "node lost")], summary["segments"]
    assert [life["cause"] for life in summary["lives"]][:1] == ["node lost"]
    assert summary["restarts"] == 0  # a lost node is not a crash: the restart budget is not spent
    addresses = cluster_addresses(tmp_path, "shrink")  # the last life's cluster: worker-0 alone, not on osl1
    assert set(addresses) == {"worker-0"}, addresses
    assert addresses["worker-0"].startswith(SUBNET + "10:"), addresses
    again = [t for t, ln in seen if t > said[0] and "worker-0 Running/training" in ln]  # a status line, every 5 s
    print(f"\nnode cut -> shrink decided {said[0] - cut['at']:.1f} s; -> seen training at 1 worker "
          f"{(again[0] - cut['at']) if again else float('nan'):.1f} s; segments {summary['segments']}")
