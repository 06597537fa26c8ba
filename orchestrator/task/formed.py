"""What a task's ``tf.distribute`` strategy formed, as numbers a heartbeat carries (task side,
no TensorFlow import: the strategy is read through its public attributes).

A program that builds its own cluster (a hard-coded ``TF_CONFIG``, ``SlurmClusterResolver``
inside one-task steps) can train alone in every task while the orchestrator planned one
cluster of N: each task then reports ``replicas_in_sync 1``, ``cluster_workers 1`` (the
heartbeat's typed ``formed`` field, not its metrics), and the supervisor compares that with the
plan (:mod:`orchestrator.supervisor.rules.formed`).
"""

from __future__ import annotations

from typing import Any

REPLICAS_IN_SYNC = "replicas_in_sync"
"""Heartbeat ``formed`` field: ``strategy.num_replicas_in_sync`` of the task's strategy."""
CLUSTER_WORKERS = "cluster_workers"
"""Heartbeat ``formed`` field: the chief and workers in the cluster the task's strategy resolved
(absent for a strategy without a cluster resolver)."""
FORMED_FIELDS = (REPLICAS_IN_SYNC, CLUSTER_WORKERS)
"""The fields of a heartbeat's ``Formed`` (typed, not metrics: the supervisor acts on them)."""
GLOBAL_BATCH_SIZE = "global_batch_size"
"""Heartbeat metric: examples per training step across every replica in sync."""


def cluster_workers(strategy: Any) -> int | None:
    """The chief and workers of the cluster ``strategy`` resolved (its cluster resolver's cluster
    spec: MultiWorkerMirroredStrategy, ParameterServerStrategy); None when it has no resolver
    (the default strategy, MirroredStrategy) or the resolver cannot say."""
    # ParameterServerStrategy keeps its resolver on itself, not on ``extended`` where the public
    # ``cluster_resolver`` property looks (TF 2.21 parameter_server_strategy_v2.py)
    resolver = getattr(strategy, "cluster_resolver", None) or getattr(strategy, "_cluster_resolver", None)
    if resolver is None:
        return None
    try:
        spec = resolver.cluster_spec().as_dict()
    except Exception:  # noqa: BLE001 - a resolver that cannot say: unknown, nothing to compare
        return None
    count = sum(len(spec.get(kind) or ()) for kind in ("chief", "master", "worker"))
    return count or 1  # an empty cluster spec: this process alone


def strategy_facts(strategy: Any) -> dict[str, int]:
    """``{"replicas_in_sync": R, "cluster_workers": W}`` of a ``tf.distribute`` strategy (the
    metrics :func:`orchestrator.client.report` sends with ``strategy=``; ``cluster_workers`` only
    when it has a cluster resolver); ``{}`` for an object that is not one."""
    replicas = getattr(strategy, "num_replicas_in_sync", None)
    if replicas is None:
        return {}
    workers = cluster_workers(strategy)
    return {REPLICAS_IN_SYNC: int(replicas), **({CLUSTER_WORKERS: workers} if workers is not None else {})}
