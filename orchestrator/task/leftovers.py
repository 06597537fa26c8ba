"""What a user's program leaves behind: the wrapper ends every descendant with the task.

A program may start processes in a session or process group of their own (a tf.data service
dispatcher, a data-loader daemon: ``subprocess.Popen(..., start_new_session=True)``, a double
fork). A signal to the task's process group misses them, and when their parent exits they are
orphans that the kernel gives to init: they would outlive the job. The wrapper of a user's program
(:mod:`orchestrator.task.execwrap`) therefore makes itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4+, ``man 2 PR_SET_CHILD_SUBREAPER``): orphans of
the program are re-parented to the wrapper, not to init, so they remain its descendants, and
:func:`end_descendants` ends them all, in two phases (SIGTERM, then SIGKILL after a grace), when
the program exits or is stopped. Each one ended is a line of
:data:`orchestrator.env.LEFT_BEHIND_FILE` in the task's directory (the report counts them).

psutil is imported only when there is something to end, so the wrapper stays small while it waits.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
from typing import Iterable

from orchestrator import env

PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` option (``linux/prctl.h``): orphaned descendants are re-parented to this process."""

LEFTOVER_GRACE_S = 1.0
"""Seconds what a program left behind gets after SIGTERM before it is SIGKILLed."""


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux; a no-op elsewhere).

    Returns:
        True when the kernel took it.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


ORPHAN_REAP_INTERVAL_S = 1.0
"""Seconds between two reaps of the program's orphans that exited while it runs (no zombies pile up)."""


def _children() -> list[int]:
    """Pids of this process's children (``/proc/self/task/*/children``; [] where it cannot be read)."""
    pids: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as f:
                pids += [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []
    return pids


def reap_orphans(program_pid: int, interval_s: float = ORPHAN_REAP_INTERVAL_S) -> threading.Thread:
    """Start a daemon thread that reaps, every ``interval_s`` seconds, the children of this
    subreaper that exited, other than the program (its exit is the task's, for ``Popen.wait``):
    orphans of the program come here when their parent ends, and an orphan that then exits
    would stay a zombie until the task ends. Returns the thread."""
    def loop() -> None:
        while True:
            time.sleep(interval_s)
            for pid in _children():
                if pid == program_pid:
                    continue
                try:
                    os.waitpid(pid, os.WNOHANG)
                except OSError:
                    pass

    thread = threading.Thread(target=loop, name="orphan-reaper", daemon=True)
    thread.start()
    return thread


def _describe(proc) -> dict[str, object] | None:
    """``{"pid", "cmdline"}`` of a running process, None when it is gone or a zombie."""
    import psutil

    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        cmdline = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return None
    return {"pid": proc.pid, "cmdline": cmdline}


def end_descendants(*, skip: Iterable[int] = (), outside_group_only: bool = False,
                    grace_s: float = LEFTOVER_GRACE_S) -> list[dict[str, object]]:
    """End every running descendant of this process, SIGTERM first and SIGKILL after ``grace_s``
    seconds (0: SIGKILL at once), reap what became this process's child, and record each in
    :data:`orchestrator.env.LEFT_BEHIND_FILE` of the task's directory (when there is one).

    Args:
        skip: pids to leave alone (the program itself, while it is being stopped).
        outside_group_only: only those outside this process group (the group itself is about
            to be SIGKILLed as a whole).
        grace_s: seconds between SIGTERM and SIGKILL.

    Returns:
        The processes ended: ``{"pid", "cmdline"}`` each, in the order found.
    """
    import psutil

    skipped = set(skip)
    try:
        procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in skipped]
    except psutil.Error:
        return []
    if outside_group_only:
        own = os.getpgrp()

        def outside(p) -> bool:
            try:
                return os.getpgid(p.pid) != own
            except OSError:
                return False

        procs = [p for p in procs if outside(p)]
    ended: list[dict[str, object]] = []
    running = []
    for p in procs:
        record = _describe(p)
        if record is not None:
            ended.append(record)
            running.append(p)
    for p in running:
        try:
            p.send_signal(signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(running, timeout=grace_s) if grace_s > 0 else ([], running)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5.0)
    _reap_zombies(skipped)
    if ended:
        record_left_behind(ended, by="wrapper")
    return ended


def _reap_zombies(skip: set[int]) -> None:
    """Reap exited children that are not in ``skip`` (orphans re-parented to this subreaper)."""
    import psutil

    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for child in children:
        if child.pid in skip:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError, OSError):
            pass


def record_left_behind(ended: list[dict[str, object]], by: str) -> None:
    """Append ``ended`` to :data:`orchestrator.env.LEFT_BEHIND_FILE` (best effort) and say so on stderr."""
    names = ", ".join(f"pid {e['pid']} ({e['cmdline']})" for e in ended)
    print(f"execwrap: ended {len(ended)} process(es) the program left behind: {names}", file=sys.stderr, flush=True)
    task_dir = env.read(env.TASK_DIR)
    if not task_dir:
        return
    try:
        with open(os.path.join(task_dir, env.LEFT_BEHIND_FILE), "a", encoding="utf-8") as out:
            for e in ended:
                out.write(json.dumps({**e, "by": by}) + "\n")
    except OSError:
        pass
