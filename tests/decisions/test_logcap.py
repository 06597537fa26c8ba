"""The log size cap (--max-log-size): cut_plan as a table, and a cut of a real file kept open for
appending, as a task's redirection keeps it."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.supervisor.logcap import CutPlan, LogCaps, collapse_range, cut_plan, size_text

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


@pytest.mark.parametrize("collapse", [True, False], ids=["collapse", "copy"])
def test_a_cut_keeps_head_and_tail_and_the_writer_appends_after_it(tmp_path: Path, collapse: bool):
    path = tmp_path / "attempt-0" / "worker-0" / "stderr.log"
    path.parent.mkdir(parents=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # the task's redirection
    os.write(fd, b"HEAD\n" + b"x" * (3 * 256 * 1024) + b"TAIL\n")
    task = SimpleNamespace(live=True, task=SimpleNamespace(name="worker-0"),
                           current=SimpleNamespace(stdout_path=None, stderr_path=path))
    caps = LogCaps(256 * 1024, collapse=collapse)
    said = caps.check([task], now=0.0, count=1)
    assert len(said) == 1 and "worker-0's stderr.log passed --max-log-size 256.0 KiB" in said[0]
    assert caps.check([task], now=0.5, count=1) == []  # at most once a second
    os.write(fd, b"AFTER\n")  # the task writes on at the new end
    os.close(fd)
    data = path.read_bytes()
    assert len(data) <= 256 * 1024 + 6
    assert data.startswith(b"HEAD\n") and data.endswith(b"TAIL\nAFTER\n") and data.count(b"cut from the middle") == 1
    (warning,) = caps.final([task])
    assert "worker-0's stderr.log" in warning, warning
    dropped = float(warning.split("was cut: ")[1].split(" KiB")[0])
    assert 512 <= dropped <= 517, warning  # 768 KiB less the cap, to a block
    assert len(path.read_bytes()) <= 256 * 1024  # the final look cuts what was appended past the cap


def test_a_collapse_loses_no_line_the_task_appends_while_it_cuts(tmp_path: Path):
    """A task appends numbered lines as fast as it can while the log is cut again and again: every
    line after the cut's tail is there, in order, up to the last (the copy-and-truncate fallback
    loses what is written between its read and its truncation)."""
    path = tmp_path / "attempt-0" / "worker-0" / "stderr.log"
    path.parent.mkdir(parents=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, b"probe\n" * 2048)
    probe = os.open(path, os.O_RDWR)
    supported = collapse_range(probe, 0, 4096)
    os.close(probe)
    if not supported:
        pytest.skip(f"the file system of {tmp_path} cannot collapse a range (tmpfs, NFS): the copy fallback runs")
    os.ftruncate(fd, 0)
    total = 300_000
    stop = threading.Event()

    def write() -> None:
        for n in range(total):
            os.write(fd, b"%d\n" % n)
        stop.set()

    task = SimpleNamespace(live=True, task=SimpleNamespace(name="worker-0"),
                           current=SimpleNamespace(stdout_path=None, stderr_path=path))
    caps = LogCaps(64 * 1024)
    writer = threading.Thread(target=write)
    writer.start()
    now = 0.0
    while not stop.is_set():
        caps.check([task], now=now, count=1)
        now += 1.0
    writer.join(timeout=60)
    os.close(fd)
    cuts = now
    text = path.read_bytes().decode()
    tail = text.split("cut from the middle of this log")[1].split("\n")[2:-1]  # its first line may be cut
    assert [int(n) for n in tail] == list(range(int(tail[0]), total)), f"a line lost in {cuts:.0f} looks"
    (warning,) = caps.final([task])
    assert "was cut" in warning
