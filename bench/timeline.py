"""Where a launch's time goes: the timeline of one run, from its launch to its first training step.

Both sides of the ``tf`` section print the same ``bench: mark LABEL (unix T)`` lines
(``BENCH_TIMING``, :func:`orchestrator.env.bench_mark`): the orchestrator on its stderr
(``cli-start``: its interpreter is up; ``cli-imported``: ``launch``'s modules are imported;
``ports-held``, ``prepared``: the ports held, the plan written; ``first-wave``: a local launch's
first tasks started, before the supervisor's modules are imported; ``health-up``: the health server
up, after the tasks have started), every task in its ``stdout.log`` (``task-main``: its interpreter is up;
``runtime-imported``, ``reporter-started``, ``first-heartbeat``: the task runtime and its
health client; ``train``, ``imported``: TensorFlow imported; ``port-released``, ``leader-up``
(MWMS), ``servers-up`` (the PSS coordinator: every worker and ps listens), ``strategy``,
``data``, ``model``, ``fit``; ``serving`` for ps and PSS workers) and ``bench: first step N done``.
A task's start is the orchestrator's ``NAME started (pid ...)`` event line (the hand-launched
side records the same line when its ``Popen`` returns). Every point is seconds after the run's launch
(``RunResult.launch_unix``).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from bench.tfjobs import RunResult

_MARK = re.compile(r"bench: mark (\S+) \(unix ([\d.]+)\)")
_FIRST = re.compile(r"bench: first step \d+ done \(unix ([\d.]+)\)")
_STARTED = re.compile(r"(\w+-\d+) started \(pid \d+, attempt 0\)")

ORCHESTRATOR = ("cli-start", "cli-imported", "ports-held", "prepared", "first-wave", "health-up")
"""The orchestrator's points, in the order they happen."""
TASK = ("started", "task-main", "runtime-imported", "reporter-started", "first-heartbeat", "train", "imported",
        "port-released", "leader-up", "servers-up", "serving", "strategy", "data", "model", "fit", "first-step")
"""A task's points, in the order they happen (a task has those of its role)."""


def points(run: RunResult, tasks: Sequence[str]) -> dict[str, float]:
    """The timeline of ``run``: ``label -> s`` for the orchestrator's points and
    ``task label -> s`` for each of ``tasks`` (e.g. ``worker-0 imported``)."""
    out: dict[str, float] = {}
    for arrived, line in run.events:
        if m := _MARK.search(line):
            out.setdefault(m[1], float(m[2]) - run.launch_unix)
        elif m := _STARTED.search(line):
            out.setdefault(f"{m[1]} started", arrived - run.launch_unix)
    for task in tasks:
        try:
            text = (run.run_dir / "attempt-0" / task / "stdout.log").read_text(errors="replace")
        except OSError:
            continue
        for m in _MARK.finditer(text):
            out.setdefault(f"{task} {m[1]}", float(m[2]) - run.launch_unix)
        if m := _FIRST.search(text):
            out[f"{task} first-step"] = float(m[1]) - run.launch_unix
    return out


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize(runs: Sequence[dict[str, float]], tasks: Sequence[str]) -> dict[str, dict[str, float | None]]:
    """Per point, the median over ``runs`` of the orchestrator's time, and for a task's point of
    the first and the last task to reach it (``{"first": s, "last": s}``; the last gates a
    collective start); points no run has are left out."""
    out: dict[str, dict[str, float | None]] = {}
    for label in ORCHESTRATOR:
        values = [p[label] for p in runs if label in p]
        if values:
            out[label] = {"first": _median(values), "last": _median(values)}
    for label in TASK:
        per_run = [[p[f"{t} {label}"] for t in tasks if f"{t} {label}" in p] for p in runs]
        per_run = [v for v in per_run if v]
        if per_run:
            out[f"task {label}"] = {"first": _median([min(v) for v in per_run]),
                                    "last": _median([max(v) for v in per_run])}
    return out


def table(orchestrated: dict[str, dict[str, float | None]], hand: dict[str, dict[str, float | None]]) -> str:
    """The two sides' timelines side by side, one line per point (medians, s after launch)."""
    def cell(side: dict[str, dict[str, float | None]], label: str) -> str:
        p = side.get(label)
        if p is None:
            return f"{'-':>15}"
        if p["first"] == p["last"]:
            return f"{p['last']:>15.3f}"
        return f"{p['first']:>7.3f}-{p['last']:<7.3f}"

    labels = [*ORCHESTRATOR, *(f"task {t}" for t in TASK)]
    lines = [f"  {'point (s after launch; tasks: first-last)':<44}{'orchestrated':>15} {'hand':>15}"]
    for label in labels:
        if label in orchestrated or label in hand:
            lines.append(f"  {label:<44}{cell(orchestrated, label)} {cell(hand, label)}")
    return "\n".join(lines)
