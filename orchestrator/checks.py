"""The checks of a job that need nothing started: the one place each is done, for both
``launch`` and ``launch --dry-run`` (and ``--resume``). A failure is a
:class:`~orchestrator.errors.SpecError` naming the field: one line, exit 2, nothing started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from orchestrator.backends import backend_class
from orchestrator.backends.base import Capability
from orchestrator.backends.host import check_memory
from orchestrator.errors import SpecError
from orchestrator.plan import Plan
from orchestrator.spec.faults import Fault, check_lose
from orchestrator.spec.faults import check_tasks as check_fault_tasks
from orchestrator.spec.model import JobSpec


def check_runs_dir(runs_dir: str | Path) -> None:
    """Make sure the runs directory is a writable directory (created when missing).

    Raises:
        SpecError: naming ``runs-dir`` when a file is in the way or it cannot be written.
    """
    path = Path(runs_dir).resolve()
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise SpecError("runs-dir", str(runs_dir), f"{existing} is not a directory",
                        "pick a directory, e.g. --runs-dir runs")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError("runs-dir", str(runs_dir), f"cannot be created ({exc.strerror})",
                        "pick a directory you can write to") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpecError("runs-dir", str(runs_dir), f"{path} is not writable", "pick a directory you can write to")




def check_run_id(run_id: str | None, field: str = "run_id") -> None:
    """The run-id rule: a run id names a directory under the runs directory, so it must be a
    plain, visible directory name (no ``/``, not empty, not starting with ``.``). None (a new
    id is drawn) passes.

    Args:
        run_id: the id given, or None.
        field: how the caller spells it in the message (``run-id`` for the CLI's flag).

    Raises:
        SpecError: naming ``field`` and the fix.
    """
    if run_id is not None and (not run_id or "/" in run_id or run_id.startswith(".")):
        example = f"--{field} digits-1" if "-" in field else f"{field}='digits-1'"
        raise SpecError(field, run_id, "must be a plain directory name", f"e.g. {example}")


def check_job(spec: JobSpec, *, backend: str, faults: Sequence[Fault] = (),
              commands: Mapping[str, Sequence[str]] | None = None, run_id: str | None = None) -> None:
    """Every check of a job that needs nothing started: the one place each is done, for
    both ``launch`` and ``launch --dry-run``.

    Raises:
        SpecError: a bad run id (:func:`check_run_id`), a fault that names a task the job does
            not have, a ``lose`` fault of a task that is not an elastic job's worker, or (a
            backend whose tasks are this machine's processes, built-in program)
            TensorFlow processes that cannot fit in this machine's memory.
    """
    check_run_id(run_id)
    engine = backend_class(backend)
    check_fault_tasks(list(faults), spec.tasks())
    check_lose(list(faults), spec.elastic is not None)
    if commands and spec.supervision.spares:
        check_spare_program(commands, spec.supervision.spares, backend)
    for fault in faults:
        if commands and fault.kind in ("hang", "raise") and fault.trigger == "time":
            raise SpecError("inject-fault", f"{fault.task}:{fault.kind}@time={fault.at:g}",
                            f"a {fault.kind} cannot be caused from outside a user's program",
                            f"use {fault.kind}@step=N (fires in report() / keras_callback()), or stop@time=S to "
                            "freeze the task")
    if engine.supports(Capability.HOST_PROCESSES) and not commands:
        check_memory(spec)


SPARE_PROBE = ("import importlib.util, orchestrator.task.spare\n"
               "if importlib.util.find_spec('tensorflow') is None: raise SystemExit('No module named tensorflow')")
"""Run by a user's interpreter before ``--spares N`` is accepted: it can run the spare and find TensorFlow."""


def check_spare_program(commands: Mapping[str, Sequence[str]], spares: int, backend: str) -> None:
    """``--spares N`` with a user's program: it must be ``python SCRIPT ARGS`` or ``python -m
    MODULE ARGS`` (:func:`orchestrator.spec.program.python_program`), and (local backend) its
    interpreter must run the orchestrator's spare: a spare is that interpreter, started with
    ``-m orchestrator.task.spare``, importing TensorFlow before the program is known.
    The probe runs only where the tasks are this machine's processes (:attr:`Capability.HOST_PROCESSES`).

    Raises:
        SpecError: naming ``--spares``, the program and the fix.
    """
    from orchestrator.spec.program import python_program

    argv = commands.get("worker") or commands.get("chief") or next(iter(commands.values()))
    python_program(argv, spares)
    if not backend_class(backend).supports(Capability.HOST_PROCESSES):  # the interpreter is not this machine's
        return
    try:
        probe = subprocess.run([argv[0], "-c", SPARE_PROBE], capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL)
        problem = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1] if probe.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    if problem:
        raise SpecError("spares", spares, f"--spares: {argv[0]} cannot run the orchestrator's spare ({problem[-200:]})",
                        f"run the program with the orchestrator's Python: -- {sys.executable} "
                        f"{' '.join(argv[1:3] if argv[1] == '-m' else argv[1:2])} ..., "
                        "or drop --spares")


ENV_STRING_MAX_BYTES = 32 * 4096
"""Linux's limit on one environment string, ``NAME=value`` and its NUL (``MAX_ARG_STRLEN``,
32 pages): ``execve`` of a process given a longer one fails with E2BIG, in a container or a
Slurm step alike."""


def check_environment(plan: Plan) -> None:
    """Every task's variables fit the kernel's limit on one environment string
    (:data:`ENV_STRING_MAX_BYTES`). TF_CONFIG grows with the cluster: ~18 bytes per task at
    ``127.0.0.1:port`` addresses, so past ~7,000 tasks no task of the job could be started
    (TensorFlow reads TF_CONFIG from the environment only). O(task types), not O(tasks).

    Raises:
        SpecError: naming the variable, its size, the limit and the fix.
    """
    last = {tp.task.task_type: tp for tp in plan.tasks}  # the longest index of each type
    for tp in last.values():
        for name in tp.env:
            size = len(name) + 1 + len(tp.env[name].encode()) + 1
            if size <= ENV_STRING_MAX_BYTES:
                continue
            tasks = len(plan.tasks)
            fits = int(tasks * (ENV_STRING_MAX_BYTES - 100) / size)
            raise SpecError("workers", plan.spec.workers,
                            f"the {name} of this {tasks}-task job is {size} bytes, past Linux's limit of "
                            f"{ENV_STRING_MAX_BYTES} bytes on one environment variable (MAX_ARG_STRLEN: no task "
                            "could start, execve fails with E2BIG)",
                            f"split it into jobs of at most ~{fits} tasks (or use shorter host names)")
