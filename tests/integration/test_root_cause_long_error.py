"""The root cause of a user's program that died as TensorFlow programs do: a deep traceback, a
ValueError kilobytes long, then lots of log lines (issue 21 item 6). Real processes, through
``launch -- PROGRAM`` (execwrap), no TensorFlow."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from orchestrator import api
from orchestrator.report.summary import format_final
from orchestrator.spec import JobSpec
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, all_pids, assert_no_process_left
from tests.programs.long_error import TAIL


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)


def test_the_root_cause_is_the_whole_long_exception_line_whatever_is_logged_after_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LONG_ERROR_BYTES", "6000")
    spec = JobSpec.create(workers=1)
    spec = dataclasses.replace(spec, supervision=SupervisionSpec.create(deadline_s=30.0,
                                                                        restart_policy={"all": "never"}))
    job = api.prepare(spec, runs_dir=tmp_path, commands={"worker": [sys.executable, "tests/programs/long_error.py"]})
    result, summary = api.run(job)
    assert_no_process_left(all_pids(summary))
    assert result.exit_code == 1, summary["reason"]
    root = json.loads((job.plan.run_dir / "summary.json").read_text())["root_cause"]
    assert root["message"].startswith("ValueError: Cannot assign value to variables 'dense_0/kernel:0'")
    assert root["message"].endswith(TAIL), root["message"][-200:]
    assert len(root["message"]) > 4096
    stderr = (job.plan.run_dir / "attempt-0" / "worker-0" / "stderr.log").read_text()
    assert stderr.rstrip().splitlines()[-1].startswith("WARNING:absl:")  # the logs really came after it
    # the final report's root cause says it whole (wrapped)
    report = format_final(summary, width=120).split("last lines of its stderr:")[0]
    assert TAIL in " ".join(line.strip() for line in report.splitlines())
