"""An elastic job's worker on a lost node (issue 34, Slurm): the rule as a table
(orchestrator/supervisor/rules/resize.py ``node_lost``), then the loop tick by tick with the fake
backend of test_supervisor_loop, whose :class:`~orchestrator.backends.base.LostNodes` names a node:
the MWMS group stops and the run continues one smaller (cause ``node lost``) instead of restarting
the task elsewhere; below MIN, or with a node that is not lost, the failure decision takes it as for
a fixed count (a group restart at the same size)."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from orchestrator.backends.base import LostNodes
from orchestrator.report.summary import build_summary
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.spec.model import TaskId
from orchestrator.supervisor import JobState
from orchestrator.supervisor.records.lives import segments
from orchestrator.supervisor.rules.resize import NODE_LOST, SizeChange, node_lost
from tests.decisions.test_parking_loop import _Faulted
from tests.decisions.test_resize_loop import Elastic
from tests.decisions.test_supervisor_loop import spec_of

MWMS, PSS = "multi_worker_mirrored", "parameter_server"


@pytest.mark.parametrize("strategy, bounds, active, task_type, index, node, stop_requested, change", [
    # an elastic MWMS worker on a lost node: the group continues one smaller without that slot
    (MWMS, (1, 2), [0, 1], "worker", 1, "osl1", False, SizeChange(1, going=(1,), cause=NODE_LOST,
                                                                     restart_group=True)),
    (MWMS, (2, 3), [0, 1, 2], "worker", 0, "osl0", False, SizeChange(2, going=(0,), cause=NODE_LOST,
                                                                        restart_group=True)),
    # below MIN: refused (the size kept), the failure decision then takes it as today
    (MWMS, (2, 2), [0, 1], "worker", 1, "osl1", False,
     SizeChange(2, refusal="worker 1's slot is lost and 1 worker(s) remain, fewer than MIN 2")),
    # an elastic PSS worker on a lost node: parked, the others train on (no group restart)
    (PSS, (1, 2), [0, 1], "worker", 1, "osl1", False, SizeChange(1, going=(1,), cause=NODE_LOST, park=(1,))),
    (PSS, (1, 3), [0, 2], "worker", 2, "osl2", False, SizeChange(1, going=(2,), cause=NODE_LOST, park=(2,))),
    (PSS, (2, 2), [0, 1], "worker", 0, "osl0", False,
     SizeChange(2, refusal="worker 0's slot is lost and 1 worker(s) remain, fewer than MIN 2")),
    (PSS, (1, 2), [0], "worker", 1, "osl1", False, SizeChange(1, refusal="worker 1 is not training (active: [0])")),
    # as today (None): its node is not lost, the orchestrator stopped it, a fixed count, not a worker
    (MWMS, (1, 2), [0, 1], "worker", 1, None, False, None),
    (MWMS, (1, 2), [0, 1], "worker", 1, "osl1", True, None),
    (MWMS, None, [0, 1], "worker", 1, "osl1", False, None),
    (MWMS, (1, 2), [0, 1], "chief", 0, "osl0", False, None),
    (MWMS, (1, 2), [0, 1], "evaluator", 0, "osl2", False, None),
    (PSS, (1, 2), [0, 1], "ps", 0, "osl1", False, None),
    (PSS, (1, 2), [0, 1], "chief", 0, "osl0", False, None),
    (PSS, None, [0, 1], "worker", 1, "osl1", False, None),
])
def test_node_lost(strategy, bounds, active, task_type, index, node, stop_requested, change):
    assert node_lost(strategy, bounds, active, task_type, index, node, stop_requested) == change


class Lost(LostNodes):
    def __init__(self, lost: dict[str, str]) -> None:
        self.lost = lost  # task name -> its lost node
        self.asked: list[str] = []

    def node_of(self, task: TaskId) -> str | None:
        self.asked.append(task.name)
        return self.lost.get(task.name)


def _lost_worker_1(tmp_path, lo: int, hi: int, lost: dict[str, str]) -> Elastic:
    h = Elastic(tmp_path, lo, hi)
    h.backend.lost_nodes = Lost(lost)
    h.all_beat(step=60)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)  # its step killed after it was declared hung, as on Slurm
    h.tick(0.1)
    return h


def test_a_worker_on_a_lost_node_shrinks_the_group_instead_of_restarting_it(tmp_path):
    h = _lost_worker_1(tmp_path, 1, 2, {"worker-1": "osl1"})
    assert "worker-1's node osl1 is lost: the group continues at 1 worker(s) from the last checkpoint" in h.view.events
    result = h.finish()
    assert result.state is JobState.PREEMPTED and h.sup.resizing.next.workers == 1
    assert h.sup.resizing.continues(result.state)  # the backend stays open for the next life
    assert [a for _, a in h.backend.started if a.attempt > 0] == []  # nothing restarted in place
    assert h.sup.restarts_used == 0  # a lost node is not a crash
    life = h.sup.lives.lives()[-1]
    assert life.cause == NODE_LOST and h.sup.resizing.ended_by(result.state) == (NODE_LOST, None)
    assert h.backend.lost_nodes.asked == ["worker-1", "worker-0"]  # of the failed attempt, then the live worker


def test_a_peer_failed_first_by_the_partition_still_shrinks_the_group_off_the_lost_node(tmp_path):
    h = Elastic(tmp_path, 1, 2)
    h.backend.lost_nodes = Lost({"worker-1": "osl1"})
    h.all_beat(step=60)
    h.tick()
    h.exit("worker-0", 1)  # its collective broke on the partition; worker-1 is not yet missed
    h.tick(0.1)
    assert "worker-1's node osl1 is lost: the group continues at 1 worker(s) from the last checkpoint" in h.view.events
    result = h.finish()
    assert result.state is JobState.PREEMPTED and h.sup.resizing.next.going == (1,)
    assert [a for _, a in h.backend.started if a.attempt > 0] == []
    h.tick(1.0)
    assert h.backend.lost_nodes.asked == ["worker-0", "worker-1"]  # once per failure, not every tick


def test_the_next_life_begins_a_segment_of_cause_node_lost(tmp_path):
    h = _lost_worker_1(tmp_path, 1, 2, {"worker-1": "osl1"})
    h.finish()
    first = h.sup.lives.lives()[-1]
    second = replace(first, number=2, cause="succeeded", size={**first.size, "workers": 1}, resumed_from_step=50,
                     last_step=90)
    assert [(s["workers"], s["cause"]) for s in segments((first, second))] == [(2, "launched"), (1, NODE_LOST)]


@pytest.mark.parametrize("lo, lost", [
    (2, {"worker-1": "osl1"}),  # below MIN: as a fixed count (on Slurm the task then moves to a node left)
    (1, {}),                    # its node is not lost: a crash, restarted as before
])
def test_otherwise_the_group_restarts_at_its_size_as_before(tmp_path, lo, lost):
    h = _lost_worker_1(tmp_path, lo, 2, lost)
    h.tick(1.0)
    assert [t.attempt for t in h.sup.snapshot().tasks] == [1, 1] and h.sup.resizing.next is None
    assert h.sup.state is not JobState.PREEMPTED
    said = [e for e in h.view.events if "is lost; not shrinking" in e]
    assert said == (["worker-1's node osl1 is lost; not shrinking: worker 1's slot is lost and 1 worker(s) remain, "
                     "fewer than MIN 2"] if lost else [])


def _pss_worker_1_lost(tmp_path, lo: int, lost: dict[str, str]) -> _Faulted:
    """A PSS job of ``lo``..2 workers (1 ps, a chief) whose worker-1 fails on ``lost`` nodes."""
    h = _Faulted(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1, elastic=ElasticSpec(lo, 2),
                                   supervision={"backoff_s": 0.0}), [])
    h.backend.lost_nodes = Lost(lost)
    h.all_beat(step=10)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)  # its step killed after it was declared hung, as on Slurm
    h.tick(0.1)
    h.tick(1.0)
    return h


def test_a_pss_worker_on_a_lost_node_is_parked_without_a_restart_or_the_budget(tmp_path):
    h = _pss_worker_1_lost(tmp_path, 1, {"worker-1": "osl1"})
    assert h.sup.restarts.parked == ("worker-1",) and h.task("worker-1").attempt == 0  # not restarted, not moved
    assert h.sup.state is JobState.RUNNING and h.sup.resizing.next is None  # the coordinator trains on
    assert h.sup.restarts_used == 0 and h.sup.snapshot().recoveries == ()
    assert h.backend.lost_nodes.asked == ["worker-1"]  # of the failed worker only: PSS workers share nothing
    assert "worker-1's node osl1 is lost: it is parked, not restarted; training goes on with 1 worker(s)" in \
        h.view.events
    assert any("worker-1 parked (node lost): training goes on with 1 worker(s), MIN 1" in e for e in h.view.events)
    h.beat("chief-0", step=20)
    h.tick()
    h.exit("chief-0", 0)
    result = h.finish()
    assert (result.state, result.restarts_used) == (JobState.SUCCEEDED, 0), result.reason
    summary = build_summary(result)
    assert summary["elastic"]["parked"] == ["worker-1"]
    assert [(s["workers"], s["cause"], s.get("tasks")) for s in summary["segments"]] == \
        [(2, "launched", None), (1, NODE_LOST, ["worker-1"])]


@pytest.mark.parametrize("lo, lost", [
    (2, {"worker-1": "osl1"}),  # below MIN: restarted (on Slurm on a node left), as for a fixed count
    (1, {}),                    # its node is not lost: a crash, restarted as before
])
def test_otherwise_a_pss_worker_is_restarted_as_before(tmp_path, lo, lost):
    h = _pss_worker_1_lost(tmp_path, lo, lost)
    assert h.sup.restarts.parked == () and h.task("worker-1").attempt == 1 and h.sup.restarts_used == 1
    said = [e for e in h.view.events if "is lost; not parking" in e]
    assert said == (["worker-1's node osl1 is lost; not parking: worker 1's slot is lost and 1 worker(s) remain, "
                     "fewer than MIN 2"] if lost else [])


def test_a_resize_takes_a_worker_parked_for_its_lost_node_back_through_a_new_coordinator(tmp_path):
    h = _pss_worker_1_lost(tmp_path, 1, {"worker-1": "osl1"})
    assert h.sup.resizing.request(2, "resize asked by a user", h.sup.state) == (True, "")
    h.tick(0.1)
    assert h.task("worker-1").attempt == 0  # not restarted at its lost node's address
    assert h.sup.resizing.next is not None and h.sup.resizing.next.restart_group  # a next life, a new TF_CONFIG
    assert any("grew back: 1 -> 2 worker(s)" in e and "the coordinator saves at its next step" in e
               for e in h.view.events), h.view.events
