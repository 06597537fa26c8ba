"""Parking a PSS worker (issue 34 item 4; docs/elastic.md): park vs restart vs fail, as a table over
:func:`orchestrator.supervisor.rules.parking.worker_fate`, and the segments a parked worker begins."""

from __future__ import annotations

import pytest

from orchestrator.spec.model import Strategy
from orchestrator.supervisor.records.lives import SEGMENT_PARKED, Life, segments
from orchestrator.supervisor.rules.parking import (
    CRASH_LOOP,
    FAIL,
    LOST,
    NODE_LOST,
    PARK,
    RESTART,
    RESTARTS_SPENT,
    worker_fate,
)

MWMS, PSS = Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER
W, PS, CHIEF = ("worker",), ("ps",), ("chief",)
SPENT = "restarts exhausted: worker-1 failed on attempt 2 of 2, 1 of --max-restarts 1 used"
LOOP = "the same error 3 times in a row (ValueError: x): a crash loop"
POLICY = "the exit-code restart policy of worker does not retry exit code 3 (exit codes 1-127 are permanent)"


@pytest.mark.parametrize("strategy, types, elastic_min, now, retry, why_not, gone, kind", [
    # an elastic PSS worker that will not come back by a restart is parked while MIN remain
    (PSS, W, 1, 2, False, SPENT, RESTARTS_SPENT, PARK),
    (PSS, W, 1, 2, False, LOOP, CRASH_LOOP, PARK),
    (PSS, W, 2, 3, False, LOOP, CRASH_LOOP, PARK),
    (PSS, W + W, 1, 3, False, SPENT, RESTARTS_SPENT, PARK),  # two at once, one left
    (PSS, W, 1, 2, True, "", LOST, PARK),  # a lost slot: parked even when a restart were allowed
    (PSS, W, 1, 2, True, "", NODE_LOST, PARK),  # its node lost (Slurm): the same, no restart tried
    (PSS, W, 1, 2, False, SPENT, NODE_LOST, PARK),
    # ... and fails the job when fewer than MIN would remain
    (PSS, W, 2, 2, False, SPENT, RESTARTS_SPENT, FAIL),
    (PSS, W, 1, 1, False, LOOP, CRASH_LOOP, FAIL),  # the last worker
    (PSS, W + W, 2, 3, False, SPENT, RESTARTS_SPENT, FAIL),
    (PSS, W, 2, 2, True, "", LOST, FAIL),
    # its node lost below MIN: restarted on a node left, as for a fixed count (a withdrawn slot cannot be)
    (PSS, W, 2, 2, True, "", NODE_LOST, RESTART),
    (PSS, W, 2, 2, False, SPENT, NODE_LOST, FAIL),
    # a failure a restart may fix is restarted, as without elastic workers
    (PSS, W, 1, 2, True, "", "", RESTART),
    # the policy refuses on its own (a bug every worker meets): fail, as today
    (PSS, W, 1, 2, False, POLICY, "", FAIL),
    # a fixed count: never parked (today's behaviour)
    (PSS, W, None, 2, False, SPENT, RESTARTS_SPENT, FAIL),
    (PSS, W, None, 2, True, "", "", RESTART),
    (PSS, W, None, 2, True, "", LOST, RESTART),
    (PSS, W, None, 2, True, "", NODE_LOST, RESTART),
    # not a PSS worker: a ps or the coordinator restarts the cluster; MWMS restarts the group
    (PSS, PS, 1, 2, False, SPENT, RESTARTS_SPENT, FAIL),
    (PSS, PS, 1, 2, True, "", NODE_LOST, RESTART),  # a ps or the chief on a lost node: moved, as today
    (PSS, CHIEF, 1, 2, True, "", NODE_LOST, RESTART),
    (PSS, CHIEF, 1, 2, False, LOOP, CRASH_LOOP, FAIL),
    (MWMS, W, 1, 2, False, SPENT, RESTARTS_SPENT, FAIL),
    (MWMS, W, 1, 2, True, "", "", RESTART),
])
def test_a_failed_worker_is_restarted_parked_or_fails_the_job(strategy, types, elastic_min, now, retry, why_not, gone,
                                                              kind):
    fate = worker_fate(strategy=strategy, task_types=types, elastic_min=elastic_min, workers_now=now, retry=retry,
                       why_not=why_not, gone=gone)
    assert fate.kind == kind
    if kind == PARK:
        assert fate.why == f"parked ({gone}): training goes on with {now - len(types)} worker(s), MIN {elastic_min}"
    elif kind == FAIL:
        assert fate.why.startswith(why_not or gone)
        if gone and elastic_min is not None and strategy is PSS and types == W:
            assert f"below the MIN of {elastic_min}" in fate.why


def _size(workers: int) -> dict:
    return {"workers": workers, "global_batch_size": 64, "per_replica_batch_size": 64, "learning_rate_factor": 1.0}


def test_a_parked_worker_begins_a_segment_of_the_life_and_a_resumed_life_at_that_size_continues_it():
    parked = {"step": 40, "size": _size(1), "cause": SEGMENT_PARKED, "tasks": ["worker-1"]}
    one = Life(number=1, started_at=0.0, last_step=90, steps_lost=10, size=_size(2), resized=(parked,))
    assert one.size_now == _size(1) and one.parked == ["worker-1"]
    assert Life.from_dict(one.to_dict()) == one
    first, second = segments((one,))
    assert (first["workers"], first["first_step"], first["last_step"], first["cause"], first["steps_lost"]) == \
        (2, 0, 40, "launched", 0)
    assert (second["workers"], second["first_step"], second["last_step"], second["cause"], second["steps_lost"],
            second["tasks"]) == (1, 40, 90, "parked worker", 10, ["worker-1"])
    two = Life(number=2, started_at=1.0, resumed_from_step=80, last_step=120, size=_size(1))
    first, second = segments((one, two))
    assert (second["last_step"], second["lives"]) == (120, [1, 2])  # the resumed life at 1 worker: one segment


def test_a_worker_back_is_no_longer_parked():
    back = {"step": 60, "size": _size(2), "cause": "grew back", "tasks": ["worker-1"], "back": True}
    parked = {"step": 40, "size": _size(1), "cause": SEGMENT_PARKED, "tasks": ["worker-1"]}
    life = Life(number=1, started_at=0.0, last_step=90, size=_size(2), resized=(parked, back))
    assert life.parked == [] and life.size_now == _size(2)
    assert [(s["workers"], s["first_step"], s["last_step"], s["cause"]) for s in segments((life,))] == \
        [(2, 0, 40, "launched"), (1, 40, 60, "parked worker"), (2, 60, 90, "grew back")]
