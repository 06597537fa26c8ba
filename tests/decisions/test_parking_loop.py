"""Parking a PSS worker, driven through the supervisor loop tick by tick with a fake backend
(issue 34 item 4; docs/elastic.md): a worker whose restarts are spent, or that crash-loops, is
parked while MIN workers remain (not restarted, the job not failed, the budget not spent); the job
succeeds when the coordinator does, naming it; below MIN the job fails as without elastic workers."""

from __future__ import annotations

import dataclasses
import json
import signal

import pytest

from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import held_at_max, make_plan
from orchestrator.report.summary import build_summary
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.spec.faults import Fault
from orchestrator.supervisor import JobState, Supervisor
from tests.decisions.test_exit_rules import _crash
from tests.decisions.test_supervisor_loop import FakeBackend, FakeClock, Harness, RecordingView, spec_of


def _harness(tmp_path, workers: int, elastic_min: int | None, **supervision) -> Harness:
    elastic = None if elastic_min is None else ElasticSpec(elastic_min, workers)
    return Harness(tmp_path, spec_of(strategy="parameter_server", workers=workers, ps=1, elastic=elastic,
                                     supervision={"backoff_s": 0.0, **supervision}))


def _kill_twice(h: Harness, name: str) -> None:
    """``name`` killed, restarted (the one restart of --max-restarts 1), killed again."""
    h.all_beat(step=5)
    h.tick()
    h.exit(name, -signal.SIGKILL)
    h.tick(0.1)
    h.tick(0.1)
    assert h.task(name).attempt == 1
    h.all_beat(step=9)
    h.tick()
    h.exit(name, -signal.SIGKILL)
    h.tick(0.1)


def test_a_pss_worker_whose_restarts_are_spent_is_parked_and_the_job_succeeds_naming_it(tmp_path):
    h = _harness(tmp_path, 2, 1, max_restarts=1)
    _kill_twice(h, "worker-1")
    assert h.sup.state is JobState.RUNNING and h.sup.restarts.parked == ("worker-1",)
    for step in (12, 15, 18):  # the others train on; no restart of worker-1 comes
        h.all_beat(step=step)
        h.tick(1.0)
    assert h.task("worker-1").attempt == 1
    assert any("worker-1 parked (restarts spent): training goes on with 1 worker(s), MIN 1" in e
               for e in h.view.events)
    h.beat("chief-0", step=20)
    h.tick()
    h.exit("chief-0", 0)
    result = h.finish()
    assert (result.state, result.exit_code, result.restarts_used) == (JobState.SUCCEEDED, 0, 1), result.reason
    summary = build_summary(result)
    assert summary["elastic"]["workers"] == 1 and summary["elastic"]["parked"] == ["worker-1"]
    assert [(s["workers"], s["cause"], s.get("tasks")) for s in summary["segments"]] == \
        [(2, "launched", None), (1, "parked worker", ["worker-1"])]
    assert summary["segments"][1]["first_step"] == 9 and summary["segments"][1]["last_step"] == 20
    assert any("worker-1 parked (restarts spent)" in w for w in summary["warnings"])


def test_a_crash_looping_pss_worker_is_parked_before_its_restarts_are_spent(tmp_path):
    h = _harness(tmp_path, 2, 1, max_restarts=5, crash_loop_limit=2, restart_policy={"worker": "on-failure"})
    h.all_beat(step=5)
    h.tick()
    for _ in range(2):
        _crash(h, "worker-1", "ValueError: bad input")
        h.tick(0.1)
        h.tick(0.1)
    assert h.sup.restarts.parked == ("worker-1",) and h.sup.restarts_used == 1
    assert h.sup.state is JobState.RUNNING


def test_parking_the_last_worker_above_min_fails_the_job_as_today(tmp_path):
    h = _harness(tmp_path, 2, 2, max_restarts=1)
    _kill_twice(h, "worker-1")
    result = h.finish()
    assert result.exit_code == 1 and "below the MIN of 2" in result.reason
    assert "restarts exhausted: worker-1 failed on attempt 2 of 2" in result.reason


def test_a_fixed_count_pss_job_still_fails_when_a_workers_restarts_are_spent(tmp_path):
    h = _harness(tmp_path, 2, None, max_restarts=1)
    _kill_twice(h, "worker-1")
    result = h.finish()
    assert result.exit_code == 1 and "restarts exhausted" in result.reason and h.sup.restarts.parked == ()


