"""``python -m orchestrator sbatch [launch options] -o job.sh``: a Slurm batch script that runs the
job with ``launch --backend slurm`` inside its own allocation, so the whole workflow is
``sbatch job.sh``.

The script asks for as many nodes as the placement needs (one task per node; with
``--tasks-per-node K``, ``ceil(tasks / K)``), ``--no-kill`` (a lost node must not end the
allocation: the orchestrator moves its tasks to the nodes left), the job's output next to the run
directories, and ``exec`` s the orchestrator, so Slurm's signals to the batch shell (SIGTERM:
``scancel``, the time limit, the end of a preemption's grace; SIGUSR1: the time limit's warning)
reach it, every task is stopped and ``summary.json`` written. Nothing is submitted; the options
are checked as ``launch`` checks them (bad input: exit 2, no file written).

Preemption and time limits (``docs/preemption-slurm.md``):

* The run id is ``slurm-<job id>`` (``--run-id`` to name it), and by default the job is
  requeueable (``--requeue``, output appended: ``--open-mode=append``; ``--no-requeue`` turns
  both off): when Slurm requeues it (``SLURM_RESTART_COUNT`` > 0) and the run directory has its
  plan, the script runs ``launch --resume <run id>``: the next life of the same run.
* ``--continue`` (with ``--time-limit`` or the partition's limit): ``--signal=B:USR1@N`` asks
  Slurm for SIGUSR1 N s (``--time-warning``) before the limit; ``launch --continue`` then saves,
  requeues the job and exits 75, and the next run continues: a run longer than the partition's
  time limit is one ``sbatch``.
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
from orchestrator.resources.placement import place
from orchestrator.spec.model import JobSpec

_OWN_OPTIONS = {"-o": True, "--output": True, "--nodes": True, "--partition": True, "--time-limit": True,
                "--backend": True, "--no-requeue": False, "--time-warning": True, "--run-id": True}
"""Options of ``sbatch`` itself, left out of the ``launch`` command (value: takes a value);
``--run-id`` is put back by the script (fresh launch) or becomes ``--resume`` (requeued)."""
DEFAULT_TIME_WARNING_S = 90
"""``sbatch --continue``: seconds before the time limit that Slurm warns the job (SIGUSR1)."""


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
                     help="nodes to allocate (default: what the placement needs: one per task, or tasks / "
                          "--tasks-per-node)")
    own.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default)")
    own.add_argument("--time-limit", default=None, metavar="TIME",
                     help="Slurm time limit, e.g. 1:00:00 (default: the deadline + 5 min when --deadline is given, "
                     "else the partition's)")
    own.add_argument("--no-requeue", action="store_true",
                     help="do not let Slurm requeue the job (default: #SBATCH --requeue and --open-mode=append, and "
                     "a requeued job continues its run with launch --resume slurm-<job id>)")
    own.add_argument("--time-warning", type=int, default=None, metavar="S",
                     help=f"with --continue: Slurm sends SIGUSR1 S seconds before the time limit (default "
                     f"{DEFAULT_TIME_WARNING_S}; at least --preemption-grace; Slurm may send it up to 30 s earlier)")
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
    none unless named: :func:`orchestrator.resources.placement.place` without an inventory)."""
    counts = [place(spec, None).of(t).count for t in spec.tasks()]
    per = tasks_per_node or 1
    return max((sum(counts[i:i + per]) for i in range(0, len(counts), per)), default=0)


