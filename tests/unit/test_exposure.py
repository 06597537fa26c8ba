"""``doctor --exposure``: the rule (table) and the command on a real listening socket."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest

from orchestrator.cli.exposure import exposures, reachable_at
from tests.conftest import REPO, orchestrator_cmd, test_env

IFACES = ["127.0.0.1", "::1", "10.0.0.5", "fe80::1"]


@pytest.mark.parametrize("bound, expected", [
    ("0.0.0.0", ("127.0.0.1", "10.0.0.5")),  # TF's own bind: every IPv4 interface
    ("::", tuple(IFACES)),  # dual stack: every address
    ("127.0.0.1", ("127.0.0.1",)),
    ("10.0.0.5", ("10.0.0.5",)),
    ("", ()),  # nothing listens here
])
def test_where_a_bound_socket_answers(bound, expected):
    assert reachable_at(bound, IFACES) == expected


def test_a_task_that_nothing_here_listens_for_is_not_exposed_here():
    tasks = [{"task": "worker-0", "address": "127.0.0.1:2222"}, {"task": "worker-1", "address": "node-1:2223"}]
    found = exposures(tasks, {2222: ["0.0.0.0"]}, IFACES)
    assert [(e.task, e.bound, e.outside) for e in found] == [("worker-0", "0.0.0.0", ("10.0.0.5",)),
                                                            ("worker-1", "", ())]


def test_doctor_exposure_lists_a_wildcard_listener_and_exits_1(tmp_path):
    """A real socket bound as TensorFlow binds (0.0.0.0) on a task's port of a run's plan."""
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        run = tmp_path / "r1"
        run.mkdir()
        (run / "plan.json").write_text(json.dumps({"tasks": [{"task": "worker-0", "address": f"127.0.0.1:{port}"}]}))
        done = subprocess.run(orchestrator_cmd("doctor", "--exposure", "r1", "--runs-dir", str(tmp_path), "--json"),
                              env=test_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    out = json.loads(done.stdout)
    (task,) = out["tasks"]
    assert task["bound"] == "0.0.0.0" and "127.0.0.1" in task["reachable"]
    assert done.returncode == (1 if task["outside"] else 0)  # a machine with only loopback exposes nothing
