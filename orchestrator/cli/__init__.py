"""Command line: ``python -m orchestrator <subcommand>``; each subcommand returns an exit code.

Exit codes: 0 succeeded, 1 job failed, 2 bad input (nothing started), 3 succeeded but an injected
fault never fired (``launch``), 75 preempted (``launch``), 130 interrupted.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys
from typing import TYPE_CHECKING, NoReturn

from orchestrator.env import bench_mark
from orchestrator.errors import OrchestratorError, SpecError

if TYPE_CHECKING:
    from orchestrator.pkimaker import CertificateMaker


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse's own convention too)
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


SUBCOMMANDS = {"launch": "launch", "validate": "validate", "render": "render", "doctor": "doctor",
               "compose": "compose", "sbatch": "sbatch", "sweep": "sweep", "status": "status", "stop": "stop",
               "resize": "resize", "logs": "logs", "list": "list_runs"}
"""Subcommand -> its module under ``orchestrator.cli``, in ``--help`` order."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of the subcommand ``only`` alone: ``main`` imports
    only the module of the subcommand it runs (``launch`` need not import ``render``, ``doctor``
    or the other backends: a launch's start waits for its CLI's imports, docs/architecture.md)."""
    parser = _Parser(prog="python -m orchestrator", description="Launch and supervise distributed TensorFlow training.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, module in SUBCOMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f"orchestrator.cli.{module}").add_parser(sub)
    return parser


def _subcommand(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names (its first word after the global options), None when none."""
    for word in argv:
        if word.startswith("-"):
            continue
        return word if word in SUBCOMMANDS else None
    return None


def _certificate_maker(subcommand: str | None, argv: list[str]) -> CertificateMaker | None:
    """For a ``launch`` that will make the run's certificates (not ``--insecure``, ``--dry-run`` or
    ``--help``): the process that makes them, started before ``launch``'s modules are imported
    (:mod:`orchestrator.pkimaker`); None otherwise. A launch that ends before it asks closes it."""
    if subcommand != "launch" or any(w in ("--insecure", "--dry-run", "-h", "--help") for w in argv):
        return None
    from orchestrator.pkimaker import CertificateMaker

    return CertificateMaker.start()


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the subcommand. Returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    separator = "--" in argv
    if separator:  # launch ... -- python train.py --epochs 3: the user's own program
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    subcommand = _subcommand(argv)
    certificates = _certificate_maker(subcommand, argv)
    if subcommand == "launch":
        _collect_less()
    try:
        return _run(subcommand, argv, command, separator, certificates)
    finally:
        started()
        if certificates is not None:
            certificates.close()


START_GC_THRESHOLD = 100_000
"""The cyclic garbage collector's first threshold while a launch starts (Python's default: 700
allocations): past the ~50,000 objects its imports allocate, so that none of them is collected
(about 5 % of their CPU), and low enough that a long wait before the start (resources leased by
another run) still collects."""

_thresholds: list[tuple[int, int, int]] = []


def _collect_less() -> None:
    """A launch's start: the collector's first threshold raised to :data:`START_GC_THRESHOLD` until
    :func:`started`."""
    _thresholds.append(gc.get_threshold())
    gc.set_threshold(START_GC_THRESHOLD, *_thresholds[-1][1:])


def started() -> None:
    """A launch's start is done (its supervisor's modules imported): what it made lives as long as
    the process (``gc.freeze``: later collections do not walk it again) and the collector's
    thresholds are as before. Nothing after the first call, or without :func:`_collect_less`."""
    if _thresholds:
        gc.freeze()
        gc.set_threshold(*_thresholds.pop())


def _run(subcommand: str | None, argv: list[str], command: list[str], separator: bool,
         certificates: CertificateMaker | None) -> int:
    parser = build_parser(subcommand)
    args = parser.parse_args(argv)
    bench_mark("cli-imported", sys.stderr)  # bench/timeline.py: the subcommand's modules are imported
    if command and args.command not in ("launch", "sbatch", "sweep"):
        parser.error(f"a program after -- is only for launch, sbatch and sweep, not {args.command}")
    args.command_argv = command
    args.raw_argv = argv
    args.program_separator = separator
    args.certificates = certificates
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OrchestratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def entry_point() -> None:
    raise SystemExit(main())
