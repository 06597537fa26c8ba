"""Port reservations: held ports cannot be taken by another launch; released ones can be bound."""

from __future__ import annotations

import socket

import pytest

from orchestrator.backends.ports import PortReservations, port_range
from orchestrator.errors import LaunchError
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


def _free_block(size: int = 16) -> tuple[int, int]:
    """An aligned block of ``size`` ports of :func:`port_range` that nothing here holds now."""
    low, high = port_range()
    for start in range(low - low % 16 + 16, high - size, 16 * 7):
        socks = []
        try:
            for p in range(start, start + size):
                s = socket.socket()
                s.bind(("0.0.0.0", p))
                socks.append(s)
            return start, start + size
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free block of ports on this machine")


def test_a_block_is_drawn_from_only_and_a_port_another_process_holds_is_skipped():
    block = _free_block()
    foreign = []
    r = PortReservations()
    try:
        for p in range(block[0], block[1] - 2):  # another program holds all but two ports of the block
            s = socket.socket()
            s.bind(("0.0.0.0", p))
            foreign.append(s)
        tasks = [TaskId("worker", i) for i in range(3)]
        got = {r.reserve(tasks[0], block=block), r.reserve(tasks[1], block=block)}
        assert got == {block[1] - 2, block[1] - 1}  # the two left, each once
        with pytest.raises(LaunchError, match=f"no free port for worker:2 in {block[0]}-{block[1] - 1}, this run's "
                           "block of ports"):
            r.reserve(tasks[2], block=block)
    finally:
        r.close()
        for s in foreign:
            s.close()
