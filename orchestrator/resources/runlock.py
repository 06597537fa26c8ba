"""One life of a run at a time: the run directory's lock (``runs/<run-id>/.lock``).

The orchestrator that runs a life of a run holds an exclusive ``flock(2)`` on the run
directory's ``.lock`` file for as long as the life runs, with its pid written in the file. A
second ``launch --resume RUN`` (or a second launch with the same ``--run-id``) finds the lock
held and is refused at once: exit 2, one line naming the pid that holds it, nothing started.
The kernel drops a ``flock`` when its holder's last descriptor closes (its process ended, even
by SIGKILL), so a lock left by a dead orchestrator is simply taken over by the next life: no
stale-lock check by pid is needed (and none can race). The file is opened close-on-exec (as
every file Python opens), so no task process inherits the lock.

Without it two resumes started together both passed the "is its orchestrator alive?" check
(``endpoint.json`` is written once the tasks have started) and ran in one directory, or the
second died with ``FileExistsError`` on ``endpoint.json`` (issue 36).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from orchestrator.errors import SpecError
from orchestrator.rundir import LOCK_FILE, RunDir

__all__ = ["LOCK_FILE", "RunLock", "create_and_hold", "exists", "hold", "holder", "let_go", "refusal"]


class RunLock:
    """The held lock of one run directory (release it with :meth:`release`, or end the process)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (the file stays: the next life takes it over). Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def holder(run_dir: RunDir) -> int | None:
    """The pid of the orchestrator whose life holds ``run_dir`` now; None when nobody does.

    Tested by taking a shared lock for a moment (never kept), so it is exact: the pid in a file
    left by a dead orchestrator is not reported.
    """
    path = run_dir.lock
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _pid_in(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0)
    except (OSError, ValueError):
        return 0


def refusal(run_dir: RunDir, pid: int, field: str) -> SpecError:
    """The one line of a launch refused because ``pid`` runs a life of the run (exit 2)."""
    who = f"pid {pid}" if pid > 0 else "another orchestrator"
    return SpecError(field, run_dir.run_id, f"a life of this run is running in {run_dir.path} ({who} holds its lock)",
                     f"watch it with `orchestrator status {run_dir.run_id}`, or wait for it to end")


def hold(run_dir: RunDir, field: str = "resume") -> RunLock:
    """Take the lock of an existing run directory for this process's life of the run.

    Args:
        run_dir: the run (its directory exists).
        field: the flag named when refused (``resume`` or ``run-id``).

    Returns:
        The held lock, with this process's pid written in the file.

    Raises:
        SpecError: another live orchestrator holds it (its pid in the message).
    """
    path = run_dir.lock
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _pid_in(fd)
        os.close(fd)
        raise refusal(run_dir, pid, field) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunLock(path, fd)


def create_and_hold(run_dir: RunDir) -> RunLock:
    """Create a new run's directory and take its lock (one atomic ``mkdir``: of two launches
    with the same ``--run-id``, one makes it).

    Raises:
        SpecError: naming ``run-id``: the directory exists (with the pid of the orchestrator
            whose life runs there, when one does).
    """
    try:
        run_dir.path.mkdir(parents=True)
    except FileExistsError:
        raise exists(run_dir) from None
    return hold(run_dir, "run-id")


def exists(run_dir: RunDir) -> SpecError:
    """The one line of a new launch whose ``--run-id`` names an existing run directory (with the
    pid of the orchestrator whose life runs there, when one does)."""
    pid = holder(run_dir)
    if pid is not None:
        return refusal(run_dir, pid, "run-id")
    return SpecError("run-id", run_dir.run_id, f"{run_dir.path} already exists",
                     f"pick another --run-id, continue it with --resume {run_dir.run_id}, or remove it")


def let_go(lock: RunLock | None, created: bool) -> None:
    """Undo :func:`hold` / :func:`create_and_hold` of a launch that failed before it started:
    release the lock, and remove the directory it ``created`` (it holds only the lock file then)."""
    if lock is None:
        return
    lock.release()
    if created:
        lock.path.unlink(missing_ok=True)
        try:
            lock.path.parent.rmdir()
        except OSError:  # something else was written there: leave it
            pass
