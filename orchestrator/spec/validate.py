"""Checks of an existing ``TF_CONFIG`` or cluster spec, written by hand or by another tool.

TensorFlow reports most of these mistakes late (a coordinator that waits forever, a
worker that dials its own loopback) or not at all. Each rule below is a kind of mistake;
every address goes through :func:`orchestrator.spec.address.parse_address` and the
topology goes through the same :class:`JobSpec` rules ``launch`` uses.

* TF_CONFIG keys: ``cluster``, ``task``, ``rpc_layer``, ``environment``; TF1's
  ``ps_hosts`` / ``worker_hosts`` flags are not TF_CONFIG.
* task types: ``chief``, ``worker``, ``ps``, ``evaluator``; ``master`` is TF1's chief, which
  ``tf.distribute`` rejects (``multi_worker_util._validate_cluster_spec``).
* each type lists its addresses in index order (a sparse ``{index: address}`` mapping is
  a ``tf.train.ClusterSpec`` feature ``tf.distribute`` strategies do not support);
* the evaluator is never in the cluster (tensorflow#46169): it has its own TF_CONFIG;
* ``task.index`` is a number in range; the evaluator's is 0;
* addresses: see :mod:`orchestrator.spec.address`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.address import Address, check_addresses, tf1_hosts_error
from orchestrator.spec.loader import TF1_NAMES, suggest
from orchestrator.spec.model import TASK_TYPES, TRAINING_TASK_TYPES, JobSpec, Strategy, TaskId

TF_CONFIG_KEYS = ("cluster", "task", "rpc_layer", "environment")
TASK_KEYS = ("type", "index", "trial")
TF1_HOST_FLAGS = {"ps_hosts": "ps", "worker_hosts": "worker", "chief_hosts": "chief", "master_hosts": "chief"}
"""TF1 ``--ps_hosts=a:1,b:1`` style flags -> the TF2 task type."""


@dataclass(frozen=True)
class ClusterReport:
    """A checked cluster (and, for a TF_CONFIG, its task).

    Attributes:
        cluster: task type -> addresses, in TF's order.
        strategy: the strategy the cluster fits (given, or inferred: ps -> parameter_server).
        task: the TF_CONFIG's task, or None for a bare cluster spec.
    """

    cluster: Mapping[str, list[Address]]
    strategy: Strategy
    task: TaskId | None = None

    def describe(self) -> str:
        """``worker:1 of a multi_worker_mirrored cluster: worker 2 (2 tasks)``."""
        counts = ", ".join(f"{t} {len(a)}" for t, a in self.cluster.items())
        total = sum(len(a) for a in self.cluster.values())
        head = f"TF_CONFIG of {self.task} in" if self.task else "cluster spec:"
        return f"{head} a {self.strategy.value} cluster of {counts} ({total} tasks)"


def parse_json(text: str, field: str = "TF_CONFIG") -> Any:
    """Parse JSON text, one line of error naming line and column.

    Raises:
        SpecError: not JSON (with a hint for the TF1 ``--worker_hosts=...`` style).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 60 else text[:57] + "..."
        if any(flag in text for flag in TF1_HOST_FLAGS):
            fix = 'TF1 host flags are not TF_CONFIG; write {"cluster": {"worker": ["host:port", ...]}, "task": {...}}'
        elif "'" in text and '"' not in text:
            fix = "JSON needs double quotes (the shell may have eaten them: wrap the value in single quotes)"
        else:
            fix = 'write JSON: {"cluster": {...}, "task": {"type": "worker", "index": 0}}'
        raise SpecError(field, shown, f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})",
                        fix) from None


