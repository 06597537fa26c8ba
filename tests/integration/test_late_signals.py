"""Signals from outside, with real processes (issue 21, item 7): a SIGTERM that reaches a task
after its training ended is a late notice, whether sent to the task's whole process group or to
its wrapper's pid: the job succeeds with a note, never fails. No TensorFlow."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tests.conftest import wait_until
from tests.e2e.test_recovery import launches, start  # noqa: F401 - the fixture

LAUNCH_TIMEOUT_S = 60


@pytest.mark.parametrize("where", ["group", "wrapper"])
def test_a_sigterm_in_teardown_after_training_ended_is_a_late_notice_not_a_failure(tmp_path, launches,  # noqa: F811
                                                                                     where):
    launch = start(launches, tmp_path, where, "--workers", "2", "--spares", "0", "--max-restarts", "0",
                   "--", sys.executable, "tests/programs/user_teardown.py")
    pid = int(launch.wait_for(r"worker-1 started \(pid (\d+)", LAUNCH_TIMEOUT_S)[1])  # the wrapper's pid
    launch.wait_for(r"worker-0 succeeded", LAUNCH_TIMEOUT_S)  # training has ended
    marker = tmp_path / where / "attempt-0" / "worker-1" / "teardown"
    wait_until(marker.exists, LAUNCH_TIMEOUT_S, what="worker-1 in its teardown")
    if where == "group":  # the wrapper leads the task's process group (its own session)
        os.killpg(pid, signal.SIGTERM)
    else:
        os.kill(pid, signal.SIGTERM)
    code, summary = launch.finish(LAUNCH_TIMEOUT_S)
    assert code == 0, "".join(launch.lines[-30:])
    assert summary["status"] == "Succeeded" and not summary.get("root_cause")
    worker1 = summary["tasks"][1]
    assert worker1["state"] == "Succeeded" and worker1["exit"] == "signal SIGTERM"
    assert "late notice, not a failure" in worker1["reason"]
