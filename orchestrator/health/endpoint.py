"""The job's health endpoint as a launch sees it: the port reserved before any task starts, the
gRPC server brought up once they have started.

Every task's environment names the health address, so the port must be known before the first
task starts; the server itself (``grpc``, ``grpc_health``, ``asyncio``: about a third of the CLI's
imports) need not be. A launch therefore holds the port with a plain socket (bound, not
listening), starts its tasks, and only then imports and starts :class:`HealthServer` on that
port, while the tasks' interpreters start and import TensorFlow (issue 23, item 3: the tasks
start before the CLI's heavy imports, as torchrun's agent starts its workers before its own
rendezvous handlers are needed). A task that reaches the port before the server listens is
refused and retries: its reporter's stream and ``RegisterAddress`` reconnect with a backoff
(:mod:`orchestrator.task.reporter`, :mod:`orchestrator.task.addressing`).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from orchestrator.errors import LaunchError

if TYPE_CHECKING:
    from orchestrator.health.server import HealthServer
    from orchestrator.tls import RunPki


class HealthEndpoint:
    """A health server's port, held from now; the server on it from :meth:`start`.

    Args:
        host: the interface to bind (a backend's ``health_host``).
        **server: the other arguments of :class:`~orchestrator.health.server.HealthServer`
            (``token``, ``store``, ``release_port``, ``register``, ``status``, ``stop``).

    Raises:
        LaunchError: no port can be bound on ``host``.
    """

    def __init__(self, host: str, **server: Any) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._held: socket.socket | None = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._held.bind((host, 0))
        except OSError as exc:
            self._held.close()
            raise LaunchError(f"cannot bind the health endpoint on {host}: {exc}") from None
        self.host = host
        self.port: int = self._held.getsockname()[1]
        self._server_args = server
        self.server: HealthServer | None = None
        self.tls: RunPki | None = None
        """The run's certificates the server requires clients to present (set before :meth:`start`);
        None: plaintext."""
        self.unix_path: str | None = None
        """A Unix socket the server also serves on (``--isolate-network``), set before :meth:`start`."""

    @property
    def address(self) -> str:
        """``host:port`` that tasks connect to (the same before and after :meth:`start`)."""
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> HealthServer:
        """Import the gRPC server and serve on the held port; returns it once bound.

        Raises:
            RuntimeError: the server did not bind within ``timeout_s`` seconds.
        """
        from orchestrator.health.server import HealthServer

        held, self._held = self._held, None
        try:
            self.server = HealthServer(host=self.host, port=self.port, held=held, tls=self.tls,
                                       unix_path=self.unix_path, **self._server_args).start(timeout_s)
        finally:
            if held is not None:
                held.close()  # the server closed it before binding; not when it failed before that
        return self.server

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop the server (open calls get at most ``grace_s`` seconds), or let the port go when
        it never started. Idempotent."""
        if self.server is not None:
            self.server.stop(grace_s)
        if self._held is not None:
            self._held.close()
            self._held = None
