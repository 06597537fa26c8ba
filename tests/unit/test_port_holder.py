"""Naming who holds a busy fixed port (issue 11, item 17b): a pid and name when visible."""

from __future__ import annotations

from collections import namedtuple

import psutil

from orchestrator.backends.ports import port_holder

Conn = namedtuple("Conn", "laddr status pid")
Addr = namedtuple("Addr", "ip port")


def test_port_holder_names_the_listener_or_says_another_process(monkeypatch):
    conns = [Conn(Addr("127.0.0.1", 5000), psutil.CONN_ESTABLISHED, None),
             Conn(Addr("0.0.0.0", 5000), psutil.CONN_LISTEN, psutil.Process().pid)]
    monkeypatch.setattr(psutil, "net_connections", lambda kind: conns)
    assert port_holder(5000) == f"pid {psutil.Process().pid} ({psutil.Process().name()})"
    monkeypatch.setattr(psutil, "net_connections", lambda kind: [Conn(Addr("0.0.0.0", 5000), psutil.CONN_LISTEN, None)])
    assert port_holder(5000) == "another process"  # another user's socket: no pid without privileges

    def denied(kind):
        raise psutil.AccessDenied()

    monkeypatch.setattr(psutil, "net_connections", denied)
    assert port_holder(5000) == "another process"
