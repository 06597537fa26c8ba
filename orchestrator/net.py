"""Port probes shared by the control plane and the task side."""

from __future__ import annotations

import socket


def can_listen(port: int, host: str = "0.0.0.0") -> bool:
    """True when ``port`` can be bound and listened on with ``SO_REUSEADDR``, as gRPC (and so
    TensorFlow's server) binds it: nothing listens on it; connections in TIME_WAIT, which block
    a plain bind, do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError:
            return False
    return True
