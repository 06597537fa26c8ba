"""``render`` output pasted into hand-started TensorFlow processes forms a working cluster, and
every example in cluster_specs/ launches (kept short by flags overriding the file)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.spec.loader import load_spec
from tests.conftest import REPO, assert_no_process_left, orchestrator_cmd, test_env

pytestmark = pytest.mark.e2e

PROGRAM = REPO / "tests" / "programs" / "tf_cluster.py"
SPEC_FILES = sorted((REPO / "cluster_specs").glob("*.*"))


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def rendered_export(spec: Path, task: str) -> str:
    """What a user copies from ``render --format env --task``: one ``export TF_CONFIG=...`` line."""
    result = subprocess.run(orchestrator_cmd("render", "--spec", str(spec), "--format", "env", "--task", task),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("export TF_CONFIG=") and "\n" not in line
    return line


def start_by_hand(export_line: str, mode: str, extra_env: dict | None = None) -> subprocess.Popen:
    """A shell that runs the pasted line, then the user's TF program (no orchestrator)."""
    env = {k: v for k, v in test_env().items() if k != "TF_CONFIG"}
    env.update(extra_env or {})
    return subprocess.Popen(["bash", "-c", f'{export_line}\nexec "{sys.executable}" "{PROGRAM}" {mode}'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                            start_new_session=True)


def result_of(proc: subprocess.Popen, timeout_s: float = 120) -> dict:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, out + err[-3000:]
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT "):])


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
    assert_no_process_left([p.pid for p in procs])


def test_rendered_tf_configs_form_a_mwms_cluster(tmp_path):
    ports = free_ports(2)
    spec = tmp_path / "mwms.yaml"
    spec.write_text(f"strategy: multi_worker_mirrored\naddresses:\n"
                    f"  worker: [127.0.0.1:{ports[0]}, 127.0.0.1:{ports[1]}]\n")
    procs = [start_by_hand(rendered_export(spec, f"worker:{i}"), "mwms") for i in range(2)]
    try:
        results = [result_of(p) for p in procs]
    finally:
        stop(procs)
    assert [r["task"] for r in results] == ["worker:0", "worker:1"]
    assert all(r["replicas"] == 2 and r["sum"] == 3.0 for r in results)  # 1 + 2, all-reduced across the two


def test_rendered_tf_configs_form_a_pss_cluster(tmp_path):
    ports = free_ports(3)
    spec = tmp_path / "pss.yaml"
    spec.write_text("strategy: parameter_server\naddresses:\n"
                    f"  chief: 127.0.0.1:{ports[0]}\n  worker: [127.0.0.1:{ports[1]}]\n  ps: [127.0.0.1:{ports[2]}]\n")
    env = {"GRPC_FAIL_FAST": "use_caller"}
    servers = [start_by_hand(rendered_export(spec, t), "pss", env) for t in ("ps:0", "worker:0")]
    chief = start_by_hand(rendered_export(spec, "chief:0"), "pss", env)
    try:
        result = result_of(chief)
        assert all(p.poll() is None for p in servers), "worker and ps serve until stopped"
    finally:
        stop([chief, *servers])
    assert result["counter"] == 6.0 and "/job:ps/" in result["variable_device"]


@pytest.mark.parametrize("path", SPEC_FILES, ids=[p.name for p in SPEC_FILES])
def test_every_example_spec_launches(tmp_path, path):
    spec = load_spec(path)
    run_id = path.stem
    result = subprocess.run(
        orchestrator_cmd("launch", "--spec", str(path), "--plain", "--runs-dir", str(tmp_path), "--run-id", run_id,
                         "--epochs", "1", "--steps-per-epoch", "5", "--spares", "0"),  # no restart: no spares
        capture_output=True, text=True, timeout=240, cwd=REPO, env=test_env(),
    )
    summary = json.loads((tmp_path / run_id / "summary.json").read_text())
    assert_no_process_left([t["pid"] for t in summary["tasks"]])
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary["status"] == "Succeeded"
    assert summary["strategy"] == spec.strategy.value  # the file's strategy: no flag overrode it
    assert summary["metrics"]["steps"] == 5  # --epochs 1 --steps-per-epoch 5 beat the file's values
    plan = json.loads((tmp_path / run_id / "plan.json").read_text())
    assert sorted(t["task"] for t in plan["tasks"]) == sorted(str(t) for t in spec.tasks())
    if spec.evaluator:
        evaluator = next(t for t in summary["tasks"] if t["task"] == "evaluator:0")
        assert evaluator["pid"], evaluator
    if spec.addresses:
        assert {t["task"]: t["address"] for t in plan["tasks"]} == {str(t): a for t, a in spec.addresses.items()}
