"""The tf.data service's roles on a real Slurm cluster of 3 simulated nodes (issue 38; see conftest.py).

``launch --backend slurm --data-service 1`` under ``salloc``: the dispatcher and the data worker
are job steps that register their own addresses like every task; the dispatcher first, then the
data worker (told the dispatcher's registered address, serving at its node's address), then the
trainers, which read through the service at the dispatcher's registered address. At the end the
service is stopped like a ps, the summary's ``data_service`` section names the addresses actually
used, and no step of the run is left in the allocation. (Before issue 38's Slurm part the slurm
backend refused ``--data-service``: exit 2.)
"""

from __future__ import annotations

import pytest

from tests.slurm.conftest import SUBNET
from tests.slurm.test_slurm import cluster_addresses, output, run_job, seen_at

pytestmark = pytest.mark.slurm


def _on_a_node(address: str) -> None:
    host, _, port = address.rpartition(":")
    assert host.startswith(SUBNET + "1") and int(port) > 0, address  # a node's own address, a bound port


@pytest.mark.parametrize("strategy", ["multi_worker_mirrored", "parameter_server"])
def test_trainers_read_through_the_data_service_on_slurm_and_nothing_is_left(slurm_env, tmp_path, strategy):
    run_id = "ds-mwms" if strategy == "multi_worker_mirrored" else "ds-pss"
    topology = ("--workers", "2") if strategy == "multi_worker_mirrored" else ("--workers", "1", "--ps", "1")
    trainer = "worker-1" if strategy == "multi_worker_mirrored" else "chief-0"
    code, seen, summary, left = run_job(slurm_env, tmp_path, run_id, "--strategy", strategy, *topology,
                                        "--epochs", "2", "--steps-per-epoch", "10", "--data-service", "1",
                                        timeout_s=300)
    assert code == 0, output(seen)
    assert summary["status"] == "Succeeded", output(seen)
    run_dir = tmp_path / run_id
    # the start order of the local backend: dispatcher, data worker (serving, registered), trainers
    starts = [seen_at(seen, f"{name} started") for name in ("dispatcher-0", "data_worker-0", trainer)]
    assert starts == sorted(starts), output(seen)
    print(f"\n{strategy}: data worker started {starts[1] - starts[0]:.1f} s after the dispatcher, {trainer} "
          f"{starts[2] - starts[1]:.1f} s after the data worker; job {seen[-1][0] - seen[0][0]:.1f} s")
    addresses = cluster_addresses(tmp_path, run_id)
    dispatcher, data_worker = addresses["dispatcher-0"], addresses["data_worker-0"]
    _on_a_node(dispatcher)
    _on_a_node(data_worker)
    worker_log = (run_dir / "attempt-0" / "data_worker-0" / "stdout.log").read_text()
    assert f"registered with {dispatcher} as {data_worker}" in worker_log, worker_log
    trainer_log = (run_dir / "attempt-0" / trainer / "stdout.log").read_text()
    assert f"through the tf.data service at {dispatcher}" in trainer_log, trainer_log
    section = summary["data_service"]
    assert section["address"] == dispatcher and section["job_name"] == run_id
    assert (section["sharding"], section["workers"]) == ("dynamic", 1)
    assert section["work_dir"] == str(run_dir / "data-service")
    assert (run_dir / "data-service" / "tf_data_dispatcher_journal").is_dir()  # on the shared run directory
    assert section["dispatcher"] == {"data_workers": 1}
    [served] = section["data_workers"]
    assert served["address"] == data_worker and served["data_tasks"] >= 1 and served["restarts"] == 0
    states = {t["task"]: (t["state"], t["signal"]) for t in summary["tasks"]}
    assert states["dispatcher:0"] == states["data_worker:0"] == ("Stopped", "SIGTERM"), states
    assert all(not t["left_behind"] for t in summary["tasks"]), summary["tasks"]
    assert left == [], left
