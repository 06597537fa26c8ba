"""A spec from the Python API's arguments: a spec file, a mapping, a :class:`JobSpec`, keyword fields
(:func:`orchestrator.api.launch` takes what :func:`spec_from` takes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.loader import (
    SUPERVISION_KEYS,
    TOP_KEYS,
    TRAINING_KEYS,
    build_spec,
    check_spec_mapping,
    read_spec_file,
    suggest,
)
from orchestrator.spec.model import JobSpec


def spec_from(spec: str | Path | Mapping[str, Any] | JobSpec | None = None, **fields: Any) -> JobSpec:
    """A validated :class:`JobSpec` from a spec file path, a mapping of spec-file fields, a
    ``JobSpec``, or nothing, with keyword fields on top (they win, as flags do over a file).

    Keyword fields use the spec file's names: top-level ones (``strategy``, ``workers``, ``ps``,
    ``chief``, ``evaluator``, ``addresses``, ...), ``training`` ones (``epochs``,
    ``batch_size_per_replica``, ``steps_per_epoch``, ...) and ``supervision`` ones
    (``max_restarts``, ``restart_policy``, ``deadline_s``, ...), without their section.

    Raises:
        SpecError: naming the first bad field (an unknown keyword gets the nearest valid name).
    """
    if isinstance(spec, JobSpec):
        if fields:
            raise SpecError(next(iter(fields)), fields[next(iter(fields))], "cannot be combined with a JobSpec",
                            "pass a spec file path or a dict with keyword fields, or build the JobSpec with them")
        return spec
    if spec is None:
        raw: dict[str, Any] = {}
    elif isinstance(spec, Mapping):
        raw = check_spec_mapping(dict(spec), "spec")
    else:
        raw = read_spec_file(spec)
    overrides: dict[str, Any] = {}
    every = tuple(k for k in TOP_KEYS if k not in ("training", "supervision")) + TRAINING_KEYS + SUPERVISION_KEYS
    for name, value in fields.items():
        if name in TOP_KEYS and name not in ("training", "supervision"):
            overrides[name] = value
        elif name in TRAINING_KEYS:
            overrides.setdefault("training", {})[name] = value
        elif name in SUPERVISION_KEYS:
            overrides.setdefault("supervision", {})[name] = value
        elif name in ("training", "supervision") and isinstance(value, Mapping):
            overrides.setdefault(name, {}).update(value)
        else:
            raise SpecError(name, value, "is not a spec field", suggest(name, every))
    return build_spec(raw, overrides)
