"""Elastic workers on the real simulated Slurm cluster (issue 34, docs/elastic.md): a lost node of
an elastic MWMS job (``--workers 1:2``) shrinks the job instead of moving the task, and the job grows
back to 2 from a one-node extension allocation.

The node is lost as in ``test_slurm.py``'s lost-node test (its slurmd SIGKILLed and its link cut
mid-training); there a fixed-count job moves worker-1 to the spare node and restarts at 2 workers.
Here the job runs in a 2-node allocation (osl0, osl1): the group continues at 1 worker from its last
checkpoint, in a next life of the run, on osl0 (``summary.json``: a segment of cause ``node lost``).
Once its grow-back cooldown has passed, it asks Slurm for a one-node extension allocation, which can
only be osl2; the test holds osl2 with a job of its own until the one-worker group trains, so the
extension waits in Slurm's queue first and the grow comes mid-training. Once Slurm starts it, the
group saves at one step and continues at 2 workers, worker-1 a step of the extension
(``srun --jobid=EXT``) on osl2 (a segment ``grew back``); at the end the extension is cancelled:
no job of the run is left in ``squeue``.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.conftest import wait_until
from tests.slurm.conftest import SUBNET
from tests.slurm.test_slurm import cluster_addresses, run_with_a_lost_node

pytestmark = pytest.mark.slurm


def _squeue(slurm_env, *args: str) -> str:
    return subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, env=slurm_env,
                          timeout=30).stdout


def test_a_lost_node_of_an_elastic_mwms_job_shrinks_it_and_an_extension_allocation_grows_it_back(slurm_env, tmp_path):
    heartbeat_timeout_s, epochs, run_id = 4.0, 3, "shrink"
    lost_node = "osl1"  # placement: worker-0 on osl0, worker-1 on osl1; osl2 held by the test's own job
    hold = subprocess.run(["sbatch", "--parsable", "-w", "osl2", "--exclusive", "--job-name", "test-holds-osl2",
                           "--output=/dev/null", "--wrap", "sleep 600"], capture_output=True, text=True, env=slurm_env,
                          timeout=30, check=True).stdout.strip().split(";")[0]
    released: dict[str, float] = {}
    run_dir = tmp_path / run_id

    def release_osl2_once_one_worker_trains(line: str) -> None:
        """Once the job asked for its extension, and its one-worker group trains (a known point of training:
        tf-keras prints "Epoch 2/N" as the resumed life begins its epoch), let Slurm have osl2."""
        if released or "asked Slurm for extension allocation" not in line:
            return

        def one_worker_trains() -> bool:
            return any(f"Epoch 2/{epochs}" in log.read_text() for log in run_dir.glob("attempt-*/worker-0/stdout.log")
                       if log.parent.parent.name != "attempt-0")

        wait_until(one_worker_trains, timeout_s=180, interval_s=0.05, what="the one-worker group training")
        subprocess.run(["scancel", hold], env=slurm_env, timeout=30, check=True)
        released["at"] = time.monotonic()

    try:
        wait_until(lambda: _squeue(slurm_env, "-j", hold, "-o", "%T").strip() == "RUNNING", timeout_s=60,
                   interval_s=0.1, what="the test's job on osl2 running")
        cut, seen, summary, text = run_with_a_lost_node(
            slurm_env, tmp_path, run_id, lost_node, epochs, "--workers", "1:2", "--heartbeat-timeout",
            str(heartbeat_timeout_s), "--grow-back", "2", nodes=2, also=release_osl2_once_one_worker_trains)
    finally:
        subprocess.run(["scancel", hold], env=slurm_env, timeout=30)
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
    # the extension: asked once the cooldown passed, pending while the test held osl2, granted after
    granted = [(t, m.group(1)) for t, ln in seen for m in [re.search(r"extension allocation (\d+) on osl2 granted", ln)]
               if m]
    assert released and granted and granted[0][0] > released["at"], text
    extension = granted[0][1]
    assert re.search(rf"grew back: 1 -> 2 worker\(s\) \(extension allocation {extension} on osl2 granted", text), text
    addresses = cluster_addresses(tmp_path, run_id)  # the last life's cluster: worker-1 on osl2
    assert addresses["worker-0"].startswith(SUBNET + "10:"), addresses
    assert addresses["worker-1"].startswith(SUBNET + "12:"), addresses
    # nothing of the run left: the extension was cancelled when the run ended
    assert f"{run_id}:extend" not in _squeue(slurm_env, "-o", "%i|%j|%T"), _squeue(slurm_env, "-o", "%i|%j|%T")
    again = [t for t, ln in seen if t > said[0] and "worker-0 Running/training" in ln]  # a status line, every 5 s
    grew = [t for t, ln in seen if "grew back: 1 -> 2" in ln]
    print(f"\nnode cut -> shrink decided {said[0] - cut['at']:.1f} s; -> seen training at 1 worker "
          f"{(again[0] - cut['at']) if again else float('nan'):.1f} s; osl2 let go -> extension {extension} granted "
          f"{granted[0][0] - released['at']:.1f} s -> grow decided {grew[0] - released['at']:.1f} s; "
          f"segments {summary['segments']}")
