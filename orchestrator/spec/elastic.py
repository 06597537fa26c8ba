"""Elastic workers: ``--workers MIN:MAX`` and what a size means for the batch (docs/elastic.md).

A job declares the sizes it may run at (``workers: {min: 2, max: 4}`` in a spec file); it starts at
MAX (``start`` in the file: the size a resumed run continues at, ``launch --resume RUN --workers N``).
The ps count stays fixed; only MWMS and PSS workers are elastic.

Batch policies (what stays fixed when the size changes):

* ``keep-global`` (default): the global batch is ``batch_size_per_replica`` x the replicas at MAX,
  and stays that at every size: per-replica batch = global / replicas. tf-keras
  ``BackupAndRestore`` saves an (epoch, step) index and the built-in program shards by DATA, so
  step k covers the same examples at any size and a checkpoint's index stays valid. Every size
  in MIN..MAX must divide the global batch (checked here, at load: one line naming the sizes
  that do).
* ``keep-per-replica``: the per-replica batch stays ``batch_size_per_replica``; the global batch
  follows the size, and ``lr_scaling: linear`` multiplies the learning rate by
  global(size) / global(MAX) (Goyal et al. 2017, "Accurate, Large Minibatch SGD": the linear
  scaling rule); ``none`` keeps it.

Under ParameterServerStrategy each step runs on one worker (``num_replicas_in_sync`` is 1 on CPU),
so a step's batch does not depend on the worker count: both policies are the same there.

Pure functions; bad values are :class:`~orchestrator.errors.SpecError` (one line, exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from orchestrator.errors import SpecError

BATCH_POLICIES = ("keep-global", "keep-per-replica")
"""``--batch-policy`` values: what stays fixed when the worker count changes."""

LR_SCALINGS = ("none", "linear")
"""``--lr-scaling`` values (``keep-per-replica`` only)."""

KEYS = ("min", "max", "start", "batch_policy", "lr_scaling", "grow_back")
"""Keys of the spec file's ``workers`` mapping."""

ELASTIC_STRATEGIES = ("multi_worker_mirrored", "parameter_server")
"""Strategies whose workers may be elastic."""

GROW_BACK_S = 30.0
"""The default cooldown of ``--grow-back on``: seconds since the last size change before an elastic
MWMS job running below MAX grows back by itself (docs/elastic.md)."""

_RANGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def parse_workers(value: object) -> object:
    """``--workers``: ``"4"`` -> 4, ``"2:4"`` -> ``{"min": 2, "max": 4}``; an int or a mapping as given.

    Raises:
        SpecError: naming ``workers`` for any other text.
    """
    if value is None or isinstance(value, (int, Mapping)):
        return value
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    match = _RANGE.match(text)
    if match is None:
        raise SpecError("workers", value, "not a count or a range MIN:MAX", "e.g. --workers 4, or --workers 2:4")
    return {"min": int(match.group(1)), "max": int(match.group(2))}


def parse_grow_back(value: object) -> float | None:
    """``--grow-back on|off|SECONDS`` (spec ``workers.grow_back``): the cooldown in seconds, None for off.

    ``on`` (or true, or absent) is :data:`GROW_BACK_S`; ``off`` (or false) is None; a number >= 0 is
    that many seconds.

    Raises:
        SpecError: naming ``workers.grow_back`` for anything else.
    """
    if value is None or value is True:
        return GROW_BACK_S
    if value is False:
        return None
    text = str(value).strip().lower()
    if text == "on":
        return GROW_BACK_S
    if text == "off":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0 or seconds == float("inf"):
        raise SpecError("workers.grow_back", value, "must be on, off or a cooldown in seconds >= 0",
                        f"e.g. --grow-back 60, --grow-back off, or leave it out (on: {GROW_BACK_S:g} s)")
    return seconds


