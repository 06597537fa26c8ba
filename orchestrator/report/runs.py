"""Run directories after the fact: find a run, read how it stands, list them.

A run directory (``runs/<run-id>/``) holds ``plan.json`` from the start, ``endpoint.json``
(mode 0600: the running orchestrator's address, job token and web URL) while the job runs, and
``summary.json`` once it has ended. :func:`run_status` reads the live status over gRPC while
the job runs, the summary after; a run whose orchestrator is gone without a summary (it was
SIGKILLed) reads as ``Lost``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import SpecError
from orchestrator.rundir import ENDPOINT_FILE, PLAN_FILE, SUMMARY_FILE, RunDir, read_json  # noqa: F401

if TYPE_CHECKING:  # grpc is imported by the calls that talk to a job, not by a launch (orchestrator.resume)
    from orchestrator.health.client import EndpointClient


def is_run_dir(path: Path) -> bool:
    """A directory the orchestrator made for a run (it has ``plan.json``)."""
    return (path / PLAN_FILE).is_file()


def run_dirs(runs_dir: str | Path) -> list[Path]:
    """Every run directory under ``runs_dir``, oldest first (by the time ``plan.json`` was written)."""
    root = Path(runs_dir)
    try:
        found = [p for p in root.iterdir() if p.is_dir() and is_run_dir(p)]
    except OSError:
        return []
    return sorted(found, key=lambda p: ((p / PLAN_FILE).stat().st_mtime, p.name))


def resolve_run(run: str | None, runs_dir: str | Path = "runs") -> Path:
    """The run directory ``run`` names: a path to a run directory, a run id under ``runs_dir``,
    or (None) the latest run under ``runs_dir``.

    Raises:
        SpecError: naming ``RUN`` (or ``runs-dir``) when there is no such run.
    """
    if run is None:
        runs = run_dirs(runs_dir)
        if not runs:
            raise SpecError("runs-dir", str(runs_dir), "holds no run", "launch one, or point --runs-dir at your runs")
        return runs[-1]
    path = Path(run)
    for candidate in (path, Path(runs_dir) / run):
        if candidate.is_dir() and is_run_dir(candidate):
            return candidate.resolve()
    known = [p.name for p in run_dirs(runs_dir)][-3:]
    hint = (f"latest runs under {runs_dir}: {', '.join(known)}" if known
            else f"no run under {runs_dir}; pass --runs-dir DIR")
    raise SpecError("RUN", run, "is neither a run directory nor a run id", hint)


@dataclass(frozen=True)
class Endpoint:
    """Where a running job answers (``endpoint.json``).

    Attributes:
        address: ``host:port`` of its gRPC endpoint.
        token: the job token.
        pid: the orchestrator's pid.
        web_url: its page's URL with the web token, when it serves one.
        tls_dir: the run's certificates (the user's client certificate among them); None: the
            run is ``--insecure`` (plaintext).
    """

    address: str
    token: str
    pid: int
    web_url: str | None
    tls_dir: str | None = None

    def client(self, timeout_s: float = 3.0) -> EndpointClient:
        from orchestrator.health.client import EndpointClient
        from orchestrator.tls import USER, files_for

        return EndpointClient(self.address, self.token, timeout_s, tls=files_for(self.tls_dir, USER))


def read_endpoint(run_dir: Path) -> Endpoint | None:
    """The run's endpoint, None when it has none (never launched with one, or ended)."""
    data = read_json(run_dir / ENDPOINT_FILE)
    if not data or "address" not in data or "token" not in data:
        return None
    return Endpoint(str(data["address"]), str(data["token"]), int(data.get("pid") or 0), data.get("web_url"),
                    data.get("tls_dir") or None)


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one we may not signal counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lost_status(run_dir: Path, why: str) -> dict[str, Any]:
    """A status for a run that has neither a live orchestrator nor a summary.

    Its ``elapsed_s`` runs from the plan's writing (the launch) to the last file written in the
    run directory (a task's log line, a checkpoint): how long the run was seen alive.
    """
    plan = read_json(run_dir / PLAN_FILE) or {}
    spec = plan.get("spec") or {}
    tasks = [{"task": t.get("task", "?"), "state": "Unknown", "restarts": 0} for t in plan.get("tasks") or []]
    status = {"run_id": run_dir.name, "run_dir": str(run_dir), "status": "Lost", "live": False, "reason": why,
              "strategy": spec.get("strategy", plan.get("strategy", "?")), "tasks": tasks, "exit_code": None}
    try:
        started = (run_dir / PLAN_FILE).stat().st_mtime
    except OSError:
        return status
    last = started
    for path in run_dir.rglob("*"):
        try:
            if path.is_file():
                last = max(last, path.stat().st_mtime)
        except OSError:
            continue
    status["elapsed_s"] = round(last - started, 3)
    status["reason"] = f"{why}; last written to {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(last))}"
    return status


def run_status(run_dir: Path, history: bool = False, timeout_s: float = 3.0) -> dict[str, Any]:
    """How the run stands: over gRPC while its orchestrator runs, else from ``summary.json``
    (``live`` False), else a ``Lost`` status saying why.

    With ``history``, also the charted series and events (``history``): live from the
    orchestrator, or from ``history.json`` of a finished run.
    """
    from orchestrator.health.client import EndpointError

    endpoint = read_endpoint(run_dir)
    if endpoint is not None:
        try:
            with endpoint.client(timeout_s) as client:
                status = client.status(history=history)
            if status:
                return status
        except EndpointError as exc:
            if exc.code == "UNAUTHENTICATED":
                return lost_status(run_dir, f"the orchestrator refused the token in {run_dir / ENDPOINT_FILE}")
    summary = read_json(run_dir / SUMMARY_FILE)
    if summary is not None:
        summary["live"] = False
        if history:
            summary["history"] = read_json(RunDir(run_dir).history) or {"seq": 0, "samples": [], "events": []}
        return summary
    if endpoint is not None and alive(endpoint.pid):
        return lost_status(run_dir, f"the orchestrator (pid {endpoint.pid}) runs but does not answer "
                                    f"at {endpoint.address}")
    if endpoint is not None:
        return lost_status(run_dir, f"the orchestrator (pid {endpoint.pid}) is gone and wrote no summary (killed?)")
    return lost_status(run_dir, "no summary.json and no endpoint.json: the orchestrator is gone (killed?)")
