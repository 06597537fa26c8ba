"""``python -m orchestrator status [RUN]``: how a job stands, live over gRPC or from its summary.

RUN is a run directory, a run id under ``--runs-dir``, or left out for the latest run. The
table is the launcher's own (the same columns and cells). ``--watch`` redraws it until the job
ends; ``--web [HOST:]PORT`` serves the job's page for this run (live, or a finished run from its
``summary.json`` and ``history.json``). Exit code: 0 while the job runs, else the job's own
(0 succeeded, 1 failed or lost, 130 interrupted); 2 bad input.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import threading
import time

from orchestrator import jsontext
from orchestrator.errors import SpecError
from orchestrator.report.live import render_status
from orchestrator.report.runs import read_endpoint, resolve_run, run_status
from orchestrator.report.status import format_table


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", default=None, metavar="RUN",
                   help="a run directory, a run id under --runs-dir, or nothing for the latest run")
    p.add_argument("--runs-dir", default="runs", help="where run directories are (default ./runs)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "status",
        help="how a job stands: live over gRPC, or from its summary once it has ended",
        description="Show the task table of a run (the launcher's live view), for a running job over its gRPC "
        "endpoint, for a finished one from summary.json. Exit codes: 0 running or succeeded, 1 failed or lost, "
        "130 interrupted, 2 bad input.",
    )
    add_run_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="print the status as JSON (summary.json's shape plus live fields)")
    p.add_argument("--watch", action="store_true", help="redraw until the job ends (Ctrl-C to quit)")
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between redraws with --watch (default 1)")
    p.add_argument("--web", default=None, metavar="[HOST:]PORT",
                   help="serve this run's web page and /metrics (live or finished) until Ctrl-C")
    p.add_argument("--web-public", action="store_true", help="allow a --web host that is not loopback")
    p.set_defaults(func=run_status_command)


def exit_code_of(status: dict) -> int:
    """0 while the job runs; else its exit code (1 when lost)."""
    if status.get("live"):
        return 0
    code = status.get("exit_code")
    return int(code) if isinstance(code, int) else 1


def _show(status: dict, as_json: bool, compact: bool = False) -> None:
    if as_json:
        print(jsontext.dumps({k: v for k, v in status.items() if k != "history"}, indent=None if compact else 2),
              flush=True)
    elif sys.stdout.isatty():
        from rich.console import Console

        Console().print(render_status(status))
    else:
        print(format_table(status), flush=True)


def run_status_command(args: argparse.Namespace) -> int:
    """Run ``status``. Returns the exit code."""
    if not 0.1 <= args.interval <= 3600:
        raise SpecError("interval", args.interval, "must be seconds in [0.1, 3600]", "e.g. --interval 1")
    run_dir = resolve_run(args.run, args.runs_dir)
    if args.web is not None:
        return _serve_web(run_dir, args)
    status = run_status(run_dir)
    if not args.watch:
        _show(status, args.json)
        return exit_code_of(status)
    try:
        if args.json or not sys.stdout.isatty():
            while True:
                if args.json:  # one JSON object per line
                    _show(status, True, compact=True)
                else:
                    print(format_table(status) + "\n", flush=True)
                if not status.get("live"):
                    return exit_code_of(status)
                time.sleep(args.interval)  # a redraw period, not a synchronisation
                status = run_status(run_dir)
        from rich.live import Live

        with Live(render_status(status), auto_refresh=False) as live:
            while status.get("live"):
                time.sleep(args.interval)
                status = run_status(run_dir)
                live.update(render_status(status), refresh=True)
        return exit_code_of(status)
    except KeyboardInterrupt:
        return 130


def _serve_web(run_dir, args: argparse.Namespace) -> int:
    from orchestrator.web.bind import parse_bind
    from orchestrator.web.server import WebServer

    host, port = parse_bind(args.web, allow_public=args.web_public)
    endpoint = read_endpoint(run_dir)

    def source(history: bool, since: int) -> dict:
        if endpoint is not None:  # live: ask the orchestrator for only what is new
            from orchestrator.health.client import EndpointError

            try:
                with endpoint.client() as client:
                    status = client.status(history=history, history_since=since)
                if status:
                    return status
            except EndpointError:
                pass
        status = run_status(run_dir, history=history)
        if history and since and "history" in status:  # the whole history was sent already
            h = status["history"]
            status["history"] = {"seq": h.get("seq", 0),
                                 "samples": [s for s in h.get("samples", []) if s["seq"] > since],
                                 "events": [e for e in h.get("events", []) if e["seq"] > since]}
        return status

    server = WebServer(source, secrets.token_urlsafe(18), host, port, process_metrics=False).start()
    print(f"web page and /metrics of {run_dir.name}: {server.url}  (Ctrl-C to stop)", flush=True)
    stop = threading.Event()
    try:
        stop.wait()  # until Ctrl-C
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
