"""``--isolate-network`` on the local backend: every task of a run in one network namespace of
its own, with only loopback, so TensorFlow's ports (bound on every interface, without
credentials: TF SECURITY.md) answer nobody outside the run.

One *holder* process per run owns the namespace: ``unshare --net`` (as root), or ``unshare --user
--map-root-user --net`` (an unprivileged user namespace, where the kernel allows it), running a
few lines of Python that bring ``lo`` up (``SIOCSIFFLAGS``), print ``ready`` and block on their
stdin: when the orchestrator goes, for whatever reason, the pipe closes and the holder exits.
Every task (and warm spare) starts as ``nsenter --net=/proc/<holder>/ns/net [--user=...] --
ARGV``: nsenter enters and execs, so the pid the backend watches is the task's own. TF_CONFIG
stays on ``127.0.0.1``; the health channel reaches the orchestrator through a Unix socket in the
run directory (a file: it crosses network namespaces).

``probe()`` says whether this machine allows it (``doctor``): Ubuntu 23.10+ restricts
unprivileged user namespaces by default (``kernel.apparmor_restrict_unprivileged_userns=1``).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.errors import LaunchError

HOLDER = r"""
import fcntl, socket, struct, sys
s = socket.socket()
ifreq = fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0))  # SIOCGIFFLAGS
flags = struct.unpack("16sH", ifreq[:18])[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))  # SIOCSIFFLAGS: IFF_UP
print("ready", flush=True)
sys.stdin.read()
"""
START_TIMEOUT_S = 10.0
SOCKET_NAME = "health.sock"
MAX_UNIX_PATH = 107
"""Longest path of a Unix socket (``sun_path`` holds 108 bytes with the terminating NUL)."""


def needs_user_namespace() -> bool:
    """Whether creating a network namespace here needs a user namespace too (not root)."""
    return os.geteuid() != 0


def holder_argv(python: str = sys.executable, user_ns: bool | None = None) -> list[str]:
    """The holder's command: ``unshare [--user --map-root-user] --net python -c HOLDER``."""
    user_ns = needs_user_namespace() if user_ns is None else user_ns
    return ["unshare", *(["--user", "--map-root-user"] if user_ns else []), "--net", python, "-c", HOLDER]


def probe(timeout_s: float = START_TIMEOUT_S) -> tuple[bool, str]:
    """Whether this machine lets this user make a network namespace: (allowed, what was seen
    or what to do)."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False, "util-linux's unshare and nsenter are not installed (apt install util-linux)"
    try:
        ns = NetworkNamespace(timeout_s=timeout_s)
    except LaunchError as exc:
        return False, str(exc)
    ns.close()
    how = "a user + network namespace (unprivileged)" if ns.user_ns else "a network namespace (root)"
    return True, f"{how} with loopback only"


def socket_path(run_dir: Path) -> Path:
    """The health endpoint's Unix socket for an isolated run: ``runs/<run-id>/health.sock``, or
    a short one under the temporary directory when that path is longer than a socket's may be."""
    path = Path(run_dir) / SOCKET_NAME
    if len(str(path)) <= MAX_UNIX_PATH:
        return path
    import tempfile

    return Path(tempfile.mkdtemp(prefix="tfc-")) / SOCKET_NAME


class NetworkNamespace:
    """A run's network namespace, held by one process from now until :meth:`close`.

    Args:
        timeout_s: how long the holder may take to bring ``lo`` up, seconds.
        user_ns: make a user namespace too; default: when not root (:func:`needs_user_namespace`).

    Raises:
        LaunchError: the namespace could not be made (the kernel or its policy refuses it: the
            message says what to do).
    """

    def __init__(self, timeout_s: float = START_TIMEOUT_S, user_ns: bool | None = None) -> None:
        self.user_ns = needs_user_namespace() if user_ns is None else user_ns
        try:
            self._holder = subprocess.Popen(holder_argv(user_ns=self.user_ns), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise LaunchError(f"--isolate-network: cannot start unshare: {exc}") from None
        assert self._holder.stdout is not None
        ready, _, _ = select.select([self._holder.stdout], [], [], timeout_s)
        line = self._holder.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.close()
            err = (self._holder.stderr.read() if self._holder.stderr else b"").decode(errors="replace").strip()
            hint = ("unprivileged user namespaces are off here (Ubuntu 23.10+: sysctl "
                    "kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile allowing userns); "
                    "or run as root" if self.user_ns else "the kernel refused a network namespace")
            raise LaunchError(f"--isolate-network: no network namespace ({err or 'no answer'}); {hint}")
        self.pid = self._holder.pid

    def wrap(self, argv: list[str] | tuple[str, ...]) -> list[str]:
        """``argv`` started inside the namespace (nsenter execs it: same pid)."""
        ns = f"/proc/{self.pid}/ns"
        user = [f"--user={ns}/user", "--preserve-credentials"] if self.user_ns else []
        return ["nsenter", *user, f"--net={ns}/net", "--", *argv]

    def close(self) -> None:
        """End the holder (the namespace goes with its last process). Idempotent."""
        if self._holder.poll() is None:
            try:
                os.killpg(self._holder.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 5.0
        while self._holder.poll() is None and time.monotonic() < deadline:
            try:
                self._holder.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        for pipe in (self._holder.stdin, self._holder.stdout, self._holder.stderr):
            if pipe is not None:
                pipe.close()
