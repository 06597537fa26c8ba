"""The Slurm backend's data: a task attempt as a job step (:class:`SlurmStep`), the backend's
options (:class:`SlurmOptions`), its bounds, and ``srun``'s exit status as a task's
(:func:`exit_code_of`). The backend itself: :mod:`orchestrator.backends.slurm`."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from typing import Mapping

from orchestrator.backends.base import TaskHandle
from orchestrator.backends.options import check_orphan_timeout, option

LOST_GRACE_S = 3.0
"""Seconds a step may take to end after SIGKILL before its node counts as lost."""
ORPHAN_TIMEOUT_S = 30.0
"""A task that cannot reach its orchestrator this long after it could kills itself."""
PROBE_TIMEOUT_S = 1.0
"""TCP connect timeout when probing a node's slurmd, seconds."""
COMMAND_TIMEOUT_S = 15.0
"""Bound on every Slurm client command (squeue, scancel, scontrol), seconds."""
DEFAULT_SLURMD_PORT = 6818


def exit_code_of(status: int) -> int:
    """``srun``'s exit status as ``Popen.returncode`` would say it for the task: ``128+N`` -> ``-N``."""
    if 128 < status < 128 + 65:
        return -(status - 128)
    return status


@dataclass(eq=False)
class SlurmStep(TaskHandle):
    """A task attempt running as a job step (``pid``: the local ``srun``).

    Attributes:
        popen: the ``srun`` process.
        node: the node the step runs on.
        step_name: its ``--job-name``, unique per run, task and attempt.
        step_id: ``JOB.STEP`` once known ("" before).
        killed_at: monotonic seconds of the SIGKILL sent to the step (None before).
        lost: the step did not end after SIGKILL; its ``srun`` was killed here.
    """

    popen: subprocess.Popen[bytes] | None = None
    node: str = ""
    step_name: str = ""
    step_id: str = ""
    killed_at: float | None = None
    lost: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class SlurmOptions:
    """Options of the slurm backend (each a ``launch`` flag unless said otherwise).

    Attributes:
        tasks_per_node: most tasks on one node (default: as few as the tasks need).
        health_host: address of this machine the nodes reach the health endpoint at (default:
            the source address of the route to the first node).
        environ: the environment to read ``SLURM_*`` from (default ``os.environ``; Python API only).
        orphan_timeout_s: seconds a task keeps running once it cannot reach its orchestrator
            (its heartbeat watchdog: a step on another node gets no parent-death signal), then it
            kills itself; > 0.

    Raises:
        SpecError: ``orphan_timeout_s`` is not > 0.
    """

    tasks_per_node: int | None = field(default=None, metadata=option(
        "most tasks on one node (default: one per node when there are enough nodes, else as few as fit)",
        metavar="N"))
    health_host: str | None = field(default=None, metadata=option(
        "this machine's address the nodes reach the health endpoint at (default: the source address of the route "
        "to the first node; never a wildcard)", metavar="ADDRESS"))
    environ: Mapping[str, str] | None = field(default=None, metadata=option(None))
    orphan_timeout_s: float = field(default=ORPHAN_TIMEOUT_S, metadata=option(
        f"seconds a task keeps running once its orchestrator is unreachable, then it stops itself (default "
        f"{ORPHAN_TIMEOUT_S:g})", metavar="SECONDS"))

    def __post_init__(self) -> None:
        check_orphan_timeout(self.orphan_timeout_s)
