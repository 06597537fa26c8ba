"""The declarations the documentation's reference pages are made from match the code, and the
generators refuse what they cannot describe (no MkDocs needed: tests/docs builds the site)."""

from __future__ import annotations

import ast
import inspect
import json

import pytest

from orchestrator.cli import build_parser
from orchestrator.report import summary
from tools.docsite import bench, reference


def _returned_keys(func) -> set[str]:
    """String keys of the dict literal ``func`` returns, directly or as ``out = {...}`` (``**`` spreads left out)."""
    tree = ast.parse(inspect.getsource(func))
    returns = [n.value for n in ast.walk(tree)
               if isinstance(n, (ast.Return, ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Dict)]
    assert returns, f"{func.__name__} returns no dict literal"
    return {k.value for k in returns[-1].keys if isinstance(k, ast.Constant)}


def test_summary_fields_name_exactly_what_build_summary_writes():
    assert set(summary.SUMMARY_FIELDS) == _returned_keys(summary.build_summary)


def test_task_fields_name_exactly_what_task_dict_writes():
    spread = {"exit_code", "signal"}  # **exit_fields(code)
    assert set(summary.TASK_FIELDS) == _returned_keys(summary.task_dict) | spread


def test_heartbeat_fields_name_what_heartbeat_dict_writes():
    source = inspect.getsource(summary.heartbeat_dict)
    optional = {"step", "epoch", "loss", "examples_per_second", "metrics", "first_step_s"}  # written when reported
    assert all(f'"{name}"' in source for name in optional)
    assert set(summary.HEARTBEAT_FIELDS) == _returned_keys(summary.heartbeat_dict) | optional


def test_a_flag_without_help_fails_the_cli_reference():
    parser = build_parser()
    launch = reference.subcommands(parser)["launch"][1]
    launch.add_argument("--planted-flag", type=int)
    with pytest.raises(reference.DocsDriftError, match="launch: --planted-flag has no help text"):
        reference.cli_markdown(parser)


def test_the_cli_reference_has_every_flag_with_its_help():
    text = reference.cli_markdown()
    assert "## `launch`" in text and "## `sbatch`" in text
    assert "| `--checkpoint-every` | `STEPS` |" in text
    assert "| `--loop` | `fit` \\| `custom` |" in text  # a pipe in a cell is escaped, not a column


def test_spec_rules_are_read_off_the_validation():
    assert "must be a whole number >= 1" in reference.field_rules("training.epochs")
    assert any("use never, on-failure or exit-code" in r or "policy" in r
               for r in reference.field_rules("supervision.restart_policy"))
    assert reference.field_rules("supervision.heartbeat_timeout_s") == ["must be a number of seconds > 0"]


def test_backend_table_comes_from_the_backends_declarations():
    text = reference.backends_markdown()
    row = next(line for line in text.splitlines() if line.startswith("| `remote` |"))
    assert row.split(" | ")[1:4] == ["-", "-", "yes (register_address, prepare_restart)"]
    assert set(reference.capability_docs()) == set(reference.backend_capabilities())
    assert "| `docker` | `base_image` | `--base-image` |" in text


def test_benchmark_tables_carry_the_date_and_machine_of_their_run(tmp_path):
    # two runs: the whole suite earlier, then only the recovery section again (what a re-bench does)
    machine = {"cpu": "Xeon", "cores": 2, "memory_gib": 23.5, "python": "3.11.7"}
    runs = {"suite.json": ("2026-11-30 04:25 UTC", list(bench.SECTION_TITLES), 4),
            "suite-recovery.json": ("2026-12-01 21:28 UTC", ["recovery"], 16)}
    for name, (date, sections, cores) in runs.items():
        (tmp_path / name).write_text(json.dumps({"date": date, "machine": {**machine, "cores": cores},
                                                 "sections": sections, "quick": False}))
    for figure, section in (("throughput_ratio_mwms2", "tf"), ("recovery_ratio_mwms", "recovery")):
        (tmp_path / f"{figure}.json").write_text(json.dumps({"id": "1", "name": figure, "section": section,
                                                             "measure": figure, "unit": "ratio", "median": 1.0}))
    text = bench.bench_markdown(tmp_path)
    tf, recovery = text.split("### Recovery of a SIGKILLed worker (warm spares)")
    assert "`python -m bench`, 2026-11-30 04:25 UTC, 4 cores (Xeon)" in tf and "2026-12-01" not in tf
    assert "`python -m bench --only recovery`, 2026-12-01 21:28 UTC, 16 cores (Xeon)" in recovery
    assert "### Recovery" in bench.bench_markdown()  # the committed results render too
    svg = bench.timeline_svg()
    assert svg.startswith("<svg") and "resumed" in svg
