"""``python -m orchestrator stop [RUN]``: stop a running job from another terminal.

The launcher does what Ctrl-C in its terminal does: SIGTERM to every task, SIGKILL to what is
left after its ``--stop-timeout``, ``summary.json`` with status ``Interrupted``, exit 130. This
command waits (at most ``--timeout`` seconds) for that summary. Exit codes: 0 stopped, 1 not
running (already ended, or its orchestrator does not answer) or not ended in time, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from orchestrator import jsontext
from orchestrator.cli.status import add_run_arguments
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.health.client import EndpointError
from orchestrator.report.runs import SUMMARY_FILE, read_endpoint, read_json, resolve_run


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "stop",
        help="stop a running job (as Ctrl-C in its terminal) and wait for its summary",
        description="Ask a running job's orchestrator to stop every task (SIGTERM, then SIGKILL after its "
        "--stop-timeout), as Ctrl-C does; it writes summary.json (Interrupted) and exits 130. Exit codes: 0 stopped, "
        "1 not running or not ended in time, 2 bad input.",
    )
    add_run_arguments(p)
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait for the job's end (default 60); 0: do not wait")
    p.add_argument("--json", action="store_true", help="print summary.json once the job has ended")
    p.set_defaults(func=run_stop)


def run_stop(args: argparse.Namespace) -> int:
    """Run ``stop``. Returns the exit code."""
    if not 0 <= args.timeout <= 3600:
        raise SpecError("timeout", args.timeout, "must be seconds in [0, 3600]", "e.g. --timeout 60")
    run_dir = resolve_run(args.run, args.runs_dir)
    endpoint = read_endpoint(run_dir)
    summary = read_json(run_dir / SUMMARY_FILE)
    if endpoint is None:
        state = summary["status"] if summary else "no summary and no endpoint: its orchestrator is gone"
        raise OrchestratorError(f"run {run_dir.name} is not running ({state}); nothing to stop")
    try:
        with endpoint.client() as client:
            accepted, state = client.stop(f"stopped by `orchestrator stop` (pid {os.getpid()})")
    except EndpointError as exc:
        raise OrchestratorError(f"cannot stop run {run_dir.name}: {exc}") from None
    if not accepted:
        raise OrchestratorError(f"run {run_dir.name} is not running ({state}); nothing to stop")
    if args.timeout == 0:
        print(f"stop requested: run {run_dir.name} (was {state})", flush=True)
        return 0
    deadline = time.monotonic() + args.timeout
    print(f"stopping run {run_dir.name} (was {state}) ...", flush=True,
          file=sys.stderr if args.json else sys.stdout)  # --json: stdout is the summary alone
    while (summary := read_json(run_dir / SUMMARY_FILE)) is None:
        if time.monotonic() > deadline:
            raise OrchestratorError(f"run {run_dir.name} did not end within {args.timeout:g} s of the stop request; "
                                    f"see python -m orchestrator status {run_dir}")
        time.sleep(0.1)  # polling the file the launcher writes at its end (bounded above)
    if args.json:
        print(jsontext.dumps(summary, indent=2))
    else:
        print(f"run {run_dir.name}: {summary['status']} after {summary['wall_time_s']:.1f} s: {summary['reason']}\n"
              f"  summary {run_dir / SUMMARY_FILE}", flush=True)
    return 0
