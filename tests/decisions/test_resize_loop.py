"""Size changes of a running elastic job in the supervision loop (orchestrator/supervisor/resizing.py),
tick by tick with the fake backend of test_supervisor_loop: a resize asked is the coordinated save
(the preemption notice to every worker, then this life ends Preempted with the next size noted, the
backend kept open for it); a lost slot (``lose``) stops the group at once instead of restarting it in
place, and below MIN fails the job; the refusals."""

from __future__ import annotations

import signal

from orchestrator.plan import make_plan
from orchestrator.spec import JobSpec
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.spec.faults import Fault
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import JobState, Supervisor
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
    h.all_beat(step=60)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    result = h.finish()
    assert result.state is JobState.FAILED
    assert result.reason == "worker 1's slot is lost and 1 worker(s) remain, fewer than MIN 2"
    assert not h.sup.resizing.continues(result.state)  # the backend closes: no next life


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
