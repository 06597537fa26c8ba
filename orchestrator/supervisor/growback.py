"""Growing back by itself (issue 34 item 3, ``--grow-back``; docs/elastic.md): an elastic
MultiWorkerMirroredStrategy job running below MAX (started smaller beside other runs' leases, or
shrunk) grows back toward MAX when the machine has room again, after a cooldown since its last size
change.

:class:`GrowBack` is the watch :class:`~orchestrator.supervisor.resizing.Resizing` keeps: each tick
it says the size to grow to now, or None (:func:`~orchestrator.supervisor.rules.resize.grow_back_to`
decides); the growth itself is Resizing's planned resize (the coordinated save, 0 steps lost, the
warm spares), its cause ``grew back``. The room is asked of a callable (the API's
:class:`~orchestrator.resources.growroom.RoomProbe`: the lease ledger; on Slurm the backend's
:class:`~orchestrator.backends.slurm_room.SlurmRoom`: the nodes left, extension allocations), at
most once every :data:`PROBE_EVERY_S` and only once everything else allows a grow (the cooldown
passed, no slot withdrawn): no I/O before. A room may also say (optional attributes): ``every_s`` (how
often it may be asked instead, seconds: a room whose I/O runs elsewhere answers at once), ``counts_lost``
(True: it counts lost slots itself, a lost node is not room until it is back, so a slot lost is not
withheld from it), ``news()`` (lines for the events since the last look) and ``why(workers)`` (where
the room comes from, for the grow's event).

Each MWMS size change is a new life of the run, so "since the last size change" is since this life's
first look (its start); the slots lost in earlier lives (``slot lost``, ``node lost`` lives) and not given back by a
later grow are withdrawn, and their times make a flapping slot wait longer
(:func:`~orchestrator.supervisor.rules.resize.grow_back_at`); a size a user asked for with ``resize``
or ``launch --resume --workers N`` is a ceiling until a later grow by command (:func:`asked_ceiling`).
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.plan import Plan
from orchestrator.spec.elastic import valid_sizes
from orchestrator.supervisor.records.lives import Carried
from orchestrator.supervisor.rules.resize import GREW_BACK, MWMS, NODE_LOST, RESIZE_ASKED, SLOT_LOST, grow_back_to

PROBE_EVERY_S = 1.0
"""Most often the room is asked for (seconds), once a grow is otherwise due."""

LOSSES = (SLOT_LOST, NODE_LOST)
"""Causes of a size change that withdraw a slot (a Slurm node lost as an injected ``lose``)."""


def withdrawn_slots(sizes: list[tuple[str, int, int]]) -> int:
    """Slots lost and not given back: ``sizes`` is each size change of the run so far, in order, as
    (cause, workers before, workers after); a loss withdraws a slot, a grow (asked, or grown back)
    gives every withdrawn slot back (pure)."""
    withdrawn = 0
    for cause, before, after in sizes:
        if cause in LOSSES:
            withdrawn += 1
        elif cause in (RESIZE_ASKED, GREW_BACK) and after > before:
            withdrawn = 0
    return withdrawn


def asked_ceiling(sizes: list[tuple[str, int, int]], top: int) -> int:
    """The most workers a grow-back may reach: MAX (``top``), or the size asked last, by ``resize``
    or by a ``launch --resume RUN --workers N`` at another size (a life that ended for another cause
    and the next at another size): a user who shrank the job keeps it there; a later grow by command
    raises it. ``sizes`` as :func:`withdrawn_slots` (pure)."""
    ceiling = top
    for cause, before, after in sizes:
        if cause == RESIZE_ASKED or (cause not in (*LOSSES, GREW_BACK) and after != before):
            ceiling = after
        elif cause == GREW_BACK:
            ceiling = max(ceiling, after)
    return ceiling


class GrowBack:
    """The grow-back watch of one life.

    Args:
        plan: the life's plan (its spec's ``elastic`` bounds and ``grow_back_s``, its size now).
        carried: the run's earlier lives (slots lost, when).
        room: the most workers the machine has room for now (None: not known); None: no grow back
            (a backend without a lease ledger, or the API not asked).
        started_wall: Unix seconds this life started (losses of earlier lives are timed from it).
    """

    def __init__(self, plan: Plan, carried: Carried, room: Callable[[], int | None] | None,
                 started_wall: float) -> None:
        spec = plan.spec
        elastic = spec.elastic
        on = elastic is not None and spec.strategy.value == MWMS and room is not None
        self.cooldown_s = elastic.grow_back_s if on and elastic is not None else None
        self.bounds = (elastic.min, elastic.max) if elastic is not None else (spec.workers, spec.workers)
        self.valid = valid_sizes(elastic, spec.strategy.value, spec.chief,
                                 spec.training.batch_size_per_replica) if elastic is not None else []
        self._room = room
        lives = carried.lives
        sizes = [int((life.size or {}).get("workers") or spec.workers) for life in lives] + [spec.workers]
        changes = [(life.cause, sizes[i], sizes[i + 1]) for i, life in enumerate(lives)]
        self.withdrawn = 0 if getattr(room, "counts_lost", False) else withdrawn_slots(changes)
        self.bounds = (self.bounds[0], asked_ceiling(changes, self.bounds[1]))  # a size asked by `resize` stays
        self._lost_ago = [max(0.0, started_wall - life.ended_at) for life in lives
                          if life.cause in LOSSES and life.ended_at is not None]
        self._since: float | None = None  # this life's first look: its last size change
        self._probe_at = 0.0

    def look(self, now: float, size: int, running: bool) -> int | None:
        """The size to grow to now (None: not now).

        Args:
            now: the supervisor's monotonic clock.
            size: the workers the job runs at.
            running: the job is Running and training (not starting, restarting, evaluating).
        """
        if self._since is None:
            self._since = now
        if self.cooldown_s is None or not running:
            return None
        since, cooldown_s = now - self._since, self.cooldown_s

        def rule(room: int | None) -> int | None:
            return grow_back_to(size, self.bounds, self.valid, room, cooldown_s=cooldown_s, since_change_s=since,
                                withdrawn=self.withdrawn, losses_ago_s=[a + since for a in self._lost_ago])

        if rule(self.bounds[1]) is None or now < self._probe_at or self._room is None:  # no I/O before it is due
            return None
        self._probe_at = now + float(getattr(self._room, "every_s", PROBE_EVERY_S))
        return rule(self._room())

    def news(self) -> list[str]:
        """What the room said since the last call (its ``news()``; [] for a room without)."""
        said = getattr(self._room, "news", None)
        return list(said()) if callable(said) else []

    def why(self, workers: int) -> str:
        """Where the room for ``workers`` comes from (the room's ``why``, else the machine's)."""
        said = getattr(self._room, "why", None)
        return str(said(workers)) if callable(said) else f"the machine has room for {workers} again"
