"""Pure helpers: aggregate repeated measurements, ratios, the Markdown table."""

from __future__ import annotations

import statistics
from typing import Iterable, Sequence


def summarize(values: Iterable[float | None], digits: int = 4) -> dict:
    """``{"min", "median", "max", "runs", "values"}`` of the measurements that are not None.

    ``runs`` counts the values kept; min/median/max are None when there are none.
    """
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return {"min": None, "median": None, "max": None, "runs": 0, "values": []}
    return {
        "min": round(min(kept), digits),
        "median": round(statistics.median(kept), digits),
        "max": round(max(kept), digits),
        "runs": len(kept),
        "values": [round(v, digits) for v in kept],
    }


def ratios(numerators: Sequence[float | None], denominators: Sequence[float | None]) -> list[float | None]:
    """Pairwise ``a / b`` of runs done side by side (None where either side is missing or b is 0)."""
    return [None if a is None or not b else a / b for a, b in zip(numerators, denominators)]


def meets(stat: dict, target: str) -> bool | None:
    """Whether the median meets ``target`` (``">= 0.99"`` or ``"<= 1.1"``); None without data."""
    median = stat.get("median")
    if median is None:
        return None
    op, _, bound = target.partition(" ")
    bound_value = float(bound)
    if op == ">=":
        return median >= bound_value
    if op == "<=":
        return median <= bound_value
    raise ValueError(f"unknown target {target!r}: use '>= X' or '<= X'")


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def markdown_table(rows: Sequence[dict]) -> str:
    """Rows of ``{"measure", "unit", "stat", "target", "met"}`` as a Markdown table."""
    lines = [
        "| # | measure | unit | min | median | max | runs | target | met |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        stat = row["stat"]
        met = row.get("met")
        mark = "-" if met is None else ("yes" if met else "**no**")
        lines.append(
            f"| {row.get('id', '')} | {row['measure']} | {row['unit']} | {_fmt(stat['min'])} | {_fmt(stat['median'])} "
            f"| {_fmt(stat['max'])} | {stat['runs']} | {row.get('target') or '-'} | {mark} |"
        )
    return "\n".join(lines)
