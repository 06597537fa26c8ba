"""A running elastic MWMS job changes size with real TensorFlow (issue 34; docs/elastic.md).

``--workers 1:2 --epochs 12``: 2 TF processes (the global batch 32 kept at every size: 540 steps; 12
epochs, not 3, so the resize lands mid-training even when a loaded machine's heartbeat shows step 30
late (with 3 epochs, one run in five failed the one-save-step check)).

* ``resize RUN --workers 1`` once the run reports step >= 30 (a bounded wait on the run's status): every
  worker saves at one step (the preemption's coordinated save) and the group continues at 1 worker
  from that step in the same launcher: segments [2 workers, 1 worker], 0 steps lost, 540 steps.
* ``--epochs 12 --inject-fault worker:1:lose@step=60``: worker 1's slot is withdrawn (not restarted in
  place): the group continues at 1 worker from the last checkpoint (the end of epoch 1, step 45),
  the steps after it lost and trained again; once it reports step >= 60 at 1 worker, ``resize RUN
  --workers 2`` gives the slot back (``grew back``: a coordinated save, 0 steps lost), and the job
  finishes its 540 steps.
"""

from __future__ import annotations

import pytest

from orchestrator.cli import main
from orchestrator.health.client import EndpointError
from orchestrator.report.runs import read_endpoint
from tests.conftest import wait_until
from tests.e2e.test_recovery import launches, start  # noqa: F401 - the fixture
from tests.e2e.test_resume import _saved_step

STEPS_12_EPOCHS = 540  # 45 steps per epoch at the global batch 32, at any size (1 worker trains ~150 steps/s here)

pytestmark = pytest.mark.e2e


def _step(run_dir) -> int:
    """The run's step now (worker 0's last heartbeat, from the run's endpoint: a status query in this
    process, no CLI start); -1 while it has none."""
    endpoint = read_endpoint(run_dir)
    if endpoint is None:
        return -1
    try:
        with endpoint.client() as client:
            tasks = client.status().get("tasks") or [{}]
    except EndpointError:
        return -1
    beat = tasks[0].get("last_heartbeat") or {}
    return int(beat.get("step") or -1)


def test_a_resize_asked_continues_the_running_group_at_1_worker_from_the_step_it_saved(tmp_path, launches, capsys):  # noqa: F811
    launch = start(launches, tmp_path, "shrink", "--workers", "1:2", "--epochs", "12")
    wait_until(lambda: _step(launch.run_dir) >= 30, 300, interval_s=0.05, what="step 30")
    assert main(["resize", "shrink", "--runs-dir", str(tmp_path), "--workers", "1"]) == 0  # in this process: at once
    assert "resize accepted: run shrink continues at 1 worker(s)" in capsys.readouterr().out
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-40:])
    assert any("resize asked: 2 -> 1 worker(s)" in line for line in launch.lines), "".join(launch.lines[-40:])
    assert not any("not done: training has ended" in line for line in launch.lines), "".join(launch.lines[-40:])
    saved = _saved_step(launch.run_dir)
    assert 30 <= saved < STEPS_12_EPOCHS
    one, two = summary["segments"]
    assert (one["workers"], one["first_step"], one["last_step"], one["cause"], one["steps_lost"]) == \
        (2, 0, saved, "launched", 0)
    assert (two["workers"], two["global_batch_size"], two["per_replica_batch_size"], two["first_step"],
            two["last_step"], two["cause"]) == (1, 32, 32, saved, STEPS_12_EPOCHS, "resize asked")
    assert summary["metrics"]["steps"] == STEPS_12_EPOCHS
    assert summary["elastic"]["workers"] == 1 and [t["task"] for t in summary["tasks"]] == ["worker:0"]
    assert [life["cause"] for life in summary["lives"]] == ["resize asked", "succeeded"]


def test_a_lost_slot_shrinks_the_group_to_1_worker_and_resize_gives_it_back(tmp_path, launches, capsys):  # noqa: F811
    launch = start(launches, tmp_path, "lose", "--workers", "1:2", "--epochs", "12",
                   "--inject-fault", "worker:1:lose@step=60")
    launch.wait_for(r"worker-1's slot is lost: the group continues at 1 worker\(s\) from the last checkpoint")
    wait_until(lambda: _step(launch.run_dir) >= 60, 300, interval_s=0.05, what="step 60 at 1 worker")
    assert main(["resize", "lose", "--runs-dir", str(tmp_path), "--workers", "2"]) == 0  # the slot given back
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-40:])
    one, two, three = summary["segments"]
    assert (one["workers"], one["cause"], two["workers"], two["cause"], three["workers"], three["cause"]) == \
        (2, "launched", 1, "slot lost", 2, "grew back")
    assert two["first_step"] == 45  # the last checkpoint: the end of epoch 1
    assert one["last_step"] >= 60 and one["steps_lost"] == one["last_step"] - 45  # at least the fault's step
    assert two["steps_lost"] == 0 and 60 <= three["first_step"] < STEPS_12_EPOCHS  # the grow: a coordinated save
    assert three["last_step"] == summary["metrics"]["steps"] == STEPS_12_EPOCHS
    assert summary["restarts"] == 0  # a lost slot is not a restart in place
    assert [t["task"] for t in summary["tasks"]] == ["worker:0", "worker:1"]
