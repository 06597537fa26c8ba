"""Training-health rules as tables: a non-finite loss or watched metric (training_rules)."""

from __future__ import annotations

import math

import pytest

from orchestrator.supervisor.rules.training_rules import NanWatch, nan_line, non_finite

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("loss, metrics, watched, expected", [
    (0.5, {}, (), {}),
    (None, {"grad_norm": INF}, (), {}),                       # not watched: not checked
    (NAN, {}, (), {"loss": NAN}),
    (INF, {}, (), {"loss": INF}),
    (-INF, {"grad_norm": 1.0}, ("grad_norm",), {"loss": -INF}),
    (0.5, {"grad_norm": INF}, ("grad_norm",), {"grad_norm": INF}),
    (NAN, {"grad_norm": NAN}, ("grad_norm", "missing"), {"loss": NAN, "grad_norm": NAN}),
])
def test_non_finite_names_the_loss_and_the_watched_metrics(loss, metrics, watched, expected):
    got = non_finite(loss, metrics, watched)
    assert list(got) == list(expected)
    assert all(math.isnan(got[k]) if math.isnan(v) else got[k] == v for k, v in expected.items())


@pytest.mark.parametrize("on_nan, step, fragments", [
    ("warn", 12, ("worker-0 reported a non-finite loss (nan) first at step 12", "training goes on", "--on-nan fail")),
    ("fail", 12, ("worker-0 reported a non-finite loss (nan) first at step 12", "without a restart")),
    ("warn", None, ("before its first step",)),
])
def test_the_line_names_task_step_and_what_happens(on_nan, step, fragments):
    line = nan_line("worker-0", step, {"loss": NAN}, on_nan)
    assert all(f in line for f in fragments), line
    assert "learning rate" in line  # the fix


@pytest.mark.parametrize("on_nan, beats, said, failure", [
    # (task, attempt, step, loss) per heartbeat -> lines said, failure set
    ("warn", [("worker-0", 0, 5, 0.3), ("worker-0", 0, 6, 0.2)], 0, False),
    ("warn", [("worker-0", 0, 5, NAN), ("worker-0", 0, 6, NAN)], 1, False),           # once per attempt
    ("warn", [("worker-0", 0, 5, NAN), ("worker-0", 1, 5, NAN), ("worker-1", 0, 5, INF)], 3, False),
    ("fail", [("worker-0", 0, 5, 0.3), ("worker-0", 0, 6, NAN)], 1, True),
])
def test_nan_watch_says_it_once_per_attempt_and_fails_under_fail(on_nan, beats, said, failure):
    watch = NanWatch(on_nan)
    lines = [line for task, attempt, step, loss in beats for line in watch.beat(task, attempt, step, loss, {})]
    assert len(lines) == said
    assert (watch.failure is not None) is failure
    if failure:
        assert watch.failure == lines[0] and "first at step 6" in lines[0]


def test_a_watched_metric_is_checked_without_a_loss():
    watch = NanWatch("warn", ("grad_norm",))
    assert watch.beat("chief-0", 0, 3, None, {"grad_norm": 1.0}) == []
    assert "grad_norm (inf) first at step 4" in watch.beat("chief-0", 0, 4, None, {"grad_norm": INF})[0]


# -- uneven data across MWMS workers -----------------------------------------------------------
from orchestrator.supervisor.rules.training_rules import uneven_data  # noqa: E402


@pytest.mark.parametrize("mwms, phase, stuck, finished, named", [
    (True, "training", True, [("worker-1", 40)], "worker-1 finished at local step 40 while worker-0 was at step 44"),
    (True, "training", True, [("worker-2", 38), ("worker-1", 40)], "worker-2 finished at local step 38"),  # first
    (True, "training", True, [], None),            # nobody left: a real hang, restarted as before
    (True, "training", False, [("worker-1", 40)], None),   # it crashed by itself: not a wait on a peer
    (True, "finishing", True, [("worker-1", 40)], None),   # its training had ended: not waiting in a step
    (False, "training", True, [("worker-1", 40)], None),   # PSS: a worker's end is the coordinator's business
])
def test_uneven_data_names_the_trainer_that_left(mwms, phase, stuck, finished, named):
    why = uneven_data(mwms, "worker-0", 44, phase, stuck, finished)
    if named is None:
        assert why is None
    else:
        assert why is not None and named in why and "uneven data across workers" in why
        assert "steps_per_epoch" in why and "repeat()" in why and "DATA" in why


# -- a SIGBUS: a full /dev/shm -------------------------------------------------------------------
from orchestrator.supervisor.rules.training_rules import shm_exhausted  # noqa: E402


@pytest.mark.parametrize("code, permanent", [(-7, True), (135, True), (-9, False), (1, False), (None, False),
                                             (0, False)])
def test_a_sigbus_is_a_full_dev_shm_not_to_restart(code, permanent):
    why = shm_exhausted(code)
    assert (why is not None) is permanent
    if why:
        assert "/dev/shm" in why and "--shm-size" in why


def test_the_step_the_client_reported_first_is_named_not_the_one_seen_first():
    watch = NanWatch("warn")
    (line,) = watch.beat("worker-0", 0, 14, NAN, {}, first_step=10)
    assert "first at step 10" in line
