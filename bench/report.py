"""What a bench run writes besides its JSON files: the machine it ran on (:func:`machine`) and
``bench/results/README.md`` (:func:`write_report`: the whole table, or one ``--only`` section of it)."""

from __future__ import annotations

import os
import platform
import time

from bench.stats import markdown_table


def log(text: str) -> None:
    """One progress line of a bench run, with the time of day."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", flush=True)


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "memory_gib": round(mem_gib, 1),
            "python": platform.python_version(), "kernel": platform.release()}


def write_report(suite, meta: dict, only: list[str] | None = None) -> str:
    title = f"`python -m bench{' --quick' if suite.quick else ''}{' --only ' + ' '.join(only) if only else ''}`"
    lines = [
        "# Benchmark results" if not only else f"## {title}",
        "",
        f"{title} on {meta['date']}: {meta['machine']['cores']} cores "
        f"({meta['machine']['cpu']}), {meta['machine']['memory_gib']} GiB, Python {meta['machine']['python']}; "
        f"load average {meta['load_before']} before, {meta['load_after']} after; {meta['duration_s']:.0f} s.",
        "",
        ("Ratios are orchestrated / hand-launched runs done side by side (interleaved, alternating order). " if not only
         else "Ratios are runs of this section done side by side (interleaved, rotating order), paired by round. ") +
        "Each figure is min / median / max over its runs; a target is met when the median meets it.",
        "",
        markdown_table(suite.rows),
        "",
    ]
    if suite.notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in suite.notes] + [""]
    text = "\n".join(lines)
    if only:  # keep the full run's table; replace this selection's earlier section, if any
        readme = suite.results / "README.md"
        old = readme.read_text() if readme.exists() else "# Benchmark results\n"
        head = f"## {title}"
        if head in old:
            start = old.index(head)
            nxt = old.find("\n## ", start + len(head))
            old = old[:start] + (old[nxt + 1:] if nxt != -1 else "")
        readme.write_text(old.rstrip("\n") + "\n\n" + text)
        return text
    (suite.results / "README.md").write_text(text)
    return text


def _r(value, digits: int = 1):
    return None if value is None else round(value, digits)


def _diff(record: dict, end: str, start: str):
    return None if record.get(end) is None or record.get(start) is None else round(record[end] - record[start], 3)


def _tail(r, lines: int = 12) -> str:
    """The last lines the orchestrator printed in run ``r`` (why a run came out incomplete)."""
    return "".join(f"\n    | {line}" for _, line in r.events[-lines:])