@dataclass(frozen=True)
class ElasticSpec:
    """The elastic bounds of a job's workers and its batch policy.

    Attributes:
        min: fewest workers the job may train with (>= 1).
        max: most workers; the job starts at MAX.
        batch_policy: ``keep-global`` or ``keep-per-replica`` (:data:`BATCH_POLICIES`).
        lr_scaling: ``none`` or ``linear`` (``keep-per-replica`` only).
        grow_back_s: an MWMS job below MAX grows back by itself when capacity returns, this many
            seconds after its last size change at the earliest; None: it does not (``--grow-back off``).
    """

    min: int
    max: int
    batch_policy: str = "keep-global"
    lr_scaling: str = "none"
    grow_back_s: float | None = GROW_BACK_S

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> tuple["ElasticSpec", int]:
        """A spec file's ``workers`` mapping -> the bounds and the size to start at (``start``, else MAX).

        Raises:
            SpecError: an unknown key, a missing or bad bound, an unknown policy.
        """
        unknown = [k for k in raw if k not in KEYS]
        if unknown:
            raise SpecError(f"workers.{unknown[0]}", raw[unknown[0]], "unknown key",
                            "valid keys: " + ", ".join(KEYS))
        for bound in ("min", "max"):
            value = raw.get(bound)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"workers.{bound}", value, "must be a whole number >= 1 (elastic workers need "
                                "both bounds)", "e.g. --workers 2:4, or workers: {min: 2, max: 4}")
        spec = cls(int(raw["min"]), int(raw["max"]), str(raw.get("batch_policy") or "keep-global"),
                   str(raw.get("lr_scaling") or "none"), parse_grow_back(raw.get("grow_back")))
        start = raw.get("start")
        if start is None:
            start = spec.max
        if not isinstance(start, int) or isinstance(start, bool):
            raise SpecError("workers.start", start, "must be a whole number", f"one of {spec.min}..{spec.max}")
        return spec, start

    def to_fields(self, workers: int) -> dict[str, Any]:
        """The spec file's ``workers`` mapping (the inverse of :meth:`from_raw`)."""
        return {"min": self.min, "max": self.max, "start": workers, "batch_policy": self.batch_policy,
                "lr_scaling": self.lr_scaling, "grow_back": "off" if self.grow_back_s is None else self.grow_back_s}


@dataclass(frozen=True)
class BatchFacts:
    """What a size means for the batch: ``global_batch_size`` examples per step,
    ``per_replica_batch_size`` per replica, the learning rate times ``learning_rate_factor``."""

    global_batch_size: int
    per_replica_batch_size: int
    learning_rate_factor: float


def replicas_at(strategy: str, chief: int, workers: int) -> int:
    """Replicas in sync per step with ``workers`` workers: chief + workers under MWMS, 1 under PSS
    (each step runs on one worker)."""
    return chief + workers if strategy == "multi_worker_mirrored" else 1


