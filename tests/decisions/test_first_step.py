"""A slow first step is judged by the start-up allowance, not the stall timeout (issue 35, item 3):
hang_rules.first_step_due_at, hang_reason and next_check_at as tables."""

from __future__ import annotations

import pytest

from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor.rules.decisions import TaskWatch, hang_reason, next_check_at
from orchestrator.supervisor.rules.hang_rules import first_step_due_at

S = SupervisionSpec.create(heartbeat_timeout_s=10.0, stall_timeout_s=15.0, startup_timeout_s=60.0)


def first(now_beat: float, training_at: float = 5.0, started_at: float = 0.0) -> TaskWatch:
    """A task training since ``training_at``, still in its first step, heartbeating at ``now_beat``."""
    return TaskWatch(True, started_at, heartbeat_at=now_beat, phase="training", progress_at=training_at, step=0,
                     in_first_step=True, training_at=training_at)


@pytest.mark.parametrize("watch, due", [
    (first(0.0, training_at=5.0), 60.0),                   # the start-up allowance from the attempt's start
    (first(0.0, training_at=50.0), 65.0),                  # never stricter than the stall timeout
    (first(0.0, training_at=5.0, started_at=100.0), 160.0),
])
def test_first_step_due_at(watch, due):
    assert first_step_due_at(watch, S) == due


@pytest.mark.parametrize("watch, now, hung_because", [
    # a 25 s first step under a 15 s stall timeout: not hung (main killed it at 20 s)
    (first(24.0), 25.0, None),
    (first(59.0), 60.0, None),
    (first(60.0), 60.5, "no first step 60.5 s after its start (in its first step for 55.5 s"),
    # past its first step the stall timeout holds again
    (TaskWatch(True, 0.0, heartbeat_at=24.0, phase="training", progress_at=5.0, step=1, training_at=5.0), 25.0,
     "no training progress for 20.0 s at step 1"),
    # a silent task in its first step is still found by the heartbeat timeout
    (first(5.0), 15.5, "no heartbeat for 10.5 s"),
])
def test_hang_reason_in_the_first_step(watch, now, hung_because):
    why = hang_reason(watch, now, S)
    assert (why is None) if hung_because is None else (why is not None and hung_because in why), why


@pytest.mark.parametrize("watch", [first(59.0), first(0.0, training_at=50.0)])
def test_next_check_at_is_the_first_step_deadline(watch):
    steady = TaskWatch(True, watch.started_at, heartbeat_at=10**6, phase="training", progress_at=watch.progress_at,
                       step=0, in_first_step=True, training_at=watch.training_at)  # heartbeats keep coming
    when = next_check_at(steady, S)
    assert when == first_step_due_at(steady, S)
    assert hang_reason(steady, when, S) is None and hang_reason(steady, when + 0.01, S) is not None
