"""Cluster spec files (YAML or JSON) -> :class:`JobSpec`, with flags overriding file fields.

The format (docs/reference/spec.md) mirrors :class:`JobSpec` field by field::

    description: two MWMS workers on fixed loopback ports   # free text, ignored
    strategy: multi_worker_mirrored
    chief: 0
    workers: 2                  # or elastic: {min: 1, max: 2, batch_policy: keep-global} (docs/elastic.md)
    ps: 0
    evaluator: 0
    heartbeat_interval_s: 1.0
    threads_per_task: null
    gpus_per_task: {worker: 1, evaluator: 0}     # or one count for chief and worker: gpus_per_task: 1
    share_gpus: false
    pin_cpus: true
    data_service: {workers: 2, sharding: dynamic}   # tf.data service roles (docs/data-service.md)
    containers: {shm_size: 2G, memory: 8G}   # each task container's /dev/shm and memory (docs/containers.md)
    training: {epochs: 5, batch_size_per_replica: 16, steps_per_epoch: null, learning_rate: 0.005, seed: 0}
    supervision: {restart_policy: {worker: on-failure}, max_restarts: 3, ...}
    addresses: {worker: ["127.0.0.1:62221", "127.0.0.1:62222"]}

Every key is optional. Unknown keys are rejected with the nearest valid key suggested
(a typo silently ignored is a job silently run with the default). Duplicate keys are
rejected too (YAML would keep the last one). Counts left out are taken from ``addresses``
when it is given, else the strategy's defaults (what ``launch`` uses without flags).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any, Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.address import tf1_hosts_error
from orchestrator.spec.containers import CONTAINER_KEYS, ContainerSpec
from orchestrator.spec.dataservice import DataServiceSpec
from orchestrator.spec.elastic import ElasticSpec, parse_workers
from orchestrator.spec.model import TASK_TYPES, JobSpec, Strategy, TaskId, TrainingSpec
from orchestrator.spec.supervision import SupervisionSpec

TOP_KEYS = (
    "description", "strategy", "chief", "workers", "ps", "evaluator",
    "heartbeat_interval_s", "threads_per_task", "training", "supervision", "addresses",
    "gpus_per_task", "share_gpus", "pin_cpus", "data_service", "containers",
)
TRAINING_KEYS = tuple(f.name for f in dataclasses.fields(TrainingSpec))
SUPERVISION_KEYS = tuple(f.name for f in dataclasses.fields(SupervisionSpec))
SECTIONS = {"training": TRAINING_KEYS, "supervision": SUPERVISION_KEYS, "containers": CONTAINER_KEYS}
"""Spec-file sections whose keys are checked: section -> its keys."""
COUNT_KEYS = {"chief": "chief", "worker": "workers", "ps": "ps", "evaluator": "evaluator"}
"""Task type -> the spec key that counts it."""

TOP_ALIASES = {
    "worker": "workers", "num_workers": "workers", "num_ps": "ps", "ps_hosts": "addresses",
    "worker_hosts": "addresses", "chiefs": "chief", "evaluators": "evaluator", "cluster": "addresses",
    "master": "chief",
}
"""Top-level keys people write from other tools' habits (TF1 flags, TF_CONFIG) -> ours."""

TF1_NAMES = {"master": "chief"}
"""TF1 task-type spellings and their TF2 names."""

FLAG_FIELDS = {
    # argparse dest -> dotted spec field; a flag left at None was not given
    "strategy": "strategy",
    "workers": "workers",
    "ps": "ps",
    "chief": "chief",
    "evaluator": "evaluator",
    "heartbeat_interval": "heartbeat_interval_s",
    "threads_per_task": "threads_per_task",
    "epochs": "training.epochs",
    "batch_size": "training.batch_size_per_replica",
    "steps_per_epoch": "training.steps_per_epoch",
    "learning_rate": "training.learning_rate",
    "seed": "training.seed",
    "max_restarts": "supervision.max_restarts",
    "restart_backoff": "supervision.backoff_s",
    "heartbeat_timeout": "supervision.heartbeat_timeout_s",
    "stall_timeout": "supervision.stall_timeout_s",
    "startup_timeout": "supervision.startup_timeout_s",
    "deadline": "supervision.deadline_s",
    "finish_timeout": "supervision.finish_timeout_s",
    "success_policy": "supervision.success_policy",
    "spares": "supervision.spares",
    "preemption_exit_codes": "supervision.preemption_exit_codes",
    "allow_cluster_mismatch": "supervision.allow_cluster_mismatch",
    "evaluator_grace": "supervision.evaluator_grace_s",
    "crash_loop_limit": "supervision.crash_loop_limit",
    "exit_grace": "supervision.exit_grace_s",
    "on_nan": "supervision.on_nan",
    "nan_metrics": "supervision.nan_metrics",
    "max_log_size": "supervision.max_log_size_bytes",
    "checkpoint_every": "training.checkpoint_every",
    "threads": "training.threads",
    "data_service": "data_service.workers",
    "data_service_sharding": "data_service.sharding",
    "batch_policy": "workers.batch_policy",
    "lr_scaling": "workers.lr_scaling",
    "grow_back": "workers.grow_back",
    "shm_size": "containers.shm_size",  # the docker backend's --shm-size, compose's, render's
    "memory": "containers.memory",  # the docker backend's --memory, compose's (render's is pod_memory)
}


