"""A run whose orchestrator died without a summary (SIGKILL, a lost machine) reads as ``Lost``
with how long it was seen alive."""

from __future__ import annotations

import json
import os

from orchestrator.report.runs import run_status
from orchestrator.report.status import format_table


def test_a_lost_run_says_how_long_it_was_seen_alive_and_when_it_was_last_written_to(tmp_path):
    run_dir = tmp_path / "20261130-170000-abcd"
    log = run_dir / "attempt-0" / "worker-0" / "stdout.log"
    log.parent.mkdir(parents=True)
    plan = run_dir / "plan.json"
    plan.write_text(json.dumps({"spec": {"strategy": "multi_worker_mirrored"}, "tasks": [{"task": "worker:0"}]}))
    log.write_text("epoch 1/3\n")
    os.utime(plan, (1796000000.0, 1796000000.0))
    os.utime(log, (1796000042.5, 1796000042.5))  # the task's last log line, 42.5 s after the launch
    (run_dir / "endpoint.json").write_text(json.dumps({"address": "127.0.0.1:9", "token": "t", "pid": 2**22 + 7}))
    os.utime(run_dir / "endpoint.json", (1796000000.0, 1796000000.0))
    status = run_status(run_dir, timeout_s=0.5)
    assert (status["status"], status["elapsed_s"]) == ("Lost", 42.5)
    assert status["reason"].startswith("the orchestrator (pid 4194311) is gone and wrote no summary (killed?); "
                                       "last written to ")
    assert format_table(status).splitlines()[0] == (
        "run 20261130-170000-abcd · multi_worker_mirrored · Lost · 42.5s")


def test_list_shows_the_accuracy_a_users_program_reported_when_there_is_no_test_accuracy():
    from orchestrator.cli.list_runs import _cells, run_entry

    base = {"run_id": "r", "status": "Succeeded", "strategy": "multi_worker_mirrored", "tasks": [{"task": "worker:0"}]}
    assert _cells(run_entry({**base, "metrics": {"accuracy": 0.9527778029441833}}))["accuracy"] == "0.9528"
    assert _cells(run_entry({**base, "metrics": {"accuracy": 0.5, "test_accuracy": 0.97}}))["accuracy"] == "0.9700"
    assert _cells(run_entry({**base, "metrics": {}}))["accuracy"] == "-"
