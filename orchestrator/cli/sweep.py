"""``python -m orchestrator sweep [launch options] --grid FLAG=V1,V2 [--grid ...] [--parallel N]
[--metric NAME] [-- PROGRAM ...]``: one run per point of a grid of launch flags.

* **On this machine** (the local and docker backends): every point of the grid (the product of
  the ``--grid`` flags, in the order given) is an ordinary ``launch`` of its own, in its own run
  directory ``<runs-dir>/<sweep id>-<k>``; at most ``--parallel N`` run at a time, and each one
  leases its cores and GPUs (:mod:`orchestrator.resources.leases`), so two points never pin the
  same cores or take the same GPU: a point waits until what it needs is free. At the end a table
  ranks the runs by ``--metric`` (``summary.json``'s ``metrics``; default ``test_accuracy``, the
  built-in program's; a metric named ``*loss*`` or ``*error*`` ranks lowest first). Exit 0 when
  every run succeeded, 1 otherwise.
* **On Slurm** (``--backend slurm -o FILE``): one batch script of a job array
  (``#SBATCH --array=0-K%N``: K+1 points, at most N at a time, Slurm's own throttle), whose
  element ``$SLURM_ARRAY_TASK_ID`` runs ``launch --backend slurm`` with its point in its own
  allocation. Nothing is submitted.

Bad input (a flag ``launch`` does not take, a value it refuses at any point) is one line, exit 2,
checked for every point before anything starts.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from orchestrator import api
from orchestrator.cli import launch
from orchestrator.cli.sbatch import gpus_per_node, launch_argv, nodes_needed
from orchestrator.errors import SpecError
from orchestrator.plan import new_run_id

_OWN = {"--grid": True, "--parallel": True, "--metric": True, "-o": True, "--output": True, "--run-id": True,
        "--backend": True, "--partition": True, "--time-limit": True}
"""Options of ``sweep`` itself, left out of each point's ``launch`` (value: takes a value)."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="run one job per point of a grid of launch flags, at most N at a time, and rank them",
        description="Expand --grid flags into runs (each an ordinary run directory), run at most --parallel at a "
        "time through the machine's leases (docs/several-jobs.md), and print them ranked by --metric. With "
        "--backend slurm -o FILE: write one Slurm job array instead. Exit codes: 0 every run succeeded, 1 not, "
        "2 bad input.",
    )
    launch.add_arguments(p)
    own = p.add_argument_group("sweep")
    own.add_argument("--grid", action="append", default=[], metavar="FLAG=V1,V2",
                     help="a launch flag and its values, e.g. --grid learning-rate=0.01,0.001; repeatable: the runs "
                     "are every combination")
    own.add_argument("--parallel", type=int, default=1, metavar="N",
                     help="runs at a time (default 1; each also waits for the cores and GPUs it leases)")
    own.add_argument("--metric", default="test_accuracy", metavar="NAME",
                     help="summary.json metric the table ranks by (default test_accuracy; names with 'loss' or "
                     "'error' rank lowest first)")
    own.add_argument("-o", "--output", default=None, metavar="FILE",
                     help="with --backend slurm: where to write the job array's batch script (- for stdout)")
    own.add_argument("--partition", default=None, help="with --backend slurm: the Slurm partition")
    own.add_argument("--time-limit", default=None, metavar="TIME", help="with --backend slurm: each element's limit")
    p.set_defaults(func=run_sweep)


def parse_grid(items: list[str], parser_flags: set[str]) -> list[tuple[str, list[str]]]:
    """``["learning-rate=0.1,0.01", ...]`` -> ``[("--learning-rate", ["0.1", "0.01"]), ...]``.

    Raises:
        SpecError: naming ``grid``: no grid, no ``=``, no value, or a flag ``launch`` does not take.
    """
    if not items:
        raise SpecError("grid", "", "a sweep needs at least one --grid FLAG=V1,V2",
                        "e.g. --grid learning-rate=0.01,0.001")
    out = []
    for item in items:
        name, sep, values = item.partition("=")
        flag = "--" + name.strip().lstrip("-")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not vals:
            raise SpecError("grid", item, "must be FLAG=V1,V2,...", "e.g. --grid learning-rate=0.01,0.001")
        if flag not in parser_flags or flag in _OWN:
            raise SpecError("grid", item, f"{flag} is not a flag of launch", "see python -m orchestrator launch --help")
        out.append((flag, vals))
    return out


