"""Under MWMS a trainer waits for the coordination service leader's port before building its
strategy (a refused first connection costs gRPC's 1 s reconnect backoff)."""

from __future__ import annotations

import socket
import threading
import time

from worker.peers import wait_for_coordination_leader, wait_for_servers


def _config(leader_port: int, task=("worker", 1), chief: bool = False) -> dict:
    cluster = {"worker": [f"127.0.0.1:{leader_port}", "127.0.0.1:1"]}
    if chief:
        cluster = {"chief": [f"127.0.0.1:{leader_port}"], "worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    return {"cluster": cluster, "task": {"type": task[0], "index": task[1]}}


def test_a_trainer_waits_until_the_leader_listens_then_goes_on_at_once():
    held = socket.socket()
    held.bind(("127.0.0.1", 0))  # bound, not listening: what the orchestrator's port reservation does
    port = held.getsockname()[1]
    listening_at: list[float] = []

    def leader_starts() -> None:
        time.sleep(0.3)
        held.listen(1)
        listening_at.append(time.monotonic())

    threading.Thread(target=leader_starts, daemon=True).start()
    try:
        assert wait_for_coordination_leader(_config(port), timeout_s=5.0)
        waited_after = time.monotonic() - listening_at[0]
    finally:
        held.close()
    assert 0 <= waited_after < 0.2


def test_the_wait_is_bounded_and_the_leader_itself_never_waits():
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    try:
        started = time.monotonic()
        assert not wait_for_coordination_leader(_config(port), timeout_s=0.3)
        assert 0.3 <= time.monotonic() - started < 2.0
        assert wait_for_coordination_leader(_config(port, task=("worker", 0)), timeout_s=0.3)  # worker 0 leads
        assert wait_for_coordination_leader(_config(port, task=("chief", 0), chief=True), timeout_s=0.3)
        started = time.monotonic()
        assert not wait_for_coordination_leader(_config(port, task=("worker", 0), chief=True), timeout_s=0.3)
        assert time.monotonic() - started >= 0.3  # with a chief, worker 0 waits for the chief
    finally:
        held.close()


def test_the_pss_coordinator_waits_until_every_worker_and_ps_listens():
    """A peer still importing TensorFlow refuses; the coordinator must not connect before it
    listens (gRPC would retry only after its 1 s reconnect backoff)."""
    listening, held = socket.socket(), socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(1)
    held.bind(("127.0.0.1", 0))  # bound, not listening: the orchestrator's reservation, or a task importing
    ports = [s.getsockname()[1] for s in (listening, held)]
    config = {"cluster": {"chief": ["127.0.0.1:1"], "worker": [f"127.0.0.1:{ports[0]}"],
                          "ps": [f"127.0.0.1:{ports[1]}"]}, "task": {"type": "chief", "index": 0}}
    try:
        assert not wait_for_servers(config, timeout_s=0.3)  # the ps does not listen yet: bounded, False
        done = threading.Event()
        result: list[bool] = []
        waiter = threading.Thread(target=lambda: (result.append(wait_for_servers(config, timeout_s=30.0)), done.set()))
        waiter.start()
        assert not done.wait(0.3)  # still waiting for the ps
        held.listen(1)
        assert done.wait(10.0) and result == [True]
    finally:
        listening.close()
        held.close()
