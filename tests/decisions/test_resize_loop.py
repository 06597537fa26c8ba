"""Size changes of a running elastic job in the supervision loop (orchestrator/supervisor/resizing.py),
tick by tick with the fake backend of test_supervisor_loop: a resize asked is the coordinated save
(the preemption notice to every worker, then this life ends Preempted with the next size noted, the
backend kept open for it); a lost slot (``lose``) stops the group at once instead of restarting it in
place, and below MIN fails the job; the refusals."""

from __future__ import annotations

import signal
from collections.abc import Callable

from orchestrator.plan import make_plan
from orchestrator.spec import JobSpec
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.spec.faults import Fault
from orchestrator.spec.model import Strategy
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import JobState, Supervisor
from orchestrator.supervisor.records.lives import Carried, Life
from tests.decisions.test_supervisor_loop import FakeBackend, FakeClock, Harness, HeartbeatStore, RecordingView


class Elastic(Harness):
    def __init__(self, tmp_path, lo: int, hi: int, faults: tuple[str, ...] = ()) -> None:  # noqa: D107
        spec = JobSpec.create(workers=hi, elastic=ElasticSpec(lo, hi),
                              supervision=SupervisionSpec.create(backoff_s=1.0))
        self.clock = FakeClock()
        self.store = HeartbeatStore(clock=self.clock)
        self.backend = FakeBackend(self.clock)
        plan = make_plan(spec, self.backend.allocate(spec), run_id="t", run_dir=tmp_path,
                         health_address="127.0.0.1:1", token="x", cores=2, faults=[Fault.parse(f) for f in faults])
        self.view = RecordingView()
        self.sup = Supervisor(plan, self.backend, self.store, self.view, clock=self.clock, stop_timeout_s=1.0)
        self.sup.start()


def test_a_resize_asked_is_the_coordinated_save_then_this_life_ends_for_the_next_size(tmp_path):
    h = Elastic(tmp_path, 1, 2)
    h.all_beat(step=5)
    h.tick()
    assert h.sup.resizing.request(1, "resize asked by a test", JobState.RUNNING) == (True, "")
    h.tick()
    notices = [h.backend.latest(n).signals for n in ("worker-0", "worker-1")]
    assert notices == [[signal.SIGTERM], [signal.SIGTERM]]  # the preemption notice: save at the next step
    h.exit("worker-0", 143)
    h.exit("worker-1", 143)
    result = h.finish()
    assert result.state is JobState.PREEMPTED and h.sup.resizing.next is not None
    assert h.sup.resizing.next.workers == 1
    assert h.sup.lives.lives()[-1].cause == "resize asked"
    assert h.sup.resizing.continues(result.state)  # the backend stays open: the next life's warm spares
    assert h.sup.restarts_used == 0


def test_refusals_leave_the_job_as_it_is(tmp_path):
    h = Elastic(tmp_path, 1, 2)
    h.all_beat(step=5)
    h.tick()
    assert h.sup.resizing.request(3, "r", JobState.RUNNING) == \
        (False, "workers=3: outside the job's elastic range 1..2")
    assert h.sup.resizing.request(2, "r", JobState.RUNNING) == (False, "workers=2: the job runs at 2 already")
    assert h.sup.resizing.request(1, "r", JobState.SUCCEEDED)[1] == "the job is Succeeded, not running"
    assert h.sup.resizing.request(1, "r", JobState.RUNNING)[0]
    assert h.sup.resizing.request(1, "r", JobState.RUNNING) == (False, "a size change is already under way")


def test_a_resize_asked_after_training_ended_is_refused_not_accepted(tmp_path):
    h = Elastic(tmp_path, 1, 2)
    h.all_beat(phase="finishing", step=90)  # evaluation, export: a new group would train nothing
    h.tick()
    assert h.sup.resizing.request(1, "r", JobState.RUNNING) == \
        (False, "training has ended (evaluation, export): nothing left to train at another size")
    h.tick()
    assert h.backend.latest("worker-0").signals == [] and h.sup.resizing.next is None


