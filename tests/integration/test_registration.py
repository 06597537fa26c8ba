"""Address registration over the real gRPC endpoint: tasks bind their own ports, register them,
and get their TF_CONFIG once the whole cluster is known (the protocol of the Slurm backend)."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from orchestrator.backends.slurm import SlurmBackend, SlurmOptions
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import TaskId
from orchestrator.task.addressing import register
from orchestrator.task.context import TaskContext


def _context(address: str, token: str, task_type: str, index: int, attempt: int = 0) -> TaskContext:
    return TaskContext(task_type=task_type, task_index=index, tf_config={}, attempt=attempt,
                       health_address=address, token=token)


@pytest.fixture
def endpoint():
    backend = SlurmBackend(SlurmOptions(environ={}))
    backend.allocate(build_spec({"workers": 2}, {}))
    server = HealthServer("secret", HeartbeatStore(), register=backend.register_address).start()
    yield backend, server
    server.stop()


def test_every_task_gets_the_cluster_of_the_ports_the_tasks_bound(endpoint):
    backend, server = endpoint
    results: dict[int, tuple[str, socket.socket | None]] = {}

    def task(index: int) -> None:
        results[index] = register(_context(server.address, "secret", "worker", index), timeout_s=20)

    threads = [threading.Thread(target=task, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    clusters = [json.loads(results[i][0]) for i in (0, 1)]
    assert clusters[0]["cluster"] == clusters[1]["cluster"]
    addresses = clusters[0]["cluster"]["worker"]
    for i in (0, 1):
        assert clusters[i]["task"] == {"type": "worker", "index": i}
        sock = results[i][1]
        assert sock is not None and addresses[i] == f"127.0.0.1:{sock.getsockname()[1]}"
        with socket.socket() as other, pytest.raises(OSError):  # held until TensorFlow binds it
            other.bind(("0.0.0.0", sock.getsockname()[1]))
        sock.close()
    assert backend.book is not None and backend.book.addresses()[TaskId("worker", 1)] == addresses[1]


def test_a_restarted_task_gets_its_earlier_port_back(endpoint):
    backend, server = endpoint
    first = {}
    threads = [threading.Thread(target=lambda i=i: first.update({i: register(
        _context(server.address, "secret", "worker", i), timeout_s=20)})) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    port = first[1][1].getsockname()[1]
    for _, sock, _ in first.values():
        sock.close()
    backend.reserve_again(TaskId("worker", 1))  # what the supervisor does before a restart
    tf_config, sock, _ = register(_context(server.address, "secret", "worker", 1, attempt=1), timeout_s=20)
    assert json.loads(tf_config)["cluster"]["worker"][1] == f"127.0.0.1:{port}"
    assert sock is None or sock.getsockname()[1] == port
    if sock is not None:
        sock.close()


def test_a_registration_without_the_job_token_is_refused(endpoint):
    _, server = endpoint
    with pytest.raises(RuntimeError, match="refused"):
        register(_context(server.address, "wrong", "worker", 0), timeout_s=10)
