"""How many workers the machine has room for now, for an elastic run that holds a lease below MAX
(issue 34 item 3, ``--grow-back``; docs/elastic.md).

A run started below MAX because other runs of the machine leased what MAX needs
(:func:`orchestrator.resources.leases.decide_sized`), or one that shrank, asks here, once a second
after its cooldown, whether the ledger would now grant it a larger size: the same decision a
launch takes (:func:`orchestrator.resources.leases.decide`), over the other live runs of the ledger,
its own lease counted as free (its next life returns it before it leases the larger size). Every
waiting run is ahead of it: a grow never takes what a waiting run waits for (first come, first
served, as :func:`orchestrator.resources.leases.ahead`).

The ledger is read without its lock (it is replaced atomically); a read that fails is "not known"
(None: no grow). :func:`room` is pure over what was read; :class:`RoomProbe` reads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

from orchestrator.errors import SpecError
from orchestrator.resources.elastic import largest_that_fits
from orchestrator.resources.gpus import Inventory
from orchestrator.resources.leases import Decision, Holder, Ledger, decide, live, start_time
from orchestrator.resources.portblocks import port_range
from orchestrator.spec.model import JobSpec


def room(spec: JobSpec, others: Sequence[Holder], *, allowed: Sequence[int], inventory: Inventory | None,
         host_cpus: bool, ports: Callable[[JobSpec], int] = lambda s: 0) -> int | None:
    """The largest size from MAX down (among the sizes the batch policy accepts) that the ledger
    would grant ``spec``'s run beside ``others`` now (pure).

    Args:
        spec: the run's spec (elastic workers; its size now does not matter).
        others: the ledger's other live entries (holders and waiters; the run's own left out).
        allowed: the cores the orchestrator may run on.
        inventory: the node's GPUs (None: the backend's scheduler assigns them).
        host_cpus: the backend pins on this machine's cores.
        ports: how many ports of this machine the run binds at a size (0: it leases no block).

    Returns:
        That size; None for a fixed count or when not even MIN fits.
    """
    if spec.elastic is None:
        return None
    def attempt(sized: JobSpec) -> Decision:
        try:
            return decide(sized, allowed, inventory, {}, others, host_cpus, ports=ports(sized), port_span=span)
        except SpecError:  # more GPUs than the node has: that size never fits here
            return Decision(False)

    span = port_range()
    tried, fit = largest_that_fits(dataclasses.replace(spec, workers=spec.elastic.max), attempt, lambda d: d.granted)
    return None if fit is None else tried[fit][0].workers


class RoomProbe:
    """Reads the ledger for :func:`room` (the supervisor's ``room`` callable: called from its loop).

    Args:
        spec: the run's spec.
        run_id: the run (its own entry is left out).
        allowed, inventory, host_cpus, ports: as :func:`room`.
        ledger: the ledger (default: :func:`orchestrator.resources.leases.ledger_dir`'s).
    """

    def __init__(self, spec: JobSpec, run_id: str, *, allowed: Sequence[int], inventory: Inventory | None,
                 host_cpus: bool, ports: Callable[[JobSpec], int] = lambda s: 0,
                 ledger: Ledger | None = None) -> None:
        self.spec, self.run_id, self.allowed, self.inventory = spec, run_id, tuple(allowed), inventory
        self.host_cpus, self.ports = host_cpus, ports
        self.ledger = ledger or Ledger()
        self._me = (os.getpid(), start_time(os.getpid()) or 0.0, run_id)

    def __call__(self) -> int | None:
        """The room now (None: not known, or not even MIN)."""
        try:
            others = [h for h in self.ledger.read() if h.key != self._me and live(h)]
            return room(self.spec, others, allowed=self.allowed, inventory=self.inventory,
                        host_cpus=self.host_cpus, ports=self.ports)
        except (OSError, ValueError):  # a ledger that cannot be read: no grow now
            return None
