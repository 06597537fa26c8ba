"""Sizes in bytes, as users write them (``256M``, ``1G``, ``512Mi``): one parser for every option
that takes one (``--max-log-size``, ``--shm-size``, ``--memory``), and the renderings of a size
for Docker (bytes) and Kubernetes (a quantity)."""

from __future__ import annotations

import re

from orchestrator.errors import SpecError

_UNITS = {"": 1, "B": 1}
for _i, _p in enumerate("KMGT", 1):
    for _suffix in (_p, _p + "B", _p + "I", _p + "IB"):
        _UNITS[_suffix] = 1 << (10 * _i)

DEFAULT_SHM_SIZE_BYTES = 1 << 30
"""1 GiB of ``/dev/shm`` for a training container: Docker's default is 64 MB, which multi-process
data loading (``tf.data`` service workers, a ``multiprocessing`` reader) and NCCL's shared-memory
transport outgrow with a ``Bus error``; NVIDIA's containers are run with ``--shm-size=1g``."""


def parse_size(name: str, value: object, fix: str) -> int:
    """``"256M"``, ``"1G"``, ``"512Mi"``, ``"64KiB"`` or a number of bytes as bytes (binary units:
    1K = 1Ki = 1024; case-insensitive).

    Args:
        name: the field or flag, for the message.
        value: what the user wrote.
        fix: an example of a good value, for the message.

    Raises:
        SpecError: naming ``name`` when ``value`` is not a size.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
    if match is None or match.group(2).upper() not in _UNITS or isinstance(value, bool):
        raise SpecError(name, value, "is not a size", fix)
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def quantity(size_bytes: int) -> str:
    """A Kubernetes quantity of ``size_bytes``: ``1Gi``, ``512Mi``, or bytes when not whole."""
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size_bytes % unit == 0:
            return f"{size_bytes // unit}{suffix}"
    return str(size_bytes)
