"""When the bench's recovery jobs kill and stop (``kill_when`` / ``stop_when`` of
:func:`bench.tfjobs.run_orchestrated`), and whether the spares that took over were warm."""

from __future__ import annotations

import re
import time
from pathlib import Path

REJOINED = re.compile(r"bench: worker-1 rejoined \(unix ([\d.]+)\)")
_SPARE_READY = re.compile(r"bench: mark spare-ready \(unix ([\d.]+)\)")
EPOCH_END = re.compile(r"bench: epoch (\d+) done at step (\d+) \(unix ([\d.]+)\)")


def pss_worker_once_trained(epoch: int, wait_for_spares: bool):
    """A ``kill_when`` for :func:`run_orchestrated`: worker-1's pid once the chief printed
    ``Epoch {epoch}/`` and, with ``wait_for_spares``, a spare finished its imports."""
    def when(run_dir: Path, events) -> int | None:
        chief = run_dir / "attempt-0" / "chief-0" / "stdout.log"
        if not chief.exists() or f"Epoch {epoch}/" not in chief.read_text(errors="replace"):
            return None
        if wait_for_spares and not any(_SPARE_READY.search(p.read_text(errors="replace"))
                                       for p in (run_dir / "spares").glob("spare-*.log")):
            return None
        return _task_pid(events, "worker-1")

    return when


def _task_pid(events, task: str) -> int | None:
    for _, line in events:
        if m := re.search(rf"{task} started \(pid (\d+), attempt 0\)", line):
            return int(m[1])
    return None


def spares_ready_at(run_dir: Path) -> float | None:
    """The Unix time the job's first spare finished its imports; None while none has."""
    times = [float(m[1]) for p in (run_dir / "spares").glob("spare-*.log")
             if (m := _SPARE_READY.search(p.read_text(errors="replace")))]
    return min(times) if times else None


def epoch_ends(log: Path) -> list[tuple[int, int, float]]:
    """``(epoch, step, unix time)`` of every ``bench: epoch E done at step S`` line in ``log``."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [(int(m[1]), int(m[2]), float(m[3])) for m in EPOCH_END.finditer(text)]


def mwms_worker_into_epoch(epoch: int, fraction: float):
    """A ``kill_when`` for :func:`run_orchestrated`: worker-1's pid ``fraction`` of an epoch
    after the end of its epoch ``epoch`` or a later one that ended after a spare of the job
    was ready (an epoch's length: the one before). So the spare is warm by construction,
    whatever the machine's speed (the spares import at the lowest CPU priority beside two
    training workers), and the kill falls inside an epoch, not at the per-epoch backup."""
    def when(run_dir: Path, events) -> int | None:
        ready = spares_ready_at(run_dir)
        if ready is None:
            return None
        ends = epoch_ends(run_dir / "attempt-0" / "worker-1" / "stdout.log")
        after = [i for i, (e, _, t) in enumerate(ends) if e >= epoch and t > ready and i > 0]
        if not after:
            return None
        i = after[0]
        if time.time() < ends[i][2] + fraction * (ends[i][2] - ends[i - 1][2]):
            return None
        return _task_pid(events, "worker-1")

    return when


def step_at(ends: list[tuple[int, int, float]], unix: float) -> int | None:
    """The step a task was at ``unix``, from its epoch ends (the rate of the last epoch before)."""
    before = [e for e in ends if e[2] <= unix]
    if len(before) < 2:
        return None
    (_, s0, t0), (_, s1, t1) = before[-2], before[-1]
    return s1 + int((unix - t1) * (s1 - s0) / (t1 - t0)) if t1 > t0 else s1


def resumed_an_epoch(run_dir: Path, events) -> bool:
    """A ``stop_when``: worker-0's second attempt finished an epoch (its heartbeats went out)."""
    return bool(epoch_ends(run_dir / "attempt-1" / "worker-0" / "stdout.log"))


def rejoined(run_dir: Path, events) -> bool:
    """A ``stop_when`` for :func:`run_orchestrated`: the chief has worker-1 back in its rotation."""
    chief = run_dir / "attempt-0" / "chief-0" / "stdout.log"
    return chief.exists() and REJOINED.search(chief.read_text(errors="replace")) is not None


def spares_warm(r, kill_at: float) -> bool:
    """Whether every spare that took over a task had finished its imports before ``kill_at``."""
    used = [s["pid"] for s in (r.summary or {}).get("spares") or [] if s.get("state") == "used"]
    if not used:
        return False
    ready = {}
    for path in (r.run_dir / "spares").glob("spare-*.log"):
        text = path.read_text(errors="replace")
        pid = re.search(r"ready \(pid (\d+)\)", text)
        when = _SPARE_READY.search(text)
        if pid and when:
            ready[int(pid[1])] = float(when[1])
    return all(pid in ready and ready[pid] < kill_at for pid in used)