class _Faulted(Harness):
    """:class:`Harness` with injected faults in the plan (a ``lose`` withdraws its attempt's slot)."""

    def __init__(self, tmp_path, spec, faults: list[str]) -> None:
        self.clock = FakeClock()
        self.store = HeartbeatStore(clock=self.clock)
        self.backend = FakeBackend(self.clock)
        plan = make_plan(spec, self.backend.allocate(spec), run_id="t", run_dir=tmp_path, health_address="127.0.0.1:1",
                         token="x", cores=2, faults=[Fault.parse(f) for f in faults])
        self.view = RecordingView()
        self.sup = Supervisor(plan, self.backend, self.store, self.view, clock=self.clock, stop_timeout_s=1.0)
        self.sup.start()


def _pss_1_2(tmp_path, faults=()) -> _Faulted:
    return _Faulted(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1, elastic=ElasticSpec(1, 2),
                                      supervision={"backoff_s": 0.0}), list(faults))


def test_a_lost_pss_worker_is_parked_at_once_without_a_restart_or_the_budget(tmp_path):
    h = _pss_1_2(tmp_path, ["worker:1:lose@step=10"])
    h.all_beat(step=10)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)  # the lose fault: it SIGKILLs itself
    h.tick(0.1)
    h.tick(1.0)
    assert h.task("worker-1").attempt == 0 and h.sup.restarts.parked == ("worker-1",)
    assert h.sup.restarts_used == 0 and h.sup.snapshot().recoveries == ()  # nothing restarted, nothing spent
    assert any("worker-1 parked (lost)" in e for e in h.view.events)
    segment = build_summary(h.sup.snapshot())["segments"][-1]
    assert (segment["workers"], segment["cause"], segment["tasks"]) == (1, "slot lost", ["worker-1"])


def test_a_resize_takes_a_parked_pss_worker_back_at_its_address_and_a_shrink_parks_the_highest(tmp_path):
    h = _pss_1_2(tmp_path, ["worker:1:lose@step=10"])
    h.all_beat(step=10)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    assert h.sup.resizing.request(3, "asked", h.sup.state) == (False, "workers=3: outside the job's elastic range 1..2")
    assert h.sup.resizing.request(2, "resize asked by a user", h.sup.state) == (True, "")
    h.tick(0.1)
    h.tick(0.1)
    assert h.sup.restarts.parked == () and h.task("worker-1").attempt == 1  # restarted in place: its next attempt
    assert h.backend.latest("worker-1").code is None and h.sup.restarts_used == 0
    assert any("worker-1 taken back (grew back): training goes on with 2 worker(s); restarted at the same address"
               in e for e in h.view.events)
    (recovery,) = h.sup.snapshot().recoveries  # ended when the coordinator has it back in its rotation
    assert (recovery.scope, recovery.tasks) == ("task", ("worker-1",))
    h.all_beat(step=20)
    h.tick()
    assert h.sup.resizing.request(1, "asked", h.sup.state) == (True, "")
    h.tick(0.1)
    assert h.sup.restarts.parked == ("worker-1",) and h.backend.stopped[-1] == ["worker-1"]
    assert h.task("worker-1").state.value == "Stopped"
    causes = [(s["workers"], s["cause"]) for s in build_summary(h.sup.snapshot())["segments"]]
    assert causes == [(2, "launched"), (1, "slot lost"), (2, "grew back"), (1, "resize asked")]


def test_a_job_whose_worker_is_parked_before_every_task_ran_is_running_once_the_others_are(tmp_path):
    h = _pss_1_2(tmp_path, ["worker:1:lose@step=10"])
    for name in ("chief-0", "worker-0", "ps-0"):
        h.beat(name, "serving" if name != "chief-0" else "training", step=None if name != "chief-0" else 1)
    h.exit("worker-1", -signal.SIGKILL)  # lost before it ever reported
    h.tick(0.1)
    h.tick(0.1)
    assert h.sup.restarts.parked == ("worker-1",) and h.sup.state is JobState.RUNNING


