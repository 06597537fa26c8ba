"""Blocks of this machine's ports, one per live run (issue 36: "the ledger holds the cores, GPUs and
port ranges each live run uses").

A local launch binds one port per task on this machine (:mod:`orchestrator.backends.ports`). Drawn at
random over the whole range, two runs started side by side race for the same ports in the window
between a release and TensorFlow's bind ("Address already in use", the most common report against
every launcher: tensorflow#46602, TonY#487). Instead each run leases a **block** of ports in the
lease ledger (:mod:`orchestrator.resources.leases`), disjoint from every other live run's, and draws
its tasks' ports only inside it, still binding and holding each (a process outside the ledger may
hold one: then another of the block is drawn).

The rules here are pure (table-tested in ``tests/decisions/test_lease_rules.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

DEFAULT_LOW = 20000
"""The lowest port drawn: above the well-known and most registered service ports of a development box."""
ALIGN = 16
"""Blocks start at multiples of this and their sizes are multiples of it."""
HEADROOM = 2
"""Ports per task in a block: one for the task, one spare for a port a process outside the ledger holds
(restarts keep their task's port; warm spares and the tf.data service roles are tasks of the count)."""

PortBlock = tuple[int, int]
"""``[low, high)``: the ports ``low`` .. ``high - 1``."""


def port_range() -> PortBlock:
    """``[low, high)`` of ports to draw from: 20000 up to the start of the kernel's ephemeral range
    (``/proc/sys/net/ipv4/ip_local_port_range``; 32768 where it cannot be read), so neither
    ``bind(0)`` nor outgoing connections of other programs are handed a port of a run; 10000 up
    when the ephemeral range starts below 21000."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    high = max(ephemeral_low, DEFAULT_LOW + 1000)
    low = DEFAULT_LOW if ephemeral_low > DEFAULT_LOW + 1000 else 10000
    return low, high


def block_size(tasks: int) -> int:
    """Ports in the block of a run of ``tasks`` tasks: :data:`HEADROOM` per task, rounded up to a
    multiple of :data:`ALIGN` (at least one :data:`ALIGN`): 1-8 tasks 16, 9-16 tasks 32."""
    need = max(1, HEADROOM * max(0, tasks))
    return -(-need // ALIGN) * ALIGN


def overlaps(a: PortBlock, b: PortBlock) -> bool:
    """True when the blocks share a port."""
    return a[0] < b[1] and b[0] < a[1]


def free_block(span: PortBlock, size: int, taken: Iterable[PortBlock], start: int = 0) -> PortBlock | None:
    """The first block of ``size`` ports inside ``span`` that overlaps none of ``taken``, trying the
    aligned starts (multiples of :data:`ALIGN`) from the ``start``-th one on, wrapping around.

    A launch passes a random ``start``: two ledgers that do not see each other (the test suite's
    lanes, another user's ``ORCH_LEASES_DIR``) then rarely deal the same block, as random draws
    rarely met before blocks; within one ledger blocks never overlap whatever ``start`` is.

    Args:
        span: the ports that may be dealt (:func:`port_range`).
        size: the block's size (:func:`block_size`).
        taken: the blocks of the other live runs.
        start: index of the first aligned start tried (any int: taken modulo their number).

    Returns:
        ``(low, high)``, or None when every aligned block overlaps a taken one (or ``span`` is
        smaller than ``size``).
    """
    first = -(-span[0] // ALIGN) * ALIGN
    starts = list(range(first, span[1] - size + 1, ALIGN))
    if not starts or size <= 0:
        return None
    held = sorted(taken)
    k = start % len(starts)
    for low in starts[k:] + starts[:k]:
        block = (low, low + size)
        if not any(overlaps(block, t) for t in held):
            return block
    return None


def format_block(block: PortBlock) -> str:
    """``20016-20031`` (both ends included, as ``list`` and the waiting line show it)."""
    return f"{block[0]}-{block[1] - 1}"