def points(grid: list[tuple[str, list[str]]]) -> list[list[str]]:
    """Every combination, as launch arguments (``["--learning-rate", "0.1", "--workers", "2"]``)."""
    return [[a for (flag, _), v in zip(grid, combo) for a in (flag, v)]
            for combo in itertools.product(*(vals for _, vals in grid))]


def _label(point: list[str]) -> str:
    return " ".join(f"{point[i][2:]}={point[i + 1]}" for i in range(0, len(point), 2))


class _PointParser(argparse.ArgumentParser):
    """``launch``'s options, whose refusal of a grid point is a SpecError (one line, exit 2)."""

    point = ""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecError("grid", self.point, f"launch refuses it: {message}", "check the values of --grid")


def _check_point(parser: _PointParser, base: list[str], point: list[str]) -> None:
    """Parse and validate one point as ``launch`` would (bad input: SpecError naming the field)."""
    parser.point = _label(point)
    parsed = parser.parse_args([*base, *point])
    parsed.run_id, parsed.resume = None, None
    launch.spec_from_args(parsed)


def render_array(args: argparse.Namespace, base: list[str], all_points: list[list[str]], program: list[str],
                 sweep_id: str) -> str:
    """The job array's batch script: element k runs ``launch --backend slurm`` with point k."""
    spec = launch.spec_from_args(args)
    nodes = nodes_needed(spec, args.tasks_per_node)
    gpus = gpus_per_node(spec, args.tasks_per_node)
    runs_dir = str(Path(args.runs_dir).resolve())
    lines = ["#!/bin/bash",
             f"# Written by `python -m orchestrator sweep`: {len(all_points)} runs, at most {args.parallel} at a time;",
             "# submit it with: sbatch <this file>. Element k runs launch with grid point k in its own allocation.",
             f"#SBATCH --job-name=tf-sweep-{sweep_id}",
             f"#SBATCH --array=0-{len(all_points) - 1}%{args.parallel}",
             f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1", "#SBATCH --no-kill",
             f"#SBATCH --output={os.path.join(runs_dir, 'slurm-%A_%a.out')}"]
    if args.partition:
        lines.append(f"#SBATCH --partition={args.partition}")
    if args.time_limit:
        lines.append(f"#SBATCH --time={args.time_limit}")
    if gpus:
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
    lines += ["set -eu", f"mkdir -p {shlex.quote(runs_dir)}", f"cd {shlex.quote(os.getcwd())}",
              'case "$SLURM_ARRAY_TASK_ID" in']
    lines += [f"  {k}) point=({shlex.join(p)}) ;;  # {_label(p)}" for k, p in enumerate(all_points)]
    lines += ['  *) echo "no grid point $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;', "esac"]
    command = shlex.join([sys.executable, "-m", "orchestrator", "launch", "--backend", "slurm", "--plain", *base])
    tail = " -- " + shlex.join(program) if program else ""
    lines += [f'exec {command} "${{point[@]}}" --run-id "{sweep_id}-${{SLURM_ARRAY_TASK_ID}}"{tail}', ""]
    return "\n".join(lines)


def _run_one(base: list[str], point: list[str], run_id: str, program: list[str]) -> int:
    argv = [sys.executable, "-m", "orchestrator", "launch", *base, *point, "--run-id", run_id, "--quiet",
            *(["--", *program] if program else [])]
    return subprocess.run(argv, stdout=subprocess.DEVNULL, check=False).returncode