@functools.cache
def _loader() -> Any:
    """A SafeLoader that rejects duplicate keys and reads ``5e-3`` as a number (YAML 1.2).
    Built at the first YAML file: a launch from flags does not import ``yaml``."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
        mapping: dict = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in mapping:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            mapping[key] = loader.construct_object(value_node, deep=deep)
        return mapping

    _Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    _Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+|\.[0-9_]+(?:[eE][-+]?[0-9]+)?)$"),
        list("-+0123456789."),
    )
    return _Loader


def read_document(path: str | Path, field: str = "spec") -> Any:
    """Parse a YAML or JSON file (JSON by its ``.json`` suffix, else YAML, a JSON superset).

    Raises:
        SpecError: when the file cannot be read or parsed (one line, with the line number).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(field, str(path), "no such file",
                        "check the path, e.g. cluster_specs/mwms-4-workers.yaml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(field, str(path), f"cannot read it ({exc.__class__.__name__})",
                        "pass a readable UTF-8 file") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(field, str(path), f"not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}",
                            "fix the syntax (or use YAML)") from None
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise SpecError(field, str(path), f"not valid YAML: {where}{problem}", "fix the syntax") from None


def suggest(key: object, valid: tuple[str, ...], prefix: str = "") -> str:
    """``did you mean 'epochs'?`` for the closest valid key, else the list of valid keys."""
    import difflib  # only for bad input: not on a launch's path to its tasks' start

    close = difflib.get_close_matches(str(key).lower(), valid, n=1, cutoff=0.6)
    if close:
        return f"did you mean {prefix}{close[0]}?"
    return "valid keys: " + ", ".join(valid)


def check_keys(mapping: Mapping, valid: tuple[str, ...], where: str, source: str = "") -> None:
    """Reject keys of ``mapping`` not in ``valid``, suggesting the nearest.

    Args:
        mapping: the parsed mapping.
        valid: its allowed keys.
        where: dotted prefix of the mapping (``""`` at the top, ``"training."`` inside).
        source: the file name, for the message.
    """
    nested = {k: f"{section}.{k}" for section, keys in SECTIONS.items() for k in keys}
    for key in mapping:
        if key in valid:
            continue
        in_file = f" in {source}" if source else ""
        if not where and key in nested:  # epochs at the top level belongs under training
            fix = f"move it under {nested[key].split('.')[0]}: ({nested[key]})"
        elif not where and str(key).lower() in TOP_ALIASES:
            fix = f"did you mean {TOP_ALIASES[str(key).lower()]}?"
        else:
            fix = suggest(key, valid, where)
        raise SpecError(f"{where}{key}", mapping[key], f"unknown key{in_file}", fix)


def read_spec_file(path: str | Path) -> dict:
    """Read a cluster spec file into a raw mapping with checked keys (values not yet validated).

    Raises:
        SpecError: unreadable file, bad syntax, not a mapping, unknown or duplicate key.
    """
    return check_spec_mapping(read_document(path), str(path))


