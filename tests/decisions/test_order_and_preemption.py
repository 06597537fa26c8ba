"""Decisions about order, backoff, preemption and resumed runs: tables over the pure functions,
and the loop driven tick by tick with the fake backend and clock of ``test_supervisor_loop``.

Two bugs planted in issue 19 survived the whole suite: the default backoff schedule shifted by
one restart, and the order of exits seen in the same look reversed (deaths by signal first is
what makes a SIGKILLed worker, not the peer that died of it, the root cause). Both have tables here.
"""

from __future__ import annotations

import signal

import pytest

from orchestrator.env import SIGTERM_RECEIVED_FILE
from orchestrator.spec import TaskId
from orchestrator.spec.model import Strategy
from orchestrator.spec.supervision import SuccessPolicy, SupervisionSpec
from orchestrator.supervisor import EXIT_PREEMPTED, JobState, TaskState
from orchestrator.supervisor.record import run_record
from orchestrator.supervisor.records.lives import Carried, Life, close_previous
from orchestrator.supervisor.rules.decisions import (
    backoff_s,
    cause_first,
    exit_order,
    failure_action,
    fatal_after_training,
    late_notice,
    preempted_task,
    restart_plan,
    training_ended,
)
from tests.decisions.test_supervisor_loop import FakeBackend, FakeHandle, Harness, spec_of

W0, W1, PS0, CHIEF = TaskId("worker", 0), TaskId("worker", 1), TaskId("ps", 0), TaskId("chief", 0)


@pytest.mark.parametrize("backoff, expected", [
    (None, [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]),  # the default: the first restart at once
    (1.0, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]),
    (0.5, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]),
    (0.0, [0.0] * 8),
])
def test_the_backoff_schedule_restart_by_restart(backoff, expected):
    supervision = SupervisionSpec.create(backoff_s=backoff)
    assert [backoff_s(supervision, n) for n in range(1, 9)] == expected


@pytest.mark.parametrize("codes, order", [
    ([1, -9], [1, 0]),  # the SIGKILLed task first: its peer's exit 1 is its consequence
    ([-9, 1], [0, 1]),
    ([3, 143, -15, 0, -11], [2, 4, 0, 1, 3]),  # signals first, then the order seen (stable)
    ([1, 2, 3], [0, 1, 2]),
    ([], []),
])
def test_exits_seen_in_one_look_are_handled_deaths_by_signal_first(codes, order):
    assert exit_order(codes) == order


def test_in_the_loop_a_sigkilled_worker_not_its_peer_is_the_root_cause(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"restart_policy": {"all": "never"}}))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-0", 1)  # seen in the same look: worker-0 died of worker-1's SIGKILL
    h.exit("worker-1", -signal.SIGKILL)
    result = h.finish()
    assert result.state is JobState.FAILED
    assert result.root_cause is not None and result.root_cause.task == W1


@pytest.mark.parametrize("notices, order", [
    ([False, True], [1, 0]), ([True, False], [0, 1]), ([False, False, True, True], [2, 3, 0, 1]),
])
def test_of_failures_seen_together_the_one_that_got_the_notice_comes_first(notices, order):
    assert cause_first(notices) == order


@pytest.mark.parametrize("failed, policy, fatal", [
    ([W1], SuccessPolicy.ALL_WORKERS, [0]),
    ([W1], SuccessPolicy.CHIEF, []),  # the coordinator's exit 0 is all the policy asks
    ([W0, W1], SuccessPolicy.CHIEF, [0, 1]),  # W0 is the coordinator here
    ([PS0], SuccessPolicy.CHIEF, [0]),
    ([TaskId("evaluator", 0)], SuccessPolicy.ALL_WORKERS, []),
])
def test_which_failures_after_training_fail_the_job(failed, policy, fatal):
    assert fatal_after_training(failed, trainers=[W0, W1], coordinator=W0, success_policy=policy) == fatal


