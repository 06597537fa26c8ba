"""The declarations the documentation's reference pages are made from match the code, and the
generators refuse what they cannot describe (no MkDocs needed: tests/docs builds the site)."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli import build_parser
from orchestrator.report import schema, summary
from tools.docsite import bench, reference


def _finished_run(tmp_path):
    """A finished job's final snapshot, from the decisions lane's harness (a fake backend and clock)."""
    from tests.decisions.test_supervisor_loop import Harness, spec_of

    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=3)
    h.beat("worker-0", step=4, test_accuracy=0.9, replicas_in_sync=2, cluster_workers=2)
    record = h.store.get(h.task("worker-0").task, 0)
    record.heartbeat.epoch, record.heartbeat.loss, record.heartbeat.examples_per_second = 1, 0.5, 64.0
    for name in ("worker-0", "worker-1"):
        h.exit(name, 0)
    return h.finish()


def test_the_summary_is_its_type_and_every_field_says_what_it_holds(tmp_path):
    for cls in (schema.RunSummary, schema.TaskEntry, schema.HeartbeatEntry):
        docs = schema.field_docs(cls)
        assert docs and all(text.strip() for text in docs.values()), cls.__name__
    assert summary.SUMMARY_FIELDS == schema.field_docs(schema.RunSummary)
    written = summary.build_summary(_finished_run(tmp_path))
    assert list(written) == list(summary.SUMMARY_FIELDS)  # exactly the type's fields, in its order
    task = written["tasks"][0]
    assert list(task) == list(summary.TASK_FIELDS)
    beat = task["last_heartbeat"]
    in_first_step = {"first_step_s"}  # absent once past the first step, as every task of a finished run is
    assert set(beat) == set(summary.HEARTBEAT_FIELDS) - in_first_step  # every progress field reported here
    assert beat["formed"] == {"replicas_in_sync": 2, "cluster_workers": 2} and beat["metrics"] == {"test_accuracy": 0.9}
    assert json.loads(json.dumps(written)) == written  # plain JSON


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
