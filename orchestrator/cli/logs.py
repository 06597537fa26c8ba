"""``python -m orchestrator logs [RUN] [TASK] [--attempt N] [-f]``: task output, prefixed ``[worker-1]``.

Reads ``runs/<run-id>/attempt-<n>/<task>/{stdout,stderr}.log``. Without ``-f``: every attempt
(or ``--attempt N``) in order, task by task, stdout then stderr, a ``=== attempt N ===`` line
before each attempt after the first. With ``-f``: the same, then new lines as they are
written, across restarts (a new attempt's files are picked up as they appear), until the job
has ended (its ``summary.json`` is written) and every file is read to its end. TASK is
``worker-1``, ``worker:1`` or a task type (``worker``: every worker); one positional that is
not a run is taken as TASK of the latest run. Exit codes: 0, 2 bad input, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator import jsontext
from orchestrator.errors import SpecError
from orchestrator.report.runs import PLAN_FILE, SUMMARY_FILE, read_json, resolve_run
from orchestrator.rundir import RunDir

FOLLOW_INTERVAL_S = 0.2
"""Seconds between two looks at the log files with ``-f``."""

_ATTEMPT = re.compile(r"^attempt-(\d+)$")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "logs",
        help="task output with [task] prefixes; -f follows it across restarts",
        description="Print the output of a run's tasks, each line prefixed with its task ([worker-1]). Exit codes: "
        "0, 2 bad input, 130 interrupted.",
    )
    p.add_argument("args", nargs="*", metavar="[RUN] [TASK]",
                   help="a run directory or run id (default: the latest run), then a task: "
                   "worker-1, worker:1 or worker")
    p.add_argument("--runs-dir", default="runs", help="where run directories are (default ./runs)")
    p.add_argument("--attempt", type=int, default=None, metavar="N", help="only attempt N (default: every attempt)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines, across restarts, until the job ends")
    p.add_argument("--stream", choices=("both", "stdout", "stderr"), default="both", help="which output (default both)")
    p.add_argument("--json", action="store_true",
                   help='one JSON object per line: {"task", "attempt", "stream", "line"}')
    p.set_defaults(func=run_logs)


def _tasks_of(run_dir: Path) -> list[str]:
    plan = read_json(run_dir / PLAN_FILE) or {}
    return [str(t["task"]).replace(":", "-") for t in plan.get("tasks") or []]


def select_tasks(run_dir: Path, task: str | None) -> list[str]:
    """Directory names (``worker-1``) of the tasks ``task`` names, in plan order.

    Raises:
        SpecError: naming ``TASK`` when the run has no such task.
    """
    names = _tasks_of(run_dir)
    if task is None:
        return names
    wanted = task.replace(":", "-")
    chosen = [n for n in names if n == wanted or n.rsplit("-", 1)[0] == wanted]
    if not chosen:
        raise SpecError("TASK", task, f"run {run_dir.name} has no such task", "one of: " + ", ".join(names))
    return chosen


def _looks_like_task(text: str) -> bool:
    return bool(re.fullmatch(r"(chief|worker|ps|evaluator)([-:]\d+)?", text))


def _attempts(run_dir: Path) -> list[int]:
    found = []
    for p in run_dir.iterdir():
        m = _ATTEMPT.match(p.name)
        if m and p.is_dir():
            found.append(int(m.group(1)))
    return sorted(found)


@dataclass
class _Source:
    task: str
    attempt: int
    stream: str
    path: Path
    offset: int = 0
    partial: bytes = b""


class _Printer:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.shown_attempts: set[int] = set()

    def line(self, src: _Source, text: str) -> None:
        if self.as_json:
            print(jsontext.dumps({"task": src.task, "attempt": src.attempt, "stream": src.stream, "line": text}))
        else:
            print(f"[{src.task}] {text}")

    def attempt(self, attempt: int) -> None:
        if attempt not in self.shown_attempts:
            if self.shown_attempts and not self.as_json:
                print(f"=== attempt {attempt} ===")
            self.shown_attempts.add(attempt)


def _read_new(src: _Source, printer: _Printer, final: bool) -> bool:
    """Print the complete lines added to ``src`` since the last read (with ``final``, the
    unterminated last line too). Returns True when something was printed."""
    try:
        with open(src.path, "rb") as fh:
            fh.seek(src.offset)
            data = fh.read()
    except OSError:
        return False
    if not data and not (final and src.partial):
        return False
    src.offset += len(data)
    data = src.partial + data
    lines = data.split(b"\n")
    src.partial = lines.pop()
    if final and src.partial:
        lines.append(src.partial)
        src.partial = b""
    if lines:
        printer.attempt(src.attempt)
    for raw in lines:
        printer.line(src, raw.decode("utf-8", errors="replace").rstrip("\r"))
    return bool(lines)


def run_logs(args: argparse.Namespace) -> int:
    """Run ``logs``. Returns the exit code."""
    positional = list(args.args)
    if len(positional) > 2:
        raise SpecError("logs", " ".join(positional), "takes at most RUN and TASK", "e.g. logs RUN worker-1")
    run, task = (positional + [None, None])[:2]
    if len(positional) == 1 and _looks_like_task(positional[0]) and not Path(positional[0]).is_dir() \
            and not (Path(args.runs_dir) / positional[0]).is_dir():
        run, task = None, positional[0]
    if args.attempt is not None and args.attempt < 0:
        raise SpecError("attempt", args.attempt, "must be 0 or more", "e.g. --attempt 1")
    run_dir = resolve_run(run, args.runs_dir)
    tasks = select_tasks(run_dir, task)
    streams = ("stdout", "stderr") if args.stream == "both" else (args.stream,)
    printer = _Printer(args.json)
    sources: dict[Path, _Source] = {}

    def discover() -> list[_Source]:
        attempts = [args.attempt] if args.attempt is not None else _attempts(run_dir)
        for attempt in attempts:
            for name in tasks:
                for stream in streams:
                    path = RunDir(run_dir).attempt(attempt) / name / f"{stream}.log"
                    if path not in sources and path.is_file():
                        sources[path] = _Source(name, attempt, stream, path)
        return sorted(sources.values(), key=lambda s: (s.attempt, tasks.index(s.task), streams.index(s.stream)))

    try:
        for src in discover():
            _read_new(src, printer, final=not args.follow)
        sys.stdout.flush()
        if not args.follow:
            return 0
        while True:
            ended = (run_dir / SUMMARY_FILE).is_file()  # looked at before the last read: nothing written after is lost
            for src in discover():
                _read_new(src, printer, final=ended)
            sys.stdout.flush()
            if ended:
                return 0
            time.sleep(FOLLOW_INTERVAL_S)  # the follow period (tail -f), not a synchronisation
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # logs ... | head
        return 0
