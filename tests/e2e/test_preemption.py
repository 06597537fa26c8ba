"""Preemption, bounded loss on a crash, and Hogwild, with real TensorFlow (README: Failure handling).

* A SIGTERM from outside (no ``stop-requested`` marker) makes the trainers save a checkpoint at
  the next step with TF's ``PreemptionCheckpointHandler`` and exit 143; the group restarts and
  resumes at exactly that step.
* Under ParameterServerStrategy TF has no preemption handler: a preempted worker exits 143 at
  once and restarts alone while the coordinator goes on (nothing lost: variables live on the ps).
* ``--checkpoint-every 10``: a SIGKILL loses at most 10 steps.
* ``--strategy hogwild``: lock-free threads on one model reach the accuracy of the others.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.e2e.test_recovery import start

pytestmark = pytest.mark.e2e


@pytest.fixture()
def launches():
    """Background launches (:func:`tests.e2e.test_recovery.start`), killed if a test fails early."""
    started: list = []
    yield started
    for launch in started:
        launch.kill()

UNDISTURBED_MWMS_ACCURACY = 0.947
"""Test accuracy of the undisturbed ``--workers 2 --epochs 3`` fit run (seed 0): 0.9472 (final loss
0.0979) on TF 2.21 with the bundled digits' own split (`worker/data.py`; 0.9500 with scikit-learn's):
the seeds fix the initial weights and the shuffle order, so the undisturbed run is reproducible and
need not be re-run in every test session (it costs a 2-worker cluster, ~35 s)."""

RESUMED_ACCURACY_TOLERANCE = 0.05
"""How far a run resumed mid-epoch may land from the undisturbed one: the resumed epoch sees its
batches in another order, and where the preemption lands depends on the machine's speed (measured:
0.9278 after a preemption at step 49, 0.019 from 0.9472; 0.9167 in a CI run, 0.030; the test set is
360 examples, so 0.05 is 18 of them)."""

STEPS_3_EPOCHS = 135  # 45 steps per epoch (1,437 examples / global batch 32, rounded up)


def _log(run_dir: Path, attempt: int, task: str, name: str = "stdout.log") -> str:
    path = run_dir / f"attempt-{attempt}" / task / name
    return path.read_text() if path.exists() else ""


def _saved_after_step(run_dir: Path, task: str) -> int:
    match = re.search(r"preempted \((?:a peer received )?SIGTERM from outside\): checkpoint saved after step (\d+); "
                      r"exiting with code 143",
                      _log(run_dir, 0, task))
    assert match, f"{task} did not save a preemption checkpoint:\n{_log(run_dir, 0, task)[-2000:]}"
    return int(match.group(1))


def _task(summary: dict, name: str) -> dict:
    return next(t for t in summary["tasks"] if t["task"] == name)


def test_sigterm_from_outside_to_an_mwms_worker_resumes_at_the_step_it_stopped_at(tmp_path, launches):
    # BENCH_TIMING makes each task print when its first step is done: the moment to preempt
    os.environ["BENCH_TIMING"] = "1"
    try:
        launch = start(launches, tmp_path, "mwms-preempt", "--workers", "2", "--epochs", "3",
                       "--restart-backoff", "0.2")
    finally:
        del os.environ["BENCH_TIMING"]
    pid = int(launch.wait_for(r"worker-1 started \(pid (\d+), attempt 0\)").group(1))
    wait_until(lambda: "bench: first step" in _log(launch.run_dir, 0, "worker-1"), 120, what="worker-1 training")
    os.kill(pid, signal.SIGTERM)  # from outside: what docker stop, Kubernetes or Slurm send
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-30:])

    saved = {t: _saved_after_step(launch.run_dir, t) for t in ("worker-0", "worker-1")}
    assert saved["worker-0"] == saved["worker-1"], saved  # TF aligned the save step across workers
    stopped_at = saved["worker-1"]
    assert 0 < stopped_at < STEPS_3_EPOCHS
    worker1 = _task(summary, "worker:1")
    assert worker1["earlier_attempts"][0]["exit"] == "exit code 143 (preempted)"
    # the report names the worker that got the SIGTERM, whichever exit was seen first
    assert "preempted (SIGTERM from outside)" in _log(launch.run_dir, 0, "worker-1")
    assert "preempted (a peer received SIGTERM from outside)" in _log(launch.run_dir, 0, "worker-0")
    [recovery] = summary["recoveries"]
    assert recovery["scope"] == "group"
    assert recovery["cause"] in (
        "worker-1 (attempt 0) failed: exit code 143 (preempted): received SIGTERM from outside (a preemption notice)",
        "worker-1 received SIGTERM from outside (a preemption notice): worker-0 (attempt 0) failed: exit code 143 "
        "(preempted): worker-1 received SIGTERM from outside; every worker saved and exited"), recovery["cause"]
    assert recovery["resumed_from_step"] == stopped_at  # 0 steps lost
    assert summary["metrics"]["steps"] == STEPS_3_EPOCHS
    assert summary["metrics"]["test_accuracy"] >= UNDISTURBED_MWMS_ACCURACY - RESUMED_ACCURACY_TOLERANCE


def test_custom_loop_preemption_saves_at_the_next_step_with_tfs_handler(tmp_path, launches):
    # the custom loop runs every step through PreemptionCheckpointHandler.run (mirrored: one task,
    # TF's local mode); `term` sends the SIGTERM a preemption sends, right after step 30. Also the mirrored
    # custom-loop training test (test_training_modes.py): the same job trains 4 epochs to high accuracy
    launch = start(launches, tmp_path, "custom-preempt", "--strategy", "mirrored", "--replicas", "2", "--loop",
                   "custom", "--epochs", "4", "--restart-backoff", "0.2", "--inject-fault", "worker:0:term@step=30")
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-30:])
    stopped_at = _saved_after_step(launch.run_dir, "worker-0")
    assert stopped_at == 31  # the signal came after step 30; TF saves before the next step runs
    [recovery] = summary["recoveries"]
    assert recovery["resumed_from_step"] == stopped_at
    assert summary["metrics"]["steps"] == 4 * 45 == 4 * summary["metrics"]["steps_per_epoch"]
    assert summary["metrics"]["test_accuracy"] >= 0.85 and summary["training"]["loop"] == "custom"
    assert summary["metrics"]["replicas"] == 2 and summary["training"]["global_batch_size"] == 32
    assert "epoch 4/4: mean loss" in _log(launch.run_dir, 1, "worker-0")


def test_a_preempted_pss_worker_exits_143_and_restarts_alone_while_training_goes_on(tmp_path, launches):
    # also the PSS custom-loop training test (test_training_modes.py): the same job trains to high accuracy
    os.environ["BENCH_TIMING"] = "1"
    try:
        launch = start(launches, tmp_path, "pss-preempt", "--strategy", "parameter_server", "--workers", "1",
                       "--ps", "1", "--loop", "custom", "--epochs", "4", "--restart-backoff", "0.2")
    finally:
        del os.environ["BENCH_TIMING"]
    pid = int(launch.wait_for(r"worker-0 started \(pid (\d+), attempt 0\)").group(1))
    wait_until(lambda: "bench: first step" in _log(launch.run_dir, 0, "chief-0"), 120, what="the coordinator training")
    os.kill(pid, signal.SIGTERM)
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-30:])

    assert "preempted (SIGTERM from outside): nothing to checkpoint in this task; exiting with code 143" in _log(
        launch.run_dir, 0, "worker-0")
    worker = _task(summary, "worker:0")
    assert worker["earlier_attempts"][0]["exit"] == "exit code 143 (preempted)"
    assert len(summary["recoveries"]) == 1, summary["recoveries"]
    [recovery] = summary["recoveries"]
    assert recovery["scope"] == "task" and recovery["tasks"] == ["worker-0"]
    chief = _task(summary, "chief:0")
    assert chief["attempts"] == 1 and chief["exit_code"] == 0  # the coordinator never restarted: nothing lost
    assert summary["metrics"]["steps"] == 4 * 90 == 4 * summary["metrics"]["steps_per_epoch"]
    assert summary["metrics"]["test_accuracy"] >= 0.85 and summary["training"]["loop"] == "custom"
    assert "epoch 4/4: mean loss" in _log(launch.run_dir, 0, "chief-0")
    # the orchestrator's own stops at the end (ps, PSS worker) are not preemptions: SIGTERM, not 143
    for name in ("worker:0", "ps:0"):
        assert _task(summary, name)["state"] == "Stopped" and _task(summary, name)["signal"] == "SIGTERM"
    assert "preempted" not in _log(launch.run_dir, 0, "ps-0") + _log(launch.run_dir, 1, "worker-0")


def test_sigkill_with_checkpoint_every_10_loses_at_most_10_steps(tmp_path, launches):
    # also the MWMS custom-loop training test (test_training_modes.py): the same job trains 4 epochs to high accuracy
    launch = start(launches, tmp_path, "ckpt-every", "--workers", "2", "--loop", "custom", "--epochs", "4",
                   "--checkpoint-every", "10", "--restart-backoff", "0.2", "--inject-fault", "worker:1:kill@step=37")
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-30:])
    [recovery] = summary["recoveries"]
    assert "signal SIGKILL" in recovery["cause"]
    resumed = recovery["resumed_from_step"]
    assert resumed == 30  # the last checkpoint before the kill at step 37 (per epoch alone: step 0)
    assert 37 - resumed <= 10
    assert summary["metrics"]["steps"] == 4 * 45 == 4 * summary["metrics"]["steps_per_epoch"]
    assert summary["training"]["checkpoint_every"] == 10
    assert summary["metrics"]["test_accuracy"] >= 0.85 and summary["training"]["loop"] == "custom"
    assert "epoch 4/4: mean loss" in _log(launch.run_dir, 1, "worker-0")


def test_hogwild_threads_train_one_shared_model_to_high_accuracy(tmp_path, launches):
    launch = start(launches, tmp_path, "hogwild", "--strategy", "hogwild", "--threads", "2", "--epochs", "4")
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-30:])
    assert summary["strategy"] == "hogwild" and summary["training"]["threads"] == 2
    assert summary["metrics"]["steps"] == 4 * 90  # 90 batches of 16 per epoch, shared by the threads
    # the threads' unlocked updates race, so accuracy varies run to run: 4 epochs measured 0.936-0.953
    # (5 quiet runs), 0.939-0.956 (4 runs beside two busy loops), but 0.689 once in a CI run (3 epochs:
    # 0.886-0.95, 0.833 in CI). Chance is 0.1, a model whose threads never update it stays near it: the
    # bound says the threads trained the shared model, not how well a race goes
    assert summary["metrics"]["test_accuracy"] >= 0.5
    out = _log(launch.run_dir, 0, "worker-0")
    assert "hogwild, 2 threads on one model, no locks" in out and "epoch 4/4: mean loss" in out
    assert summary["tasks"][0]["last_heartbeat"]["loss"] is not None
