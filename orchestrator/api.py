"""The Python API: one job from spec to summary; the CLI's ``launch`` is a thin layer over it.

``dry_run`` builds the plan and starts nothing; ``prepare`` reserves addresses, starts the
health server and writes ``plan.json``; ``run`` supervises to the end, stops the health
server and writes ``summary.json``. ``check_job`` holds the checks both paths share.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from orchestrator.backends import get_backend
from orchestrator.backends.base import Backend
from orchestrator.backends.local import check_memory
from orchestrator.errors import SpecError
from orchestrator.spec.faults import Fault
from orchestrator.spec.faults import check_tasks as check_fault_tasks
from orchestrator.health.server import HealthServer, HeartbeatStore
from orchestrator.plan import Plan, make_plan, new_run_id
from orchestrator.report.summary import build_summary, write_summary
from orchestrator.spec.model import JobSpec, TaskId
from orchestrator.supervisor import JobResult, Supervisor
from orchestrator.supervisor.job import View


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
        raise SpecError("runs-dir", str(runs_dir), f"{existing} is not a directory", "pick a directory, e.g. --runs-dir runs")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError("runs-dir", str(runs_dir), f"cannot be created ({exc.strerror})", "pick a directory you can write to") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpecError("runs-dir", str(runs_dir), f"{path} is not writable", "pick a directory you can write to")


@dataclass
class Job:
    """A prepared job: plan written, ports held, health server up, nothing started yet."""

    plan: Plan
    supervisor: Supervisor
    server: HealthServer
    store: HeartbeatStore


def check_job(spec: JobSpec, *, backend: str, faults: Sequence[Fault] = (),
              commands: Mapping[str, Sequence[str]] | None = None) -> None:
    """Every check of a job that needs nothing started: the one place each is done, for
    both ``launch`` and ``launch --dry-run``.

    Raises:
        SpecError: a fault names a task the job does not have, or (local backend, built-in
            program) the TensorFlow processes cannot fit in this machine's memory.
    """
    check_fault_tasks(list(faults), spec.tasks())
    for fault in faults:
        if commands and fault.kind == "hang" and fault.trigger == "time":
            raise SpecError("inject-fault", f"{fault.task}:hang@time={fault.at:g}",
                            "a hang cannot be caused from outside a user's program",
                            "use hang@step=N (fires in report() / keras_callback()), or stop@time=S to freeze the task")
    if backend == "local" and not commands:
        check_memory(spec)


def _assemble(spec: JobSpec, engine: Backend[Any], addresses: Mapping[TaskId, str], *, run_id: str, run_dir: Path,
              health_address: str, token: str, faults: Sequence[Fault], commands: Mapping[str, Sequence[str]] | None,
              dry_run: bool) -> Plan:
    """The one path from spec, backend and addresses to a plan, for a launch and for a dry run."""
    return make_plan(
        spec,
        addresses,
        run_id=run_id,
        run_dir=run_dir,
        health_address=health_address,
        token=token,
        orchestrator_pid=os.getpid() if engine.parent_death_signal and not dry_run else 0,
        python=engine.python,
        faults=faults,
        commands=commands,
    )


def dry_run(
    spec: JobSpec,
    *,
    runs_dir: str | Path = "runs",
    run_id: str | None = None,
    faults: Sequence[Fault] = (),
    commands: Mapping[str, Sequence[str]] | None = None,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
) -> Plan:
    """The plan ``launch`` would run, with nothing started, bound or created (the health
    address reads ``127.0.0.1:<port>`` and the token is empty).

    Raises:
        SpecError: as :func:`check_job`, or an address the backend cannot use.
    """
    check_job(spec, backend=backend, faults=faults, commands=commands)
    engine = get_backend(backend, **(backend_options or {}))
    run_id = run_id or new_run_id()
    try:
        return _assemble(spec, engine, engine.allocate(spec), run_id=run_id, run_dir=Path(runs_dir).resolve() / run_id,
                         health_address="127.0.0.1:<port>", token="", faults=faults, commands=commands, dry_run=True)
    finally:
        engine.close()


def prepare(
    spec: JobSpec,
    *,
    runs_dir: str | Path = "runs",
    run_id: str | None = None,
    faults: Sequence[Fault] = (),
    commands: Mapping[str, Sequence[str]] | None = None,
    view: View | None = None,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    **supervisor_options: Any,
) -> Job:
    """Plan a job and get everything ready to start it.

    Args:
        spec: validated job spec.
        runs_dir: parent of the run directory.
        run_id: run directory name (default: a new time-stamped id).
        faults: faults to inject.
        commands: argv per task type instead of the built-in programs.
        view: live output (see :mod:`orchestrator.report.live`).
        backend: backend name.
        backend_options: passed to the backend (docker: ``image``, ``base_image``, ...).
        **supervisor_options: passed to :class:`Supervisor` (``stop_timeout_s``, ...).

    Raises:
        SpecError: as :func:`check_job`, or when the run directory exists.
        LaunchError: when ports cannot be reserved or the backend cannot open.
    """
    check_job(spec, backend=backend, faults=faults, commands=commands)
    run_id = run_id or new_run_id()
    run_dir = Path(runs_dir).resolve() / run_id
    if run_dir.exists():
        raise SpecError("run-id", run_id, f"{run_dir} already exists", "pick another --run-id or remove it")
    engine = get_backend(backend, **(backend_options or {}))
    token = secrets.token_urlsafe(24)
    store = HeartbeatStore()
    server = None
    try:
        engine.open(run_id, run_dir)  # docker: engine, image, the job's network
        addresses = engine.allocate(spec)
        check_runs_dir(runs_dir)  # the last check: it creates the runs directory
        server = HealthServer(token, store, engine.release_port, host=engine.health_host,
                              register=engine.register_address).start()
        plan = _assemble(spec, engine, addresses, run_id=run_id, run_dir=run_dir, health_address=server.address, token=token,
                         faults=faults, commands=commands, dry_run=False)
    except BaseException:
        if server is not None:
            server.stop()
        engine.close()
        raise
    run_dir.mkdir(parents=True)
    (run_dir / "plan.json").write_text(json.dumps(plan.to_dict(), indent=2) + "\n", encoding="utf-8")
    supervisor = Supervisor(plan, engine, store, view, **supervisor_options)
    return Job(plan, supervisor, server, store)


def run(job: Job) -> tuple[JobResult, dict[str, Any]]:
    """Supervise the job to its end; returns the result and the summary (also written)."""
    try:
        result = job.supervisor.run()
    finally:
        job.server.stop()
    summary = build_summary(job.supervisor.snapshot())
    write_summary(job.plan.run_dir, summary)
    return result, summary
