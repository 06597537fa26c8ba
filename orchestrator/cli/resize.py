"""``python -m orchestrator resize RUN --workers N``: ask a running elastic job to change size.

The size is checked here first, as ``launch --resume RUN --workers N`` checks it
(:func:`orchestrator.resume.resized_spec`: within the run's MIN..MAX, a size its batch policy
allows), then sent to the job's orchestrator (the ``ResizeJob`` call), whose supervisor decides
on it (docs/elastic.md: under MultiWorkerMirroredStrategy a coordinated save, then the group at
the new size from that step). Exit codes: 0 accepted (the resize goes on in the job; ``status``
shows it), 2 refused: a size outside MIN..MAX or the batch policy's, the size it runs at, a run
that is not running or whose workers are not elastic (one line naming ``workers`` or ``RUN``).
"""

from __future__ import annotations

import argparse
import os

from orchestrator.cli.status import add_run_arguments
from orchestrator.errors import SpecError
from orchestrator.health.client import EndpointError
from orchestrator.report.runs import SUMMARY_FILE, read_endpoint, read_json, resolve_run
from orchestrator.resume import resized_spec


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "resize",
        help="ask a running elastic job (--workers MIN:MAX) to continue at another size",
        description="Ask a running job whose workers are elastic to change size: under multi_worker_mirrored every "
        "worker saves at one step and the group continues at the new size from that step (docs/elastic.md). "
        "Exit codes: 0 accepted, 2 refused (a size outside MIN..MAX or the batch policy's, a run that is not "
        "running or not elastic).",
    )
    add_run_arguments(p)
    p.add_argument("--workers", type=int, required=True, metavar="N", help="the size to continue at, in MIN..MAX")
    p.set_defaults(func=run_resize)


def run_resize(args: argparse.Namespace) -> int:
    """Run ``resize``. Returns the exit code (0 accepted).

    Raises:
        SpecError: every refusal (exit 2, one line).
    """
    run_dir = resolve_run(args.run, args.runs_dir)
    plan = read_json(run_dir / "plan.json")
    if not plan or "spec" not in plan:
        raise SpecError("RUN", run_dir.name, "has no plan.json with its spec", "name a run that was launched")
    resized_spec(plan, args.workers)  # the size: in the range, the batch policy's, the run elastic
    endpoint = read_endpoint(run_dir)
    if endpoint is None:
        summary = read_json(run_dir / SUMMARY_FILE)
        state = summary["status"] if summary else "its orchestrator is gone"
        if state == "Succeeded":  # launch --resume refuses it too: nothing left to train
            raise SpecError("RUN", run_dir.name, "is not running (Succeeded): it has nothing left to train",
                            f"launch a new run (a new --run-id) with --workers {args.workers}")
        raise SpecError("RUN", run_dir.name, f"is not running ({state})",
                        f"resize a running job; continue an ended one with launch --resume {run_dir.name} "
                        f"--workers {args.workers}")
    try:
        with endpoint.client() as client:
            accepted, state, refusal = client.resize(args.workers, f"resize asked by `orchestrator resize` "
                                                     f"(pid {os.getpid()})")
    except EndpointError as exc:
        raise SpecError("RUN", run_dir.name, f"is not running (its endpoint does not answer: {exc})",
                        "see python -m orchestrator status") from None
    if not accepted:
        refusal = (refusal or f"refused by the job ({state})").removeprefix(f"workers={args.workers}: ")
        raise SpecError("workers", args.workers, refusal,
                        "see python -m orchestrator status")
    print(f"resize accepted: run {run_dir.name} continues at {args.workers} worker(s) (was {state})", flush=True)
    return 0
