"""The run's network namespace (``--isolate-network``, local backend) with real processes, no
TensorFlow: a listener on every interface inside answers inside and nowhere outside, and a
process inside reaches nothing of the host's network but files (the health socket's way)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from orchestrator.backends import netns
from tests.conftest import wait_until

INSIDE = """
import socket, sys
listener = socket.socket()
listener.bind(("0.0.0.0", 0))  # as TensorFlow binds
listener.listen()
print(listener.getsockname()[1], flush=True)
socket.create_connection(("127.0.0.1", listener.getsockname()[1]), 5).close()  # loopback works inside
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2)
    print("reached the host", flush=True)
except OSError:
    print("host unreachable", flush=True)
sys.stdin.read()
"""


def _modes() -> list[bool]:
    """Root: both the plain network namespace and the user + network one; otherwise the latter."""
    return [False, True] if os.geteuid() == 0 else [True]


@pytest.mark.parametrize("user_ns", _modes())
def test_a_wildcard_listener_inside_answers_nobody_outside(user_ns):
    try:
        ns = netns.NetworkNamespace(user_ns=user_ns)
    except Exception as exc:  # noqa: BLE001 - the machine's policy, not our bug: doctor says it
        pytest.skip(f"no network namespace here: {exc}")
    with socket.socket() as host_listener:
        host_listener.bind(("0.0.0.0", 0))
        host_listener.listen()
        inside = subprocess.Popen(ns.wrap([sys.executable, "-c", INSIDE, str(host_listener.getsockname()[1])]),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            port = int(inside.stdout.readline())
            assert inside.stdout.readline().strip() == "host unreachable"
            for host in ("127.0.0.1", *[a for a in _ipv4_addresses() if a != "127.0.0.1"]):
                with pytest.raises(OSError):
                    socket.create_connection((host, port), 2).close()
        finally:
            inside.stdin.close()
            inside.wait(10)
            ns.close()
    assert inside.returncode == 0
    ns.close()  # idempotent


def _ipv4_addresses() -> list[str]:
    from orchestrator.cli.exposure import interface_addresses

    return [a for a in interface_addresses() if ":" not in a]


def test_a_long_run_directory_gets_a_short_socket_path(tmp_path):
    assert netns.socket_path(tmp_path) == tmp_path / "health.sock"
    long_dir = tmp_path / ("x" * 120)
    path = netns.socket_path(long_dir)
    assert len(str(path)) <= netns.MAX_UNIX_PATH and path.name == "health.sock"
    path.parent.rmdir()


def test_the_local_backend_starts_its_warm_spares_in_the_run_s_namespace(tmp_path):
    """A spare becomes a task without a new process, so it must already be where the task would
    run: inside the run's namespace (``LocalBackend`` hands ``SparePool`` its wrap)."""
    from orchestrator.backends.base import SpareRequest
    from orchestrator.backends.local import LocalBackend
    from orchestrator.backends.options import LocalOptions

    backend = LocalBackend(LocalOptions(isolate_network=True))
    try:
        backend.open("r", tmp_path)
    except Exception as exc:  # noqa: BLE001 - the machine's policy, not our bug: doctor says it
        pytest.skip(f"no network namespace here: {exc}")
    show = "import os, sys; print(os.readlink('/proc/self/ns/net'), flush=True); sys.stdin.read()"
    try:
        backend.keep_spares(SpareRequest(count=1, argv=(sys.executable, "-m", "worker"), env={}, preload=(),
                                         log_dir=tmp_path / "spares", command=(sys.executable, "-c", show)))
        log = tmp_path / "spares" / "spare-0.log"
        wait_until(lambda: log.exists() and log.read_text().strip() != "", 30, what="the spare's namespace")
        assert log.read_text().strip().startswith("net:[")
        assert log.read_text().strip() != os.readlink("/proc/self/ns/net")
    finally:
        backend.close()
