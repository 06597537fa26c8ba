"""Several jobs on one machine (issue 36): two runs submitted together against the same two runs
back to back, and the gap between the first's end and the second's start when it waited.

Each run is ``launch --workers 2`` of a CPU-bound program of our own (no TensorFlow: a fixed
number of Python loop iterations per task), pinned by default to every core of this machine, so
the second run of a pair submitted together leases nothing until the first ends: together should
take no longer than back to back (no slowdown from two jobs on the same cores, no idle gap). The
runs lease in a ledger of their own (``ORCH_LEASES_DIR`` under the bench's work directory).

* ``several_together_over_back_to_back``: wall time from submitting both at once to the end of
  the last / the wall time of the two run one after the other, interleaved in alternating order.
* ``several_wait_gap``: the waiting run's ``plan.json`` (written once it holds its lease and
  planned) less the first run's ``summary.json`` (written right before it returns its lease):
  the lease's release, one poll (``leases.POLL_S``), the port reservations and the plan.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from bench.report import log
from bench.stats import ratios
from bench.tfjobs import PY, REPO, base_env

WORK = "import sys\nx = 0\nfor i in range(int(sys.argv[1])):\n    x += i * i\n"
"""A task's work: ``N`` loop iterations (~15 M/s on one core here)."""


def _command(workdir: Path, run_id: str, iterations: int) -> list[str]:
    return [PY, "-m", "orchestrator", "launch", "--runs-dir", str(workdir), "--run-id", run_id, "--workers", "2",
            "--spares", "0", "--quiet", "--", PY, "-c", WORK, str(iterations)]


def _env(workdir: Path) -> dict[str, str]:
    return {**base_env(), "ORCH_LEASES_DIR": str(workdir / "leases")}


def back_to_back(workdir: Path, tag: str, iterations: int) -> float:
    """Seconds to run two jobs one after the other."""
    t0 = time.monotonic()
    for k in range(2):
        subprocess.run(_command(workdir, f"{tag}-seq{k}", iterations), cwd=REPO, env=_env(workdir), check=True,
                       capture_output=True, timeout=600)
    return time.monotonic() - t0


def together(workdir: Path, tag: str, iterations: int) -> tuple[float, float]:
    """(seconds from submitting two jobs at once to the end of both, the waiting one's gap in seconds)."""
    t0 = time.monotonic()
    procs = [subprocess.Popen(_command(workdir, f"{tag}-tog{k}", iterations), cwd=REPO, env=_env(workdir),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for k in range(2)]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    wall = time.monotonic() - t0
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a run failed: {[e.decode()[-500:] for e in errors]}")
    dirs = [workdir / f"{tag}-tog{k}" for k in range(2)]
    first, second = sorted(dirs, key=lambda d: os.stat(d / "plan.json").st_mtime)
    gap = os.stat(second / "plan.json").st_mtime - os.stat(first / "summary.json").st_mtime
    return wall, gap


def section(suite) -> None:
    """The two figures (``suite``: :class:`bench.run.Suite`)."""
    rounds = 1 if suite.quick else 3
    iterations = 5_000_000 if suite.quick else 40_000_000
    workdir = suite.workdir / "several"
    workdir.mkdir(parents=True, exist_ok=True)
    seq, tog, gaps = [], [], []
    for r in range(rounds):
        order = ("seq", "tog") if r % 2 == 0 else ("tog", "seq")
        for kind in order:
            if kind == "seq":
                seq.append(back_to_back(workdir, f"r{r}", iterations))
            else:
                wall, gap = together(workdir, f"r{r}", iterations)
                tog.append(wall)
                gaps.append(gap)
        log(f"several: round {r}: back to back {seq[-1]:.2f} s, together {tog[-1]:.2f} s, gap {gaps[-1]:.3f} s")
    details = {"back_to_back_s": seq, "together_s": tog, "iterations_per_task": iterations, "rounds": rounds,
               "measured": "2 runs of launch --workers 2 (each pinned to every core) of a CPU-bound loop, no TF"}
    suite.add("36", "several_together_over_back_to_back", "two runs submitted together on this machine: total wall "
              "time / the same two runs back to back (each leases every core: the second waits)", "ratio",
              ratios(tog, seq), "<= 1.02", details)
    suite.add("36", "several_wait_gap", "the waiting run's start (its plan.json) after the first run's end (its "
              "summary.json)", "s", gaps, "<= 1", details)
