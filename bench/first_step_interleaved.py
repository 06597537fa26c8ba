"""Experiment: launch -> first step, orchestrated / hand-launched, in interleaved rounds, for cluster
shapes the ``tf`` section does not run (issue 33 item 9, bench/results/NOTES.md).

``mwms1`` is MWMS at 1 worker: on a 2-core machine the orchestrator then has a core its task does not
use while it imports TensorFlow, so what is left of the gap is what no core count removes (the time from
the command to the first task's start). ``mwms2`` is the ``tf`` section's shape at 1 epoch, for a
comparison in the same minutes. Each round runs both sides, the order alternating (drift cancels),
through the ``tf`` section's own :func:`bench.tfjobs.run_orchestrated` and :func:`bench.tfjobs.run_hand`.

    python -m bench.first_step_interleaved [--rounds 8] [--shapes mwms1 mwms2]

Prints every run's first step (seconds after its launch), each shape's launch timeline (medians, both
sides: :mod:`bench.timeline`), and one ``RESULT`` line per shape: the medians, their ratio and the
median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench import timeline
from bench.tfjobs import Topology, precompile, run_hand, run_orchestrated, warm_up

SHAPES = {
    "mwms1": Topology("mwms1", "multi_worker_mirrored", 0, 1, 0, 1),
    "mwms2": Topology("mwms2", "multi_worker_mirrored", 0, 2, 0, 1),
}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.first_step_interleaved",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds per shape, each one run per side (default 8)")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["mwms1", "mwms2"])
    args = parser.parse_args()
    precompile()
    warm_up()
    work = Path(tempfile.mkdtemp(prefix="first-step-"))
    n = 0
    for topo in (SHAPES[name] for name in args.shapes):
        names = [f"{t}-{i}" for t, i in topo.tasks()]
        runs: dict[str, list] = {"o": [], "h": []}
        for i in range(args.rounds):
            for side in ("o", "h") if i % 2 == 0 else ("h", "o"):
                n += 1
                if side == "o":
                    r = run_orchestrated(work, f"{topo.name}-orch-{n:02d}", topo.launch_args(), topo.coordinator)
                else:
                    r = run_hand(work, f"{topo.name}-hand-{n:02d}", topo)
                runs[side].append(r)
                print(f"{topo.name} {r.side}: exit {r.exit_code}, first step {r.first_step_s()}", flush=True)
        firsts = {side: [r.first_step_s() for r in rs] for side, rs in runs.items()}
        if any(f is None for fs in firsts.values() for f in fs):
            print(f"RESULT {topo.name}: a run did not reach its first step (runs under {work})", flush=True)
            continue
        lines = {side: timeline.summarize([timeline.points(r, names) for r in rs], names) for side, rs in runs.items()}
        print(timeline.table(lines["o"], lines["h"]), flush=True)
        o, h = statistics.median(firsts["o"]), statistics.median(firsts["h"])
        per_round = statistics.median([a / b for a, b in zip(firsts["o"], firsts["h"])])
        print(f"RESULT {topo.name}: orchestrated {o:.3f} s, hand {h:.3f} s, ratio {o / h:.3f}, "
              f"median of per-round ratios {per_round:.3f}", flush=True)


if __name__ == "__main__":
    main()
