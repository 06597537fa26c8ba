"""How a user's tasks end (``launch ... -- python tests/programs/user_endings.py MODE``, real
processes through ``execwrap``, no TensorFlow): the evaluator's grace for its last evaluation,
an evaluator crash-looping on the same error, a trainer that finished but cannot exit."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from orchestrator import api
from orchestrator.report.summary import format_final
from orchestrator.spec import JobSpec
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, all_pids, assert_no_process_left

PROGRAM = str(REPO / "tests" / "programs" / "user_endings.py")
DEADLINE_S = 40.0
"""Every job here ends within this: a wrong behaviour fails in seconds, not at pytest's timeout."""


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)


def launch(tmp_path: Path, worker: str, evaluator: str | None = None, **supervision):
    supervision.setdefault("backoff_s", 0.1)
    supervision.setdefault("deadline_s", DEADLINE_S)
    spec = JobSpec.create(workers=1, evaluator=1 if evaluator else 0, heartbeat_interval_s=0.2)
    spec = dataclasses.replace(spec, supervision=SupervisionSpec.create(**supervision))
    commands = {"worker": [sys.executable, PROGRAM, worker]}
    if evaluator:
        commands["evaluator"] = [sys.executable, PROGRAM, evaluator]
    job = api.prepare(spec, runs_dir=tmp_path, commands=commands)
    result, summary = api.run(job)
    assert_no_process_left(all_pids(summary))
    return job, result, summary


def test_an_evaluator_cut_off_by_its_grace_says_its_final_evaluation_was_lost(tmp_path):
    _, result, summary = launch(tmp_path, "train", "evaluate-slowly", evaluator_grace_s=1.0)
    assert result.exit_code == 0, summary["reason"]
    evaluator = summary["tasks"][1]
    assert evaluator["state"] == "Stopped" and "final evaluation lost" in evaluator["reason"]
    (warning,) = summary["warnings"]
    assert warning.startswith("evaluator-0: final evaluation lost: still evaluating 1 s after the job succeeded")
    assert warning.endswith("its last result is of step 1")
    assert summary["evaluation"]["evaluated_step"] == 1
    assert f"WARNING     {warning[:40]}" in format_final(summary, width=200)


def test_an_evaluator_finishing_within_its_grace_records_its_final_result(tmp_path):
    _, result, summary = launch(tmp_path, "train", "evaluate", evaluator_grace_s=30.0)
    assert result.exit_code == 0, summary["reason"]
    assert summary["tasks"][1]["state"] == "Succeeded"
    assert summary["evaluation"] == {"evaluated_step": 3, "eval_accuracy": 0.75}
    assert summary["warnings"] == []


def test_an_evaluator_failing_with_the_same_keyerror_is_stopped_as_a_crash_loop_and_warned_about(tmp_path):
    job, result, summary = launch(tmp_path, "train-until-evaluator-failed:3", "evaluate-keyerror", max_restarts=5)
    assert result.exit_code == 0, summary["reason"]
    evaluator = summary["tasks"][1]
    assert evaluator["state"] == "Failed" and evaluator["attempts"] == 3  # not the 6 the budget allows
    assert [f["message"] for f in summary["failures"]] == ["KeyError: 'evaluator'"] * 3
    (warning,) = summary["warnings"]
    assert warning.startswith("evaluator-0 never evaluated: it failed with the same error 3 times in a row "
                              "(KeyError: 'evaluator')")
    assert "WARNING     evaluator-0 never evaluated" in format_final(summary, width=200)


@pytest.mark.parametrize("mode, where", [
    ("train-then-stuck-thread", 'the main thread waits in threading._shutdown for the non-daemon thread "loader" in '
                                "main.<locals>.load_forever (programs/user_endings.py:"),
    ("train-then-stuck-atexit", 'the main thread "MainThread" in main.<locals>.flush_forever '
                                "(programs/user_endings.py:"),
])
def test_a_trainer_that_finished_but_cannot_exit_is_killed_and_the_job_succeeds_naming_the_thread(
        tmp_path, mode, where):
    _, result, summary = launch(tmp_path, mode, exit_grace_s=1.0, heartbeat_timeout_s=2.0)
    assert result.exit_code == 0, summary["reason"]
    assert summary["status"] == "Succeeded" and summary["failures"] == []
    worker = summary["tasks"][0]
    assert worker["state"] == "Succeeded" and worker["signal"] == "SIGKILL"
    (warning,) = summary["warnings"]
    assert warning.startswith(f"worker-0 finished its work but was stuck in its exit, in {where}"), warning
    assert "stack dump in" in warning
