"""Rendering TF_CONFIG: a pure function of (addresses, task).

TF_CONFIG format (TF "Multi-worker training with Keras" guide)::

    {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
     "task": {"type": "worker", "index": 1}}

The evaluator is left out of the training cluster: a ParameterServerStrategy
coordinator that sees it waits for it forever (tensorflow#46169). The evaluator's
own TF_CONFIG carries the training cluster and its task, which
``TFConfigClusterResolver`` accepts for the evaluator alone.
"""

from __future__ import annotations

import json
from typing import Mapping

from orchestrator.spec.model import TRAINING_TASK_TYPES, TaskId


def cluster_spec(addresses: Mapping[TaskId, str]) -> dict[str, list[str]]:
    """The training cluster as TF wants it: task type -> addresses ordered by task index.

    Args:
        addresses: ``host:port`` of every task (the evaluator, if present, is skipped).

    Returns:
        ``{"chief": [...], "worker": [...], "ps": [...]}`` with empty types omitted.

    Raises:
        ValueError: when the indices of a task type are not 0..n-1.
    """
    cluster: dict[str, list[str]] = {}
    for task_type in TRAINING_TASK_TYPES:
        indexed = sorted((t.task_index, a) for t, a in addresses.items() if t.task_type == task_type)
        if not indexed:
            continue
        if [i for i, _ in indexed] != list(range(len(indexed))):
            raise ValueError(f"{task_type} indices must be 0..{len(indexed) - 1}, got {[i for i, _ in indexed]}")
        cluster[task_type] = [a for _, a in indexed]
    return cluster


def tf_config(addresses: Mapping[TaskId, str], task: TaskId) -> dict:
    """The TF_CONFIG of one task.

    Args:
        addresses: ``host:port`` of every task of the job.
        task: the task whose TF_CONFIG is wanted.

    Returns:
        A dict with ``cluster``, ``task`` and ``rpc_layer`` ("grpc").

    Raises:
        KeyError: when ``task`` has no address.
    """
    if task not in addresses:
        raise KeyError(f"no address for {task}")
    return {
        "cluster": cluster_spec(addresses),
        "task": {"type": task.task_type, "index": task.task_index},
        "rpc_layer": "grpc",
    }


def tf_config_json(addresses: Mapping[TaskId, str], task: TaskId) -> str:
    """:func:`tf_config` serialized compactly, as the TF_CONFIG environment variable holds it."""
    return json.dumps(tf_config(addresses, task), separators=(",", ":"), sort_keys=True)


class ClusterConfig:
    """Every task's TF_CONFIG from one cluster rendered once (a plan of N tasks asks N of them:
    built one by one, that is O(N^2) time and text, ~100 s and 2.5 GB at 10,000 tasks).

    :meth:`tf_config` shares the one cluster dict (read it, never change it); :meth:`text` is
    :func:`tf_config_json`, made from the cluster's JSON when asked (O(N) each).

    Args:
        addresses: ``host:port`` of every task of the job.

    Raises:
        ValueError: as :func:`cluster_spec`.
    """

    def __init__(self, addresses: Mapping[TaskId, str]) -> None:
        self.addresses = addresses
        self.cluster = cluster_spec(addresses)
        self._json = json.dumps(self.cluster, separators=(",", ":"), sort_keys=True)

    def tf_config(self, task: TaskId) -> dict:
        """:func:`tf_config` of ``task``. Raises KeyError when ``task`` has no address."""
        if task not in self.addresses:
            raise KeyError(f"no address for {task}")
        return {"cluster": self.cluster, "task": {"type": task.task_type, "index": task.task_index},
                "rpc_layer": "grpc"}

    def text(self, task: TaskId) -> str:
        """:func:`tf_config_json` of ``task`` (keys sorted: cluster, rpc_layer, task)."""
        own = json.dumps({"type": task.task_type, "index": task.task_index}, separators=(",", ":"), sort_keys=True)
        return f'{{"cluster":{self._json},"rpc_layer":"grpc","task":{own}}}'

