"""Under MWMS a trainer waits for the coordination service leader's port before building its
strategy (a refused first connection costs gRPC's 1 s reconnect backoff)."""

from __future__ import annotations

import socket
import threading
import time

from worker.train import wait_for_coordination_leader


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
