"""Elastic workers on the real simulated Slurm cluster (issue 34, docs/elastic.md): a lost node of
an elastic MWMS job (``--workers 1:2``) shrinks the job instead of moving the task, and the job grows
back to 2 from a one-node extension allocation.

The node is lost as in ``test_slurm.py``'s lost-node test (its slurmd SIGKILLed and its link cut
mid-training); there a fixed-count job moves worker-1 to the spare node and restarts at 2 workers.
Here the job runs in a 2-node allocation (osl0, osl1): the group continues at 1 worker from its last
checkpoint, in a next life of the run, on osl0 (``summary.json``: a segment of cause ``node lost``).
With ``--grow-back 0`` it then asks Slurm at once for a one-node extension allocation, which can
only be osl2; once Slurm starts it, the group saves at one step and continues at 2 workers, worker-1 a
step of the extension (``srun --jobid=EXT``) on osl2 (a segment ``grew back``); at the end the
extension is cancelled: no job of the run is left in ``squeue``. (Training at 1 worker is fast, about
0.2 s an epoch, so the grow comes while the one-worker group starts, before or at its first steps:
``--grow-back 0`` keeps it ahead of the end of training; a pending extension, its bound and the node
that answers again are tested without TensorFlow in test_slurm_extend.py.)

ParameterServerStrategy (``--strategy parameter_server --ps 1 --workers 1:2``, also this file's
basic PSS run on three nodes: chief and ps on osl0, worker-0 on osl1, worker-1 on osl2, over mutual
TLS): osl2's processes die in the chief's 2nd epoch (slurmd, slurmstepd and worker-1 SIGKILLed, the
link left up; a partition stalls TF's coordinator instead, docs/elastic.md says for how long);
worker-1 is parked, not restarted (no node is moved to, no restart spent), and the chief trains on
with worker-0 to the end (``summary.json``: a segment of cause ``node lost`` naming worker-1).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.slurm.conftest import SUBNET
from tests.slurm.test_slurm import cluster_addresses, run_with_a_lost_node, seen_at

pytestmark = pytest.mark.slurm


def _squeue(slurm_env, *args: str) -> str:
    return subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, env=slurm_env,
                          timeout=30).stdout


def test_a_lost_node_of_an_elastic_mwms_job_shrinks_it_and_an_extension_allocation_grows_it_back(slurm_env, tmp_path):
    heartbeat_timeout_s, epochs, run_id = 4.0, 4, "shrink"
    lost_node = "osl1"  # placement: worker-0 on osl0, worker-1 on osl1; osl2 outside the allocation
    cut, seen, summary, text = run_with_a_lost_node(
        slurm_env, tmp_path, run_id, lost_node, epochs, "--workers", "1:2", "--heartbeat-timeout",
        str(heartbeat_timeout_s), "--grow-back", "0", nodes=2)
    said = [t for t, ln in seen if "worker-1's node osl1 is lost: the group continues at 1 worker(s)" in ln]
    assert said, text
    assert "-> osl2" not in text, text  # not moved: the group shrank
    assert summary["status"] == "Succeeded", text
    assert summary["metrics"]["test_accuracy"] >= 0.85
    causes = [(s["workers"], s["cause"]) for s in summary["segments"]]
    assert causes == [(2, "launched"), (1, "node lost"), (2, "grew back")], summary["segments"]
    assert [life["cause"] for life in summary["lives"]][:2] == ["node lost", "grew back"]
    assert summary["segments"][1]["steps_lost"] == 0  # a planned resize: the coordinated save
    assert summary["restarts"] == 0  # a lost node is not a crash: the restart budget is not spent
    assert summary["segments"][1]["first_step"] == 45  # the one-worker group from the epoch's checkpoint
    # the extension: asked when the grow was due, granted, grown into
    asked = [t for t, ln in seen if "growing back needs another node: asked Slurm for extension allocation" in ln]
    granted = [(t, m.group(1)) for t, ln in seen for m in [re.search(r"extension allocation (\d+) on osl2 granted", ln)]
               if m]
    assert asked and granted and granted[0][0] >= asked[0] > said[0], text
    extension = granted[0][1]
    assert re.search(rf"grew back: 1 -> 2 worker\(s\) \(extension allocation {extension} on osl2 granted", text), text
    addresses = cluster_addresses(tmp_path, run_id)  # the last life's cluster: worker-1 on osl2
    assert addresses["worker-0"].startswith(SUBNET + "10:"), addresses
    assert addresses["worker-1"].startswith(SUBNET + "12:"), addresses
    # nothing of the run left: the extension was cancelled when the run ended
    assert f"{run_id}:extend" not in _squeue(slurm_env, "-o", "%i|%j|%T"), _squeue(slurm_env, "-o", "%i|%j|%T")
    grew = [t for t, ln in seen if "grew back: 1 -> 2" in ln]
    print(f"\nnode cut -> shrink decided {said[0] - cut['at']:.1f} s; -> extension {extension} asked "
          f"{asked[0] - said[0]:.1f} s later, granted {granted[0][0] - asked[0]:.1f} s after asked, grow decided "
          f"{grew[0] - granted[0][0]:.1f} s after; segments {summary['segments']}")


def test_pss_on_three_nodes_a_lost_node_parks_its_worker_and_the_chief_trains_on(slurm_env, tmp_path):
    # 12 epochs of 90 steps: the loss is decided ~7 s after the cut (the heartbeat timeout, then 3 s for a step
    # SIGKILL does not end); the chief trained 180 steps meanwhile and 450 in the 2.3 s after (one run here), so
    # the job must outlast it by more than that on a quiet machine
    epochs, run_id, lost_node = 12, "pss", "osl2"  # chief-0 and ps-0 on osl0, worker-0 on osl1, worker-1 on osl2
    cut, seen, summary, text = run_with_a_lost_node(
        slurm_env, tmp_path, run_id, lost_node, epochs, "--strategy", "parameter_server", "--ps", "1",
        "--workers", "1:2", "--heartbeat-timeout", "4", watch="chief-0", dies=True)
    said = [t for t, ln in seen if "worker-1's node osl2 is lost: it is parked, not restarted" in ln]
    assert said and "worker-1 parked (node lost): training goes on with 1 worker(s), MIN 1" in text, text
    assert "-> osl" not in text and "restarting" not in text.lower(), text  # not moved, not restarted
    assert summary["status"] == "Succeeded", text
    assert summary["metrics"]["test_accuracy"] >= 0.85
    assert summary["restarts"] == 0 and summary["recoveries"] == [], summary["recoveries"]
    assert summary["elastic"]["parked"] == ["worker-1"] and summary["elastic"]["workers"] == 1
    segments = [(s["workers"], s["cause"], s.get("tasks")) for s in summary["segments"]]
    assert segments == [(2, "launched", None), (1, "node lost", ["worker-1"])], summary["segments"]
    assert summary["segments"][1]["last_step"] > summary["segments"][1]["first_step"]  # trained on at 1 worker
    states = {t["task"]: (t["state"], t["signal"]) for t in summary["tasks"]}
    assert states == {"chief:0": ("Succeeded", None), "worker:0": ("Stopped", "SIGTERM"),
                      "worker:1": ("Failed", "SIGKILL"), "ps:0": ("Stopped", "SIGTERM")}, states  # parked: above
    addresses = cluster_addresses(tmp_path, run_id)
    assert [addresses[t].rsplit(":", 1)[0] for t in ("chief-0", "worker-0", "worker-1", "ps-0")] == \
        [SUBNET + "10", SUBNET + "11", SUBNET + "12", SUBNET + "10"], addresses
    # over mutual TLS (the default): every task read its certificate from the shared run directory,
    # registered its address and streamed its heartbeats; the keys went with the run
    plan = json.loads((tmp_path / run_id / "plan.json").read_text())
    assert {t["env"].get("ORCH_TLS_DIR") for t in plan["tasks"]} == {str((tmp_path / run_id / "tls").resolve())}
    assert all(t["last_heartbeat"] and t["last_heartbeat"]["heartbeats"] >= 1 for t in summary["tasks"])
    assert not (tmp_path / run_id / "tls").exists()
    print(f"\nnode cut -> worker-1 parked {said[0] - cut['at']:.1f} s; -> job ended "
          f"{seen_at(seen, 'job Succeeded') - said[0]:.1f} s later; segments {summary['segments']}")
