"""What keeps the loop's work per tick O(changes) at thousands of tasks, as plain data: the
recoveries a heartbeat can complete, the view's snapshots in slices, the status built once per task."""

from __future__ import annotations

from pathlib import Path

from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.report.status import status_dict, task_dict
from orchestrator.spec import JobSpec, TaskId
from orchestrator.supervisor import Supervisor
from orchestrator.supervisor.pictures import Pictures
from orchestrator.supervisor.records.recovery import Recovery, RecoveryBook
from orchestrator.supervisor.records.states import Failure
from orchestrator.supervisor.rules.decisions import RestartScope
from tests.decisions.test_supervisor_loop import FakeBackend, FakeClock


def _failure(name: str) -> Failure:
    kind, index = name.rsplit("-", 1)
    return Failure(TaskId(kind, int(index)), 0, -9, 1.0, 1.0, "", "", "")


def test_only_a_task_a_waiting_restart_names_can_complete_it():
    book = RecoveryBook()
    assert not book.waiting and not book.waits_for("worker-1")
    book.open(Recovery(_failure("worker-1"), RestartScope.TASK, ["worker-1"], detected_at=1.0))
    book.open(Recovery(_failure("worker-2"), RestartScope.TASK, ["worker-2"], detected_at=1.0))
    assert book.waiting and book.waits_for("worker-1") and book.waits_for("worker-2") and not book.waits_for("worker-3")
    book.restarted(2.0)
    book.note("worker-1", 3.0, RestartScope.TASK, doing="serving", resumed_from_step=None, coordinator="chief-0")
    assert not book.waits_for("worker-1") and book.waits_for("worker-2") and not book.all_resumed
    book.note("worker-2", 3.0, RestartScope.TASK, doing="serving", resumed_from_step=None, coordinator="chief-0")
    assert book.all_resumed and not book.waits_for("worker-2")


def test_pictures_come_in_rounds_of_slices_in_plan_order():
    tasks = list(range(7))
    pictures = Pictures(tasks, 3, lambda rt, now: (rt, now))  # type: ignore[arg-type, return-value]
    assert pictures.advance(1.0) is None and pictures.in_round
    assert pictures.advance(2.0) is None
    assert pictures.advance(3.0) == ((0, 1.0), (1, 1.0), (2, 1.0), (3, 2.0), (4, 2.0), (5, 2.0), (6, 3.0))
    assert not pictures.in_round
    assert Pictures(tasks, 10, lambda rt, now: rt).advance(0.0) == tuple(tasks)  # type: ignore[arg-type]


def _job(workers: int, tmp_path: Path) -> tuple[Supervisor, FakeClock, HeartbeatStore]:
    clock = FakeClock()
    backend = FakeBackend(clock)
    spec = JobSpec.create(strategy="parameter_server", workers=workers, ps=1)
    plan = make_plan(spec, backend.allocate(spec), run_id="r", run_dir=tmp_path, health_address="127.0.0.1:1",
                     token="t")
    store = HeartbeatStore(clock)
    return Supervisor(plan, backend, store, clock=clock), clock, store


def _beat(store: HeartbeatStore, task: TaskId, step: int) -> None:
    store.record(pb.Heartbeat(task=pb.TaskKey(task_type=task.task_type, task_index=task.task_index, attempt=0),
                              phase=pb.PHASE_TRAINING, step=step))


def test_a_task_that_keeps_beating_is_never_hung_and_one_that_stops_is_found_after_the_timeout(tmp_path):
    sup, clock, store = _job(3, tmp_path)
    sup.start()
    timeout = sup.policy.heartbeat_timeout_s
    steady, frozen = TaskId("worker", 1), TaskId("worker", 2)
    for step in range(int(4 * timeout)):  # a beat a second, the same phase: routine beats
        for rt in sup.tasks:
            if rt.task != frozen or step == 0:
                _beat(store, rt.task, step)
        sup.tick()
        hung = [f.task for f in sup.failures]
        assert steady not in hung
        if step <= timeout:
            assert not hung, f"{hung} hung at {step} s"
        clock.now += 1.0
    assert [f.task for f in sup.failures] == [frozen]
    assert "no heartbeat for 5.0 s" in sup.failures[0].message


def test_status_builds_each_task_entry_as_its_own_task_dict(tmp_path):
    sup, clock, store = _job(4, tmp_path)
    sup.start()
    for rt in sup.tasks:
        _beat(store, rt.task, 3)
    clock.now += 0.5
    sup.tick()
    snapshot = sup.snapshot()
    status = status_dict(snapshot)
    assert status["tasks"] == [task_dict(t) for t in snapshot.tasks]
    assert [t["name"] for t in status["tasks"]] == [rt.task.name for rt in sup.tasks]