def test_failure_actions():
    common = dict(strategy=Strategy.MULTI_WORKER_MIRRORED, training_tasks=[W0, W1], trainers=[W0, W1],
                  coordinator=W0, success_policy=SuccessPolicy.ALL_WORKERS)
    assert failure_action([W1], ended="", job_preempted=True, **common).kind == "preempt"
    restart = failure_action([W1], ended="", job_preempted=False, **common)
    assert (restart.kind, restart.tasks) == ("restart", (W0, W1))
    fail = failure_action([W1], ended="worker-0 succeeded", job_preempted=False, **common)
    assert (fail.kind, fail.cause) == ("fail", 0) and "a restart would run it again" in fail.why
    assert training_ended("worker-0", False, [("worker-0", "training"), ("worker-1", "finishing")]) == \
        "worker-1 reported finishing"
    assert training_ended("worker-0", False, [("worker-0", "training")]) == ""


@pytest.mark.parametrize("code, counted, retried", [
    (143, False, True), (42, False, True), (-15, False, True),  # preemptions: free, whatever the budget
    (137, True, False),  # retryable, but the budget is used up
    (1, True, False),  # permanent under exit-code
])
def test_a_preemption_never_counts_against_the_budget_nor_waits(code, counted, retried):
    supervision = SupervisionSpec.create(max_restarts=2, backoff_s=5.0)
    plan = restart_plan(supervision, "worker", code, restarts_used=2, task_name="worker-1", attempt=2)
    assert plan.retry is retried
    if retried:
        assert (plan.counted, plan.delay_s) == (counted, 0.0)


def test_a_configured_preemption_exit_code_is_one_and_others_are_not():
    supervision = SupervisionSpec.create(preemption_exit_codes="143,7")
    assert supervision.preemption_code(7) and supervision.preemption_code(143) and not supervision.preemption_code(42)


def test_tfs_default_handler_exit_42_restarts_at_once_without_using_the_budget(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"max_restarts": 1}))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", 42)  # PreemptionCheckpointHandler off Google Cloud: saved, exit 42
    h.exit("worker-0", 42)
    h.tick()  # no backoff: the same look restarts them
    assert h.sup.restarts_used == 0 and h.sup.state is JobState.STARTING
    assert [t.attempt for t in h.sup.snapshot().tasks] == [1, 1]
    assert all(t.state is TaskState.STARTING for t in h.sup.snapshot().tasks)


def test_a_job_preemption_saves_and_leaves_with_its_own_exit_code(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=7)
    h.tick()
    h.sup.request_preemption("SIGTERM to the orchestrator")
    h.tick()
    # the notice is a plain SIGTERM (TF's handler saves), not the orchestrator's two-phase stop
    assert all(h.backend.latest(n).signals == [signal.SIGTERM] for n in ("worker-0", "worker-1"))
    assert h.backend.stopped == []
    result = h.finish()
    assert (result.state, result.exit_code) == (JobState.PREEMPTED, EXIT_PREEMPTED)
    assert "every training task saved and left at step 7" in result.reason
    assert h.sup.restarts_used == 0 and not h.sup.failures
    (life,) = result.lives
    assert (life.number, life.ended, life.cause, life.last_step) == (1, "Preempted", "preempted", 7)


class DeafBackend(FakeBackend):
    """Tasks that ignore a plain SIGTERM (a save that never finishes); a stop still ends them."""

    def signal(self, handle: FakeHandle, signum: int) -> None:
        handle.signals.append(signum)
        if signum == signal.SIGKILL and handle.code is None:
            handle.code = -signum


def test_a_save_that_does_not_finish_within_the_grace_is_reported(tmp_path):
    # tasks saving do not beat in this harness: a heartbeat timeout longer than the grace
    h = Harness(tmp_path, spec_of(workers=2, supervision={"heartbeat_timeout_s": 10.0}))
    h.sup.backend = h.backend = DeafBackend(h.clock)
    h.sup = type(h.sup)(h.sup.plan, h.backend, h.store, h.view, clock=h.clock, stop_timeout_s=1.0,
                        preemption_grace_s=5.0)
    h.sup.start()
    h.all_beat(step=3)
    h.tick()
    h.sup.request_preemption("SIGTERM to the orchestrator")
    h.tick()
    assert not h.sup.state.terminal
    h.tick(4.9)
    assert not h.sup.state.terminal  # within the grace
    h.tick(0.2)
    assert h.sup.state is JobState.PREEMPTED
    assert "worker-0, worker-1 did not save within the 5 s grace" in h.sup.reason