def check_spec_mapping(raw: object, source: str = "") -> dict:
    """Check the keys of a parsed spec file (values are checked by :func:`build_spec`).

    Args:
        raw: the parsed document.
        source: its path, for messages.

    Raises:
        SpecError: not a mapping, a TF_CONFIG, an unknown key.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SpecError("spec", source, f"the file holds a {type(raw).__name__}, not a mapping of spec fields",
                        "see docs/reference/spec.md, or cluster_specs/ for examples")
    if "cluster" in raw and "task" in raw:
        raise SpecError("spec", source, "this is a TF_CONFIG, not a cluster spec file",
                        f"check it with: python -m orchestrator validate {source}")
    source = Path(source).name
    check_keys(raw, TOP_KEYS, "", source)
    for section, keys in SECTIONS.items():
        value = raw.get(section)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise SpecError(section, value, f"must be a mapping of {section} options",
                            f"write {section}: {{{keys[0]}: ...}}; see docs/reference/spec.md")
        check_keys(value, keys, f"{section}.", source)
    if "description" in raw and not isinstance(raw["description"], str):
        raise SpecError("description", raw["description"], "must be text", "quote it")
    return dict(raw)


def parse_addresses(raw: object, field: str = "addresses") -> dict[TaskId, str]:
    """``{worker: [a, b], chief: a}`` -> ``{TaskId: address}`` (addresses not yet parsed).

    A single string stands for a one-element list (handy for ``chief`` and ``evaluator``).

    Raises:
        SpecError: unknown or TF1 task type, a sparse (index-keyed) list, a non-list.
    """
    if not isinstance(raw, Mapping):
        raise SpecError(field, raw, "must map task types to lists of host:port",
                        "e.g. addresses: {worker: ['10.0.0.1:2222', '10.0.0.2:2222']}")
    out: dict[TaskId, str] = {}
    for task_type, value in raw.items():
        where = f"{field}.{task_type}"
        if task_type in TF1_NAMES:
            raise SpecError(where, value, f"'{task_type}' is the TF1 name of this task type",
                            f"rename it to {TF1_NAMES[task_type]}")
        if task_type not in TASK_TYPES:
            raise SpecError(where, value, "unknown task type", suggest(task_type, TASK_TYPES))
        if isinstance(value, str):
            if "," in value:  # before the counts are compared: 'h1:1,h2:1' is one string, not one task
                raise tf1_hosts_error(where, value)
            value = [value]
        if isinstance(value, Mapping):
            raise SpecError(where, value, "a sparse list (task index -> address) is not supported by tf.distribute",
                            "list every task's address in index order")
        if not isinstance(value, list):
            raise SpecError(where, value, "must be a list of host:port", f"e.g. {task_type}: ['10.0.0.1:2222']")
        for index, address in enumerate(value):
            out[TaskId(task_type, index)] = address  # type: ignore[assignment]  # checked by JobSpec
    return out


def merge(base: Mapping, overrides: Mapping) -> dict:
    """Deep-merge ``overrides`` into ``base`` (mappings merge key by key, anything else replaces)."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def overrides_from_flags(args: object) -> dict:
    """The spec fields a user gave as flags (argparse attributes that are not None).

    ``--restart-policy [ROLE=]POLICY`` items become ``supervision.restart_policy``; a
    ``store_true`` flag (``--chief``) counts as 1.
    """
    out: dict = {}
    fields = dict(FLAG_FIELDS)
    for name in TRAINING_KEYS:  # training options whose flag has the field's own name (--loop, --data, ...)
        fields.setdefault(name, f"training.{name}")
    for dest, dotted in fields.items():
        value = getattr(args, dest, None)
        if value is None or value is False:
            continue
        if value is True:
            value = 1
        if dest == "workers":
            value = parse_workers(value)
        if dotted.startswith("workers.") and not isinstance(out.get("workers", {}), Mapping):
            raise SpecError(dest.replace("_", "-"), value, "is for elastic workers",
                            "give --workers MIN:MAX, or drop it")
        node = out
        *parents, leaf = dotted.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    policies = {}
    for item in getattr(args, "restart_policy", None) or []:
        role, _, policy = item.rpartition("=")
        policies[role or "all"] = policy
    if policies:
        out.setdefault("supervision", {})["restart_policy"] = policies
    if getattr(args, "share_gpus", None):
        out["share_gpus"] = True
    if getattr(args, "no_pin", None):
        out["pin_cpus"] = False
    gpus = getattr(args, "gpus_per_task", None)
    if gpus is not None:
        out["gpus_per_task"] = gpus
    return out


def gpu_counts(raw: object, strategy: Strategy) -> object:
    """``gpus_per_task`` as a mapping role -> count: one count is that of every task that
    computes (:func:`orchestrator.resources.cores.training_roles`: chief and worker; workers alone
    under ParameterServerStrategy, whose chief only dispatches); a mapping is kept (checked by
    :class:`JobSpec`)."""
    if raw is None:
        return {}
    if isinstance(raw, int) and not isinstance(raw, bool):
        roles = ("worker",) if strategy is Strategy.PARAMETER_SERVER else ("chief", "worker")
        return {role: raw for role in roles}
    return raw