def check_cluster(cluster: object, field: str = "cluster", strategy: Strategy | str | None = None) -> ClusterReport:
    """Check a cluster spec: ``{"chief": [...], "worker": [...], "ps": [...]}``.

    Args:
        cluster: the parsed cluster spec.
        field: its dotted name in messages (``cluster`` inside a TF_CONFIG).
        strategy: the strategy it is meant for; None infers it (ps present ->
            parameter_server, else multi_worker_mirrored).

    Returns:
        The checked cluster.

    Raises:
        SpecError: naming the first bad field, its value and the fix.
    """
    if not isinstance(cluster, Mapping):
        raise SpecError(field, cluster, "must map task types to lists of host:port",
                        'e.g. {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}')
    if not cluster:
        raise SpecError(field, dict(cluster), "the cluster has no tasks",
                        'list them, e.g. {"worker": ["10.0.0.1:2222"]}')
    items: list[tuple[str, object]] = []
    lists: dict[str, list] = {}
    for task_type, value in cluster.items():
        where = f"{field}.{task_type}"
        if task_type in TF1_NAMES:
            raise SpecError(where, value, f"'{task_type}' is the TF1 name of the {TF1_NAMES[task_type]}; "
                            "tf.distribute rejects it", f"rename {task_type} to {TF1_NAMES[task_type]}")
        if task_type in TF1_HOST_FLAGS:
            raise SpecError(where, value, f"'{task_type}' is a TF1 command-line flag, not a task type",
                            f"write {TF1_HOST_FLAGS[task_type]}: a list of host:port")
        if task_type == "evaluator":
            raise SpecError(where, value, "the evaluator must not be in the cluster: a ParameterServerStrategy "
                            "coordinator waits for it forever (tensorflow#46169)",
                            "drop it from cluster; the evaluator's own TF_CONFIG has task type evaluator")
        if task_type not in TASK_TYPES:
            raise SpecError(where, value, "unknown task type", suggest(task_type, TRAINING_TASK_TYPES))
        if isinstance(value, Mapping):
            raise SpecError(where, value, "a sparse cluster (task index -> address) is not supported by tf.distribute",
                            "list every task's address in index order")
        if isinstance(value, str):
            if "," in value:
                raise tf1_hosts_error(where, value)
            raise SpecError(where, value, "must be a list of host:port", f'write a list: ["{value}"]')
        if not isinstance(value, list):
            raise SpecError(where, value, "must be a list of host:port", f'e.g. "{task_type}": ["10.0.0.1:2222"]')
        if not value:
            raise SpecError(where, value, f"no {task_type} addresses", f"drop {task_type}, or list its tasks")
        lists[task_type] = value
        items += [(f"{where}[{i}]", a) for i, a in enumerate(value)]
    if len(lists.get("chief", [])) > 1:
        raise SpecError(f"{field}.chief", lists["chief"], "TensorFlow allows at most one chief",
                        "keep one chief and make the others workers")
    parsed = check_addresses(items)
    if strategy is None:
        strategy = Strategy.PARAMETER_SERVER if "ps" in lists else Strategy.MULTI_WORKER_MIRRORED
    strategy = strategy if isinstance(strategy, Strategy) else Strategy.parse(strategy)
    if strategy is Strategy.PARAMETER_SERVER and "chief" not in lists:
        raise SpecError(f"{field}.chief", None, "ParameterServerStrategy needs a chief to run the ClusterCoordinator",
                        f'add "chief": ["host:port"] to {field}')
    try:
        JobSpec.create(strategy=strategy, chief=len(lists.get("chief", [])), workers=len(lists.get("worker", [])),
                       ps=len(lists.get("ps", [])))
    except SpecError as exc:
        task_type = {"workers": "worker"}.get(exc.field, exc.field)
        raise SpecError(f"{field}.{task_type}", lists.get(task_type, []), exc.problem,
                        exc.fix.replace("--", "").replace("drop ps", f"drop {field}.ps")) from None
    ordered = {t: [parsed[f"{field}.{t}[{i}]"] for i in range(len(lists[t]))]
               for t in TRAINING_TASK_TYPES if t in lists}
    return ClusterReport(ordered, strategy)


