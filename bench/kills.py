"""When the bench's recovery jobs kill and stop (``kill_when`` / ``stop_when`` of
:func:`bench.tfjobs.run_orchestrated`), and whether the spares that took over were warm."""

from __future__ import annotations

import re
from pathlib import Path

REJOINED = re.compile(r"bench: worker-1 rejoined \(unix ([\d.]+)\)")
_SPARE_READY = re.compile(r"bench: mark spare-ready \(unix ([\d.]+)\)")


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
        for _, line in events:
            if m := re.search(r"worker-1 started \(pid (\d+), attempt 0\)", line):
                return int(m[1])
        return None

    return when


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
