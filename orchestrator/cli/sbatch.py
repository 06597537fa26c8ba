"""``python -m orchestrator sbatch [launch options] -o job.sh``: a Slurm batch script that runs the
job with ``launch --backend slurm`` inside its own allocation, so the whole workflow is
``sbatch job.sh``.

The script asks for as many nodes as the placement needs (one task per node; with
``--tasks-per-node K``, ``ceil(tasks / K)``), ``--no-kill`` (a lost node must not end the
allocation: the orchestrator moves its tasks to the nodes left), the job's output next to the run
directories, and ``exec`` s the orchestrator, so Slurm's SIGTERM (``scancel``, the time limit)
reaches it and every task is stopped and ``summary.json`` written. Nothing is submitted; the
options are checked as ``launch`` checks them (bad input: exit 2, no file written).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path

from orchestrator.cli import launch
from orchestrator.errors import SpecError
from orchestrator.placement import place
from orchestrator.spec.model import JobSpec

_OWN_OPTIONS = {"-o": True, "--output": True, "--nodes": True, "--partition": True, "--time-limit": True,
                "--backend": True}
"""Options of ``sbatch`` itself, left out of the ``launch`` command (value: takes a value)."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sbatch",
        help="write a Slurm batch script that runs the job (launch --backend slurm) in its own allocation",
        description="Write a batch script for `sbatch`: it allocates the nodes the job needs and runs "
        "`launch --backend slurm` with the options given here. Nothing is submitted.",
    )
    launch.add_arguments(p)
    own = p.add_argument_group("batch script")
    own.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the script (- for stdout)")
    own.add_argument("--nodes", type=int, default=None,
                     help="nodes to allocate (default: what the placement needs: one per task, or tasks / --tasks-per-node)")
    own.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default)")
    own.add_argument("--time-limit", default=None, metavar="TIME",
                     help="Slurm time limit, e.g. 1:00:00 (default: the deadline + 5 min when --deadline is given, "
                     "else the partition's)")
    p.set_defaults(func=run_sbatch)


def launch_argv(raw: list[str]) -> list[str]:
    """``raw`` (the options given to ``sbatch``) without ``sbatch``'s own options."""
    if "sbatch" in raw:  # global options and the subcommand itself go
        raw = raw[raw.index("sbatch") + 1:]
    out, skip = [], False
    for item in raw:
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if name in _OWN_OPTIONS:
            skip = _OWN_OPTIONS[name] and "=" not in item
            continue
        out.append(item)
    return out


def nodes_needed(spec: JobSpec, tasks_per_node: int | None) -> int:
    """Nodes the placement needs: one per task, or ``ceil(tasks / tasks_per_node)``."""
    return math.ceil(len(spec.tasks()) / (tasks_per_node or 1))


def gpus_per_node(spec: JobSpec, tasks_per_node: int | None) -> int:
    """GPUs each node of the allocation needs: the most any node's tasks ask for together, tasks
    placed in order, ``tasks_per_node`` (default 1) per node (``gpus_per_task``; ps and evaluator
    none unless named: :func:`orchestrator.placement.place` without an inventory)."""
    counts = [place(spec, None).of(t).count for t in spec.tasks()]
    per = tasks_per_node or 1
    return max((sum(counts[i:i + per]) for i in range(0, len(counts), per)), default=0)


def render_script(spec: JobSpec, launch_args: list[str], program: list[str], *, nodes: int, partition: str | None,
                  time_limit: str | None, workdir: str, python: str, runs_dir: str, gpus: int = 0) -> str:
    """The batch script's text (see the module docstring); ``gpus``: ``--gpus-per-node``
    (:func:`gpus_per_node`), 0 for none."""
    tasks = ", ".join(t.name for t in spec.tasks())
    lines = [
        "#!/bin/bash",
        "# Written by `python -m orchestrator sbatch`; submit it with: sbatch " + "<this file>",
        f"# {spec.strategy.value}: {tasks}; each task is its own job step, placed one per node in node order",
        "# (chief, workers, ps, evaluator). The run directory must be on a file system every node mounts;",
        "# the orchestrator checks it at start. --no-kill: a lost node does not end the allocation, the",
        "# orchestrator moves its tasks to the nodes left.",
        f"#SBATCH --job-name=tf-{spec.strategy.value}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --no-kill",
        f"#SBATCH --output={os.path.join(runs_dir, 'slurm-%j.out')}",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    if gpus:  # each step then asks srun --gpus-per-task for its own (orchestrator/backends/slurm.py)
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
    command = [python, "-m", "orchestrator", "launch", "--backend", "slurm", "--plain", *launch_args]
    if program:
        command += ["--", *program]
    lines += [
        "set -eu",
        f"mkdir -p {shlex.quote(runs_dir)}",
        f"cd {shlex.quote(workdir)}",
        "# exec: Slurm's SIGTERM (scancel, the time limit) reaches the orchestrator, which stops every task",
        "exec " + shlex.join(command),
        "",
    ]
    return "\n".join(lines)


def _time_limit(deadline_s: float | None) -> str | None:
    if deadline_s is None:
        return None
    minutes = math.ceil(deadline_s / 60) + 5
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def run_sbatch(args: argparse.Namespace) -> int:
    """Write the batch script. Returns 0 (2 on bad input, raised as SpecError)."""
    if args.backend not in ("local", "slurm"):  # local: argparse's default, i.e. not given
        raise SpecError("backend", args.backend, "a batch script runs the slurm backend", "leave out --backend")
    if args.dry_run:
        raise SpecError("dry-run", True, "sbatch writes a script and starts nothing anyway", "leave out --dry-run")
    spec = launch.spec_from_args(args)
    program = list(getattr(args, "command_argv", None) or [])
    if getattr(args, "program_separator", False) and not program:
        raise SpecError("--", "", "no program after --", "write the program to run, e.g. -- python train.py")
    needed = nodes_needed(spec, args.tasks_per_node)
    if args.tasks_per_node is not None and args.tasks_per_node < 1:
        raise SpecError("tasks-per-node", args.tasks_per_node, "must be at least 1", "e.g. --tasks-per-node 2")
    nodes = args.nodes if args.nodes is not None else needed
    if nodes < needed:
        raise SpecError("nodes", nodes, f"{len(spec.tasks())} tasks need {needed} node(s) at "
                        f"{args.tasks_per_node or 1} per node", f"use --nodes {needed} or raise --tasks-per-node")
    raw = list(getattr(args, "raw_argv", []) or [])
    text = render_script(spec, launch_argv(raw), program, nodes=nodes, partition=args.partition,
                         time_limit=args.time_limit or _time_limit(spec.supervision.deadline_s),
                         workdir=os.getcwd(), python=sys.executable, runs_dir=str(Path(args.runs_dir).resolve()),
                         gpus=gpus_per_node(spec, args.tasks_per_node))
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)  # Slurm opens the job's output file there before the script runs
    target = Path(args.output)
    if target.parent and not target.parent.is_dir():
        raise SpecError("output", args.output, f"{target.parent} is not a directory", "write the script into an existing directory")
    target.write_text(text, encoding="utf-8")
    target.chmod(0o755)
    gpus = gpus_per_node(spec, args.tasks_per_node)
    per_node = f", {gpus} GPU(s) per node" if gpus else ""
    print(f"wrote {target}: {nodes} node(s), {len(spec.tasks())} task(s){per_node}; submit it with: sbatch {target}")
    return 0
