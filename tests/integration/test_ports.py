"""Port reservations: held ports cannot be taken by another launch; released ones can be bound."""

from __future__ import annotations

import socket

from orchestrator.backends.ports import PortReservations, port_range
from orchestrator.spec import TaskId


def test_two_reservation_sets_never_share_a_port_and_held_ports_block_binds():
    a, b = PortReservations(), PortReservations()
    tasks = [TaskId("worker", i) for i in range(20)]
    pa = [a.reserve(t) for t in tasks]
    pb = [b.reserve(t) for t in tasks]
    assert len(set(pa) | set(pb)) == 40
    low, high = port_range()
    assert all(low <= p < high for p in pa + pb)
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TF's gRPC server does
        try:
            s.bind(("0.0.0.0", pa[0]))
            bound = True
        except OSError:
            bound = False
        assert not bound, "a held port could be bound by someone else"
    finally:
        s.close()
    a.close()
    b.close()


def test_release_lets_the_task_bind_its_port():
    r = PortReservations()
    task = TaskId("ps", 0)
    port = r.reserve(task)
    assert r.release(task) == port
    assert r.release(task) == 0
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen()
    s.close()
    r.close()
