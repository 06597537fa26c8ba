"""The run directory's layout: the one module that knows where each file of a run lives.

``runs/<run-id>/`` holds::

    plan.json            the plan (written once by the first life; a resumed run keeps it)
    run.json             the run record of every orchestrator lifetime (lives, restart budget,
                         failures, attempt counter), rewritten atomically as the job goes
    endpoint.json        mode 0600, while an orchestrator runs: its address, token, web URL, pid
    .lock                held (``flock``) by the orchestrator of the life that runs here, its pid
                         inside (:mod:`orchestrator.resources.runlock`: one life at a time)
    summary.json         how the job ended (rewritten at the end of every life)
    history.json         the progress series and events the web page charts
    cluster.json         tasks that registered their own addresses (Slurm): the addresses used
                         (:mod:`orchestrator.backends.addresses`)
    attempt-<n>/<task>/  one attempt of one task: stdout.log, stderr.log, error.json, stacks.txt,
                         its scratch and marker files (:mod:`orchestrator.env`)
    spares/              the warm spares' logs
    backup/              BackupAndRestore's directory, shared by the job (what a resume restores)
    model/               the chief's exported SavedModel
    tensorboard/         the chief's summaries

Everything else builds paths through :class:`RunDir`; no other module joins these names.
It lives in the shared layer: the control plane and the task side both read it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import jsontext
from orchestrator.spec.model import TaskId

PLAN_FILE = "plan.json"
RECORD_FILE = "run.json"
ENDPOINT_FILE = "endpoint.json"
LOCK_FILE = ".lock"
SUMMARY_FILE = "summary.json"
HISTORY_FILE = "history.json"
CLUSTER_FILE = "cluster.json"
ERROR_FILE = "error.json"
STACKS_FILE = "stacks.txt"


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory (nothing is created by building one).

    Attributes:
        path: the run directory, ``runs/<run-id>`` (absolute when built by the orchestrator).
    """

    path: Path

    @classmethod
    def of(cls, runs_dir: str | Path, run_id: str) -> "RunDir":
        """``runs_dir/run_id``, resolved."""
        return cls(Path(runs_dir).resolve() / run_id)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def plan(self) -> Path:
        return self.path / PLAN_FILE

    @property
    def record(self) -> Path:
        return self.path / RECORD_FILE

    @property
    def endpoint(self) -> Path:
        return self.path / ENDPOINT_FILE

    @property
    def lock(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def history(self) -> Path:
        return self.path / HISTORY_FILE

    @property
    def cluster(self) -> Path:
        return self.path / CLUSTER_FILE

    @property
    def spares(self) -> Path:
        return self.path / "spares"

    @property
    def backup(self) -> Path:
        return self.path / "backup"

    @property
    def model(self) -> Path:
        return self.path / "model"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    def attempt(self, attempt: int) -> Path:
        """``attempt-<n>``: every task's directory of attempt ``n``."""
        return self.path / f"attempt-{attempt}"

    def task(self, attempt: int, task: TaskId) -> Path:
        """``attempt-<n>/<task>``: logs, error file and scratch of one attempt of one task."""
        return self.attempt(attempt) / task.name

    def attempts(self) -> list[int]:
        """The attempt numbers that have a directory, ascending."""
        try:
            names = [p.name for p in self.path.iterdir() if p.is_dir() and p.name.startswith("attempt-")]
        except OSError:
            return []
        return sorted(int(n.removeprefix("attempt-")) for n in names if n.removeprefix("attempt-").isdigit())


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (a temporary file, then ``os.replace``):
    a reader sees the old file or the new one, never half of one. Returns ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(jsontext.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, None when missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file only its owner can read (mode 0600 from its creation), whole:
    written beside it, then linked in, so a reader that polls for it (``status``, ``stop``) never
    reads it half written.

    Raises:
        FileExistsError: when ``path`` exists.
    """
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.link(partial, path)  # fails when path exists, as O_EXCL would
    finally:
        partial.unlink(missing_ok=True)
