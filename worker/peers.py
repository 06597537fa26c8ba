"""Before a task builds its strategy: wait (bounded) until the peers it connects to first listen.

A connection refused by a peer still importing TensorFlow costs gRPC's reconnect backoff (1 s
at first, then 1.6 s, ...); a poll of its port every 20 ms costs nothing. The orchestrator's port
reservation binds without listening, so it is refused like a port nobody holds.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Mapping

LEADER_WAIT_S = 30.0
"""Bound on a trainer's wait for the coordination service leader's port, seconds."""


def wait_for_coordination_leader(tf_config: Mapping[str, Any], timeout_s: float = LEADER_WAIT_S) -> bool:
    """Under MWMS, wait (bounded) until the coordination service leader (chief 0, else worker 0:
    ``multi_worker_util.coordination_leader``) accepts TCP connections on its port; True once
    it does, or when this task is the leader.

    A trainer that creates its strategy before the leader's server listens gets its
    ``RegisterTask`` call's connection refused, and gRPC retries it only after its reconnect
    backoff (1 s at first): measured, a restart in warm spares, where every task builds its
    strategy at the same moment, sometimes lost about 1.2 s there. Polling the port every 20 ms
    costs nothing. The orchestrator's port reservation binds without listening, so it is
    refused like a port nobody holds.
    """
    cluster, task = tf_config.get("cluster", {}), tf_config.get("task", {})
    leader_type = "chief" if cluster.get("chief") else "worker"
    if not cluster.get(leader_type) or (task.get("type"), int(task.get("index", 0))) == (leader_type, 0):
        return True
    return _wait_listening([str(cluster[leader_type][0])], timeout_s)


def wait_for_servers(tf_config: Mapping[str, Any], timeout_s: float = LEADER_WAIT_S) -> bool:
    """Under ParameterServerStrategy, the coordinator waits (bounded) until every worker and ps
    accepts TCP connections, before it builds its strategy; True once they all do.

    The strategy connects to each of them at once; one still importing TensorFlow (the last ps
    to start, often) refuses, and gRPC retries only after its reconnect backoff (1 s at
    first): measured (``python -m bench --only tf``, ``bench/timeline.py``), a coordinator ready
    before its last peer built its strategy 0.9-1.1 s after that peer served, on both sides of
    the bench, in most starts. A worker that never comes (it crashed at start) costs at most
    ``timeout_s``; the strategy then starts as before and the supervisor sees the crash.
    """
    cluster = tf_config.get("cluster", {})
    return _wait_listening([str(a) for role in ("worker", "ps") for a in cluster.get(role, [])], timeout_s)


def _wait_listening(addresses: list[str], timeout_s: float) -> bool:
    """Poll every 20 ms until each ``host:port`` of ``addresses`` accepts a TCP connection (the
    orchestrator's port reservation binds without listening: refused like a port nobody holds);
    False after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    for address in addresses:
        host, _, port = address.rpartition(":")
        while True:
            try:
                with socket.create_connection((host.strip("[]"), int(port)), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)
    return True