def test_a_lost_slot_stops_the_group_instead_of_restarting_it_in_place(tmp_path):
    h = Elastic(tmp_path, 1, 2, ("worker:1:lose@step=60",))
    h.all_beat(step=60)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    assert "worker-1's slot is lost: the group continues at 1 worker(s) from the last checkpoint" in h.view.events
    result = h.finish()
    assert result.state is JobState.PREEMPTED and h.sup.resizing.next.workers == 1
    assert [a for _, a in h.backend.started if a.attempt > 0] == []  # nothing restarted in place
    assert h.sup.lives.lives()[-1].cause == "slot lost" and h.sup.lives.lives()[-1].last_step == 60


def test_a_crash_of_an_elastic_worker_without_lose_restarts_the_group_as_before(tmp_path):
    h = Elastic(tmp_path, 1, 2, ("worker:1:lose@step=60,attempt=1",))  # a lose of another attempt
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    h.tick(1.0)
    assert [t.attempt for t in h.sup.snapshot().tasks] == [1, 1] and h.sup.resizing.next is None


def test_a_lost_slot_below_min_fails_the_job(tmp_path):
    h = Elastic(tmp_path, 2, 2, ("worker:1:lose@step=60",))
    h.all_beat(step=30)  # the heartbeats said 30; the fault fired at 60
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    result = h.finish()
    assert result.state is JobState.FAILED
    assert result.reason == "worker 1's slot is lost and 1 worker(s) remain, fewer than MIN 2"
    assert not h.sup.resizing.continues(result.state)  # the backend closes: no next life
    assert h.sup.lives.lives()[-1].last_step == 60  # main: 30, the step the heartbeats had said


def test_a_preemption_from_outside_during_a_resize_ends_the_run_preempted_without_a_next_life(tmp_path):
    h = Elastic(tmp_path, 1, 2)
    h.all_beat(step=5)
    h.tick()
    assert h.sup.resizing.request(1, "resize asked by a test", JobState.RUNNING)[0]
    h.tick()
    h.sup.request_preemption("SIGTERM to the orchestrator")  # the node itself is being preempted meanwhile
    h.exit("worker-0", 143)
    h.exit("worker-1", 143)
    result = h.finish()
    assert result.state is JobState.PREEMPTED and not h.sup.resizing.continues(result.state)
    assert h.sup.lives.lives()[-1].cause == "preempted"  # launch --resume continues it, at the size it asks


class Growing(Harness):
    """An elastic MWMS job at ``start`` of ``lo..hi`` whose machine has ``self.room`` workers of room
    (the lease ledger's answer, counted each time it is asked)."""

    def __init__(self, tmp_path, lo: int, hi: int, start: int, grow_back_s: float | None = 30.0,
                 carried: Carried | None = None, strategy: Strategy = Strategy.MULTI_WORKER_MIRRORED,
                 ps: int = 0, room: Callable[[], int | None] | None = None,
                 asked_room: object = None) -> None:  # noqa: D107
        elastic = ElasticSpec(lo, hi, "keep-per-replica", grow_back_s=grow_back_s)  # every size valid
        spec = JobSpec.create(strategy=strategy, workers=start, ps=ps, chief=ps, elastic=elastic,
                              supervision=SupervisionSpec.create(backoff_s=1.0))
        self.clock = FakeClock()
        self.store = HeartbeatStore(clock=self.clock)
        self.backend = FakeBackend(self.clock)
        plan = make_plan(spec, self.backend.allocate(spec), run_id="t", run_dir=tmp_path,
                         health_address="127.0.0.1:1", token="x", cores=2)
        self.view = RecordingView()
        self.room: int | None = start
        self.asked = 0
        self.sup = Supervisor(plan, self.backend, self.store, self.view, clock=self.clock, stop_timeout_s=1.0,
                              carried=carried, room=room or self._room, asked_room=asked_room)
        self.sup.start()

    def _room(self) -> int | None:
        self.asked += 1
        return self.room

    def train_for(self, seconds: float, step: int = 5) -> None:
        """Tick ``seconds`` on, the workers beating (a new step) every second (no hang, no stall)."""
        for i in range(int(seconds)):
            self.all_beat(step=step + i + 1)
            self.tick(1.0)

    def workers(self) -> list[str]:
        return [rt.task.name for rt in self.sup.tasks if rt.task.task_type == "worker"]


