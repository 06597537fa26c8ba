"""The local backend's warm spares: interpreters that imported a task's program and wait for its
assignment (:mod:`orchestrator.task.spare`), so that a restart skips TensorFlow's import."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from orchestrator import env as envvars
from orchestrator.backends.base import SpareInfo, SpareRequest
from orchestrator.backends.host import TASK_RSS_BYTES

log = logging.getLogger("orchestrator.backends.local")

MAX_SPARE_DEATHS = 3
"""Warm spares that may end before they are used (an import that fails, a program that cannot
start) before the backend stops starting new ones for the job."""


@dataclass(eq=False)
class _Spare:
    """A warm spare process and what became of it (see :class:`SpareInfo`)."""

    popen: subprocess.Popen[bytes]
    argv: tuple[str, ...]
    ready_file: Path
    state: str = "ready"
    task: str = ""

    @property
    def imported(self) -> bool:
        """Its imports are done (:mod:`orchestrator.task.spare` created its ready file)."""
        return self.ready_file.exists()


class SparePool:
    """Every spare started for one job, used or not (:meth:`keep`, :meth:`take`, :meth:`close`)."""

    def __init__(self, wrap: Callable[[list[str]], list[str]] = list) -> None:
        self._wrap = wrap
        """Makes a spare's argv (the local backend's: into the run's network namespace with
        ``--isolate-network``, :mod:`orchestrator.backends.netns`)."""
        self._spares: list[_Spare] = []
        self._given_up = False

    def keep(self, request: SpareRequest) -> None:
        """Keep ``request.count`` spares ready (:mod:`orchestrator.task.spare`; for a user's
        program ``request.command``, the spare mode of :mod:`orchestrator.task.execwrap`), fewer
        when this machine's available memory cannot hold them (~700 MiB each, :data:`TASK_RSS_BYTES`,
        one task's worth kept free). Each spare is in its own session, its stdin a pipe: the
        assignment, or its end; it imports at the lowest CPU priority (``SCHED_IDLE``) and
        creates its ready file ``spare-N.ready`` in ``request.log_dir`` once it can take a task."""
        for spare in self._spares:
            if spare.state == "ready" and spare.popen.poll() is not None:
                spare.state = "died"
                log.warning("spare pid %d ended before it was used (exit %s)", spare.popen.pid, spare.popen.returncode)
        died = sum(1 for s in self._spares if s.state == "died")
        if died >= MAX_SPARE_DEATHS:  # a spare that cannot start (an import error): stop trying
            if not self._given_up:
                self._given_up = True
                log.warning("%d warm spares ended before they were used; no more spares for this job (see %s)",
                            died, request.log_dir)
            return
        ready = [s for s in self._spares if s.state == "ready" and s.argv == request.argv]
        missing = request.count - len(ready)
        if missing <= 0:
            return
        fits = int(psutil.virtual_memory().available // TASK_RSS_BYTES) - 1  # keep one task's worth free
        if fits <= 0:
            return
        env = {**os.environ, **request.env, envvars.SPARE_PRELOAD: ",".join(request.preload)}
        command = list(request.command)
        if not command:  # a built-in program, python -m MODULE: the spare imports it and runs it
            command = [request.argv[0], "-m", "orchestrator.task.spare"]
            env[envvars.SPARE_MODULE] = request.argv[2]
        request.log_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(min(missing, fits)):
            number = len(self._spares)
            ready_file = request.log_dir / f"spare-{number}.ready"
            with open(request.log_dir / f"spare-{number}.log", "ab") as out:
                try:
                    popen = subprocess.Popen(self._wrap(command),
                                             env={**env, envvars.SPARE_READY_FILE: str(ready_file)},
                                             stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True,
                                             close_fds=True)
                except OSError as exc:
                    log.warning("cannot start a spare: %s", exc)
                    return
            self._spares.append(_Spare(popen, tuple(request.argv), ready_file))

    def take(self, argv: tuple[str, ...]) -> _Spare | None:
        """A spare for ``argv`` whose imports are done; None when there is none: a cold start
        then, since a spare still importing does so at the lowest CPU priority
        (``SCHED_IDLE``) and would be starved by the very restart it stands in for."""
        for spare in self._spares:
            if spare.state == "ready" and spare.argv == tuple(argv):
                if spare.popen.poll() is not None:
                    spare.state = "died"
                elif spare.imported:
                    return spare
        return None

    def infos(self) -> list[SpareInfo]:
        """Every spare started for this job and what became of it."""
        return [SpareInfo(s.popen.pid, s.state, s.task) for s in self._spares]

    def close(self) -> None:
        """Stop the spares that were not used (end of stdin first, then SIGKILL to their group)."""
        for spare in self._spares:
            if spare.state != "ready":
                continue
            spare.state = "stopped"
            try:
                os.killpg(spare.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                spare.popen.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                log.warning("spare pid %d survived SIGKILL", spare.popen.pid)
            if spare.popen.stdin is not None:
                try:
                    spare.popen.stdin.close()
                except OSError:
                    pass