def test_a_pss_grow_past_the_started_cluster_is_the_coordinators_save_then_a_next_life_at_the_new_size(tmp_path):
    # started at 1 of 1..2 (beside other runs' leases, or `start: 1`): worker 1 is in no TF_CONFIG of this life
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=1, ps=1, elastic=ElasticSpec(1, 2),
                                  supervision={"backoff_s": 0.0}))
    h.all_beat(step=5)
    h.tick()
    assert h.sup.resizing.request(2, "resize asked by a user", h.sup.state) == (True, "")
    h.tick(0.1)
    # the preemption notice to the coordinator alone: the ps and the worker serve on while it saves
    assert [h.backend.latest(n).signals for n in ("chief-0", "worker-0", "ps-0")] == [[signal.SIGTERM], [], []]
    assert any("resize asked: 1 -> 2 worker(s) (resize asked by a user); past the 1 worker(s) the cluster started "
               "with: the coordinator saves at its next step" in e for e in h.view.events)
    h.exit("chief-0", 143)  # saved at its next step
    result = h.finish()
    assert result.state is JobState.PREEMPTED and h.sup.resizing.continues(result.state)
    assert h.sup.resizing.next is not None and h.sup.resizing.next.workers == 2
    assert h.sup.lives.lives()[-1].cause == "resize asked" and h.sup.restarts_used == 0
    assert h.sup.snapshot().recoveries == ()  # not a failure: no recovery, no restart spent


class _Held(Harness):
    """A PSS job of ``workers: {min: 1, max: 2, start: 1}`` planned as a launch plans it: every slot up to MAX
    (addresses reserved), worker-1 held; each start's TF_CONFIG is kept (``configs``: task name -> per attempt)."""

    def __init__(self, tmp_path) -> None:  # noqa: D107
        spec = spec_of(strategy="parameter_server", workers=1, ps=1, elastic=ElasticSpec(1, 2),
                       supervision={"backoff_s": 0.0})
        at_max = held_at_max(spec)
        assert at_max is not None and at_max.workers == 2
        self.clock = FakeClock()
        self.store = HeartbeatStore(clock=self.clock)
        self.backend = FakeBackend(self.clock)
        self.configs: dict[str, list[dict]] = {}
        start = self.backend.start

        def keep(request):
            self.configs.setdefault(request.task.name, []).append(json.loads(request.env["TF_CONFIG"]))
            return start(request)

        self.backend.start = keep  # type: ignore[method-assign]
        plan = dataclasses.replace(make_plan(at_max, self.backend.allocate(at_max), run_id="t", run_dir=tmp_path,
                                             health_address="127.0.0.1:1", token="x", cores=2), started_workers=1)
        self.view = RecordingView()
        self.sup = Supervisor(plan, self.backend, self.store, self.view, clock=self.clock, stop_timeout_s=1.0)
        self.sup.start()


