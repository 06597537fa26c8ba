"""``--isolate-network`` with real TensorFlow (issue 37, item 2): while a 2-worker MWMS job trains,
no TCP connection from this machine's network namespace reaches any task's TF port (at loopback
or at any interface address), while inside the run's namespace the port answers; the job trains
to its usual accuracy, its heartbeats reaching the orchestrator through the run's Unix socket."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from orchestrator.backends import netns
from orchestrator.cli.exposure import interface_addresses
from orchestrator.report.runs import read_endpoint
from tests.conftest import REPO, assert_no_process_left, orchestrator_cmd, test_env, wait_until

pytestmark = pytest.mark.e2e


def _allowed() -> bool:
    return netns.probe()[0]


def _connects(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        try:
            s.connect((host, port))
        except OSError:
            return False
        return True


@pytest.mark.skipif(not _allowed(), reason="this machine allows no network namespace (doctor says why)")
def test_isolated_tasks_train_and_no_tf_port_answers_from_outside(tmp_path):
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        orchestrator_cmd("launch", "--plain", "--runs-dir", str(runs), "--run-id", "iso", "--spares", "0",
                         "--workers", "2", "--epochs", "3", "--isolate-network"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=test_env())
    run_dir = runs / "iso"
    try:
        wait_until(lambda: read_endpoint(run_dir) is not None or proc.poll() is not None, 60, what="endpoint.json")
        endpoint = read_endpoint(run_dir)
        assert endpoint is not None, proc.communicate(timeout=30)[0]

        def training() -> bool:  # both workers past their first step: TF's servers are up and the cluster formed
            with endpoint.client() as client:
                status = client.status()
            steps = [((t.get("last_heartbeat") or {}).get("step") or 0) for t in status.get("tasks", [])]
            return len(steps) == 2 and min(steps) > 0 or proc.poll() is not None

        wait_until(training, 240, what="both workers training")
        assert proc.poll() is None
        plan = json.loads((run_dir / "plan.json").read_text())
        assert {t["env"]["ORCH_HEALTH_ADDRESS"] for t in plan["tasks"]} == {f"unix:{netns.socket_path(run_dir)}"}
        hosts = ["127.0.0.1", *[a for a in interface_addresses() if ":" not in a and a != "127.0.0.1"]]
        for task in plan["tasks"]:
            port = int(task["address"].rpartition(":")[2])
            assert task["address"].startswith("127.0.0.1:")
            for host in hosts:
                assert not _connects(host, port), f"{task['task']} answers at {host}:{port} from outside the run"
            if os.geteuid() == 0:  # inside the run's namespace the very port answers: the check above means something
                pid = json.loads(subprocess.run(
                    orchestrator_cmd("status", "iso", "--runs-dir", str(runs), "--json"), env=test_env(), cwd=REPO,
                    capture_output=True, text=True, timeout=30).stdout)["tasks"][0]["pid"]
                inside = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "--", "python3", "-c",
                                         f"import socket; socket.create_connection(('127.0.0.1', {port}), 5)"],
                                        capture_output=True, text=True, timeout=30)
                assert inside.returncode == 0, inside.stderr
        exposure = subprocess.run(orchestrator_cmd("doctor", "--exposure", "iso", "--runs-dir", str(runs), "--json"),
                                  env=test_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
        assert exposure.returncode == 0 and not json.loads(exposure.stdout)["exposed"], exposure.stdout
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "Succeeded" and summary["metrics"]["test_accuracy"] >= 0.85
    assert all(t["last_heartbeat"]["heartbeats"] >= 3 for t in summary["tasks"])  # over the Unix socket
    assert_no_process_left([t["pid"] for t in summary["tasks"]])
    assert not (run_dir / "tls").exists()


@pytest.mark.skipif(not _allowed(), reason="this machine allows no network namespace (doctor says why)")
def test_the_data_service_roles_live_in_the_run_s_namespace_and_beat_over_mutual_tls(tmp_path):
    """The tf.data service's dispatcher and data worker (issue 38) are tasks like the others: each
    has its own client certificate and ``ORCH_TLS_DIR``, and with ``--isolate-network`` runs in the
    run's one network namespace (the trainers reach the dispatcher at its loopback address)."""
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        orchestrator_cmd("launch", "--plain", "--runs-dir", str(runs), "--run-id", "iso-ds", "--spares", "0",
                         "--workers", "2", "--epochs", "2", "--steps-per-epoch", "10", "--data-service", "1",
                         "--isolate-network"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=test_env())
    run_dir = runs / "iso-ds"
    try:
        wait_until(lambda: read_endpoint(run_dir) is not None or proc.poll() is not None, 60, what="endpoint.json")
        endpoint = read_endpoint(run_dir)
        assert endpoint is not None, proc.communicate(timeout=30)[0]
        pids: dict[str, int] = {}

        def serving() -> bool:  # every task has beaten (over mutual TLS: the server takes nothing else)
            with endpoint.client() as client:
                tasks = client.status().get("tasks", [])
            pids.update({t["task"]: t["pid"] for t in tasks if t.get("pid") and t.get("last_heartbeat")})
            return len(pids) == 4 or proc.poll() is not None

        wait_until(serving, 240, what="every task's first heartbeat")
        assert proc.poll() is None and set(pids) == {"worker:0", "worker:1", "dispatcher:0", "data_worker:0"}
        plan = json.loads((run_dir / "plan.json").read_text())
        tls_dir = str(run_dir / "tls")
        for task in plan["tasks"]:
            assert task["env"]["ORCH_TLS_DIR"] == tls_dir, task["task"]
            assert task["env"]["ORCH_HEALTH_ADDRESS"] == f"unix:{netns.socket_path(run_dir)}", task["task"]
        for name in ("dispatcher-0", "data_worker-0"):
            assert (run_dir / "tls" / f"{name}.crt").is_file() and (run_dir / "tls" / f"{name}.key").is_file()
        spaces = {task: os.readlink(f"/proc/{pid}/ns/net") for task, pid in pids.items()}
        assert len(set(spaces.values())) == 1, spaces  # one namespace for the run, service roles included
        assert set(spaces.values()) != {os.readlink("/proc/self/ns/net")}
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "Succeeded" and summary["metrics"]["steps"] == 20
    hb = {t["task"]: t["last_heartbeat"] for t in summary["tasks"]}
    assert hb["dispatcher:0"]["metrics"]["data_workers"] == 1.0 and hb["data_worker:0"]["metrics"]["data_tasks"] >= 1
    assert_no_process_left([t["pid"] for t in summary["tasks"]])
    assert not (run_dir / "tls").exists()