def test_every_task_sigtermed_from_outside_at_once_is_the_job_preempted_not_failures(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=4)
    h.tick()
    for name in ("worker-0", "worker-1"):  # Slurm signals every job step at once
        (h.backend.latest(name).stdout_path.parent / SIGTERM_RECEIVED_FILE).write_text("")
    h.exit("worker-1", 143)
    h.tick()
    assert h.sup.state is not JobState.RESTARTING and h.sup.restarts_used == 0
    h.exit("worker-0", 143)
    result = h.finish()
    assert result.state is JobState.PREEMPTED and "the job is preempted" in result.reason


def test_one_task_sigtermed_from_outside_is_a_task_preemption_restarted_for_free(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=4)
    h.tick()
    (h.backend.latest("worker-1").stdout_path.parent / SIGTERM_RECEIVED_FILE).write_text("")
    h.exit("worker-1", 143)
    h.exit("worker-0", 143)
    h.tick()
    assert h.sup.restarts_used == 0 and [t.attempt for t in h.sup.snapshot().tasks] == [1, 1]
    assert not h.sup.state.terminal


def test_a_resumed_life_counts_attempts_on_and_keeps_the_budget(tmp_path):
    carried = Carried(lives=(Life(number=1, started_at=1.0, ended_at=2.0, ended="Preempted", cause="preempted",
                                  last_step=40),),
                      restarts_used=1, next_attempt={"worker-0": 3, "worker-1": 3},
                      task_restarts={"worker-0": 1, "worker-1": 1})
    h = Harness(tmp_path, spec_of(workers=2, supervision={"max_restarts": 2}))
    h.sup = type(h.sup)(h.sup.plan, h.backend, h.store, h.view, clock=h.clock, stop_timeout_s=1.0, carried=carried)
    h.sup.start()
    assert [t.attempt for t in h.sup.snapshot().tasks] == [3, 3]
    assert h.backend.latest("worker-0").stdout_path.parent.parent.name == "attempt-3"
    h.beat("worker-0", step=41, resumed_from_step=40)
    h.beat("worker-1", step=41, resumed_from_step=40)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick()
    assert h.sup.restarts_used == 2  # the one left
    h.tick(10)
    h.all_beat(step=42)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    result = h.finish()
    assert result.state is JobState.FAILED and "2 of --max-restarts 2 used" in result.reason
    first, second = result.lives
    assert (first.steps_lost, second.number, second.resumed_from_step) == (0, 2, 40)
    record = run_record(h.sup)
    again = Carried.from_record(record)
    assert again.restarts_used == 2 and again.next_attempt == {"worker-0": 5, "worker-1": 5}
    assert [life.ended for life in again.lives] == ["Preempted", "Failed"]


def test_the_record_written_while_running_knows_the_last_step(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=12)
    h.tick()
    (life,) = Carried.from_record(run_record(h.sup)).lives  # read back as if the orchestrator had died now
    assert (life.last_step, life.ended) == (12, "Lost")


def test_a_life_killed_without_a_word_reads_lost_and_counts_its_lost_steps():
    record = {"lives": [{"life": 1, "started_at_unix": 1.0, "last_step": 67}], "restarts_used": 0}
    carried = Carried.from_record(record)
    assert (carried.lives[0].ended, carried.lives[0].cause) == ("Lost", "orchestrator killed")
    (closed,) = close_previous(carried.lives, resumed_from_step=60)
    assert closed.steps_lost == 7


def test_steps_lost_wait_for_a_life_that_trains_and_skip_lives_that_never_did():
    trained = Life(number=1, started_at=1.0, ended="Preempted", last_step=1035)
    idle = Life(number=2, started_at=2.0, ended="Preempted")  # requeued, preempted again before training
    assert close_previous((trained, idle), resumed_from_step=None) == (trained, idle)  # not known yet
    first, second = close_previous((trained, idle), resumed_from_step=1035)
    assert (first.steps_lost, second.steps_lost) == (0, None)


