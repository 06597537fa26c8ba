"""``--web [HOST:]PORT``: the address the job's page is served on, checked before anything
starts (apart from :mod:`orchestrator.web.server`, which imports ``asyncio`` and ``aiohttp``: a
launch checks ``--web`` without them)."""

from __future__ import annotations

import ipaddress

from orchestrator.errors import SpecError


def parse_bind(text: str, allow_public: bool = False, field: str = "web") -> tuple[str, int]:
    """``[HOST:]PORT`` -> (host, port); the host defaults to ``127.0.0.1``.

    A wildcard (``0.0.0.0``, ``::``, ``*``, an empty host) or any address that is not loopback
    serves the job's page to the network over plain HTTP: refused unless ``allow_public``.

    Raises:
        SpecError: naming ``field`` for a malformed value, a port outside 0-65535, or a
            non-loopback host without ``allow_public``.
    """
    raw = str(text).strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", raw
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise SpecError(field, text, "is not [HOST:]PORT", "e.g. --web 8080 or --web 127.0.0.1:8080") from None
    if not 0 <= port <= 65535:
        raise SpecError(field, text, "port must be 0-65535 (0: any free port)", "e.g. --web 8080")
    if host in ("", "*"):
        host = "0.0.0.0"
    if host == "localhost":
        host = "127.0.0.1"
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_public:
        raise SpecError(field, text, "is not a loopback address: the page would be served to the network over plain "
                        "HTTP", "use 127.0.0.1:PORT (and an SSH tunnel), or add --web-public to mean it")
    return host, port
