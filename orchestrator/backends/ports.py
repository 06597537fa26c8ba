"""Port reservations for tasks on this machine.

Choosing a free port in the parent and binding it seconds later in the child races with
every other process on the machine (tensorflow#46602, TonY#487). Here the orchestrator
binds each task's port itself at planning time and keeps it bound until the task asks,
over the health channel, right before its tf.distribute server binds (``ReleasePort``).
A second launch on the same machine cannot pick a held port: its bind fails and it
draws another.

Ports are drawn below the kernel's ephemeral range (``ip_local_port_range``), so neither
``bind(0)`` nor outgoing connections of other programs are handed a released port in the
short window before TensorFlow binds it. A launch draws them inside the block of ports the
lease ledger gives its run (:mod:`orchestrator.resources.portblocks`), disjoint from every other
live run's on this machine; a port of the block that a process outside the ledger holds is
skipped. The reservation socket sets neither ``SO_REUSEADDR`` nor ``SO_REUSEPORT``
(TensorFlow's gRPC server refuses to share a port).
"""

from __future__ import annotations

import random
import socket
import threading

from orchestrator.errors import LaunchError
from orchestrator.resources.portblocks import PortBlock, format_block, port_range
from orchestrator.spec.model import TaskId

__all__ = ["PortReservations", "port_holder", "port_range"]

_ATTEMPTS = 200


def port_holder(port: int) -> str:
    """Who holds TCP ``port`` on this machine, for an error message: ``pid 4242 (nc)``, or
    ``another process`` when the socket's owner is not visible (another user's process
    without privileges, or a platform where psutil cannot list connections).

    Args:
        port: the local TCP port.

    Returns:
        ``pid <pid> (<name>)`` of the process that listens on it (else of any socket bound
        to it), or ``another process``.
    """
    import psutil

    try:
        sockets = [c for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port]
    except (psutil.Error, OSError):
        return "another process"
    sockets.sort(key=lambda c: (c.status != psutil.CONN_LISTEN, c.pid is None))
    for conn in sockets:
        if conn.pid is None:
            continue
        try:
            return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
        except psutil.Error:
            return f"pid {conn.pid}"
    return "another process"


class PortReservations:
    """Holds one bound socket per task until the task releases it.

    Args:
        bind_host: interface the reservation binds; ``0.0.0.0`` so it blocks binds on
            every interface, as TensorFlow's server binds ``0.0.0.0:port``.
        rng: random source (tests pass a seeded one).
    """

    def __init__(self, bind_host: str = "0.0.0.0", rng: random.Random | None = None) -> None:
        self._bind_host = bind_host
        self._rng = rng or random.SystemRandom()
        self._lock = threading.Lock()
        self._held: dict[TaskId, socket.socket] = {}
        self._ports: dict[TaskId, int] = {}

    def reserve(self, task: TaskId, port: int | None = None, block: PortBlock | None = None) -> int:
        """Bind and hold a port for ``task``; ``port`` asks for that one port.

        Args:
            task: the task.
            port: this port (a fixed address, or the task's port again before a restart).
            block: ``[low, high)``: draw only inside it (the run's block of the lease ledger), each
                of its ports at most once, in random order; None: random draws over
                :func:`port_range` (no lease).

        Returns:
            The reserved port.

        Raises:
            LaunchError: when no port could be bound (or the requested one is taken, or every
                free port of ``block`` is held by other processes or other tasks of the run).
        """
        low, high = block or port_range()
        if port:
            candidates = [port]
        elif block:
            with self._lock:
                mine = set(self._ports.values())
            candidates = [p for p in range(low, high) if p not in mine]
            self._rng.shuffle(candidates)
        else:
            candidates = [self._rng.randrange(low, high) for _ in range(_ATTEMPTS)]
        for candidate in candidates:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((self._bind_host, candidate))
            except OSError:
                sock.close()
                continue
            with self._lock:
                old = self._held.pop(task, None)
                if old is not None:
                    old.close()
                self._held[task] = sock
                self._ports[task] = candidate
            return candidate
        if port:
            raise LaunchError(f"port {port} for {task} is in use; free it or let the orchestrator choose")
        if block:
            raise LaunchError(f"no free port for {task} in {format_block(block)}, this run's block of ports (other "
                              "processes hold the rest): stop them, or launch again for another block")
        raise LaunchError(f"no free port in {low}..{high - 1} after {_ATTEMPTS} tries for {task}")

    def release(self, task: TaskId) -> int:
        """Close the reservation of ``task`` so the task can bind. Returns its port, 0 if none held."""
        with self._lock:
            sock = self._held.pop(task, None)
            if sock is None:
                return 0
            sock.close()
            return self._ports[task]

    def port(self, task: TaskId) -> int:
        """The port assigned to ``task`` (held or released), 0 when none."""
        with self._lock:
            return self._ports.get(task, 0)

    def close(self) -> None:
        """Release every reservation."""
        with self._lock:
            for sock in self._held.values():
                sock.close()
            self._held.clear()
