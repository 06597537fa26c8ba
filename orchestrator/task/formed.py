"""What a task's ``tf.distribute`` strategy formed, as numbers a heartbeat carries (task side,
no TensorFlow import: the strategy is read through its public attributes).

A program that builds its own cluster (a hard-coded ``TF_CONFIG``, ``SlurmClusterResolver``
inside one-task steps) can train alone in every task while the orchestrator planned one
cluster of N: each task then reports ``replicas_in_sync 1``, ``cluster_workers 1``, and the
supervisor compares that with the plan (:mod:`orchestrator.supervisor.formed`).
"""

from __future__ import annotations

from typing import Any

REPLICAS_IN_SYNC = "replicas_in_sync"
"""Heartbeat metric: ``strategy.num_replicas_in_sync`` of the task's strategy."""
CLUSTER_WORKERS = "cluster_workers"
"""Heartbeat metric: the chief and workers in the cluster the task's strategy resolved (1 for
a strategy of this process alone)."""
GLOBAL_BATCH_SIZE = "global_batch_size"
"""Heartbeat metric: examples per training step across every replica in sync."""


def cluster_workers(strategy: Any) -> int:
    """The chief and workers of the cluster ``strategy`` resolved: its ``cluster_resolver``'s
    cluster spec (MultiWorkerMirroredStrategy, ParameterServerStrategy), 1 without one (the
    default strategy, MirroredStrategy: this process alone)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    try:
        spec = resolver.cluster_spec().as_dict()
    except Exception:  # noqa: BLE001 - a resolver that cannot say: this process alone
        return 1
    count = sum(len(spec.get(kind) or ()) for kind in ("chief", "master", "worker"))
    return max(count, 1)


def strategy_facts(strategy: Any) -> dict[str, int]:
    """``{"replicas_in_sync": R, "cluster_workers": W}`` of a ``tf.distribute`` strategy (the
    metrics :func:`orchestrator.client.report` sends with ``strategy=``); ``{}`` for an object
    that is not one."""
    replicas = getattr(strategy, "num_replicas_in_sync", None)
    if replicas is None:
        return {}
    return {REPLICAS_IN_SYNC: int(replicas), CLUSTER_WORKERS: cluster_workers(strategy)}
