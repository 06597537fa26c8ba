"""The ``sbatch`` of a one-node extension allocation and what it copies from the run's own job (issue 34
item 5, docs/elastic.md "Slurm: growing back"): :func:`read_base`, :func:`extension_argv`,
:func:`watch_script`, :func:`step_environ`; used by :mod:`orchestrator.backends.slurm_extend`.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.backends.slurm_commands import command
from orchestrator.errors import LaunchError

log = logging.getLogger("orchestrator.backends.slurm")

NAME_SUFFIX = ":extend"
"""An extension's job name: the run id and this."""
_INPUT_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES",
               "SLURM_NNODES", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_JOB_CPUS_PER_NODE")


@dataclass(frozen=True)
class BaseJob:
    """What an extension copies from the run's own allocation (``squeue``, ``scontrol show job``).

    Attributes:
        job_id: the run's job (``SLURM_JOB_ID``).
        partition: its partition ("" when unknown: Slurm's default).
        time_left: its time left as ``squeue %L`` says it (``1-02:03:04``, ``9:58``; "" when unlimited).
        account, qos: its account and QoS ("" for none).
        cpus_per_node: the CPUs it holds on its first node (``SLURM_JOB_CPUS_PER_NODE``; 0 when unknown).
        gres: its generic resources per node (``TresPerNode``, e.g. ``gres:gpu:2``; "" for none).
    """

    job_id: str
    partition: str = ""
    time_left: str = ""
    account: str = ""
    qos: str = ""
    cpus_per_node: int = 0
    gres: str = ""


def _given(value: str) -> str:
    value = value.strip()
    return "" if value in ("(null)", "N/A", "UNLIMITED", "NOT_SET", "INVALID", "None") else value


def read_base(environ: Mapping[str, str], job_id: str) -> BaseJob:
    """The run's own job as an extension copies it (one ``squeue``, one ``scontrol show job``);
    what cannot be read is left to Slurm's defaults."""
    cpus = environ.get("SLURM_JOB_CPUS_PER_NODE", "").split("(", 1)[0].split(",", 1)[0]
    fields: dict[str, str] = {}
    part = left = account = qos = ""
    try:
        queued = command(dict(environ), "squeue", "-h", "-j", job_id, "-o", "%P|%L|%a|%q")
        if queued.returncode == 0 and queued.stdout.strip():
            part, left, account, qos = (queued.stdout.strip().splitlines()[0].split("|") + ["", "", "", ""])[:4]
        shown = command(dict(environ), "scontrol", "show", "job", "-o", job_id)
        for item in shown.stdout.split():
            key, sep, value = item.partition("=")
            if sep and key not in fields:
                fields[key] = value
    except LaunchError as exc:
        log.warning("%s", exc)
    gres = fields.get("TresPerNode", "")
    return BaseJob(job_id, partition=_given(part), time_left=_given(left), account=_given(account),
                   qos=_given(qos), cpus_per_node=int(cpus) if cpus.isdigit() else 0,
                   gres=",".join(g.removeprefix("gres:").removeprefix("gres/") for g in _given(gres).split(",") if g))


def watch_script(job_id: str) -> str:
    """The extension's batch script: wait while the run's job ``job_id`` is in ``squeue`` (three
    misses in a row end it, so one slow answer does not), or for ever where the node has no ``squeue``
    (the time limit ends it)."""
    j = shlex.quote(job_id)
    return ("command -v squeue >/dev/null 2>&1 || exec sleep infinity; n=0; while [ $n -lt 3 ]; do "
            f"if squeue -h -j {j} -o %i 2>/dev/null | grep -q .; then n=0; else n=$((n+1)); fi; sleep 5; done")


def extension_argv(base: BaseJob, run_id: str, exclude: Sequence[str]) -> list[str]:
    """``sbatch`` of one extension: one node, none of ``exclude``, the run's partition, time left,
    account, QoS, CPUs and generic resources per node (pure)."""
    argv = ["sbatch", "--parsable", "--nodes=1", "--ntasks=1", f"--job-name={run_id}{NAME_SUFFIX}",
            "--output=/dev/null", "--error=/dev/null"]
    if exclude:
        argv.append(f"--exclude={','.join(sorted(set(exclude)))}")
    for flag, value in (("--partition", base.partition), ("--time", base.time_left), ("--account", base.account),
                        ("--qos", base.qos), ("--gres", base.gres)):
        if value:
            argv.append(f"{flag}={value}")
    if base.cpus_per_node > 1:
        argv.append(f"--cpus-per-task={base.cpus_per_node}")
    return [*argv, f"--wrap={watch_script(base.job_id)}"]


def step_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the run's own allocation's variables that Slurm's commands read as
    input (``sbatch`` and ``srun --jobid`` of another job must not take them)."""
    return {k: v for k, v in environ.items() if k not in _INPUT_VARS}
