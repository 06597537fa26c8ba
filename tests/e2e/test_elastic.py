"""Elastic workers with real TensorFlow (issue 34, first slice; docs/elastic.md).

A ``--workers 1:2`` MWMS job starts at 2 workers with the global batch of 2 (16 per replica); a
SIGTERM to the orchestrator (a preemption) saves at the next step and the run ends Preempted; the
node is gone, so ``launch --resume RUN --workers 1`` continues it at 1 worker: the same global batch,
32 per replica, from the saved step (keep-global keeps the checkpoint's (epoch, step) index valid),
and the job succeeds with every step trained once. Three TF processes in all (2, then 1).
"""

from __future__ import annotations

import signal

import pytest

from tests.conftest import wait_until
from tests.e2e.test_preemption import STEPS_3_EPOCHS
from tests.e2e.test_recovery import launches, start  # noqa: F401 - the fixture
from tests.e2e.test_resume import _saved_step

pytestmark = pytest.mark.e2e


def test_an_elastic_mwms_run_preempted_at_2_workers_resumes_at_1_with_the_same_global_batch(tmp_path, launches):  # noqa: F811
    first = start(launches, tmp_path, "elastic", "--workers", "1:2", "--epochs", "3", "--spares", "0")
    first.wait_for(r"global batch 32")
    log = first.run_dir / "attempt-0" / "worker-0" / "stdout.log"
    wait_until(lambda: log.exists() and "Epoch 2/3\n" in log.read_text(), 300, what="Epoch 2/3 started")
    first.proc.send_signal(signal.SIGTERM)  # a preemption: every worker saves at its next step and leaves
    code, summary = first.finish()
    assert code == 75, "".join(first.lines[-30:])
    saved = _saved_step(first.run_dir)
    assert summary["elastic"] == {"min": 1, "max": 2, "workers": 2, "parked": [], "batch_policy": "keep-global",
                                  "lr_scaling": "none"}
    assert "per-replica batch 16, global batch 32" in log.read_text()

    second = start(launches, tmp_path, "elastic", "--resume", "elastic", "--workers", "1")
    second.wait_for(r"resuming run elastic, life 2")
    code, summary = second.finish()
    assert code == 0, "".join(second.lines[-30:])
    assert [t["task"] for t in summary["tasks"]] == ["worker:0"]
    assert summary["elastic"]["workers"] == 1
    one, two = summary["segments"]
    assert (one["workers"], one["global_batch_size"], one["per_replica_batch_size"], one["first_step"],
            one["cause"], one["steps_lost"]) == (2, 32, 16, 0, "launched", 0)
    assert (two["workers"], two["global_batch_size"], two["per_replica_batch_size"], two["first_step"],
            two["last_step"], two["cause"]) == (1, 32, 32, saved, STEPS_3_EPOCHS, "resumed at another size")
    assert one["last_step"] == saved and one["learning_rate_factor"] == two["learning_rate_factor"] == 1.0
    assert summary["metrics"]["steps"] == STEPS_3_EPOCHS  # the same steps per epoch: the global batch kept
    resumed_log = (first.run_dir / "attempt-1" / "worker-0" / "stdout.log").read_text()
    assert "1 replica(s) in sync, per-replica batch 32, global batch 32" in resumed_log
    assert "sharded by DATA" in resumed_log or "DATA" in resumed_log


def test_a_keep_per_replica_run_resumed_at_1_worker_converts_its_step_through_the_examples_seen(tmp_path, launches):  # noqa: F811
    first = start(launches, tmp_path, "per-replica", "--workers", "1:2", "--batch-policy", "keep-per-replica",
                  "--lr-scaling", "linear", "--epochs", "2", "--spares", "0")
    log = first.run_dir / "attempt-0" / "worker-0" / "stdout.log"
    wait_until(lambda: log.exists() and "Epoch 2/2\n" in log.read_text(), 300, what="Epoch 2/2 started")
    first.proc.send_signal(signal.SIGTERM)
    code, summary = first.finish()
    assert code == 75, "".join(first.lines[-30:])
    saved = _saved_step(first.run_dir)  # at global batch 32, 45 steps per epoch

    second = start(launches, tmp_path, "per-replica", "--resume", "per-replica", "--workers", "1")
    code, summary = second.finish()
    assert code == 0, "".join(second.lines[-30:])
    one, two = summary["segments"]
    assert (one["workers"], one["global_batch_size"], one["per_replica_batch_size"], one["learning_rate_factor"]) == \
        (2, 32, 16, 1.0)
    # the same examples seen: step s at 32 examples is step 2s at 16; 90 steps per epoch now
    assert (two["workers"], two["global_batch_size"], two["per_replica_batch_size"], two["learning_rate_factor"],
            two["first_step"], two["last_step"]) == (1, 16, 16, 0.5, 2 * saved, 180)
    resumed_log = (first.run_dir / "attempt-1" / "worker-0" / "stdout.log").read_text()
    assert "(global batch 16): the same examples seen" in resumed_log
