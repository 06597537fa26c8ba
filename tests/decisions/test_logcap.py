"""The log size cap (--max-log-size): cut_plan as a table, and a cut of a real file kept open for
appending, as a task's redirection keeps it."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.supervisor.logcap import CutPlan, LogCaps, cut_plan, size_text

MIB = 1 << 20


@pytest.mark.parametrize("size, cap, head, plan", [
    (MIB, MIB, None, None),                                  # at the cap: kept whole
    (MIB + 1, MIB, None, CutPlan(MIB // 4, MIB - MIB // 4 - 256)),
    (5 * MIB, MIB, 1000, CutPlan(1000, MIB - 1000 - 256)),   # after a first cut its head stays
])
def test_cut_plan(size, cap, head, plan):
    assert cut_plan(size, cap, head) == plan


@pytest.mark.parametrize("n, text", [(12, "12 B"), (2048, "2.0 KiB"), (150 * MIB, "150.0 MiB"), (3 << 30, "3.0 GiB")])
def test_size_text(n, text):
    assert size_text(n) == text


def test_a_cut_keeps_head_and_tail_and_the_writer_appends_after_it(tmp_path: Path):
    path = tmp_path / "attempt-0" / "worker-0" / "stderr.log"
    path.parent.mkdir(parents=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # the task's redirection
    os.write(fd, b"HEAD\n" + b"x" * (3 * 256 * 1024) + b"TAIL\n")
    task = SimpleNamespace(live=True, task=SimpleNamespace(name="worker-0"),
                           current=SimpleNamespace(stdout_path=None, stderr_path=path))
    caps = LogCaps(256 * 1024)
    said = caps.check([task], now=0.0, count=1)
    assert len(said) == 1 and "worker-0's stderr.log passed --max-log-size 256.0 KiB" in said[0]
    assert caps.check([task], now=0.5, count=1) == []  # at most once a second
    os.write(fd, b"AFTER\n")  # the task writes on at the new end
    os.close(fd)
    data = path.read_bytes()
    assert len(data) <= 256 * 1024 + 6
    assert data.startswith(b"HEAD\n") and data.endswith(b"TAIL\nAFTER\n") and b"cut from the middle" in data
    (warning,) = caps.final([task])
    assert "worker-0's stderr.log" in warning and "(attempt 0) was cut: 512.3 KiB dropped" in warning, warning
