"""Growing an elastic job on Slurm back to MAX (issue 34 item 5, docs/elastic.md "Slurm: growing back"):
the pure rules.

A job that lost a node runs below MAX on the nodes left. The nodes it may grow into are its
allocation's nodes not lost, a lost node that answers again, and one-node *extension allocations*:
new Slurm jobs (``sbatch -N1 --exclude=...``) whose steps join the run (``srun --jobid=EXT``).

* :func:`nodes_room`: the most workers those nodes hold at the job's density (its tasks per node
  when it started), and :func:`nodes_short`: how many more nodes MAX needs;
* :func:`extension_next`: what the extension watch does next with its (at most one) pending
  extension: ask for one, wait, take it, cancel it (not started within the bound, or not needed any
  more), or forget one Slurm ended.

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
