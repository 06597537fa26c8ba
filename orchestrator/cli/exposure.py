"""``doctor --exposure [RUN]``: every address from which a running job's TensorFlow ports are reachable.

TensorFlow's gRPC server binds every IPv4 interface (``0.0.0.0``) whatever address ``TF_CONFIG``
names, without credentials (TF SECURITY.md: it "accepts connections from anywhere"). For each task
of the run (``plan.json``) this finds the socket listening on the task's port in this machine's
network namespace (psutil) and lists the addresses it answers on: every address of this machine's
interfaces for a wildcard bind. A port that nothing here listens on is the task's own node's
(Slurm), a container's, or an isolated run's namespace (``--isolate-network``): said so.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from orchestrator.rundir import RunDir, read_json


@dataclass(frozen=True)
class Exposure:
    """One task's TensorFlow port and where it answers.

    Attributes:
        task: ``worker-1``.
        address: its ``TF_CONFIG`` address (``host:port``).
        bound: the listening socket's own address (``0.0.0.0``: every IPv4 interface); empty when
            nothing listens on the port in this machine's network namespace.
        reachable: the addresses a client can connect to it at.
        outside: those that are not loopback (reachable from other machines).
    """

    task: str
    address: str
    bound: str
    reachable: tuple[str, ...]
    outside: tuple[str, ...]


def reachable_at(bound: str, interfaces: Iterable[str]) -> tuple[str, ...]:
    """The addresses a socket bound to ``bound`` answers on, given this machine's interface
    addresses (a pure rule: a wildcard ``0.0.0.0`` answers on every IPv4 address, ``::`` on every
    address (dual stack), any other on itself only)."""
    interfaces = list(dict.fromkeys(interfaces))
    if bound == "0.0.0.0":
        return tuple(a for a in interfaces if ipaddress.ip_address(a).version == 4)
    if bound == "::":
        return tuple(interfaces)
    return (bound,) if bound else ()


def is_outside(address: str) -> bool:
    """Whether ``address`` can be reached from another machine (not loopback)."""
    return not ipaddress.ip_address(address.split("%")[0]).is_loopback


def interface_addresses() -> list[str]:
    """Every IPv4 and IPv6 address of this machine's interfaces (psutil), loopback first."""
    out = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                out.append(a.address.split("%")[0])
    return sorted(dict.fromkeys(out), key=lambda a: (not ipaddress.ip_address(a).is_loopback, a))


def listeners() -> dict[int, list[str]]:
    """port -> the addresses sockets listen on it at, in this network namespace (TCP)."""
    out: dict[int, list[str]] = {}
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return out
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr:
            out.setdefault(c.laddr.port, []).append(c.laddr.ip)
    return out


def exposures(tasks: Sequence[Mapping[str, Any]], listening: Mapping[int, list[str]],
              interfaces: Sequence[str]) -> list[Exposure]:
    """Each task's exposure from ``plan.json``'s ``tasks`` (``task``, ``address``), the sockets
    listening here (:func:`listeners`) and this machine's addresses (:func:`interface_addresses`)."""
    out = []
    for t in tasks:
        address = str(t.get("address", ""))
        port = int(address.rpartition(":")[2] or 0) if address.rpartition(":")[2].isdigit() else 0
        binds = listening.get(port, []) if port else []
        reach: list[str] = []
        for b in binds:
            reach += reachable_at(b, interfaces)
        found = tuple(dict.fromkeys(reach))
        out.append(Exposure(str(t.get("task", "?")), address, ",".join(sorted(set(binds))), found,
                            tuple(a for a in found if is_outside(a))))
    return out


def report(run_dir: Path, as_json: bool = False) -> tuple[int, str]:
    """The text (or JSON) of ``doctor --exposure`` for ``run_dir``; exit code 0 when no TF port
    answers outside loopback, 1 when one does.

    Raises:
        OSError: ``plan.json`` is unreadable.
    """
    import json

    plan = read_json(RunDir(run_dir).plan) or {}
    found = exposures(plan.get("tasks") or [], listeners(), interface_addresses())
    exposed = any(e.outside for e in found)
    if as_json:
        return (1 if exposed else 0), json.dumps({"run_id": run_dir.name, "exposed": exposed,
                                                  "tasks": [asdict(e) for e in found]}, indent=2)
    lines = [f"exposure of run {run_dir.name}: TensorFlow's gRPC servers have no authentication"]
    for e in found:
        if not e.bound:
            where = "nothing listens on its port in this machine's network namespace (another node, a container, " \
                    "or an isolated run's own namespace)"
        else:
            where = f"bound {e.bound}, reachable at {', '.join(e.reachable) or '-'}"
        lines.append(f"  {'EXPOSED' if e.outside else 'ok':<7} {e.task:<12} {e.address:<22} {where}")
    lines.append("fix: launch with --isolate-network (docs/security.md), or firewall these ports" if exposed
                 else "no TensorFlow port of this run answers outside loopback here")
    return (1 if exposed else 0), "\n".join(lines)
