"""A task's own cores: ``ORCH_CPUS`` (:mod:`orchestrator.resources.cpus` plans them) made its affinity.

The task side's half of pinning: :func:`pin_self` runs in :mod:`orchestrator.task.execwrap`
before a user's program starts (the program inherits it), in a warm spare when it takes a task
over, and in ``python -m worker`` and ``python -m ps`` right after ``import tensorflow``, for
every thread (``all_threads``), before TensorFlow starts its thread pools (its first op). Not
before the import: four TensorFlow imports on two cores, two of them pinned one core each, ended
0.4-1 s later than floating ones (the kernel cannot even out the load of pinned processes), and a
PSS job's launch -> first step took a median 11.90 s pinned that way against 10.91 s unpinned
(4 interleaved pairs; after the change 11.57 s against 11.63 s). Importing uses one thread and
no pool: where the import runs does not change where training runs. A Slurm task's node share is
still resolved first thing (:func:`resolve_early`), before its heartbeat reporter starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from orchestrator import env
from orchestrator.resources.cores import allowed_cores, node_share_plan


def parse_cpus(text: str) -> tuple[int, ...]:
    """The cores of a cpu list (``0-3,8``, as :func:`orchestrator.resources.cores.format_cpus` writes
    it); () for an empty one.

    Raises:
        ValueError: text that is not a cpu list.
    """
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if first < 0 or last < first:
            raise ValueError(f"bad cpu range {part!r}")
        out.extend(range(first, last + 1))
    return tuple(sorted(set(out)))


def pin_self(environ: Mapping[str, str] | None = None, variable: str = env.CPUS,
             all_threads: bool = False) -> tuple[int, ...]:
    """Set the calling thread's affinity (``sched_setaffinity(0)``: threads it starts later
    inherit it) to the cores of ``variable`` (``ORCH_CPUS``), before TensorFlow starts its
    thread pools (its first op), so that every pool runs there. ``all_threads``: also every
    other thread of the process that shares the calling thread's affinity (one pinned elsewhere,
    the heartbeat reporter's on ``ORCH_SERVICE_CPUS``, keeps its own). Nothing when the variable
    is unset or empty, or the platform has no affinity.

    A task on another node (Slurm) has ``ORCH_NODE_CPUS`` instead (:func:`resolve_node_share`):
    it first divides the cores its step may use among the job's tasks on that node.

    Returns:
        The cores set; () when none were.
    """
    source = os.environ if environ is None else environ
    if variable == env.CPUS and environ is None and not source.get(variable) and source.get(env.NODE_CPUS):
        resolve_node_share()
    text = source.get(variable, "")
    if not text or not hasattr(os, "sched_setaffinity"):
        return ()
    try:
        cpus = parse_cpus(text)
        floating = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
    except (ValueError, OSError):
        return ()  # a core this process may not use (another cpuset): it runs unpinned, as without the variable
    if all_threads:
        for tid in _threads():
            try:
                if os.sched_getaffinity(tid) == floating:  # a thread pinned elsewhere (the reporter's) stays
                    os.sched_setaffinity(tid, cpus)
            except OSError:  # it ended meanwhile
                pass
    return cpus


def resolve_early() -> None:
    """What ``python -m worker`` and ``python -m ps`` run first thing, before their heartbeat
    reporter starts: a task with a node share (``ORCH_NODE_CPUS``, Slurm) turns it into its
    ``ORCH_CPUS``, ``ORCH_SERVICE_CPUS`` and thread limits now (:func:`resolve_node_share`), so
    that the reporter's thread finds its service cores; the pinning itself waits until
    TensorFlow is imported (:func:`pin_self` with ``all_threads``)."""
    if not env.read(env.CPUS) and env.read(env.NODE_CPUS):
        resolve_node_share()


def _threads() -> list[int]:
    """The ids of this process's threads (``/proc/self/task``); [] where there is no such list."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


def resolve_node_share() -> tuple[int, ...]:
    """``ORCH_NODE_CPUS`` (this task's share of its node, :func:`orchestrator.resources.cores.node_share`)
    over the cores this process may run on (its Slurm step's) into what a task on this machine
    gets from its plan: ``ORCH_CPUS``, ``ORCH_SERVICE_CPUS`` and the thread limits in
    ``os.environ`` (the program and what it starts inherit them). A bad share is ignored
    (the task floats, its threads as planned).

    Returns:
        The task's cores; () when it floats.
    """
    try:
        plan, me = node_share_plan(env.read(env.NODE_CPUS), allowed_cores())
    except ValueError:
        return ()
    os.environ.update(plan.env(me))  # what CpuPlan.env gives a task planned on one machine
    return tuple(plan.tasks.get(me, ()))
