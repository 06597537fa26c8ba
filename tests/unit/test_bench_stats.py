"""Unit tests of the benchmark suite's pure helpers (bench/stats.py, bench/tfjobs.py); part of tests/unit."""

from pathlib import Path

import pytest

from bench.stats import markdown_table, meets, ratios, summarize
from bench.tfjobs import TaskLog


def test_summarize_keeps_measured_values_only():
    stat = summarize([3.0, None, 1.0, 2.0])
    assert (stat["min"], stat["median"], stat["max"], stat["runs"]) == (1.0, 2.0, 3.0, 3)
    assert summarize([None])["median"] is None and summarize([])["runs"] == 0


def test_ratios_pairwise_and_missing_sides():
    assert ratios([2.0, None, 3.0, 1.0], [1.0, 1.0, 0.0, 4.0]) == [2.0, None, None, 0.25]


def test_meets_uses_the_median():
    assert meets(summarize([0.9, 1.0, 1.1]), ">= 0.99")
    assert not meets(summarize([0.9, 0.95, 1.2]), ">= 0.99")
    assert meets(summarize([1.0]), "<= 1.10") and meets(summarize([]), "<= 1") is None
    with pytest.raises(ValueError):
        meets(summarize([1.0]), "~ 1")


def test_markdown_table_marks_missed_targets():
    table = markdown_table([{"id": "1", "measure": "m", "unit": "s", "stat": summarize([1.0, 2.0]), "target": "<= 1",
                             "met": False}])
    assert "| 1 | m | s | 1.00 | 1.50 | 2.00 | 2 | <= 1 | **no** |" in table


def test_task_log_parses_markers_and_median_epoch_rate(tmp_path: Path):
    log = tmp_path / "stdout.log"
    log.write_text(
        "worker-0: MultiWorkerMirroredStrategy, 2 replica(s) in sync, per-replica batch 16, global batch 32, ...\n"
        "bench: first step 1 done (unix 100.000)\n"
        "bench: epoch 1 done at step 45 (unix 101.000)\n"
        "bench: epoch 2 done at step 90 (unix 102.000)\n"
        "injecting fault: kill at step=60 (unix 102.500)\n"
        "bench: epoch 3 done at step 135 (unix 105.000)\n"
        "bench: epoch 4 done at step 180 (unix 106.000)\n"
    )
    parsed = TaskLog.read(log)
    assert parsed.first_step == (1, 100.0) and parsed.global_batch == 32 and parsed.fault == ("kill", 60, 102.5)
    # epoch rates after epoch 1: 1440, 480, 1440 examples/s -> the median ignores the slow one
    assert parsed.examples_per_second() == pytest.approx(1440.0)
    assert TaskLog.read(tmp_path / "missing.log").examples_per_second() is None
