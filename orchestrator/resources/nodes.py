"""Where the Slurm backend's tasks run: the placement rule over an allocation's nodes, and
moving the tasks of lost nodes (pure functions; :mod:`orchestrator.backends.slurm` acts on them)."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from orchestrator.errors import SpecError
from orchestrator.spec.model import TaskId

__all__ = ["move_off", "parse_node_list", "place"]


def place(tasks: Sequence[TaskId], nodes: Sequence[str], tasks_per_node: int | None = None) -> dict[TaskId, str]:
    """The node of every task (the placement rule of the module docstring).

    Args:
        tasks: the job's tasks, chief first (``JobSpec.tasks()`` order).
        nodes: the allocation's nodes, in ``SLURM_JOB_NODELIST`` order.
        tasks_per_node: most tasks on one node (default ``ceil(tasks / nodes)``).

    Returns:
        task -> node name.

    Raises:
        SpecError: no nodes, a bad ``tasks_per_node``, or more tasks than the nodes can hold.
    """
    if not nodes:
        raise SpecError("SLURM_JOB_NODELIST", "", "the allocation has no nodes", "run inside salloc -N N or sbatch")
    cap = tasks_per_node if tasks_per_node is not None else math.ceil(len(tasks) / len(nodes))
    if cap < 1:
        raise SpecError("tasks-per-node", tasks_per_node, "must be at least 1", "e.g. --tasks-per-node 2")
    if len(tasks) > cap * len(nodes):
        raise SpecError("tasks-per-node", cap, f"{len(tasks)} tasks do not fit on {len(nodes)} node(s) with at most "
                        f"{cap} per node", f"allocate {math.ceil(len(tasks) / cap)} nodes (salloc -N "
                        f"{math.ceil(len(tasks) / cap)}) or raise --tasks-per-node to "
                        f"{math.ceil(len(tasks) / len(nodes))}")
    return {task: nodes[i % len(nodes)] for i, task in enumerate(tasks)}


def move_off(placement: Mapping[TaskId, str], moving: Sequence[TaskId], nodes: Sequence[str], lost: set[str],
             tasks_per_node: int) -> dict[TaskId, str] | str:
    """Place ``moving`` (tasks whose node is lost) on the nodes left, least loaded first.

    Returns:
        The new placement, or a sentence saying why they do not fit.
    """
    left = [n for n in nodes if n not in lost]
    new = dict(placement)
    load = {n: sum(1 for t, m in new.items() if m == n and t not in moving) for n in left}
    for task in moving:
        free = [n for n in left if load[n] < tasks_per_node]
        if not free:
            return (f"node(s) {', '.join(sorted(lost))} lost; the {len(left)} node(s) left "
                    f"({', '.join(left) or 'none'}) "
                    f"cannot hold {len(moving)} more task(s) with at most {tasks_per_node} per node")
        target = min(free, key=lambda n: (load[n], left.index(n)))
        new[task] = target
        load[target] += 1
    return new


def parse_node_list(text: str) -> list[str]:
    """Node names, one a line (``scontrol show hostnames`` output)."""
    return [line.strip() for line in text.splitlines() if line.strip()]
