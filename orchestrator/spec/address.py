"""Task addresses: the one parser every ``host:port`` goes through, and the rules a set of
addresses must follow (no TensorFlow needed).

Rules, and the bug each one prevents:

* ``host:port`` with a port in 1..65535 and nothing else (no ``grpc://`` scheme, no path:
  TF_CONFIG's ``rpc_layer`` carries the protocol);
* one address per task: TF1's comma-separated ``"h1:2222,h2:2222"`` (its ``--worker_hosts``
  flag) is a list in TF2, and says so wherever it appears (it would otherwise read as an
  unbracketed IPv6 address);
* IPv6 literals in brackets, ``[fe80::1]:2222``: gRPC cannot tell the port from an
  unbracketed IPv6 address;
* one task per ``host:port``: two servers cannot bind one port;
* ``localhost`` / ``127.x`` only when every task is on loopback: a task on another host
  dials its own loopback, not yours, and waits forever;
* ``localhost`` is written ``127.0.0.1`` in every TF_CONFIG we emit (``launch`` and
  ``render`` alike, :func:`localhost_as_ipv4`): it may resolve to IPv6 ``::1`` where the
  server listens on IPv4 only, or where IPv6 is off (tensorflow#19900).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Iterable

from orchestrator.errors import SpecError

_HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_\-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_\-]{0,62}))*\.?$"
)
_EXAMPLE = "e.g. 10.0.0.5:2222, worker-1.example:2222 or [fe80::1]:2222"


LOOPBACK_IPV4 = "127.0.0.1"
"""What ``localhost`` is written as in a TF_CONFIG (tensorflow#19900)."""


@dataclass(frozen=True)
class Address:
    """A parsed task address.

    Attributes:
        host: hostname, IPv4 literal, or IPv6 literal without brackets.
        port: TCP port, 1..65535.
    """

    host: str
    port: int

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    @property
    def is_loopback(self) -> bool:
        """True for ``localhost``, ``127.0.0.0/8`` and ``::1``."""
        if self.host.lower().rstrip(".") == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if self.is_ipv6 else f"{self.host}:{self.port}"


def localhost_as_ipv4(address: Address | str, field: str = "address") -> str:
    """The address as it goes into a TF_CONFIG: ``localhost:2222`` (any case, trailing dot)
    becomes ``127.0.0.1:2222``, every other address is returned as given.

    The one rule ``launch`` (local backend) and ``render`` share: ``localhost`` may resolve to
    IPv6 where TensorFlow's server is on IPv4 only, or where IPv6 is off (tensorflow#19900).

    Args:
        address: a parsed address, or a ``host:port`` string.
        field: dotted field name for the error when ``address`` is a bad string.

    Raises:
        SpecError: when ``address`` is a string that is not a valid address.
    """
    parsed = address if isinstance(address, Address) else parse_address(address, field)
    if parsed.host.lower().rstrip(".") == "localhost":
        return f"{LOOPBACK_IPV4}:{parsed.port}"
    return str(address)


def parse_address(value: object, field: str) -> Address:
    """Parse one ``host:port``.

    Args:
        value: the address as given (anything: YAML may hand over an int or a list).
        field: dotted field name for the error, e.g. ``cluster.worker[1]``.

    Returns:
        The parsed address.

    Raises:
        SpecError: naming ``field``, the value and the fix.
    """
    if not isinstance(value, str):
        raise SpecError(field, value, "an address must be a 'host:port' string", f"quote it, {_EXAMPLE}")
    text = value
    if "," in text:
        raise tf1_hosts_error(field, value)
    if text != text.strip() or not text:
        raise SpecError(field, value, "an address must be 'host:port' with no spaces", _EXAMPLE)
    if "://" in text:
        raise SpecError(field, value, "an address has no scheme (rpc_layer says grpc)",
                        "drop the '" + text.split("://")[0] + "://'")
    if "/" in text:
        raise SpecError(field, value, "an address has no path", "write just host:port, " + _EXAMPLE)
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise SpecError(field, value, "a bracketed IPv6 address needs ']:port' after it", "e.g. [fe80::1]:2222")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise SpecError(field, value, "not an IPv6 address inside the brackets", "e.g. [fe80::1]:2222") from None
    else:
        if text.count(":") > 1:
            host_part, _, port_part = text.rpartition(":")
            fix = f"put the IPv6 address in brackets: [{host_part}]:{port_part}"
            try:
                ipaddress.IPv6Address(text)  # fe80::1 or fe80::1:2222: which part is the port?
                fix = f"put the IPv6 address in brackets and add the port: [{text}]:2222"
                if port_part.isdigit() and len(port_part) >= 3:
                    fix = f"put the IPv6 address in brackets: [{host_part}]:{port_part} if {port_part} is the port"
            except ValueError:
                pass
            raise SpecError(field, value, "an IPv6 address must be in brackets", fix)
        host, sep, port_text = text.partition(":")
        if not sep:
            raise SpecError(field, value, "the address has no port", f"write {text}:2222 (host:port)")
        if not host:
            raise SpecError(field, value, "the address has no host", f"e.g. 10.0.0.5{text}")
        if not _HOSTNAME_RE.match(host):
            raise SpecError(field, value, f"{host!r} is not a hostname or IP address", _EXAMPLE)
    port = _parse_port(port_text, value, field)
    return Address(host, port)


def tf1_hosts_error(field: str, value: str) -> SpecError:
    """The error for a TF1 comma-separated host string (``"h1:2222,h2:2222"``, the format of
    TF1's ``--worker_hosts``), wherever it appears: a cluster spec's task type, one of its list
    items, a spec file's ``addresses``, a TF_CONFIG.

    Args:
        field: dotted field name, e.g. ``cluster.worker`` or ``addresses.worker[0]``.
        value: the string as given.

    Returns:
        The SpecError to raise: it says to write a list, with the string's own items.
    """
    items = [part.strip() for part in value.split(",") if part.strip()]
    shown = ", ".join(f'"{item}"' for item in items[:3]) + (", ..." if len(items) > 3 else "")
    return SpecError(field, value, "TF1 comma-separated hosts (the --worker_hosts format): one address per task",
                     f"write a list: [{shown}]")


def _parse_port(text: str, value: object, field: str) -> int:
    if not text.isdigit():
        raise SpecError(field, value, f"port {text!r} is not a number", "use a port from 1 to 65535, e.g. 2222")
    port = int(text)
    if not 1 <= port <= 65535:
        raise SpecError(field, value, f"port {port} is out of range", "use a port from 1 to 65535, e.g. 2222")
    return port


def check_addresses(items: Iterable[tuple[str, object]]) -> dict[str, Address]:
    """Parse every address and check them together.

    Args:
        items: ``(field, address)`` pairs, e.g. ``("cluster.worker[0]", "10.0.0.5:2222")``.

    Returns:
        field -> parsed address.

    Raises:
        SpecError: the first bad address, a duplicate ``host:port``, or loopback mixed with
            other hosts.
    """
    parsed: dict[str, Address] = {}
    seen: dict[tuple[str, int], str] = {}
    for field, value in items:
        address = parse_address(value, field)
        key = ("localhost" if address.is_loopback else address.host.lower().rstrip("."), address.port)
        if key in seen:
            raise SpecError(
                field, value, f"{seen[key]} already uses this host:port", "give every task its own port (or host)"
            )
        seen[key] = field
        parsed[field] = address
    loopback = [f for f, a in parsed.items() if a.is_loopback]
    remote = [f for f, a in parsed.items() if not a.is_loopback]
    if loopback and remote:
        field = loopback[0]
        raise SpecError(
            field,
            str(parsed[field]),
            f"a loopback address in a cluster that also has other hosts ({remote[0]}={str(parsed[remote[0]])!r}): "
            "tasks elsewhere cannot reach it",
            "use this machine's hostname or IP for every task, or loopback for every task",
        )
    return parsed
