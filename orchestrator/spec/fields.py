"""A :class:`~orchestrator.spec.model.JobSpec` as spec-file fields: the inverse of
:func:`orchestrator.spec.loader.build_spec` (``build_spec(spec_fields(s), {}) == s``).

``plan.json`` keeps a run's spec in this form, so a resumed run (``launch --resume``) is
built from the very spec it was launched with.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping

from orchestrator.spec.model import JobSpec


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def spec_fields(spec: JobSpec) -> dict[str, Any]:
    """``spec`` as spec-file fields (JSON-ready): what ``plan.json`` keeps under ``spec`` and
    :func:`orchestrator.spec.loader.build_spec` builds the same spec from."""
    out: dict[str, Any] = {
        "strategy": spec.strategy.value, "chief": spec.chief, "workers": spec.workers, "ps": spec.ps,
        "evaluator": spec.evaluator, "heartbeat_interval_s": spec.heartbeat_interval_s,
        "threads_per_task": spec.threads_per_task,
        "training": _plain(dataclasses.asdict(spec.training)),
        "supervision": _plain({f.name: getattr(spec.supervision, f.name)
                               for f in dataclasses.fields(spec.supervision)}),
    }
    if spec.gpus_per_task:
        out["gpus_per_task"] = dict(spec.gpus_per_task)
    if spec.share_gpus:
        out["share_gpus"] = True
    if not spec.pin_cpus:
        out["pin_cpus"] = False
    if spec.data_service is not None:
        out["data_service"] = spec.data_service.to_fields()
    if spec.elastic is not None:
        out["workers"] = spec.elastic.to_fields(spec.workers)
    if spec.containers.to_fields():
        out["containers"] = spec.containers.to_fields()
    if spec.addresses is not None:
        grouped: dict[str, list[str]] = {}
        for task in sorted(spec.addresses, key=lambda t: (t.task_type, t.task_index)):
            grouped.setdefault(task.task_type, []).append(spec.addresses[task])
        out["addresses"] = grouped
    return out


