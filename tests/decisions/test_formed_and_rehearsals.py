"""Issue 21 items 2 and 8: what the tasks formed vs the plan, rehearsals that test nothing, the step
a run really resumed at, and the global batch across lives. Pure functions in tables, and the loop
driven tick by tick with the fake backend and clock of ``test_supervisor_loop`` (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.spec import TaskId
from orchestrator.spec.faults import Fault
from orchestrator.supervisor import JobState, Supervisor
from orchestrator.supervisor.records.lives import Carried, Life, LifeBook, batch_change
from orchestrator.supervisor.records.recovery import Recovery, RecoveryBook
from orchestrator.supervisor.records.states import EXIT_UNTESTED, Failure
from orchestrator.supervisor.rules.decisions import RestartScope
from orchestrator.supervisor.rules.formed import fails_job, mismatch, summary_field
from orchestrator.supervisor.rules.rehearsal import NO_STEP_WARNING_S, checked_success, never_fires
from tests.decisions.test_supervisor_loop import FakeBackend, FakeClock, Harness, RecordingView, spec_of

W0, W1, CHIEF = TaskId("worker", 0), TaskId("worker", 1), TaskId("chief", 0)


# -- formed vs planned -------------------------------------------------------------------------
@pytest.mark.parametrize("strategy, counts, task, metrics, expected", [
    # MWMS, 2 workers planned: a worker that trained alone
    ("multi_worker_mirrored", {"workers": 2}, W0, {"replicas_in_sync": 1, "cluster_workers": 1},
     "worker-0 formed replicas_in_sync 1 and a cluster of 1 worker(s), 2 planned (chief + workers)"),
    ("multi_worker_mirrored", {"workers": 2}, W1, {"replicas_in_sync": 1}, "worker-1 formed replicas_in_sync 1, "
     "2 planned (chief + workers)"),
    ("multi_worker_mirrored", {"workers": 2}, W0, {"replicas_in_sync": 2, "cluster_workers": 2}, None),
    # GPUs: more replicas than workers is a formed cluster
    ("multi_worker_mirrored", {"workers": 2}, W0, {"replicas_in_sync": 4, "cluster_workers": 2}, None),
    ("multi_worker_mirrored", {"workers": 2, "chief": 1}, CHIEF, {"replicas_in_sync": 3, "cluster_workers": 3}, None),
    ("multi_worker_mirrored", {"workers": 2, "chief": 1}, CHIEF, {"replicas_in_sync": 2, "cluster_workers": 2},
     "chief-0 formed replicas_in_sync 2 and a cluster of 2 worker(s), 3 planned (chief + workers)"),
    ("multi_worker_mirrored", {"workers": 2}, W0, {}, None),  # nothing reported: nothing to compare
    # PSS: the coordinator's resolver must see the planned chief + workers; replicas are not compared
    ("parameter_server", {"workers": 2, "ps": 1, "chief": 1}, CHIEF, {"replicas_in_sync": 1, "cluster_workers": 3},
     None),
    ("parameter_server", {"workers": 2, "ps": 1, "chief": 1}, CHIEF, {"replicas_in_sync": 1, "cluster_workers": 1},
     "chief-0 formed replicas_in_sync 1 and a cluster of 1 worker(s), 3 planned (chief + workers)"),
    ("parameter_server", {"workers": 2, "ps": 1, "chief": 1}, W0, {"cluster_workers": 1}, None),  # serves: unchecked
    ("mirrored", {"workers": 1}, W0, {"replicas_in_sync": 1, "cluster_workers": 1}, None),  # one task: unchecked
])
def test_what_a_task_formed_is_compared_with_the_plan(strategy, counts, task, metrics, expected):
    assert mismatch(spec_of(strategy=strategy, **counts), task, metrics) == expected


@pytest.mark.parametrize("in_cluster, metrics, expected", [
    # PSS planned at MAX 2 with worker-1 held: the coordinator's TF_CONFIG names 1 worker, then 2 after a grow
    (1, {"replicas_in_sync": 1, "cluster_workers": 2}, None),
    (2, {"replicas_in_sync": 1, "cluster_workers": 3}, None),
    (1, {"replicas_in_sync": 1, "cluster_workers": 3},
     "chief-0 formed replicas_in_sync 1 and a cluster of 3 worker(s), 2 planned (chief + workers)"),
    (None, {"replicas_in_sync": 1, "cluster_workers": 2},
     "chief-0 formed replicas_in_sync 1 and a cluster of 2 worker(s), 3 planned (chief + workers)"),
])
def test_a_pss_coordinator_is_compared_with_the_workers_its_tf_config_named(in_cluster, metrics, expected):
    spec = spec_of(strategy="parameter_server", workers=2, ps=1, chief=1)
    assert mismatch(spec, CHIEF, metrics, in_cluster) == expected


def test_a_mismatch_fails_only_mwms_and_only_unless_allowed():
    assert fails_job(spec_of(workers=2))
    assert not fails_job(spec_of(workers=2, supervision={"allow_cluster_mismatch": True}))
    assert not fails_job(spec_of(strategy="parameter_server", workers=2, ps=1))
    field = summary_field(spec_of(workers=2), [(W0, {"replicas_in_sync": 1.0}), (W1, {"replicas_in_sync": 2.0})])
    assert field == {"checked": True, "planned_workers": 2, "allowed": False,
                     "formed": {"worker-0": {"replicas_in_sync": 1}, "worker-1": {"replicas_in_sync": 2}},
                     "mismatches": ["worker-0 formed replicas_in_sync 1, 2 planned (chief + workers)"]}


def test_n_solo_trainings_fail_an_mwms_job_with_the_numbers_at_once(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.beat("worker-0", step=0, replicas_in_sync=1, cluster_workers=1)
    h.beat("worker-1", step=0, replicas_in_sync=1, cluster_workers=1)
    h.tick()
    warnings = [e for e in h.view.events if e.startswith("WARNING")]
    assert len(warnings) == 2 and "worker-0 formed replicas_in_sync 1" in warnings[0]
    assert "--allow-cluster-mismatch" in warnings[0]
    h.tick(0.1)  # the next look fails the job and stops every task, before they train on alone
    result = h.finish()
    assert result.state is JobState.FAILED and result.exit_code == 1
    assert "replicas_in_sync 1" in result.reason and "2 planned" in result.reason
    assert h.backend.stopped == [["worker-0", "worker-1"]]


@pytest.mark.parametrize("formed, state, code", [(1, JobState.FAILED, 1), (2, JobState.SUCCEEDED, 0)])
def test_both_workers_exit_0_in_the_look_that_sees_what_they_formed(tmp_path, formed, state, code):
    """Solo trainings (replicas_in_sync 1 of 2 planned) that exit 0 in the same look still fail
    the job; a formed cluster is no warning."""
    h = Harness(tmp_path, spec_of(workers=2))
    h.beat("worker-0", step=0, replicas_in_sync=formed, cluster_workers=formed)
    h.beat("worker-1", step=0, replicas_in_sync=formed, cluster_workers=formed)
    h.exit("worker-0", 0)
    h.exit("worker-1", 0)
    result = h.finish()
    assert (result.state, result.exit_code) == (state, code)
    if formed == 1:
        assert "replicas_in_sync 1" in result.reason
    else:
        assert not [e for e in h.view.events if "WARNING" in e]


def test_an_allowed_mismatch_is_a_warning_and_the_job_succeeds(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"allow_cluster_mismatch": True}))
    h.beat("worker-0", step=0, replicas_in_sync=1, cluster_workers=1)
    h.beat("worker-1", step=0, replicas_in_sync=1, cluster_workers=1)
    h.tick()
    h.beat("worker-0", step=5, replicas_in_sync=1, cluster_workers=1)  # said once per attempt, not per beat
    h.tick(0.1)
    h.exit("worker-0", 0)
    h.exit("worker-1", 0)
    result = h.finish()
    assert (result.state, result.exit_code) == (JobState.SUCCEEDED, 0)
    warnings = [e for e in h.view.events if e.startswith("WARNING")]
    assert len(warnings) == 2 and all("allowed by supervision.allow_cluster_mismatch" in w for w in warnings)


# -- rehearsals that test nothing ----------------------------------------------------------------
STEP_FAULT = Fault.parse("worker:0:kill@step=5")


@pytest.mark.parametrize("fault, attempt, saw_step, ended, ran_s, says", [
    (STEP_FAULT, 0, False, True, 3.0, "worker-0 (attempt 0) ended without ever sending a step"),
    (STEP_FAULT, 0, False, False, NO_STEP_WARNING_S, "worker-0 has run 30 s without sending a step"),
    (STEP_FAULT, 0, False, False, NO_STEP_WARNING_S - 0.1, None),  # it may still send one
    (STEP_FAULT, 0, True, True, 3.0, None),  # it sent steps: the fault fires from them
    (STEP_FAULT, 1, False, True, 3.0, None),  # another attempt's
    (Fault.parse("worker:0:kill@time=5"), 0, False, True, 3.0, None),  # fired by the clock
    # a ps's fault handed over by worker-0, the gate: its steps (any attempt of it) fire it
    (Fault(Fault.parse("ps:0:kill@step=5").task, "kill", "step", 5, relay="worker:0"), 1, False, True, 3.0,
     "of ps-0 will never fire: worker-0 (attempt 1) ended without ever sending a step (worker-0 is the job's gate"),
    (Fault(Fault.parse("ps:0:kill@step=5").task, "kill", "step", 5, relay="worker:0"), 0, True, False, 40.0, None),
])
def test_a_step_fault_that_cannot_fire_is_said_with_the_fix(fault, attempt, saw_step, ended, ran_s, says):
    text = never_fires("worker-0", fault, attempt=attempt, saw_step=saw_step, ended=ended, ran_s=ran_s)
    if says is None:
        assert text is None
    else:
        assert says in text and "kill@step=5" in text and "@time=" in text and "report(step=" in text


def test_a_success_is_checked_for_what_it_formed_and_tested():
    assert checked_success("worker-0 exited 0", None, lambda: []) == (JobState.SUCCEEDED, 0, "worker-0 exited 0")
    state, code, reason = checked_success("worker-0 exited 0", None, lambda: ["worker:0:kill@step=5"])
    assert (state, code) == (JobState.SUCCEEDED, EXIT_UNTESTED) and EXIT_UNTESTED not in (0, 1, 2, 75, 130)
    assert "tested nothing: worker:0:kill@step=5 never fired" in reason
    assert checked_success("x", "worker-0 formed replicas_in_sync 1", lambda: [])[:2] == (JobState.FAILED, 1)


def fault_harness(tmp_path: Path, faults: list[str]) -> Harness:
    """:class:`Harness` with injected faults in the plan."""
    h = Harness.__new__(Harness)
    spec = spec_of(workers=1)
    h.clock = FakeClock()
    h.store = HeartbeatStore(clock=h.clock)
    h.backend = FakeBackend(h.clock)
    plan = make_plan(spec, h.backend.allocate(spec), run_id="t", run_dir=tmp_path, health_address="127.0.0.1:1",
                     token="x", cores=2, faults=[Fault.parse(f) for f in faults])
    h.view = RecordingView()
    h.sup = Supervisor(plan, h.backend, h.store, h.view, clock=h.clock, stop_timeout_s=1.0)
    h.sup.start()
    return h


def test_a_step_fault_on_a_program_that_sends_no_step_is_said_when_it_ends_and_exits_3(tmp_path):
    h = fault_harness(tmp_path, ["worker:0:kill@step=5"])
    h.tick(1.0)
    assert not [e for e in h.view.events if "never fire" in e]
    h.exit("worker-0", 0)
    h.tick(0.1)
    (said,) = [e for e in h.view.events if "never fire" in e]  # at once, not at the end of the run
    assert "worker-0 (attempt 0) ended without ever sending a step" in said
    result = h.finish()
    assert (result.state, result.exit_code) == (JobState.SUCCEEDED, EXIT_UNTESTED)
    assert "the rehearsal tested nothing: worker:0:kill@step=5 never fired" in result.reason


def test_a_step_fault_is_said_after_the_task_ran_a_while_without_a_step(tmp_path):
    h = fault_harness(tmp_path, ["worker:0:kill@step=5"])
    for _ in range(int(NO_STEP_WARNING_S) - 1):  # heartbeats (a program that reports no step), no step
        h.beat("worker-0", phase="training", loss=0.5)
        h.tick(1.0)
    assert not [e for e in h.view.events if "never fire" in e]
    h.beat("worker-0", phase="training")
    h.tick(1.0)
    assert len([e for e in h.view.events if "has run 30 s without sending a step" in e]) == 1
    h.beat("worker-0", phase="training")
    h.tick(1.0)
    assert len([e for e in h.view.events if "never fire" in e]) == 1  # said once


def test_a_step_fault_of_an_attempt_killed_as_hung_without_a_step_is_said(tmp_path):
    h = fault_harness(tmp_path, ["worker:0:kill@step=5"])
    h.beat("worker-0", phase="training", loss=0.5)  # past start-up, but no step
    h.tick(11.0)  # no heartbeat for 11 s: hung, killed and restarted in this same look
    assert h.task("worker-0").attempt == 1
    (said,) = [e for e in h.view.events if "never fire" in e]
    assert "worker-0 (attempt 0) ended without ever sending a step" in said


def test_a_fault_that_fired_before_its_step_reached_us_leaves_the_exit_code_alone(tmp_path):
    h = fault_harness(tmp_path, ["worker:0:kill@step=5"])
    h.tick()  # its report of step 5 fired the fault in the task before any heartbeat carried it
    log = tmp_path / "attempt-0" / "worker-0" / "stdout.log"
    log.write_text("injecting fault: kill at step=5 (unix 1.000)\n")
    h.exit("worker-0", 0)
    result = h.finish()
    assert (result.state, result.exit_code) == (JobState.SUCCEEDED, 0)
    assert not [e for e in h.view.events if "never fire" in e]


def test_whether_a_fault_fired_is_recorded_when_its_attempt_ends_and_a_snapshot_reads_no_log(tmp_path):
    h = fault_harness(tmp_path, ["worker:0:exit=3@time=1"])
    assert [f.to_dict() for f in h.sup.snapshot().faults] == [{"fault": "worker:0:exit=3@time=1", "fired": False}]
    log = tmp_path / "attempt-0" / "worker-0" / "stdout.log"
    log.write_text("injecting fault: exit at time=1 (unix 1.000)\n")
    h.tick(0.5)
    assert not h.sup.snapshot().faults[0].fired  # its attempt runs: nothing read yet
    h.exit("worker-0", 3)
    h.tick(0.1)
    assert h.sup.snapshot().faults[0].fired  # read once, when the attempt ended
    log.unlink()  # a snapshot (a status query, a page refresh) never reads the log again
    assert h.sup.snapshot().faults[0].fired


# -- the step a run really resumed at, the global batch across lives ----------------------------------
def test_a_resumed_step_said_after_the_first_step_still_lands_in_the_recovery():
    book = RecoveryBook()
    failure = Failure(task=W1, attempt=0, exit_code=-9, at=1.0, wall_time=0.0, message="killed", stderr_tail="",
                      log_path="")
    book.open(Recovery(cause=failure, scope=RestartScope.GROUP, tasks=["worker-0", "worker-1"], detected_at=1.0))
    book.restarted(2.0)
    book.note("worker-0", 3.0, RestartScope.GROUP, doing="training", resumed_from_step=None, coordinator="worker-0")
    assert book.recoveries[0].resumed_at == 3.0 and book.recoveries[0].resumed_from_step is None
    book.note("worker-0", 3.5, RestartScope.GROUP, doing="training", resumed_from_step=30, coordinator="worker-0")
    assert book.recoveries[0].resumed_from_step == 30


@pytest.mark.parametrize("earlier, now, says", [
    ([64], 96, "from 64 (life 1) to 96"),
    ([64, None], 96, "from 64 (life 1) to 96"),  # the last life that reported one
    ([64, 32], 96, "from 32 (life 2) to 96"),
    ([64], 64, None),
    ([None], 96, None),
    ([], 96, None),
])
def test_a_changed_global_batch_between_lives_is_a_warning(earlier, now, says):
    lives = tuple(Life(number=i + 1, started_at=0.0, global_batch_size=b) for i, b in enumerate(earlier))
    text = batch_change(lives, now)
    assert (text is None) if says is None else (says in text and text.startswith("WARNING"))


def test_the_global_batch_is_kept_in_the_record_and_a_change_at_resume_is_warned_once():
    carried = Carried.from_record({"lives": [Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted",
                                                  last_step=40, global_batch_size=64).to_dict()]})
    assert carried.lives[0].global_batch_size == 64  # run.json keeps it
    book = LifeBook(carried, started_at=2.0, pid=1)
    assert book.coordinator_beat(0, None, 3.0, global_batch_size=96.0)
    book.coordinator_beat(1, 30, 3.5, global_batch_size=96.0)
    (warning,) = book.take_warnings()
    assert "from 64 (life 1) to 96" in warning and book.take_warnings() == []
    assert [life.global_batch_size for life in book.lives()] == [64, 96]
    assert book.lives()[-1].to_dict()["global_batch_size"] == 96
