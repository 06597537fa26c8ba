"""Runs that outlive preemption, with real TensorFlow (README: Failure handling, preemption).

* SIGTERM to the orchestrator (what Slurm, ``docker stop`` and a Kubernetes eviction send) saves
  and leaves: every trainer checkpoints at its next step, the job ends ``Preempted`` (exit 75),
  and ``launch --resume`` continues it in the same run directory from that step: 0 steps lost,
  the accuracy of an undisturbed run.
* The orchestrator SIGKILLed outright: ``--resume`` continues from the last checkpoint, at most
  ``--checkpoint-every`` steps lost, and the life that died reads ``Lost``.
* A user's program that leaves preemption to TF's own ``PreemptionCheckpointHandler`` (exit 42
  after its save, its default off Google Cloud): a SIGTERM to the pid ``status`` shows reaches
  it, and the restart is free (no restart counted, no backoff), resuming at the saved step.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_no_process_left, wait_until
from tests.e2e.test_preemption import RESUMED_ACCURACY_TOLERANCE, STEPS_3_EPOCHS, UNDISTURBED_MWMS_ACCURACY
from tests.e2e.test_recovery import launches, start  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e


def _saved_step(run_dir: Path) -> int:
    steps = {int(m) for log in run_dir.glob("attempt-0/worker-*/stdout.log")
             for m in re.findall(r"checkpoint saved after step (\d+); exiting with code 143", log.read_text())}
    assert len(steps) == 1, f"the workers did not save one preemption checkpoint: {steps}"
    return steps.pop()


def _wait_for_epoch(run_dir: Path, epoch: str) -> None:
    """Until tf-keras ``fit`` starts epoch ``epoch`` (``Epoch 2/3``) on worker-0: the one before is done."""
    log = run_dir / "attempt-0" / "worker-0" / "stdout.log"
    wait_until(lambda: log.exists() and f"Epoch {epoch}\n" in log.read_text(), 300, what=f"Epoch {epoch} started")


def test_sigterm_to_the_orchestrator_saves_and_a_resume_loses_no_step(tmp_path, launches):  # noqa: F811
    first = start(launches, tmp_path, "preempted", "--workers", "2", "--epochs", "3", "--spares", "0")
    _wait_for_epoch(first.run_dir, "2/3")  # two epochs left: the SIGTERM lands mid-training by construction
    first.proc.send_signal(signal.SIGTERM)
    code, summary = first.finish()
    assert code == 75, "".join(first.lines[-30:])
    assert summary["status"] == "Preempted" and summary["restarts"] == 0
    saved = _saved_step(first.run_dir)
    assert "every training task saved and left" in summary["reason"]
    record = json.loads((first.run_dir / "run.json").read_text())
    assert record["next_attempt"] == {"worker-0": 1, "worker-1": 1}

    second = start(launches, tmp_path, "preempted", "--resume", "preempted", "--deadline", "600")
    second.wait_for(r"resuming run preempted, life 2: life 1 ended Preempted \(preempted\)")
    code, summary = second.finish()
    assert code == 0, "".join(second.lines[-30:])
    one, two = summary["lives"]
    assert (one["ended"], one["cause"], one["steps_lost"]) == ("Preempted", "preempted", 0)
    assert (two["ended"], two["resumed_from_step"]) == ("Succeeded", saved)
    assert summary["metrics"]["steps"] == STEPS_3_EPOCHS and summary["restarts"] == 0
    assert abs(summary["metrics"]["test_accuracy"] - UNDISTURBED_MWMS_ACCURACY) <= RESUMED_ACCURACY_TOLERANCE
    assert (first.run_dir / "attempt-1" / "worker-0" / "stdout.log").exists()  # attempts count on


def test_a_sigkilled_orchestrator_resumes_losing_at_most_checkpoint_every_steps(tmp_path, launches):  # noqa: F811
    # also the orphan test (test_recovery.py's test_tasks_die_within_seconds_when_the_orchestrator_is_sigkilled
    # ran a job of its own for it): the tasks of the SIGKILLed orchestrator are gone within seconds
    first = start(launches, tmp_path, "killed", "--workers", "2", "--epochs", "2", "--spares", "0",
                  "--checkpoint-every", "10")
    pids = [int(first.wait_for(rf"worker-{i} started \(pid (\d+)")[1]) for i in range(2)]
    _wait_for_epoch(first.run_dir, "2/2")
    seen = 45  # one epoch: 45 steps; a checkpoint every 10 steps and at the epoch's end
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    killed_at = time.monotonic()
    assert_no_process_left(pids, timeout_s=5.0)
    print(f"tasks gone {time.monotonic() - killed_at:.2f} s after the orchestrator's SIGKILL")
    endpoint = first.run_dir / "endpoint.json"
    assert endpoint.exists()  # the killed orchestrator could not clean up
    # what a SIGKILL during a save leaves (a CI run got it): worker-1's temp copy's ``checkpoint`` file names files
    # never written. TF's handler restores a non-chief from that copy, so the resume failed with NotFoundError;
    # a resumed non-chief must restore the chief's checkpoint only
    temp = first.run_dir / "backup" / "workertemp_1"
    temp.mkdir(parents=True, exist_ok=True)
    (temp / "checkpoint").write_text('model_checkpoint_path: "ckpt-999"\nall_model_checkpoint_paths: "ckpt-999"\n')

    second = start(launches, tmp_path, "killed", "--resume", "killed")
    code, summary = second.finish()
    assert code == 0, "".join(second.lines[-30:])
    one, two = summary["lives"]
    assert (one["ended"], one["cause"]) == ("Lost", "orchestrator killed")
    assert two["resumed_from_step"] is not None and two["resumed_from_step"] >= seen - 10
    assert one["steps_lost"] is not None and one["steps_lost"] <= 10
    assert summary["metrics"]["steps"] == 90


def test_a_users_program_with_tfs_default_handler_exit_42_resumes_for_free(tmp_path, launches):  # noqa: F811
    # also issue 21 item 7 (test_preemption.py's test_a_users_preemption_is_named_after_the_worker_signalled... ran
    # this job with 8 steps): worker-1 gets the SIGTERM and is slow to exit (--slow-exit); worker-0, which only
    # saved and exited 42 with it, is seen first; the decision waits for worker-1 (decisions.awaits_saving_peers)
    # no longer than the preemption grace (3 s here: worker-1's exit takes 30 s), and the preemption is still named
    # after worker-1
    launch = start(launches, tmp_path, "user42", "--workers", "2", "--spares", "0", "--max-restarts", "0",
                   "--preemption-grace", "3", "--", sys.executable, "tests/programs/user_preempt.py", "30",
                   "--slow-exit")
    pid = int(launch.wait_for(r"worker-1 started \(pid (\d+)")[1])  # the pid `status` shows: the wrapper's
    waiting = [tmp_path / "user42" / "attempt-0" / f"worker-{i}" / "at-step-3" for i in range(2)]
    wait_until(lambda: all(p.exists() for p in waiting), 120, what="both workers at step 3")
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: (tmp_path / "user42" / "attempt-0" / "worker-1" / "sigterm-received").exists(), 10,
               what="the wrapper took the notice")
    (tmp_path / "user42" / "go").write_text("")
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-30:])
    assert summary["restarts"] == 0  # --max-restarts 0: a preemption is free
    (recovery,) = summary["recoveries"]
    assert "exit code 42" in recovery["cause"] and "received SIGTERM from outside" in recovery["cause"]
    assert recovery["cause"].startswith("worker-1 received SIGTERM from outside"), recovery["cause"]
    assert any("waiting up to 3 s for worker-1 to save and exit too" in line for line in launch.lines)
    resumed = int(re.search(r"resumed from step (\d+)",
                            (launch.run_dir / "attempt-1" / "worker-0" / "stdout.log").read_text())[1])
    assert resumed >= 3 and recovery["resumed_from_step"] == resumed
    assert "done at step 30" in (launch.run_dir / "attempt-1" / "worker-0" / "stdout.log").read_text()


def test_pss_sigterm_to_the_orchestrator_the_coordinator_saves_and_a_resume_loses_no_step(tmp_path, launches):  # noqa: F811
    # TF has no preemption handler under PSS: the built-in coordinator is its own (custom loop);
    # the orchestrator notices it alone, so that its workers and ps serve until it has saved
    first = start(launches, tmp_path, "pss", "--strategy", "parameter_server", "--loop", "custom", "--epochs", "3",
                  "--spares", "0")
    log = first.run_dir / "attempt-0" / "chief-0" / "stdout.log"
    wait_until(lambda: log.exists() and "epoch 1/3: mean loss" in log.read_text(), 300, what="epoch 1 done")
    first.proc.send_signal(signal.SIGTERM)
    code, summary = first.finish()
    assert code == 75, "".join(first.lines[-30:])
    saved = int(re.search(r"checkpoint saved after step (\d+); exiting with code 143", log.read_text())[1])
    second = start(launches, tmp_path, "pss", "--resume", "pss")
    code, summary = second.finish()
    assert code == 0, "".join(second.lines[-30:])
    one, two = summary["lives"]
    assert (one["ended"], one["steps_lost"], two["resumed_from_step"]) == ("Preempted", 0, saved)
    assert summary["metrics"]["steps"] == 3 * summary["metrics"]["steps_per_epoch"] and summary["restarts"] == 0


def test_pss_fit_sigterm_after_an_epoch_the_end_line_names_the_step_that_epoch_saved(tmp_path, launches):  # noqa: F811
    # the fit loop: BackupAndRestore saves each epoch's end, and a notice exits the coordinator at once
    # (nothing to checkpoint); the epoch's step is said before that save (a flushed report), so the end
    # line and the life name it, however long the heartbeat interval (5 s here, the hang timeout above it:
    # a report left for the next heartbeat would be lost with the coordinator)
    launch = start(launches, tmp_path, "pss-fit", "--strategy", "parameter_server", "--epochs", "4", "--spares", "0",
                   "--heartbeat-interval", "5", "--heartbeat-timeout", "60")
    log = launch.run_dir / "attempt-0" / "chief-0" / "stdout.log"
    wait_until(lambda: log.exists() and "Epoch 3/4\n" in log.read_text(), 300, what="Epoch 3/4 started")
    launch.proc.send_signal(signal.SIGTERM)  # epochs 1 and 2 saved
    ended = launch.wait_for(r"job Preempted: preempted \(SIGTERM to the orchestrator\): every training task saved "
                            r"and left(?: at step (\d+))?")
    code, summary = launch.finish()
    assert code == 75, "".join(launch.lines[-30:])
    saved = 2 * summary["metrics"]["steps_per_epoch"]
    assert ended[1] is not None and int(ended[1]) >= saved, ended[0]
    assert summary["lives"][0]["last_step"] >= saved and summary["metrics"]["steps"] >= saved
