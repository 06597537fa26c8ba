"""The elastic sections' pure helpers (``bench/elastic.py``) and the fault line a PSS worker prints
(``bench/tfjobs.py`` ``TaskLog``); part of tests/unit, nothing timed."""

from __future__ import annotations

import pytest

from bench.elastic import (
    accuracy_args,
    coordinator_restarts,
    epoch_rates,
    epochs_ended,
    points_apart,
    pss_args,
    shrink_rates,
    shrink_ratio,
    spread_points,
)
from bench.tfjobs import TaskLog


def test_a_fault_handed_over_by_the_gate_is_read_like_one_fired_by_the_task(tmp_path):
    handed = tmp_path / "worker-2.log"  # a PSS worker reports no step: the chief hands its step faults over
    handed.write_text("bench: mark serving (unix 9.5)\n"
                      "injecting fault: lose at step=630 (unix 1796510967.701; handed over at job step 632)\n")
    assert TaskLog.read(handed).fault == ("lose", 630, 1796510967.701)
    own = tmp_path / "worker-1.log"
    own.write_text("injecting fault: term at step=60 (unix 12.5)\n")
    assert TaskLog.read(own).fault == ("term", 60, 12.5)
    timed = tmp_path / "timed.log"  # a time= fault is not a step fault
    timed.write_text("injecting fault: kill at time=2 (unix 12.5)\n")
    assert TaskLog.read(timed).fault is None


def test_epoch_rates_are_steps_per_second_between_consecutive_markers():
    epochs = [(1, 90, 10.0), (2, 180, 11.0), (3, 270, 11.0), (4, 360, 12.5), (5, 360, 13.0)]
    # epoch 3 took no time and epoch 5 no step: both left out
    assert epoch_rates(epochs) == [(10.0, 11.0, 90.0), (11.0, 12.5, 60.0)]
    assert epoch_rates(epochs[:1]) == []


def test_shrink_rates_split_at_the_fault_and_leave_out_the_epoch_it_fell_in_and_the_next():
    epochs = [(e, 90 * e, float(e)) for e in range(1, 11)]  # one epoch a second: 90 steps/s
    epochs[6:] = [(e, 90 * e, 7.0 + (e - 7) * 1.5) for e in range(7, 11)]  # from epoch 8 on: 60 steps/s
    before, after = shrink_rates(epochs, fault_unix=5.5)  # in epoch 6 (5.0 -> 6.0)
    assert before == [90.0] * 4  # epochs 2-5
    assert after == [60.0] * 3  # epochs 8-10: epoch 7 (6 -> 7), the first begun after it, left out
    assert shrink_rates(epochs, 5.5, settle_epochs=0)[1] == [90.0, 60.0, 60.0, 60.0]
    assert shrink_rates(epochs, 100.0) == ([90.0] * 6 + [60.0] * 3, [])


@pytest.mark.parametrize(("before", "after", "workers", "expected"), [
    ([90.0, 120.0, 100.0], [50.0, 80.0, 200 / 3], 3, 1.0),  # medians 100 -> 66.7: exactly 2/3 of the rate
    ([100.0], [100.0], 3, 1.5),  # the same rate at 2 workers as at 3 (2 shared cores)
    ([100.0], [40.0], 2, 0.8),
    ([], [40.0], 3, None),
    ([100.0], [], 3, None),
    ([100.0], [100.0], 1, None),
])
def test_shrink_ratio_is_the_rate_after_over_the_share_of_the_rate_before(before, after, workers, expected):
    ratio = shrink_ratio(before, after, workers)
    assert (ratio is None) if expected is None else ratio == pytest.approx(expected)


def test_coordinator_restarts_are_the_chiefs_attempts_after_the_first():
    summary = {"tasks": [{"task": "worker:2", "attempts": 2}, {"task": "chief:0", "attempts": 1}]}
    assert coordinator_restarts(summary) == 0
    assert coordinator_restarts({"tasks": [{"task": "chief:0", "attempts": 3}]}) == 2
    assert coordinator_restarts({"tasks": [{"task": "worker:0", "attempts": 1}]}) is None
    assert coordinator_restarts(None) is None


def test_points_apart_is_the_absolute_difference_in_points():
    assert points_apart(0.9611, 0.9722) == pytest.approx(1.11)
    assert points_apart(0.9722, 0.9611) == pytest.approx(1.11)
    assert points_apart(None, 0.97) is None and points_apart(0.97, None) is None
    assert spread_points([0.9583, None, 0.9694, 0.9611]) == pytest.approx(1.11)
    assert spread_points([0.9583, None]) is None


def test_the_launch_arguments_are_the_documented_ones():
    assert pss_args(16, 675) == ["--strategy", "parameter_server", "--ps", "1", "--workers", "2:3", "--epochs", "16",
                                 "--inject-fault", "worker:2:lose@step=675"]
    assert accuracy_args(True, 30) == ["--workers", "2:3", "--epochs", "30", "--seed", "0"]
    assert accuracy_args(False, 30) == ["--workers", "3", "--epochs", "30", "--seed", "0"]


def test_epochs_ended_counts_the_markers_of_a_log(tmp_path):
    log = tmp_path / "stdout.log"
    assert epochs_ended(log) == 0  # not written yet
    log.write_text("Epoch 1/30\nbench: epoch 1 done at step 30 (unix 5.0)\nbench: epoch 2 done at step 60 (unix 6.0)\n")
    assert epochs_ended(log) == 2