@pytest.mark.parametrize("reported, lost", [
    (5, 0),  # the custom loop: it saves at its next step on the notice, past the step it reported
    (9, 3),  # the fit loop: it leaves at once and resumes from its last backup (step 6): 3 steps trained again
])
def test_a_pss_grow_into_a_held_slot_restarts_the_coordinator_alone_and_the_ps_and_workers_keep_running(
        tmp_path, reported, lost):
    h = _Held(tmp_path)
    assert sorted(h.configs) == ["chief-0", "ps-0", "worker-0"]  # worker-1 held: not started
    assert all(len(c[0]["cluster"]["worker"]) == 1 for c in h.configs.values())  # its TF_CONFIG names 1 worker
    h.all_beat(step=5)
    h.tick()
    assert h.sup.state is JobState.RUNNING  # the held worker is not waited for
    h.beat("chief-0", step=reported, cluster_workers=2)  # its resolver's cluster: the chief and worker-0
    h.tick()
    assert h.sup.resizing.request(2, "resize asked by a user", h.sup.state) == (True, "")
    h.tick(0.1)
    # the notice to the coordinator alone: it saves; the ps and worker-0 serve on
    assert [h.backend.latest(n).signals for n in ("chief-0", "worker-0", "ps-0")] == [[signal.SIGTERM], [], []]
    assert any("past the 1 worker(s) its coordinator's TF_CONFIG names: the coordinator saves at its next step, "
               "then restarts with a TF_CONFIG naming worker-1 too" in e for e in h.view.events)
    h.exit("chief-0", 143)  # saved at its next step
    h.tick(0.1)
    h.tick(0.1)
    # worker-1 started and the coordinator's next attempt, both with the cluster of 2 workers; nothing else restarted
    assert [len(c["cluster"]["worker"]) for c in h.configs["chief-0"]] == [1, 2]
    assert [len(c["cluster"]["worker"]) for c in h.configs["worker-1"]] == [2]
    assert len(h.configs["ps-0"]) == 1 and len(h.configs["worker-0"]) == 1
    assert h.task("chief-0").attempt == 1 and h.task("ps-0").attempt == 0 and h.task("worker-0").attempt == 0
    assert h.sup.state is not JobState.PREEMPTED and h.sup.resizing.next is None and h.sup.restarts_used == 0
    assert h.sup.snapshot().recoveries == () and h.sup.failures == []  # the coordinator's save is no failure
    h.beat("chief-0", step=6, resumed_from_step=6, cluster_workers=3)  # it resumes from its save at step 6
    h.tick(0.1)
    h.all_beat(step=7)
    h.tick(0.1)
    h.exit("chief-0", 0)
    result = h.finish()
    assert result.state is JobState.SUCCEEDED and h.sup.restarts_used == 0
    assert not any("did not train as one cluster" in e for e in h.view.events)  # the cluster each TF_CONFIG named
    assert build_summary(h.sup.snapshot())["cluster_check"]["mismatches"] == []
    life = h.sup.lives.life
    assert (life.size_now or {})["workers"] == 2 and life.held == () and life.parked == []
    assert [(c["cause"], c["tasks"], c["back"], c["step"]) for c in life.resized] == \
        [("resize asked", ["worker-1"], True, 6)]  # from the step the coordinator resumed from
    assert h.sup.lives.lives()[-1].size == {**(life.size or {}), "workers": 1}
    segments = [(s["workers"], s["cause"], s["first_step"], s["steps_lost"])
                for s in build_summary(h.sup.snapshot())["segments"]]
    assert segments == [(1, "launched", 0, lost), (2, "resize asked", 6, None)]


def test_a_group_restart_of_a_pss_job_below_max_leaves_its_held_worker_unstarted(tmp_path):
    h = _Held(tmp_path)
    h.all_beat(step=5)
    h.tick()
    h.exit("ps-0", -signal.SIGKILL)  # a ps failure restarts the whole cluster
    for _ in range(5):
        h.tick(1.0)
    assert h.task("ps-0").attempt == 1 and h.task("chief-0").attempt == 1 and h.task("worker-0").attempt == 1
    assert "worker-1" not in h.configs and h.sup.lives.life.held == ("worker-1",)
    assert [len(c["cluster"]["worker"]) for c in h.configs["chief-0"]] == [1, 1]


def test_a_coordinator_that_does_not_leave_on_the_notice_of_a_grow_is_killed_after_the_grace(tmp_path):
    h = _Held(tmp_path)
    signal_now = h.backend.signal
    ignored: list[int] = []

    def deaf_once(handle, signum):  # a program of its own that saves nothing on SIGTERM and trains on
        if handle.task.name == "chief-0" and signum == signal.SIGTERM and not ignored:
            ignored.append(signum)
            handle.signals.append(signum)
            return
        signal_now(handle, signum)

    h.backend.signal = deaf_once  # type: ignore[method-assign]
    h.all_beat(step=5)
    h.tick()
    assert h.sup.resizing.request(2, "resize asked by a user", h.sup.state) == (True, "")
    h.tick(0.1)
    assert ignored and h.task("chief-0").attempt == 0
    for step in range(6, 20):  # 28 s of steps (a tick every 2 s, within the heartbeat timeout)
        h.all_beat(step=step)
        h.tick(2.0)
    assert h.task("chief-0").attempt == 0 and h.sup.resizing.request(2, "again", h.sup.state)[0] is False
    h.all_beat(step=20)
    h.tick(2.5)  # past the preemption grace (30 s): killed, then restarted with the cluster of 2
    h.tick(0.1)
    assert any("chief-0 did not leave within 30 s of its notice: killed" in e for e in h.view.events)
    assert [len(c["cluster"]["worker"]) for c in h.configs["chief-0"]] == [1, 2] and "worker-1" in h.configs
    assert h.task("ps-0").attempt == 0 and h.task("worker-0").attempt == 0 and h.sup.restarts_used == 0
