"""The room of an elastic job that grows on Slurm, back by itself (MWMS) or asked by ``resize`` (issue 34
item 5, docs/elastic.md "Slurm: growing back"): :class:`SlurmRoom`, what the supervisor's grow-back
watch and a grow asked by ``resize`` ask, and :func:`usable_nodes`, the nodes a life may place tasks on
(the allocation's, those lost and back, granted extension allocations' from
:mod:`orchestrator.backends.slurm_extend`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from orchestrator.backends.slurm_extend import Extensions
from orchestrator.resources.extension import nodes_room, nodes_short, per_node
from orchestrator.spec.model import JobSpec


def usable_nodes(nodes: list[str], lost: Collection[str], extensions: Extensions) -> list[str]:
    """The nodes tasks may be placed on now: the allocation's ``nodes`` not ``lost`` (or lost and
    answering again), then the granted extension allocations' nodes not lost, in the order they were
    granted."""
    back = extensions.back()
    return [n for n in nodes if n not in lost or n in back] + \
        [n for n in extensions.granted() if n not in lost and n not in nodes]


class SlurmRoom:
    """The ``room`` of an elastic MWMS job on Slurm (the supervisor's grow-back watch calls it, at most
    every :attr:`every_s`, only once a grow is otherwise due): the most workers the nodes it may use hold at its
    density; it tells :class:`Extensions` how many nodes MAX is short of. Lost slots are counted here
    (``counts_lost``): a lost node is not room until it answers again.

    Args:
        spec: the life's spec (its elastic bounds, its other tasks).
        usable: the nodes the job may use now (the allocation's not lost, those back, granted extensions).
        used: the nodes this life's tasks run on.
        per_node: the job's tasks per node.
        extensions: the run's extension allocations.
    """

    counts_lost = True
    every_s = 0.2
    """How often the grow-back watch may ask (seconds): an answer reads memory only (the extension watch,
    a thread, talks to Slurm), so a granted extension is grown into at once."""

    def __init__(self, spec: JobSpec, usable: Callable[[], list[str]], used: Callable[[], set[str]], per_node: int,
                 extensions: Extensions) -> None:
        assert spec.elastic is not None
        self.bounds = (spec.elastic.min, spec.elastic.max)
        self._others = len(spec.tasks()) - spec.workers  # chief, ps, evaluator, tf.data service
        self._usable, self._used, self.per_node, self.extensions = usable, used, per_node, extensions

    def tasks_at(self, workers: int) -> int:
        """The job's tasks at ``workers`` workers."""
        return self._others + workers

    def __call__(self) -> int | None:
        """The most workers in MIN..MAX the usable nodes hold now (None: not even MIN)."""
        return self._room(self.bounds[1])

    def _room(self, target: int) -> int | None:
        """As :meth:`__call__`, extension allocations asked for the nodes ``target`` workers are short of."""
        nodes = len(self._usable())
        lo, hi = self.bounds
        self.extensions.want(nodes_short(target, self.tasks_at, nodes, self.per_node))
        return nodes_room(lo, hi, self.tasks_at, nodes, self.per_node)

    @property
    def asked_wait_s(self) -> float:
        """The longest a grow asked by ``resize`` waits for extension allocations: as long as Slurm has to
        start one (:data:`~orchestrator.backends.slurm_extend.GRANT_TIMEOUT_S`), seconds."""
        from orchestrator.backends import slurm_extend

        return slurm_extend.GRANT_TIMEOUT_S

    def for_size(self, workers: int) -> int:
        """The most workers in MIN..MAX the usable nodes hold now (0: not even MIN), asked for a grow to
        ``workers`` asked by ``resize``: extension allocations are asked for the nodes ``workers`` is
        short of (not MAX's), all at once."""
        return self._room(workers) or 0

    def news(self) -> list[str]:
        """The extension watch's lines since the last call (events)."""
        return self.extensions.news()

    def why(self, workers: int) -> str:
        """Where the room for ``workers`` comes from, for the grow's event."""
        used, granted, back = self._used(), self.extensions.granted(), self.extensions.back()
        fresh = [n for n in self._usable() if n not in used]
        said = [f"extension allocation {granted[n]} on {n} granted" if n in granted else
                f"node {n} answers again" if n in back else f"node {n} of the allocation is free" for n in fresh]
        return "; ".join(said) or f"the allocation has room for {workers} again"


class SlurmGrowth:
    """What a :class:`~orchestrator.backends.slurm.SlurmBackend` says about growing back
    (:class:`~orchestrator.backends.base.GrowsBack`).

    Args:
        backend: the backend (its allocation's nodes, the lost ones, its placement and extensions).
    """

    def __init__(self, backend: Any) -> None:  # a SlurmBackend (which imports this module)
        self._backend = backend

    def grow_room(self, spec: JobSpec) -> SlurmRoom | None:
        """The room of an elastic MWMS job that grows back by itself (:class:`SlurmRoom`: the nodes it
        may use, extension allocations asked for when MAX needs more; which jobs grow back is
        :func:`orchestrator.handle.room_probe`'s to say); None outside an allocation."""
        b = self._backend
        if not b.job_id:
            return None
        density = b.density or per_node(b.tasks_per_node_option, len(spec.tasks()), len(b.nodes))
        return SlurmRoom(spec, lambda: usable_nodes(b.nodes, b.lost, b.extensions),
                         lambda: set(b.placement.values()), density, b.extensions)
