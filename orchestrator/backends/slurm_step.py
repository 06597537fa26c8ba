"""The Slurm backend's data: a task attempt as a job step (:class:`SlurmStep`), its bounds, and
``srun``'s exit status as a task's (:func:`exit_code_of`). Its options
(:class:`~orchestrator.backends.options.SlurmOptions`) are declared with every backend's, in
:mod:`orchestrator.backends.options`; the backend itself: :mod:`orchestrator.backends.slurm`."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field

from orchestrator.backends.base import TaskHandle

LOST_GRACE_S = 3.0
"""Seconds a step may take to end after SIGKILL before its node counts as lost."""
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
        job_id: the Slurm job it is a step of when not the run's own allocation (an extension
            allocation's, :mod:`orchestrator.backends.slurm_extend`); "" for the run's own.
    """

    popen: subprocess.Popen[bytes] | None = None
    node: str = ""
    step_name: str = ""
    step_id: str = ""
    killed_at: float | None = None
    lost: bool = False
    job_id: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