def _metric(runs_dir: Path, run_id: str, name: str) -> tuple[str, float | None]:
    try:
        summary = json.loads((runs_dir / run_id / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no summary", None
    value = (summary.get("metrics") or {}).get(name)
    return str(summary.get("status")), float(value) if isinstance(value, (int, float)) else None


def run_sweep(args: argparse.Namespace) -> int:
    """Run ``sweep``. Returns 0 when every run succeeded, 1 otherwise (2: bad input)."""
    parser = _PointParser(add_help=False)
    launch.add_arguments(parser)
    flags = {o for a in parser._actions for o in a.option_strings}  # noqa: SLF001 - argparse's own table
    grid = parse_grid(args.grid, flags)
    if args.parallel < 1:
        raise SpecError("parallel", args.parallel, "must be at least 1", "e.g. --parallel 2")
    if args.resume is not None or args.dry_run:
        raise SpecError("resume" if args.resume is not None else "dry-run", True, "is not for a sweep",
                        "leave it out")
    program = list(getattr(args, "command_argv", None) or [])
    raw = list(getattr(args, "raw_argv", []) or [])
    base = _strip(raw[raw.index("sweep") + 1:] if "sweep" in raw else raw)
    all_points = points(grid)
    for point in all_points:
        _check_point(parser, base, point)
    sweep_id = args.run_id or new_run_id()
    api.check_run_id(sweep_id, "run-id")
    if args.backend == "slurm":
        if not args.output:
            raise SpecError("output", "", "a Slurm sweep is written as a job array script", "add -o sweep.sh")
        text = render_array(args, base, all_points, program, sweep_id)
        if args.output == "-":
            sys.stdout.write(text)
        else:
            Path(args.output).write_text(text, encoding="utf-8")
            Path(args.output).chmod(0o755)
            print(f"wrote {args.output}: a job array of {len(all_points)} runs, at most {args.parallel} at a time; "
                  f"submit it with: sbatch {args.output}")
        return 0
    if args.output:
        raise SpecError("output", args.output, "is for --backend slurm (a job array script)", "leave out -o")
    base = [*base, "--backend", args.backend] if args.backend != "local" else base
    runs_dir = Path(args.runs_dir)
    ids = [f"{sweep_id}-{k}" for k in range(len(all_points))]
    print(f"sweep {sweep_id}: {len(all_points)} runs, at most {args.parallel} at a time, under {runs_dir}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        futures = {pool.submit(_run_one, base, p, rid, program): (rid, p) for rid, p in zip(ids, all_points)}
        codes = {}
        for done in concurrent.futures.as_completed(futures):
            rid, p = futures[done]
            codes[rid] = done.result()
            status, value = _metric(runs_dir, rid, args.metric)
            shown = f", {args.metric} {value:.4g}" if value is not None else ""
            print(f"run {rid} ({_label(p)}): {status}{shown}", flush=True)
    print(ranking(runs_dir, list(zip(ids, all_points)), args.metric), flush=True)
    return 0 if all(c == 0 for c in codes.values()) else 1


def ranking(runs_dir: Path, runs: list[tuple[str, list[str]]], metric: str) -> str:
    """The final table: rank, run, its grid point, status and metric, best first (runs without
    the metric last)."""
    lower = any(word in metric for word in ("loss", "error"))
    rows = [(rid, _label(p), *_metric(runs_dir, rid, metric)) for rid, p in runs]
    rows.sort(key=lambda r: (r[3] is None, (r[3] if lower else -r[3]) if r[3] is not None else 0.0))
    table = [("rank", "run", "point", "status", metric)]
    table += [(str(i + 1), rid, point, status, f"{v:.4g}" if v is not None else "-")
              for i, (rid, point, status, v) in enumerate(rows)]
    widths = [max(len(r[c]) for r in table) for c in range(5)]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(5)).rstrip() for r in table)


def _strip(raw: list[str]) -> list[str]:
    """``raw`` without ``sweep``'s own options (:data:`_OWN`)."""
    out, skip = [], False
    for item in launch_argv(raw):
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if name in _OWN:
            skip = _OWN[name] and "=" not in item
            continue
        out.append(item)
    return out
