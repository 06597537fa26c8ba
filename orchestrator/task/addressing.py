"""Task side of address registration (``RegisterAddress``), for tasks on other machines (Slurm).

The orchestrator cannot hold a port on another node, so the task does what the local backend
does for it: it binds a free port on its own node and holds it, registers ``host:port``, waits
until the whole training cluster is known (a tf.data service role: the dispatcher's address; the
dispatcher: nothing), takes the TF_CONFIG and the service's addresses of the reply, and closes
its socket right before TensorFlow binds the port (``HeartbeatReporter.release_port``).

* ``host`` is this node's address on the network the orchestrator is reached through (the
  source address of a route to the health endpoint; no packet is sent), so peers on other
  nodes can reach it: never loopback unless the orchestrator itself is on loopback.
* Ports are drawn below the kernel's ephemeral range (as :mod:`orchestrator.backends.ports`
  does), so no outgoing connection is handed the port in the moment between the release and
  TensorFlow's bind. The holding socket sets no ``SO_REUSEADDR``.
* The orchestrator may answer with another port: the task's earlier one, when a restarted task
  comes back on the same node; the task then holds that one (a port whose old connections
  linger in TIME_WAIT cannot be held, and TensorFlow binds it anyway with ``SO_REUSEADDR``).

Every call has a deadline; the whole registration is bounded by :data:`REGISTER_TIMEOUT_S`.
"""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path
from typing import NamedTuple

from orchestrator.net import can_listen

REGISTER_TIMEOUT_S = 600.0
"""A task gives up registering after this long (the supervisor's startup timeout is shorter)."""
CALL_WAIT_S = 5.0
"""How long one ``RegisterAddress`` call may wait for the rest of the cluster, seconds."""
_LOW = 20000


def node_host(health_address: str) -> str:
    """This machine's address on the route to ``health_address`` (``host:port``): an IPv4
    literal its peers can reach (a UDP ``connect`` picks the source address; nothing is sent)."""
    host = health_address.rsplit(":", 1)[0].strip("[]")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return str(probe.getsockname()[0])


def _port_range() -> tuple[int, int]:
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    return (_LOW, ephemeral_low) if ephemeral_low > _LOW + 1000 else (10000, max(ephemeral_low, 11000))


def hold_port(port: int = 0, attempts: int = 200) -> tuple[socket.socket | None, int]:
    """Bind and hold a port on every interface (TensorFlow's server binds ``0.0.0.0:port``).

    Args:
        port: this port (0: draw a free one below the ephemeral range).
        attempts: draws before giving up.

    Returns:
        ``(socket, port)``; the socket is None when ``port`` was asked for and only connections
        in TIME_WAIT block it (TensorFlow binds it anyway).

    Raises:
        OSError: when no port could be bound (or the one asked for is in use).
    """
    low, high = _port_range()
    rng = random.SystemRandom()
    candidates = [port] if port else [rng.randrange(low, high) for _ in range(attempts)]
    last: OSError | None = None
    for candidate in candidates:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("0.0.0.0", candidate))
            return sock, candidate
        except OSError as exc:
            sock.close()
            last = exc
    if port and can_listen(port):
        return None, port
    raise OSError(
        f"no free port to hold ({'port %d' % port if port else f'{attempts} draws in {low}..{high - 1}'}): {last}"
    )


class Registered(NamedTuple):
    """What a ready registration gives the task.

    Attributes:
        tf_config: its TF_CONFIG (JSON).
        sock: the socket holding its port: close it right before TensorFlow binds (None:
            nothing is held).
        env: variables to set before it runs (the tf.data service's registered addresses:
            ``ORCH_DATA_SERVICE_ADDRESS``, a service role's ``ORCH_TASK_ADDRESS``); empty without one.
    """

    tf_config: str
    sock: socket.socket | None
    env: dict[str, str]


def register(context, timeout_s: float = REGISTER_TIMEOUT_S) -> Registered:
    """Register this task's address and wait for the cluster (see the module docstring).

    Args:
        context: the task's :class:`orchestrator.task.context.TaskContext`.
        timeout_s: bound on the whole registration, seconds.

    Returns:
        :class:`Registered`: its TF_CONFIG, its held port, its service variables.

    Raises:
        RuntimeError: the orchestrator refused the registration, or gave no cluster within
            ``timeout_s`` seconds.
    """
    import grpc

    from orchestrator import env, tls
    from orchestrator.proto import supervisor_pb2 as pb
    from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
    from orchestrator.task.reporter import CHANNEL_OPTIONS

    host = node_host(context.health_address)
    sock, port = hold_port()
    key = pb.TaskKey(task_type=context.task_type, task_index=context.task_index, attempt=context.attempt)
    metadata = ((env.TOKEN_METADATA_KEY, context.token),)
    deadline = time.monotonic() + timeout_s
    backoff_s = 0.2
    files = tls.files_for(context.tls_dir, f"{context.task_type}-{context.task_index}")
    with tls.channel(context.health_address, files, CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.SupervisorStub(channel)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if sock is not None:
                    sock.close()
                raise RuntimeError(f"no cluster from the orchestrator at {context.health_address} "
                                   f"within {timeout_s:g} s")
            try:
                reply = stub.RegisterAddress(
                    pb.AddressRequest(task=key, host=host, port=port, wait_s=min(CALL_WAIT_S, left)),
                    metadata=metadata, timeout=min(CALL_WAIT_S, left) + 5.0)
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNIMPLEMENTED):
                    raise RuntimeError(f"the orchestrator refused the registration: {exc.details()}") from None
                time.sleep(min(backoff_s, max(0.0, deadline - time.monotonic())))
                backoff_s = min(backoff_s * 2, 2.0)
                continue
            if reply.error:
                if sock is not None:
                    sock.close()
                raise RuntimeError(f"the orchestrator refused the registration of {host}:{port}: {reply.error}")
            given = int(reply.address.rsplit(":", 1)[1]) if reply.address else port
            if given != port:  # our earlier port on this node: serve there again
                if sock is not None:
                    sock.close()
                sock, port = hold_port(given)
            if reply.ready:
                return Registered(reply.tf_config, sock, dict(reply.env))
