"""Facts about this machine the local backend needs: memory for the TensorFlow processes,
the cgroup's OOM-kill count, Python stacks of a process read from outside (py-spy), a pidfd
that says when a child process exits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from orchestrator.errors import SpecError
from orchestrator.spec.model import JobSpec

TASK_RSS_BYTES = 700 * 2**20
"""Resident memory of one task of the built-in program (TensorFlow + tf-keras + the model), measured."""

def pidfd(popen: "subprocess.Popen[bytes]") -> int | None:
    """A pidfd of the child ``popen`` (``pidfd_open(2)``, Linux >= 5.3, Python >= 3.9): readable
    once the child exits, before it is reaped; the caller closes it. None where there is none
    (another OS, an older kernel, no descriptor left: ``EMFILE``) or the child was already reaped:
    the supervisor then polls it every tick."""
    if popen.returncode is not None or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(popen.pid)
    except OSError:  # ENOSYS (kernel < 5.3), EMFILE, ESRCH
        return None


def check_memory(spec: JobSpec, available_bytes: int | None = None) -> None:
    """Refuse a job whose TensorFlow processes cannot fit in this machine's memory.

    Raises:
        SpecError: when ``tasks x ~700 MiB`` exceeds the available memory (the tasks would be
            OOM-killed one after the other), naming the task count and what fits.
    """
    available = psutil.virtual_memory().available if available_bytes is None else available_bytes
    tasks = spec.tf_process_count()
    if tasks * TASK_RSS_BYTES > available:
        fits = max(1, available // TASK_RSS_BYTES)
        raise SpecError(
            "tasks", tasks,
            f"{tasks} TensorFlow processes need ~{tasks * TASK_RSS_BYTES / 2**30:.0f} GiB, "
            f"{available / 2**30:.1f} GiB is available",
            f"use at most {fits} tasks on this machine, or run it on Kubernetes (render --format tfjob)",
        )


def py_spy_dump(pid: int, timeout_s: float) -> str:
    """``py-spy dump`` of ``pid`` and each Python process below it, concatenated ("" when
    py-spy is not installed, cannot attach, or takes longer than ``timeout_s`` seconds)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(exe):
        return ""
    try:
        root = psutil.Process(pid)
        pids = [root.pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return ""
    deadline = time.monotonic() + max(timeout_s, 1.0)
    dumps = []
    for p in pids:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            out = subprocess.run([exe, "dump", "--pid", str(p)], capture_output=True, text=True, timeout=left)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip():
            dumps.append(out.stdout)
        else:
            dumps.append(f"py-spy could not read pid {p}: {(out.stderr or out.stdout).strip()[-300:]}\n")
    return "\n".join(dumps)


def cgroup_oom_kills(pid: int | None = None) -> int | None:
    """OOM kills counted by the memory cgroup of ``pid`` (default this process): cgroup v2
    ``memory.events`` or v1 ``memory.oom_control`` ``oom_kill`` line; None when unreadable."""
    try:
        lines = Path(f"/proc/{pid or 'self'}/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        path = path.lstrip("/")
        if controllers == "":
            candidates += [Path("/sys/fs/cgroup") / path / "memory.events", Path("/sys/fs/cgroup/memory.events")]
        elif "memory" in controllers.split(","):
            candidates += [Path("/sys/fs/cgroup/memory") / path / "memory.oom_control",
                           Path("/sys/fs/cgroup/memory/memory.oom_control")]
    for candidate in candidates:
        try:
            for row in candidate.read_text().splitlines():
                key, _, value = row.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


