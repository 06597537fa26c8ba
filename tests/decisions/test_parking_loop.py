"""Parking a PSS worker, driven through the supervisor loop tick by tick with a fake backend
(issue 34 item 4; docs/elastic.md): a worker whose restarts are spent, or that crash-loops, is
parked while MIN workers remain (not restarted, the job not failed, the budget not spent); the job
succeeds when the coordinator does, naming it; below MIN the job fails as without elastic workers."""

from __future__ import annotations

import signal

from orchestrator.report.summary import build_summary
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.supervisor import JobState
from tests.decisions.test_exit_rules import _crash
from tests.decisions.test_supervisor_loop import Harness, spec_of


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