def facts_at(elastic: ElasticSpec, strategy: str, chief: int, workers: int, per_replica: int) -> BatchFacts:
    """The batch facts at ``workers`` workers under ``elastic``'s policy; ``per_replica`` is the
    spec's ``training.batch_size_per_replica`` (the per-replica batch at MAX). Under
    ``keep-global`` a size that does not divide the global batch gets the floor (refused by
    :func:`check_elastic` first)."""
    top, now = replicas_at(strategy, chief, elastic.max), replicas_at(strategy, chief, workers)
    if elastic.batch_policy == "keep-global":
        return BatchFacts(per_replica * top, per_replica * top // now, 1.0)
    factor = now / top if elastic.lr_scaling == "linear" else 1.0
    return BatchFacts(per_replica * now, per_replica, factor)


class _Job(Protocol):
    """What :func:`batch_facts` reads of a :class:`~orchestrator.spec.model.JobSpec` (which imports this module)."""

    @property
    def elastic(self) -> ElasticSpec | None: ...
    @property
    def strategy(self) -> Any: ...
    @property
    def chief(self) -> int: ...
    @property
    def workers(self) -> int: ...
    @property
    def training(self) -> Any: ...
    @property
    def replicas(self) -> int: ...


def batch_facts(spec: _Job) -> BatchFacts:
    """The batch facts of ``spec`` at its size (``spec.workers``); without elastic workers the
    global batch is ``batch_size_per_replica`` x ``spec.replicas`` and the factor 1."""
    per_replica = spec.training.batch_size_per_replica
    if spec.elastic is None:
        return BatchFacts(per_replica * spec.replicas, per_replica, 1.0)
    return facts_at(spec.elastic, spec.strategy.value, spec.chief, spec.workers, per_replica)


def valid_sizes(elastic: ElasticSpec, strategy: str, chief: int, per_replica: int) -> list[int]:
    """The sizes in MIN..MAX whose replicas divide the global batch (every one under
    ``keep-per-replica`` and under PSS)."""
    facts = facts_at(elastic, strategy, chief, elastic.max, per_replica)
    if elastic.batch_policy != "keep-global":
        return list(range(elastic.min, elastic.max + 1))
    return [n for n in range(elastic.min, elastic.max + 1)
            if facts.global_batch_size % replicas_at(strategy, chief, n) == 0]


def check_elastic(elastic: ElasticSpec, strategy: str, chief: int, workers: int, per_replica: int,
                  fixed_addresses: bool = False) -> None:
    """The rules of elastic workers (docs/elastic.md).

    Args:
        elastic: the bounds and policy.
        strategy: the strategy's value.
        chief: 0 or 1.
        workers: the size the job starts (or resumes) at.
        per_replica: ``training.batch_size_per_replica``.
        fixed_addresses: the spec gives ``addresses`` (one per task: not elastic yet).

    Raises:
        SpecError: MIN > MAX; a strategy other than MWMS and PSS; ``workers`` outside MIN..MAX;
            an unknown batch policy or scaling; ``linear`` with ``keep-global``; fixed addresses;
            under ``keep-global`` a size whose replicas do not divide the global batch (the line
            names the sizes that do).
    """
    if elastic.min > elastic.max:
        raise SpecError("workers", f"{elastic.min}:{elastic.max}", "MIN is larger than MAX",
                        f"e.g. --workers {elastic.max}:{elastic.min}")
    if strategy not in ELASTIC_STRATEGIES:
        raise SpecError("workers", f"{elastic.min}:{elastic.max}", f"{strategy} has no elastic workers",
                        "use --strategy multi_worker_mirrored or parameter_server, or a plain --workers N")
    if elastic.batch_policy not in BATCH_POLICIES:
        raise SpecError("workers.batch_policy", elastic.batch_policy, "unknown batch policy",
                        "use keep-global or keep-per-replica")
    if elastic.lr_scaling not in LR_SCALINGS:
        raise SpecError("workers.lr_scaling", elastic.lr_scaling, "unknown learning-rate scaling",
                        "use none or linear")
    if elastic.lr_scaling != "none" and elastic.batch_policy == "keep-global":
        raise SpecError("workers.lr_scaling", elastic.lr_scaling, "keep-global keeps the global batch, so "
                        "the learning rate needs no scaling", "drop --lr-scaling, or use --batch-policy "
                        "keep-per-replica")
    if strategy == "parameter_server" and elastic.grow_back_s not in (None, GROW_BACK_S):
        raise SpecError("workers.grow_back", elastic.grow_back_s, "parameter_server jobs do not grow back by "
                        "themselves (resize RUN --workers N takes parked workers back)",
                        "drop --grow-back, or use --strategy multi_worker_mirrored")
    if fixed_addresses:
        raise SpecError("workers", f"{elastic.min}:{elastic.max}", "elastic workers with fixed addresses are "
                        "not supported yet", "drop addresses (the backend chooses them), or a plain --workers N")
    if not elastic.min <= workers <= elastic.max:
        raise SpecError("workers", workers, f"outside the job's elastic range {elastic.min}..{elastic.max}",
                        f"use a size in {elastic.min}..{elastic.max}")
    sizes = valid_sizes(elastic, strategy, chief, per_replica)
    if len(sizes) != elastic.max - elastic.min + 1:
        glob = facts_at(elastic, strategy, chief, elastic.max, per_replica).global_batch_size
        bad = [n for n in range(elastic.min, elastic.max + 1) if n not in sizes]
        chief_note = " (with the chief's replica)" if chief else ""
        raise SpecError("workers", f"{elastic.min}:{elastic.max}",
                        f"keep-global: the global batch {glob} cannot be split evenly at "
                        f"{_few(bad)} worker(s){chief_note}; valid sizes: {_few(sizes, 32)}",
                        "pick MIN:MAX among the valid sizes, a --batch-size whose global batch every size divides, "
                        "or --batch-policy keep-per-replica")


def _few(sizes: Sequence[int], most: int = 12) -> str:
    """``sizes`` for a one-line message: the first ``most``, then how many more (``--workers 1:1000``)."""
    shown = ", ".join(map(str, sizes[:most]))
    return shown if len(sizes) <= most else f"{shown} and {len(sizes) - most} more"
