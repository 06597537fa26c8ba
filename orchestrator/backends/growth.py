"""What a backend whose scheduler places the tasks says about growing an elastic job back
(issue 34, docs/elastic.md): :attr:`orchestrator.backends.base.Backend.growth`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from orchestrator.spec.model import JobSpec


class GrowsBack(Protocol):
    """A backend whose scheduler places the tasks (Slurm) and says itself what room an elastic MWMS
    job that grows back by itself has (``--grow-back``: :mod:`orchestrator.supervisor.growback`);
    the others leave it to the lease ledger of this machine
    (:attr:`~orchestrator.backends.base.Backend.growth` None)."""

    def grow_room(self, spec: JobSpec) -> Callable[[], int | None] | None:
        """The ``room`` the grow-back watch asks once its cooldown has passed: the most workers the
        backend could place now (None: not known). Called once per life; None: nothing grows back."""
