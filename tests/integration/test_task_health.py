"""What a task does differently in a container (real processes and gRPC, no TensorFlow, no Docker):
its grpc.health.v1 server and probe, waiting to be stopped (Compose), running without an
orchestrator, and killing itself when the orchestrator it reached is gone."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest

from orchestrator import env
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.spec import TaskId
from orchestrator.task.probe import probe, serve_task_health
from tests.conftest import REPO, test_env, wait_until

TF_CONFIG = json.dumps({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_task(tmp_path, **variables: str) -> subprocess.Popen:
    environment = {**test_env(), "TF_CONFIG": TF_CONFIG, **variables}
    for name in (env.HEALTH_ADDRESS, env.ORCHESTRATOR_PID):
        environment.pop(name, None)
    environment.update(variables)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.programs.task"], cwd=REPO, env=environment,
        stdout=open(tmp_path / "stdout.log", "wb"), stderr=open(tmp_path / "stderr.log", "wb"), start_new_session=True,
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(10)


def run_probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.task.probe", *args], cwd=REPO, env=test_env(),
                          capture_output=True, text=True, timeout=30)


def test_probe_says_serving_while_the_server_lives_and_fails_after():
    server, port = serve_task_health(0, host="127.0.0.1")
    try:
        assert probe(f"127.0.0.1:{port}") == (True, "SERVING")
        result = run_probe(f"127.0.0.1:{port}")
        assert (result.returncode, result.stdout.strip()) == (0, f"127.0.0.1:{port}: SERVING")
    finally:
        server.stop(None)
    result = run_probe(f"127.0.0.1:{port}", "--timeout", "2")
    assert result.returncode == 1 and "UNAVAILABLE" in result.stdout
    assert run_probe("--from-env").returncode == 0  # no task health server configured: nothing to check


def test_a_task_serves_grpc_health_when_asked(tmp_path):
    port = free_port()
    task = start_task(tmp_path, TEST_BEHAVIOR="serve", **{env.TASK_HEALTH_PORT: str(port)})
    try:
        wait_until(lambda: probe(f"127.0.0.1:{port}", timeout_s=1.0)[0], 30, 0.2, "the task's health server")
    finally:
        stop(task)
    assert not probe(f"127.0.0.1:{port}", timeout_s=1.0)[0]


def test_a_finished_task_waits_to_be_stopped_and_exits_0(tmp_path):
    task = start_task(tmp_path, TEST_BEHAVIOR="succeed", **{env.STAY_UNTIL_STOPPED: "1"})
    try:
        wait_until(lambda: b"waiting to be stopped" in (tmp_path / "stderr.log").read_bytes(), 30, 0.05, "done")
        assert task.poll() is None
        task.send_signal(signal.SIGTERM)
        assert task.wait(10) == 0
    finally:
        stop(task)


def test_a_task_runs_to_its_end_with_no_orchestrator_listening(tmp_path):
    task = start_task(tmp_path, TEST_BEHAVIOR="succeed", **{env.HEALTH_ADDRESS: f"127.0.0.1:{free_port()}",
                                                           env.JOB_TOKEN: "t"})
    try:
        assert task.wait(30) == 0
    finally:
        stop(task)
    assert "behavior=succeed" in (tmp_path / "stdout.log").read_text()


class _NONE:
    count = 0


@pytest.mark.timeout(60)
def test_a_task_that_lost_its_orchestrator_kills_itself(tmp_path):
    store = HeartbeatStore()
    server = HealthServer("tok", store).start()
    task = start_task(tmp_path, TEST_BEHAVIOR="serve", **{env.HEALTH_ADDRESS: server.address, env.JOB_TOKEN: "tok",
                                                         env.ORPHAN_TIMEOUT_S: "1", env.HEARTBEAT_INTERVAL_S: "0.2"})
    try:
        # two beats: the task has seen its first one go out on an open stream (it knows it reached us)
        wait_until(lambda: (store.get(TaskId("worker", 0), 0) or _NONE).count >= 2, 30, 0.05, "two heartbeats")
    finally:
        server.stop()  # the orchestrator is gone
    try:
        assert task.wait(20) == -signal.SIGKILL
        assert "unreachable" in (tmp_path / "stderr.log").read_text()
    finally:
        stop(task)