def render_script(spec: JobSpec, launch_args: list[str], program: list[str], *, nodes: int, partition: str | None,
                  time_limit: str | None, workdir: str, python: str, runs_dir: str, gpus: int = 0,
                  run_id: str | None = None, requeue: bool = True, time_warning_s: int | None = None) -> str:
    """The batch script's text (see the module docstring).

    Args:
        gpus: ``--gpus-per-node`` (:func:`gpus_per_node`), 0 for none.
        run_id: the run's id (default ``slurm-$SLURM_JOB_ID``, expanded by the script).
        requeue: ``#SBATCH --requeue`` and ``--open-mode=append``, and a requeued job resumes its
            run; False: ``--no-requeue``.
        time_warning_s: ``#SBATCH --signal=B:USR1@S`` (``--continue``); None: no warning.
    """
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
    if requeue:
        lines += ["#SBATCH --requeue", "#SBATCH --open-mode=append"]
    else:
        lines.append("#SBATCH --no-requeue")
    if time_warning_s is not None:
        lines.append(f"#SBATCH --signal=B:USR1@{time_warning_s}")
    command = shlex.join([python, "-m", "orchestrator", "launch", "--backend", "slurm", "--plain", *launch_args])
    tail = " -- " + shlex.join(program) if program else ""
    lines += [
        "set -eu",
        f"mkdir -p {shlex.quote(runs_dir)}",
        f"cd {shlex.quote(workdir)}",
        f"run_id={shlex.quote(run_id)}" if run_id else 'run_id="slurm-${SLURM_JOB_ID}"',
        "# exec: Slurm's signals to the batch shell (SIGTERM: scancel, the time limit, a preemption's end of",
        "# grace; SIGUSR1: the time limit's warning) reach the orchestrator itself, which saves and stops every task",
    ]
    if requeue:
        lines += [
            "# requeued (a preemption, or launch --continue before the time limit): the next life of the same run",
            f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ] && [ -e {shlex.quote(runs_dir)}/"$run_id"/plan.json ]; then',
            ('    echo "Slurm job ${SLURM_JOB_ID} requeued (SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT}): '
             'continuing run $run_id"'),
            f'    exec {command} --resume "$run_id"{tail}',
            "fi",
        ]
    lines += [f'exec {command} --run-id "$run_id"{tail}', ""]
    return "\n".join(lines)


def _time_limit(deadline_s: float | None) -> str | None:
    if deadline_s is None:
        return None
    minutes = math.ceil(deadline_s / 60) + 5
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def _time_warning(args: argparse.Namespace) -> int | None:
    """``--signal=B:USR1@S``'s S under ``--continue`` (None without it).

    Raises:
        SpecError: ``--time-warning`` without ``--continue``, out of range or shorter than the
            save's grace; ``--continue`` with ``--no-requeue``; ``--resume``.
    """
    if not args.continue_run:
        if args.time_warning is not None:
            raise SpecError("time-warning", args.time_warning, "is the warning of --continue", "add --continue")
        return None
    if args.no_requeue:
        raise SpecError("continue", True, "requeues the job before its time limit, --no-requeue forbids that",
                        "drop --no-requeue or --continue")
    warning = DEFAULT_TIME_WARNING_S if args.time_warning is None else args.time_warning
    if not args.preemption_grace <= warning <= 65535:  # Slurm's --signal takes at most 0xffff s
        raise SpecError("time-warning", warning, f"must be in [--preemption-grace ({args.preemption_grace:g} s), "
                        "65535] seconds: the save after the warning gets the grace", "e.g. --time-warning 90")
    return warning


def run_sbatch(args: argparse.Namespace) -> int:
    """Write the batch script. Returns 0 (2 on bad input, raised as SpecError)."""
    if args.backend not in ("local", "slurm"):  # local: argparse's default, i.e. not given
        raise SpecError("backend", args.backend, "a batch script runs the slurm backend", "leave out --backend")
    if args.resume is not None:
        raise SpecError("resume", args.resume, "a batch script resumes its run by itself when Slurm requeues it",
                        "drop --resume")
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
    warning = _time_warning(args)
    raw = list(getattr(args, "raw_argv", []) or [])
    text = render_script(spec, launch_argv(raw), program, nodes=nodes, partition=args.partition,
                         time_limit=args.time_limit or _time_limit(spec.supervision.deadline_s),
                         workdir=os.getcwd(), python=sys.executable, runs_dir=str(Path(args.runs_dir).resolve()),
                         gpus=gpus_per_node(spec, args.tasks_per_node), run_id=args.run_id,
                         requeue=not args.no_requeue, time_warning_s=warning)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    # Slurm opens the job's output file there before the script runs
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    target = Path(args.output)
    if target.parent and not target.parent.is_dir():
        raise SpecError("output", args.output, f"{target.parent} is not a directory",
                        "write the script into an existing directory")
    target.write_text(text, encoding="utf-8")
    target.chmod(0o755)
    gpus = gpus_per_node(spec, args.tasks_per_node)
    per_node = f", {gpus} GPU(s) per node" if gpus else ""
    print(f"wrote {target}: {nodes} node(s), {len(spec.tasks())} task(s){per_node}; submit it with: sbatch {target}")
    return 0
