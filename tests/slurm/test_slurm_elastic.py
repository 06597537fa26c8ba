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
from tests.slurm.test_slurm import _restore_node, cluster_addresses, cut_node_in_epoch_2, output, run_job

pytestmark = pytest.mark.slurm


def test_a_lost_node_of_an_elastic_mwms_job_shrinks_it_to_the_workers_left(slurm_env, tmp_path):
    heartbeat_timeout_s = 4.0
    lost_node = "osl1"  # placement: worker-0 on osl0, worker-1 on osl1, osl2 spare
    cut, on_line = cut_node_in_epoch_2(tmp_path / "shrink", lost_node, epochs=4)

    try:
        code, seen, summary, left = run_job(
            slurm_env, tmp_path, "shrink", "--workers", "1:2", "--epochs", "4",
            "--heartbeat-timeout", str(heartbeat_timeout_s), on_line=on_line)
    finally:
        _restore_node(slurm_env, lost_node)
    text = output(seen)
    assert cut, "training never showed up in the output:\n" + text
    assert code == 0, text
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
    # only a step on the lost node may be left (Slurm lists it until it declares the node down)
    assert all(ln.endswith(f"|{lost_node}") for ln in left), left