def build_spec(raw: Mapping, overrides: Mapping | None = None) -> JobSpec:
    """Build and validate a :class:`JobSpec` from a raw spec mapping and flag overrides.

    Args:
        raw: keys as in a spec file (checked by :func:`read_spec_file`), or ``{}``.
        overrides: the same shape, from :func:`overrides_from_flags`; they win.

    Raises:
        SpecError: naming the first bad field.
    """
    overrides = overrides or {}
    flagged = overrides.get("workers")
    if isinstance(flagged, Mapping) and not isinstance(raw.get("workers"), Mapping) and "min" not in flagged:
        key = next(iter(flagged))  # --batch-policy, --lr-scaling, --grow-back over a plain count (or the default)
        count = "the default" if raw.get("workers") is None else f"the spec file's {raw['workers']}"
        raise SpecError(key.replace("_", "-"), flagged[key], f"is for elastic workers (the workers are a plain "
                        f"count: {count})", "give --workers MIN:MAX or workers: {min: .., max: ..}, or drop it")
    fields = merge(raw, overrides)
    if ("restart_policy" in (raw.get("supervision") or {})
            and "restart_policy" in overrides.get("supervision", {})):
        file_policy = raw["supervision"]["restart_policy"]
        if isinstance(file_policy, str):  # a plain policy in the file means every role
            file_policy = {"all": file_policy}
        if isinstance(file_policy, Mapping):
            fields["supervision"]["restart_policy"] = merge(file_policy, overrides["supervision"]["restart_policy"])
    strategy = Strategy.parse(fields.get("strategy", Strategy.MULTI_WORKER_MIRRORED.value))
    pss = strategy is Strategy.PARAMETER_SERVER
    single = strategy in (Strategy.MIRRORED, Strategy.HOGWILD)  # one task: replicas are its devices, or threads
    addresses = parse_addresses(fields["addresses"]) if fields.get("addresses") is not None else None
    defaults = {"chief": 1 if pss else 0, "workers": 2 if pss else 1 if single else 4, "ps": 1 if pss else 0,
                "evaluator": 0}
    counts = {}
    elastic = None
    if isinstance(fields.get("workers"), Mapping):
        elastic, fields["workers"] = ElasticSpec.from_raw(fields["workers"])
    for task_type, key in COUNT_KEYS.items():
        if key in fields and fields[key] is not None:
            counts[key] = fields[key]
        elif addresses is not None:
            counts[key] = sum(1 for t in addresses if t.task_type == task_type)
        else:
            counts[key] = defaults[key]
    training_raw = fields.get("training") or {}
    training = TrainingSpec(**{k: v for k, v in training_raw.items() if v is not None or k == "steps_per_epoch"})
    supervision_raw = dict(fields.get("supervision") or {})
    policies = supervision_raw.pop("restart_policy", None)
    if isinstance(policies, str):
        policies = {"all": policies}
    if policies is not None and not isinstance(policies, Mapping):
        raise SpecError("supervision.restart_policy", policies, "must be a policy or a mapping role -> policy",
                        "e.g. restart_policy: {worker: on-failure}")
    supervision_raw = {k: v for k, v in supervision_raw.items()
                       if v is not None
                       or k in ("deadline_s", "finish_timeout_s", "success_policy", "backoff_s", "spares")}
    try:
        supervision = SupervisionSpec.create(restart_policy=policies, **supervision_raw)
    except SpecError as exc:
        if exc.field.startswith("supervision."):
            raise
        raise SpecError("supervision." + exc.field, exc.value, exc.problem, exc.fix) from None
    extra = {k: fields[k] for k in ("heartbeat_interval_s", "threads_per_task", "share_gpus", "pin_cpus")
             if fields.get(k) is not None}
    if "gpus_per_task" in fields:  # the flag's count over the file's roles
        gpus = gpu_counts(raw.get("gpus_per_task"), strategy)
        flag = gpu_counts((overrides or {}).get("gpus_per_task"), strategy)
        extra["gpus_per_task"] = merge(gpus, flag) if isinstance(gpus, Mapping) and isinstance(flag, Mapping) \
            else flag or gpus
    service_raw = fields.get("data_service")
    if isinstance(service_raw, Mapping) and "workers" not in service_raw and service_raw:
        service_raw = {"workers": 1, **service_raw}  # --data-service-sharding alone: one data worker
    data_service = DataServiceSpec.from_raw(service_raw)
    if data_service is not None:
        extra["data_service"] = data_service
    if elastic is not None:
        extra["elastic"] = elastic
    containers = ContainerSpec.from_raw(fields.get("containers"))
    if containers is not None:
        extra["containers"] = containers
    return JobSpec.create(strategy=strategy, training=training, supervision=supervision, addresses=addresses,
                          **counts, **extra)


def load_spec(path: str | Path, overrides: Mapping | None = None) -> JobSpec:
    """Read, check and build the spec in ``path``; ``overrides`` (from flags) win.

    Raises:
        SpecError: naming the first bad field.
    """
    return build_spec(read_spec_file(path), overrides)
