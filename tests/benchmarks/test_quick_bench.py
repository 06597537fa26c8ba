"""``python -m bench --quick``: every section of the benchmark suite but ``FULL_ONLY`` runs and gives every
figure.

The bench is run as users run it (a subprocess from the repository root), into a temporary
results directory: the committed ``bench/results`` must stay untouched. About 2.5 minutes on
2 cores. Its figures are smoke values (one short run each) and are not checked against the
targets; what fails here is a section that raised or a figure left without any value.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(1200)


def _snapshot(directory) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(directory.iterdir())}


def test_quick_bench_runs_every_section_and_writes_only_to_its_results_dir(tmp_path):
    committed = REPO / "bench" / "results"
    before = _snapshot(committed)
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--results-dir", str(results)], cwd=REPO,
                          capture_output=True, text=True, timeout=1100)
    log = "\n".join(line for line in proc.stdout.splitlines() if line.startswith(("[bench", "bench error")))
    print(log)  # the sections' timestamps (pytest -rP shows them)
    assert proc.returncode == 0, f"python -m bench --quick exited {proc.returncode}:\n{log}\n{proc.stderr[-3000:]}"
    meta = json.loads((results / "suite.json").read_text())
    assert meta["errors"] == [] and meta["quick"] is True
    from bench.run import FULL_ONLY, SECTIONS
    for section in [s for s in SECTIONS if s not in FULL_ONLY]:
        assert f"section {section} done" in log, f"section {section} did not finish:\n{log}"
    figures = [json.loads(p.read_text()) for p in results.glob("*.json") if p.name != "suite.json"]
    assert len(figures) >= len(SECTIONS) - len(FULL_ONLY)
    assert all(f["runs"] >= 1 for f in figures), [f["name"] for f in figures if f["runs"] < 1]
    assert "# Benchmark results" in (results / "README.md").read_text()
    assert _snapshot(committed) == before, "the quick bench wrote into the committed bench/results"