def check_tf_config(value: object, strategy: Strategy | str | None = None, field: str = "TF_CONFIG") -> ClusterReport:
    """Check one task's TF_CONFIG (a JSON string or its parsed form).

    Args:
        value: the TF_CONFIG.
        strategy: the strategy it is meant for; None infers it from the cluster.
        field: name of the whole value in messages.

    Returns:
        The checked cluster and task.

    Raises:
        SpecError: naming the first bad field (``cluster.worker[1]``, ``task.index``, ...).
    """
    config = parse_json(value, field) if isinstance(value, str) else value
    if not isinstance(config, Mapping):
        raise SpecError(field, config, "must be a JSON object with cluster and task",
                        'e.g. {"cluster": {"worker": ["10.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}}')
    for key in config:
        if key in TF1_HOST_FLAGS:
            raise SpecError(key, config[key], "a TF1 command-line flag is not a TF_CONFIG key",
                            f'write "cluster": {{"{TF1_HOST_FLAGS[key]}": ["host:port", ...]}}')
        if key not in TF_CONFIG_KEYS:
            raise SpecError(key, config[key], "unknown TF_CONFIG key", suggest(key, TF_CONFIG_KEYS))
    if "cluster" not in config:
        raise SpecError("cluster", None, "TF_CONFIG has no cluster", 'add "cluster": {"worker": ["host:port", ...]}')
    report = check_cluster(config["cluster"], "cluster", strategy)
    rpc_layer = config.get("rpc_layer", "grpc")
    if not isinstance(rpc_layer, str) or not rpc_layer.startswith("grpc"):
        raise SpecError("rpc_layer", rpc_layer, "tf.distribute servers speak gRPC",
                        'write "rpc_layer": "grpc" or leave it out')
    environment = config.get("environment")
    if environment is not None and not isinstance(environment, str):
        raise SpecError("environment", environment, "must be text (TF1: cloud or google)", "leave it out")
    task = config.get("task")
    if task is None:
        raise SpecError("task", None, "TF_CONFIG has no task", 'add "task": {"type": "worker", "index": 0}')
    if not isinstance(task, Mapping):
        raise SpecError("task", task, "must be an object with type and index",
                        'e.g. "task": {"type": "worker", "index": 0}')
    for key in task:
        if key not in TASK_KEYS:
            raise SpecError(f"task.{key}", task[key], "unknown task key", suggest(key, TASK_KEYS[:2], "task."))
    task_type, index = task.get("type"), task.get("index", 0)
    if task_type in TF1_NAMES:
        raise SpecError("task.type", task_type, f"'{task_type}' is the TF1 name of the {TF1_NAMES[task_type]}",
                        f'write "type": "{TF1_NAMES[task_type]}"')
    if task_type not in TASK_TYPES:
        raise SpecError("task.type", task_type, "unknown task type", suggest(task_type, TASK_TYPES))
    if isinstance(index, bool) or not isinstance(index, int):
        fix = f'write "index": {index}' if isinstance(index, str) and index.isdigit() else 'e.g. "index": 0'
        raise SpecError("task.index", index, "the task index must be a number", fix)
    listed = len(report.cluster.get(task_type, [])) if task_type != "evaluator" else 1
    if not 0 <= index < listed:
        if task_type != "evaluator" and not listed:
            raise SpecError("task.type", task_type, f"the cluster has no {task_type}",
                            f"add this task's address to cluster.{task_type}, or fix task.type")
        raise SpecError("task.index", index, f"out of range: the cluster has {listed} {task_type} task(s)",
                        f"use 0..{listed - 1}" if listed > 1 else "use 0")
    return ClusterReport(report.cluster, report.strategy, TaskId(task_type, index))


def check_consistent(reports: Mapping[str, ClusterReport]) -> None:
    """TF_CONFIGs of one job: the same cluster everywhere, each task once.

    Args:
        reports: source name -> checked TF_CONFIG.

    Raises:
        SpecError: a cluster differs from the first, or two sources are the same task.
    """
    first_name, first = next(iter(reports.items()))
    seen: dict[TaskId, str] = {}
    for name, report in reports.items():
        if report.cluster != first.cluster:
            raise SpecError(f"{name}: cluster", {t: [str(a) for a in v] for t, v in report.cluster.items()},
                            f"differs from the cluster in {first_name}", "render every task's TF_CONFIG from one spec")
        if report.task is not None and report.task in seen:
            raise SpecError(f"{name}: task", str(report.task), f"{seen[report.task]} is the same task",
                            "give every process its own task type and index")
        if report.task is not None:
            seen[report.task] = name
