"""Strict JSON: the one encoder every record and ``--json`` output of the orchestrator goes through.

Python's :func:`json.dumps` writes a NaN or an infinity as the bare words ``NaN`` /
``Infinity``, which RFC 8259 does not allow: a strict parser (``json.loads(...,
parse_constant=...)`` raising, JavaScript's ``JSON.parse`` behind the web page's ``r.json()``,
``jq``) rejects the whole file. A training loss turns NaN in ordinary jobs, so every number we
write may be non-finite. Here each non-finite float becomes ``null``, and a top-level object
gets a note of what was there: ``"non_finite": {"metrics.final_loss": "NaN", ...}`` (path ->
``NaN`` / ``Infinity`` / ``-Infinity``; list items as ``[i]``). Nothing is lost, and every
reader, ours included, parses the text with any JSON parser.

It lives in the shared layer: the control plane and the task side both use it.
"""

from __future__ import annotations

import json
import math
from typing import Any

NON_FINITE_KEY = "non_finite"
"""The note a top-level object gets when a value under it was not finite (path -> its name)."""


def _name(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def finite(data: Any, path: str = "", notes: dict[str, str] | None = None) -> Any:
    """``data`` with every non-finite float replaced by None (dicts, lists and tuples walked;
    other values kept as they are). When ``notes`` is given, each replaced value's path
    (``metrics.loss``, ``tasks[0].last_heartbeat.loss``) -> ``NaN`` / ``Infinity`` / ``-Infinity``
    is added to it. Returns ``data`` itself (not a copy) when it holds nothing non-finite."""
    if isinstance(data, float):
        if math.isfinite(data):
            return data
        if notes is not None:
            notes[path or "."] = _name(data)
        return None
    if isinstance(data, dict):
        out, changed = {}, False
        for key, value in data.items():
            clean = finite(value, f"{path}.{key}" if path else str(key), notes)
            changed = changed or clean is not value
            out[key] = clean
        return out if changed else data
    if isinstance(data, (list, tuple)):
        items = [finite(value, f"{path}[{i}]", notes) for i, value in enumerate(data)]
        return items if any(a is not b for a, b in zip(items, data)) else data
    return data


NOTES_KEPT = 20
"""Paths a note names at most (a loss series that turned NaN has one per point): the first ones,
then ``"...": "N more"``."""


def strict(data: Any) -> Any:
    """``data`` as strict JSON can hold it: non-finite floats as None; a top-level dict that held
    any gets :data:`NON_FINITE_KEY` (path -> ``NaN`` / ``Infinity`` / ``-Infinity``, the first
    :data:`NOTES_KEPT` of them)."""
    notes: dict[str, str] = {}
    clean = finite(data, "", notes)
    if len(notes) > NOTES_KEPT:
        more = len(notes) - NOTES_KEPT
        notes = dict(list(notes.items())[:NOTES_KEPT]) | {"...": f"{more} more"}
    if notes and isinstance(clean, dict):
        clean = {**clean, NON_FINITE_KEY: {**(clean.get(NON_FINITE_KEY) or {}), **notes}}
    return clean


def dumps(data: Any, **options: Any) -> str:
    """:func:`json.dumps` of :func:`strict` ``(data)``, with ``allow_nan=False`` (so a value we
    missed raises ``ValueError`` here rather than writing a file no strict parser reads).
    ``options``: :func:`json.dumps`'s (``indent``, ``separators``, ``sort_keys``)."""
    return json.dumps(strict(data), allow_nan=False, **options)


def loads_strict(text: str | bytes) -> Any:
    """Parse ``text`` as strict JSON (RFC 8259): a bare ``NaN`` / ``Infinity`` raises ValueError.
    What tests and a careful reader use to check that a record is JSON."""
    def reject(constant: str) -> Any:
        raise ValueError(f"not JSON: the bare constant {constant}")
    return json.loads(text, parse_constant=reject)