def test_a_job_below_max_grows_back_after_its_cooldown_once_the_machine_has_room(tmp_path):
    h = Growing(tmp_path, 1, 4, start=2)
    h.all_beat(step=5)
    h.tick()
    h.room = 4
    h.train_for(29.0)  # room, but the cooldown (30 s since this life's start) has not passed
    assert h.sup.resizing.next is None and h.asked == 0  # the ledger is not even read before it is due
    h.train_for(1.0, step=40)
    assert h.asked == 1 and h.sup.resizing.next is not None
    assert (h.sup.resizing.next.workers, h.sup.resizing.next.cause) == (4, "grew back")
    assert any(e.startswith("grew back: 2 -> 4 worker(s) (the machine has room for 4 again, 30 s or more after the "
                            "last size change); every worker saves at its next step") for e in h.view.events)
    assert [h.backend.latest(n).signals for n in h.workers()] == [[signal.SIGTERM]] * 2  # the coordinated save
    for name in h.workers():
        h.exit(name, 143)
    result = h.finish()
    assert result.state is JobState.PREEMPTED and h.sup.resizing.continues(result.state)
    assert h.sup.lives.lives()[-1].cause == "grew back" and h.sup.restarts_used == 0


def test_without_room_it_asks_once_a_second_and_grows_to_the_room_there_is(tmp_path):
    h = Growing(tmp_path, 1, 4, start=1)
    h.all_beat(step=5)
    h.tick()
    h.train_for(30.0)
    asked = h.asked
    assert asked == 1 and h.sup.resizing.next is None  # room for 1: it runs at 1
    for _ in range(5):
        h.tick(0.1)
    assert h.asked == asked  # at most once a second
    h.room = 3  # room for 3 of the 4: it grows to 3
    h.train_for(1.0, step=50)
    assert h.sup.resizing.next is not None and h.sup.resizing.next.workers == 3


def test_grow_back_off_a_pss_job_and_a_job_at_max_never_ask_the_ledger(tmp_path):
    for h in (Growing(tmp_path / "off", 1, 4, start=2, grow_back_s=None),
              Growing(tmp_path / "max", 1, 2, start=2),
              Growing(tmp_path / "pss", 1, 2, start=1, strategy=Strategy.PARAMETER_SERVER, ps=1)):
        h.room = 4
        h.all_beat(step=5)
        h.tick()
        h.train_for(40.0)
        assert h.asked == 0 and h.sup.resizing.next is None, h.sup.plan.spec


def test_a_slot_lost_and_not_given_back_is_not_grown_into(tmp_path):
    lost = Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted", cause="slot lost", size={"workers": 2})
    h = Growing(tmp_path, 1, 2, start=1, carried=Carried(lives=(lost,)))
    h.room = 2
    h.all_beat(step=5)
    h.tick()
    h.train_for(100.0)
    assert h.asked == 0 and h.sup.resizing.next is None  # the local backend never says the slot is back


def test_a_size_a_user_asked_for_is_not_grown_out_of(tmp_path):
    asked = Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted", cause="resize asked", size={"workers": 4})
    h = Growing(tmp_path, 1, 4, start=2, carried=Carried(lives=(asked,)))  # `resize RUN --workers 2` ended life 1
    h.room = 4
    h.all_beat(step=5)
    h.tick()
    h.train_for(100.0)
    assert h.asked == 0 and h.sup.resizing.next is None


def test_the_summary_of_a_life_below_max_names_the_per_replica_batch_it_trains_with(tmp_path):
    from orchestrator.report.summary import build_summary
    from tests.decisions.test_supervisor_loop import spec_of

    h = Harness(tmp_path, spec_of(workers=1, elastic=ElasticSpec(1, 2)))  # 1 of 1..2, keep-global
    training = build_summary(h.sup.snapshot())["training"]
    assert (training["replicas"], training["global_batch_size"], training["batch_size_per_replica"]) == (1, 32, 32)
