"""Benchmark tables and the recovery timeline, rendered from ``bench/results/*.json``.

``python -m bench`` writes one JSON file per figure (``<name>.json``: measure, unit, min / median /
max, runs, target, met, details) and one per suite run (``suite.json``, ``suite-<sections>.json``:
date, machine, sections). A figure belongs to the latest suite run of its section, which is the run
that last wrote it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from tools.docsite.reference import table

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"

SECTION_OF_PREFIX = (
    ("throughput_", "tf"), ("first_step_", "tf"), ("recovery_", "recovery"), ("steps_lost_mwms", "recovery"),
    ("detect_sigkill_tf", "recovery"), ("detect_hang_tf", "hang"), ("orchestrator_", "footprint"),
    ("client_", "client"), ("ingest_", "ingest"), ("scale_", "scale"), ("checkpoint_", "checkpoint"),
    ("steps_lost_", "checkpoint"), ("hogwild_", "hogwild"), ("mirrored_", "hogwild"), ("several_", "several"),
)
"""Figure-name prefix -> the ``python -m bench`` section that writes it (``bench/run.py``), for
result files written before figures recorded their ``section``."""

SECTION_TITLES = {
    "tf": "Overhead: throughput and launch -> first step, orchestrated / hand-launched",
    "recovery": "Recovery of a SIGKILLed worker (warm spares)",
    "hang": "Hang detection",
    "detect": "Exit detection on the local backend (no TensorFlow)",
    "beats": "Heartbeat gaps on a loaded machine",
    "footprint": "The orchestrator's own footprint",
    "client": "The health client in each task",
    "ingest": "Heartbeat ingest",
    "scale": "The supervisor at scale (simulated tasks)",
    "several": "Several jobs on one machine (leases)",
    "checkpoint": "Checkpoints and preemption",
    "hogwild": "Hogwild",
    "dataservice": "The tf.data service",
    "resize": "Elastic: a planned MWMS resize's pause",
    "pss_shrink": "Elastic: a PSS job that loses a worker",
    "resize_accuracy": "Elastic: test accuracy after an MWMS run resized 3 -> 2 -> 3",
}


def section_of(figure: dict) -> str:
    """The bench section a figure comes from."""
    if figure.get("section"):
        return str(figure["section"])
    for prefix, section in SECTION_OF_PREFIX:
        if figure["name"].startswith(prefix):
            return section
    return "other"


def load(results: Path = RESULTS) -> tuple[list[dict], list[dict]]:
    """(figures, suite runs) from a results directory; suite runs newest first."""
    figures, suites = [], []
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        (suites if path.name.startswith("suite") else figures).append(data)
    suites.sort(key=lambda s: s.get("date", ""), reverse=True)
    return figures, suites


def _num(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{int(value):,}" if isinstance(value, (int, float)) else str(value)


def _machine(suite: dict) -> str:
    m = suite.get("machine", {})
    return (f"{m.get('cores', '?')} cores ({m.get('cpu', '?')}), {m.get('memory_gib', '?')} GiB, "
            f"Python {m.get('python', '?')}")


def bench_markdown(results: Path = RESULTS) -> str:
    """One table per bench section, each headed by the date, machine and command of its run."""
    figures, suites = load(results)
    by_section: dict[str, list[dict]] = {}
    for figure in figures:
        by_section.setdefault(section_of(figure), []).append(figure)
    out = []
    for section, title in SECTION_TITLES.items():
        rows = by_section.get(section)
        if not rows:
            continue
        suite = next((s for s in suites if section in s.get("sections", ())), None)
        out += [f"### {title}", ""]
        if suite:
            only = "" if suite.get("sections") == list(SECTION_TITLES) or len(suite.get("sections", ())) > 5 \
                else " --only " + " ".join(suite["sections"])
            load_text = f"; load average {suite['load_before']} before, {suite['load_after']} after" \
                if suite.get("load_before") else ""
            out += [(f"`python -m bench{' --quick' if suite.get('quick') else ''}{only}`, {suite['date']}, "
                    f"{_machine(suite)}{load_text}."), ""]
        rows.sort(key=lambda f: (str(f.get("id", "")), f["name"]))
        out.append(table(["measure", "unit", "min", "median", "max", "runs", "target", "met"],
                         [(f["measure"], f.get("unit", ""), _num(f.get("min")), _num(f.get("median")),
                           _num(f.get("max")), f.get("runs", ""), f.get("target") or "",
                           {True: "yes", False: "**no**", None: ""}[f.get("met")]) for f in rows],
                         align="llrrrr"))
        out.append("")
    return "\n".join(out)


# -- the recovery timeline --------------------------------------------------------------------------

COLORS = {"failed": "#d62728", "decided": "#ff7f0e", "resumed": "#2ca02c", "band": "#ffbb78", "axis": "#777"}
"""The web page's timeline colours (``orchestrator/web/static/app.js``): red failure, orange decision
and band until training resumed, green resumption."""


def _recovery(figures: list[dict], name: str) -> dict | None:
    return next((f for f in figures if f["name"] == name), None)


def timeline_svg(results: Path = RESULTS) -> str:
    """An SVG of the measured recoveries (median of the runs), drawn as the web page's timeline draws
    a recovery: failure (red), restart decided (orange), the band until training resumed, resumed (green)."""
    figures, _ = load(results)
    lanes = []
    detect = _recovery(figures, "detect_sigkill_tf")
    for name, label in (("recovery_ratio_mwms", "MWMS, 2 workers: group restart"),
                        ("recovery_ratio_pss", "PSS: one worker restarted alone")):
        fig = _recovery(figures, name)
        if not fig:
            continue
        details = fig.get("details", {})
        total = (details.get("recovery_s") or {}).get("median")
        cold = (details.get("cold_start_s") or {}).get("median")
        if total is None:
            continue
        decided = (detect or {}).get("median") or 0.0
        lanes.append((label, decided, total, cold))
    if not lanes:
        return ""
    span = max(max(t, c or 0) for _, _, t, c in lanes) * 1.05
    width, left, lane_h = 760, 230, 56
    height = 40 + lane_h * len(lanes)
    scale = (width - left - 20) / span

    def x(t: float) -> float:
        return left + t * scale

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="recovery timeline" style="max-width:100%;font:12px sans-serif">')]
    for i, (label, decided, total, cold) in enumerate(lanes):
        y = 20 + i * lane_h
        parts.append(f'<text x="4" y="{y + 22}">{html.escape(label)}</text>')
        parts.append(f'<rect x="{x(decided):.1f}" y="{y + 8}" width="{(total - decided) * scale:.1f}" height="20" '
                     f'fill="{COLORS["band"]}"/>')
        for t, colour, text in ((0.0, "failed", "SIGKILL"), (decided, "decided", ""), (total, "resumed",
                                                                                        f"resumed {total:.2f} s")):
            parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{y + 4}" y2="{y + 32}" '
                         f'stroke="{COLORS[colour]}" stroke-width="3"/>')
            if text:
                parts.append(f'<text x="{x(t) + 4:.1f}" y="{y + 44}" fill="{COLORS[colour]}">{text}</text>')
        if cold:
            parts.append(f'<line x1="{x(cold):.1f}" x2="{x(cold):.1f}" y1="{y + 4}" y2="{y + 32}" '
                         f'stroke="{COLORS["axis"]}" stroke-dasharray="4 3"/>')
            parts.append(f'<text x="{x(cold) - 4:.1f}" y="{y + 44}" text-anchor="end" fill="{COLORS["axis"]}">'
                         f'cold launch -> first step {cold:.1f} s</text>')
    axis_y = height - 8
    parts.append(f'<line x1="{left}" x2="{width - 20}" y1="{axis_y - 10}" y2="{axis_y - 10}" '
                 f'stroke="{COLORS["axis"]}"/>')
    step = 1 if span < 12 else 2 if span < 25 else 5
    t = 0
    while t <= span:
        parts.append(f'<text x="{x(t):.1f}" y="{axis_y}" text-anchor="middle" fill="{COLORS["axis"]}">{t} s</text>')
        t += step
    parts.append("</svg>")
    return "".join(parts)