def test_a_preemption_after_training_ended_lets_the_tasks_finish_instead_of_noticing_them(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(phase="finishing", step=90)  # evaluating and exporting: fit's backup is already gone
    h.tick()
    h.sup.request_preemption("SIGTERM to the orchestrator")
    h.tick()
    assert all(h.backend.latest(n).signals == [] for n in ("worker-0", "worker-1"))
    h.exit("worker-0", 0)
    h.exit("worker-1", 0)
    result = h.finish()
    assert result.state is JobState.SUCCEEDED


def test_the_only_task_of_a_job_sigtermed_from_outside_is_restarted_not_the_job_preempted(tmp_path):
    h = Harness(tmp_path, spec_of(strategy="mirrored", workers=1))
    h.all_beat(step=4)
    h.tick()
    (h.backend.latest("worker-0").stdout_path.parent / SIGTERM_RECEIVED_FILE).write_text("")
    h.exit("worker-0", 143)
    h.tick()
    assert not h.sup.state.terminal and h.sup.restarts_used == 0
    assert [t.attempt for t in h.sup.snapshot().tasks] == [1]


def test_a_pss_job_preemption_notices_the_coordinator_alone_so_its_workers_serve_while_it_saves(tmp_path):
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1))
    h.all_beat(step=6)
    h.tick()
    h.sup.request_preemption("SIGTERM to the orchestrator")
    h.tick()
    assert h.backend.latest("chief-0").signals == [signal.SIGTERM]  # the notice, not a stop
    # once it has left, the rest is stopped (two-phase), never sent the notice themselves
    assert h.backend.stopped == [["worker-0", "worker-1", "ps-0"]]
    result = h.finish()
    assert result.state is JobState.PREEMPTED


# -- issue 21, item 7: late notices and the task that was preempted ---------------------------

@pytest.mark.parametrize("preemption_exit, notice, ended, late", [
    (True, True, "worker-0 succeeded", True),  # SIGTERM to the group or to the wrapper's pid alike
    (True, True, "", False),  # training still on: a preemption, restarted
    (True, False, "worker-0 succeeded", False),  # no notice from outside: a failure after training
    (False, True, "worker-1 reported finishing", False),  # exit 1: a failure, whatever the notice
])
def test_a_sigterm_from_outside_after_training_ended_is_a_late_notice_not_a_failure(preemption_exit, notice, ended,
                                                                                     late):
    note = late_notice(preemption_exit=preemption_exit, notice=notice, ended=ended)
    assert bool(note) is late
    if late:
        assert ended in note and "not a failure" in note


@pytest.mark.parametrize("cause, notice, noticed, named", [
    ("worker-0", False, ["worker-1"], "worker-1"),  # worker-0 only saved and exited: worker-1 was signalled
    ("worker-1", True, ["worker-1"], "worker-1"),
    ("worker-0", False, [], "worker-0"),  # nobody got it: the cause is all there is
])
def test_a_preemption_is_named_after_the_task_that_received_the_notice(cause, notice, noticed, named):
    assert preempted_task(cause, notice, noticed) == named


def test_in_the_loop_a_sigterm_to_a_workers_group_after_training_ended_succeeds_with_a_note(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(phase="finishing", step=9)
    h.tick()
    h.exit("worker-0", 0)
    h.tick()
    (h.backend.latest("worker-1").stdout_path.parent / SIGTERM_RECEIVED_FILE).write_text("")
    h.exit("worker-1", -signal.SIGTERM)  # the program died of it in its teardown
    result = h.finish()
    assert result.state is JobState.SUCCEEDED, result.reason
    assert "late notice, not a failure" in h.task("worker-1").reason


def test_in_the_loop_a_peer_seen_first_does_not_name_the_preemption(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=4)
    h.tick()
    (h.backend.latest("worker-1").stdout_path.parent / SIGTERM_RECEIVED_FILE).write_text("")
    h.exit("worker-0", 42)  # TF's handler made worker-0 save and exit first
    h.tick()
    assert h.sup.snapshot().recoveries == ()  # the decision waits for worker-1, still saving
    h.exit("worker-1", 42)
    h.tick()
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.cause.startswith("worker-1 (attempt 0) failed: exit code 42")
