"""Growing an elastic job on Slurm back to MAX (issue 34 item 5, docs/elastic.md "Slurm: growing back"):
the pure rules.

A job that lost a node runs below MAX on the nodes left. The nodes it may grow into are its
allocation's nodes not lost, a lost node that answers again, and one-node *extension allocations*:
new Slurm jobs (``sbatch -N1 --exclude=...``) whose steps join the run (``srun --jobid=EXT``).

* :func:`nodes_room`: the most workers those nodes hold at the job's density (its tasks per node
  when it started), and :func:`nodes_short`: how many more nodes MAX needs;
* :func:`extension_next`: what the extension watch does next with each pending extension: wait,
  take it, cancel it (not started within the bound, or not needed any more), or forget one Slurm
  ended; and :func:`extensions_to_ask`: how many more to ask for at once (a grow short of two nodes
  asks for both together, not one after the other);
* :func:`asked_grow`: whether a grow asked by ``resize`` goes now, waits for extension allocations,
  or goes on the nodes it has once the wait is over.

The commands are :mod:`orchestrator.backends.slurm_extend`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

SUBMIT = "submit"
"""Ask Slurm for a one-node extension allocation."""
WAIT = "wait"
"""An extension is pending: look again later."""
GRANTED = "granted"
"""The pending extension runs: check a step starts on its node, then its node is room."""
CANCEL_LATE = "cancel late"
"""Slurm did not start the pending extension within the bound: cancel it, ask again later."""
CANCEL_UNNEEDED = "cancel unneeded"
"""The pending extension is not needed any more (the grow is no longer due): cancel it."""
GONE = "gone"
"""Slurm ended the pending extension before it ran (failed, cancelled by someone): ask again later."""
NOTHING = "nothing"
"""Nothing pending and nothing to ask for (no node short, or the retry's wait not over)."""

NOW, WAIT_FOR_NODES, PACKED = "now", "wait for nodes", "packed"
"""What a grow asked by ``resize`` does (:func:`asked_grow`)."""
ASKED_GROW_WAIT_S = 120.0
"""The longest a grow asked by ``resize`` waits for extension allocations (seconds; Slurm's room says its
own: the grant bound of :mod:`orchestrator.backends.slurm_extend`)."""

STARTING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED"})
"""``squeue`` states of a job that has not run yet but may (``%T``)."""


def nodes_room(lo: int, hi: int, tasks_at: Callable[[int], int], nodes: int, per_node: int) -> int | None:
    """The most workers in ``lo..hi`` whose tasks fit on ``nodes`` nodes of ``per_node`` tasks each (pure).

    Args:
        lo, hi: the elastic bounds (MIN, MAX).
        tasks_at: the job's task count at a number of workers (chief, ps, evaluator counted).
        nodes: the nodes the job may use now.
        per_node: the most tasks on one node (the job's density when it started; >= 1).

    Returns:
        That size; None when not even MIN fits.
    """
    fit = [n for n in range(lo, hi + 1) if tasks_at(n) <= nodes * max(1, per_node)]
    return max(fit) if fit else None


def nodes_short(hi: int, tasks_at: Callable[[int], int], nodes: int, per_node: int) -> int:
    """How many more nodes the job needs for MAX (``hi``) at ``per_node`` tasks a node; 0 when it
    has enough (pure)."""
    return max(0, math.ceil(tasks_at(hi) / max(1, per_node)) - nodes)


def per_node(option: int | None, tasks: int, nodes: int) -> int:
    """The job's density: ``--tasks-per-node`` when given, else as its placement packs the tasks it
    started with on the allocation's nodes (``ceil(tasks / nodes)``, at least 1) (pure)."""
    return option if option is not None else max(1, math.ceil(tasks / max(1, nodes)))


def extension_next(short: int, pending: str | None, pending_age_s: float, retry_in_s: float, *,
                   grant_timeout_s: float) -> str:
    """What the extension watch does next (pure).

    Args:
        short: nodes the job needs beyond those it may use now to reach MAX (:func:`nodes_short`),
            as the room probe last said it (0 when the grow is no longer due).
        pending: ``squeue``'s state (``%T``) of the pending extension; "" when Slurm lists it no
            more; None when none is pending.
        pending_age_s: seconds since the pending extension was asked for.
        retry_in_s: seconds until another may be asked for after a cancelled or failed one (<= 0: now).
        grant_timeout_s: most seconds an extension may stay pending before it is cancelled.

    Returns:
        :data:`SUBMIT`, :data:`WAIT`, :data:`GRANTED`, :data:`CANCEL_LATE`, :data:`CANCEL_UNNEEDED`,
        :data:`GONE` or :data:`NOTHING`.
    """
    if pending is None:
        return SUBMIT if short > 0 and retry_in_s <= 0 else NOTHING
    if pending == "RUNNING":
        return GRANTED
    if pending not in STARTING_STATES:
        return GONE
    if short <= 0:
        return CANCEL_UNNEEDED
    if pending_age_s > grant_timeout_s:
        return CANCEL_LATE
    return WAIT


def extensions_to_ask(short: int, pending: int, retry_in_s: float) -> int:
    """How many extension allocations to ask for now, each of one node, all at once (pure).

    Args:
        short: nodes the job needs beyond those it may use now (:func:`nodes_short`; 0 when the grow
            is no longer due).
        pending: extensions asked for and not yet running.
        retry_in_s: seconds until another may be asked for after a cancelled or failed one (<= 0: now).

    Returns:
        ``short - pending`` (at least 0), or 0 while the retry's wait is not over.
    """
    return max(0, short - pending) if retry_in_s <= 0 else 0


def asked_grow(target: int, room: int | None, waited_s: float, bound_s: float) -> str:
    """What a grow to ``target`` workers asked by ``resize`` does now (pure).

    Args:
        target: the size asked.
        room: the most workers the nodes the job may use hold at its density (their count at the
            density it started with; extension allocations granted counted); None: the backend does not
            say (it places what it is asked: the local and docker backends).
        waited_s: seconds since the grow was asked.
        bound_s: the longest wait for extension allocations, seconds.

    Returns:
        :data:`NOW` when the backend does not say or its nodes hold ``target``; :data:`WAIT_FOR_NODES`
        (extension allocations asked for the nodes short) while ``waited_s < bound_s``; else
        :data:`PACKED`: the grow goes on the nodes the job has, more tasks a node than it started with.
    """
    if room is None or room >= target:
        return NOW
    return WAIT_FOR_NODES if waited_s < bound_s else PACKED
