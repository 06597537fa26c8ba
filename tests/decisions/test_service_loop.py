"""The tf.data service's tasks in the supervision loop (fake backend and clock): the start waves,
each service task restarted alone, a trainers' group restart leaving the service serving, and the
service stopped once training ends."""

from __future__ import annotations

import signal

from orchestrator.spec.dataservice import DataServiceSpec
from orchestrator.supervisor import JobState
from tests.decisions.test_supervisor_loop import Harness, spec_of


def started(h: Harness) -> list[str]:
    return [handle.task.name for _, handle in h.backend.started]


def serving_job(tmp_path, **kw) -> Harness:
    h = Harness(tmp_path, spec_of(workers=2, data_service=DataServiceSpec(workers=2), **kw))
    h.beat("dispatcher-0", "serving")
    h.tick()
    h.beat("data_worker-0", "serving")
    h.beat("data_worker-1", "serving")
    h.tick()
    h.all_beat(step=5)
    h.tick()
    return h


def test_the_dispatcher_starts_first_then_the_data_workers_then_the_trainers(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, data_service=DataServiceSpec(workers=2)))
    assert started(h) == ["dispatcher-0"]
    h.tick(1.0)
    assert started(h) == ["dispatcher-0"]  # it has not said it serves
    h.beat("dispatcher-0", "serving")
    h.tick()
    assert started(h) == ["dispatcher-0", "data_worker-0", "data_worker-1"]
    h.beat("data_worker-0", "serving")
    h.tick()
    assert len(started(h)) == 3  # every data worker registered first
    h.beat("data_worker-1", "serving")
    h.tick()
    assert started(h) == ["dispatcher-0", "data_worker-0", "data_worker-1", "worker-0", "worker-1"]


def test_a_job_without_the_service_starts_every_task_at_once(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    assert started(h) == ["worker-0", "worker-1"]


def test_a_data_worker_or_the_dispatcher_restarts_alone(tmp_path):
    h = serving_job(tmp_path)
    h.exit("data_worker-1", -signal.SIGKILL)
    h.tick(0.1)
    h.exit("dispatcher-0", -signal.SIGKILL)
    h.tick(0.1)
    h.tick(1.0)  # the backoff
    attempts = {t.name: t.attempt for t in h.sup.snapshot().tasks}
    assert attempts == {"dispatcher-0": 1, "data_worker-0": 0, "data_worker-1": 1, "worker-0": 0, "worker-1": 0}
    assert h.backend.stopped == [] and h.sup.state is JobState.RUNNING
    assert [(r.scope, r.tasks) for r in h.sup.snapshot().recoveries] == [("task", ("data_worker-1",)),
                                                                         ("task", ("dispatcher-0",))]


def test_a_trainers_group_restart_leaves_the_service_serving(tmp_path):
    h = serving_job(tmp_path)
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    assert h.backend.stopped == [["worker-0"]]  # the survivors of the group, not the service
    h.tick(1.0)
    attempts = {t.name: t.attempt for t in h.sup.snapshot().tasks}
    assert attempts == {"dispatcher-0": 0, "data_worker-0": 0, "data_worker-1": 0, "worker-0": 1, "worker-1": 1}


def test_a_dispatcher_that_may_not_restart_fails_the_job(tmp_path):
    h = serving_job(tmp_path, supervision={"restart_policy": {"dispatcher": "never"}})
    h.exit("dispatcher-0", 1)
    result = h.finish()
    assert result.state is JobState.FAILED and "dispatcher-0" in result.reason


def test_the_service_is_stopped_once_training_ended(tmp_path):
    h = serving_job(tmp_path)
    h.exit("worker-0", 0)
    h.exit("worker-1", 0)
    result = h.finish()
    assert result.state is JobState.SUCCEEDED
    assert sorted(n for names in h.backend.stopped for n in names) == ["data_worker-0", "data_worker-1",
                                                                       "dispatcher-0"]
