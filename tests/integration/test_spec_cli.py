"""validate / render / doctor and launch --spec through the real CLI; fixed ports through the real backend."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from orchestrator.backends.local import LocalBackend
from orchestrator.errors import SpecError
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import TaskId
from tests.conftest import REPO, orchestrator_cmd, test_env

SPEC_FILES = sorted((REPO / "cluster_specs").glob("*.*"))


def cli(*args: str, env: dict | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(orchestrator_cmd(*args), capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
                          env={**test_env(), **(env or {})})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_error_line(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_validate_accepts_every_example_and_rendered_tf_configs(tmp_path):
    result = cli("validate", *map(str, SPEC_FILES))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok  ") == len(SPEC_FILES)
    rendered = cli("render", "--spec", str(REPO / "cluster_specs" / "pss-chief-worker-ps.yaml"),
                   "--format", "tf-config")
    paths = []
    for i, line in enumerate(rendered.stdout.splitlines()):
        paths.append(tmp_path / f"task{i}.json")
        paths[-1].write_text(line)
    result = cli("validate", *map(str, paths))
    assert result.returncode == 0, result.stderr
    assert "3 TF_CONFIGs agree on the cluster and name different tasks" in result.stdout


def test_validate_reads_tf_config_from_the_environment():
    good = json.dumps({"cluster": {"worker": ["10.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}})
    result = cli("validate", env={"TF_CONFIG": good})
    assert result.returncode == 0 and "$TF_CONFIG: TF_CONFIG of worker:0" in result.stdout
    bad = json.dumps({"cluster": {"worker": ["10.0.0.1:2222", "localhost:2223"]},
                      "task": {"type": "worker", "index": 0}})
    line = one_error_line(cli("validate", env={"TF_CONFIG": bad}))
    assert line.startswith("error: $TF_CONFIG: cluster.worker[1]='localhost:2223': a loopback address")


@pytest.mark.parametrize(
    "text, name, fragment",
    [
        ("workers: 2\ntraning: {epochs: 1}\n", "s.yaml",
         "s.yaml: traning={'epochs': 1}: unknown key in s.yaml; did you mean training?"),
        ('{"cluster": {"master": ["a:1"]}, "task": {"type": "master", "index": 0}}', "tf.json",
         "tf.json: cluster.master=['a:1']: 'master' is the TF1 name of the chief"),
        ('{"worker": ["a:1", "a:1"]}', "cluster.json",
         "cluster.json: cluster.worker[1]='a:1': cluster.worker[0] already uses"),
    ],
)
def test_validate_names_the_file_field_value_and_fix(tmp_path, text, name, fragment):
    (tmp_path / name).write_text(text)
    line = one_error_line(cli("validate", str(tmp_path / name)))
    assert fragment in line, line


def test_validate_checks_several_tf_configs_against_each_other():
    a = json.dumps({"cluster": {"worker": ["h1:1", "h2:1"]}, "task": {"type": "worker", "index": 0}})
    line = one_error_line(cli("validate", "--tf-config", a, "--tf-config", a))
    assert "--tf-config #2: task='worker:0': --tf-config #1 is the same task" in line


def test_render_env_for_hosts_elsewhere():
    result = cli("render", "--strategy", "parameter_server", "--workers", "2", "--host", "10.0.0.1",
                 "--base-port", "4000", "--format", "env")
    assert result.returncode == 0, result.stderr
    exports = [line for line in result.stdout.splitlines() if line.startswith("export TF_CONFIG=")]
    assert len(exports) == 4 and "# ps:0 on 10.0.0.1:4003" in result.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--task", "worker:5", "--workers", "2"], "task='worker:5': the job has no such task"),
        (["--task", "boss:0"], "task='boss:0': not a task"),
        (["--spec", "cluster_specs/pss-chief-worker-ps.yaml", "--host", "10.0.0.1"],
         "the spec already fixes every address"),
        (["--host", "a:b:c"], "host="),
    ],
)
def test_render_bad_input(args, fragment):
    assert fragment in one_error_line(cli("render", *args))


def test_launch_spec_with_fixed_ports_plans_exactly_those_ports(tmp_path):
    ports = [free_port(), free_port()]
    spec = tmp_path / "fixed.yaml"
    spec.write_text(f"addresses:\n  worker: [127.0.0.1:{ports[0]}, localhost:{ports[1]}]\ntraining: {{epochs: 3}}\n")
    result = cli("launch", "--spec", str(spec), "--epochs", "2", "--dry-run", "--runs-dir", str(tmp_path / "runs"))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["cluster"]["worker"] == [f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"]  # localhost -> IPv4 literal
    assert json.loads(plan["tasks"][0]["env"]["ORCH_TRAINING"])["epochs"] == 2


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("addresses: {worker: [10.0.0.7:2222]}\n",
         "addresses.worker[0]='10.0.0.7:2222': the local backend runs every task"),
        ("addresses: {worker: ['127.0.0.1:80']}\n", "ports below 1024 need root"),
        ("workers: 2\nepochs: 3\n", "epochs=3: unknown key in bad.yaml; move it under training: (training.epochs)"),
    ],
)
def test_launch_bad_spec_exits_2_and_starts_nothing(tmp_path, text, fragment):
    if "ports below" in fragment and sys.platform == "linux":
        import os

        if os.geteuid() == 0:
            pytest.skip("root may bind ports below 1024")
    (tmp_path / "bad.yaml").write_text(text)
    line = one_error_line(cli("launch", "--spec", str(tmp_path / "bad.yaml"), "--runs-dir", str(tmp_path / "runs")))
    assert fragment in line, line
    assert not (tmp_path / "runs").exists()


def test_local_backend_reserves_exactly_the_fixed_ports_and_fails_cleanly_on_a_busy_one():
    ports = [free_port(), free_port()]
    spec = build_spec({"addresses": {"worker": [f"127.0.0.1:{p}" for p in ports]}})
    backend = LocalBackend()
    try:
        assert backend.allocate(spec) == {TaskId("worker", i): f"127.0.0.1:{p}" for i, p in enumerate(ports)}
        with socket.socket() as probe, pytest.raises(OSError):
            probe.bind(("127.0.0.1", ports[1]))  # held for the task
        assert backend.release_port(TaskId("worker", 1), 0) == ports[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", ports[1]))  # released: the task can bind it now
    finally:
        backend.close()
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", ports[1]))
        busy.listen()
        backend = LocalBackend()
        with pytest.raises(SpecError) as info:  # bad input (exit 2), naming the field, the port and who holds it
            backend.allocate(spec)
        assert info.value.field == "addresses.worker[1]"
        assert f"port {ports[1]} is in use by pid {os.getpid()} (" in info.value.problem
        assert "addresses.worker[1]" in info.value.fix
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", ports[0]))  # the other reservation was let go
    with pytest.raises(SpecError, match="loopback"):
        LocalBackend().allocate(build_spec({"addresses": {"worker": ["10.0.0.1:2222"]}}))


def test_launch_on_a_fixed_port_another_process_listens_on_is_bad_input(tmp_path):
    port = free_port()
    (tmp_path / "busy.yaml").write_text(f"addresses: {{worker: ['127.0.0.1:{free_port()}', 'localhost:{port}']}}\n")
    holder = subprocess.Popen([sys.executable, "-c", "import socket, sys, time; s = socket.socket(); "
                               f"s.bind(('0.0.0.0', {port})); s.listen(); print('up', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        line = one_error_line(cli("launch", "--spec", str(tmp_path / "busy.yaml"),
                                  "--runs-dir", str(tmp_path / "runs")))
    finally:
        holder.kill()
        holder.wait()
    assert line.startswith(f"error: addresses.worker[1]='localhost:{port}': "
                           f"port {port} is in use by pid {holder.pid} ("), line
    assert "give addresses.worker[1] a free port" in line
    assert not (tmp_path / "runs").exists()


def test_doctor_reports_and_fails_on_a_busy_fixed_port(tmp_path):
    result = cli("doctor", "--quick", "--workers", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ready" in result.stdout.splitlines()[-1]
    for name in ("python", "tensorflow", "tf-keras", "cores", "memory", "disk", "ports"):
        assert f" {name} " in result.stdout
    port = free_port()
    (tmp_path / "s.yaml").write_text(f"addresses: {{worker: ['127.0.0.1:{port}']}}\n")
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", port))
        busy.listen()
        result = cli("doctor", "--quick", "--json", "--spec", str(tmp_path / "s.yaml"))
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    ports = next(c for c in report["checks"] if c["name"] == "ports")
    assert not report["ready"] and ports["status"] == "FAIL" and str(port) in ports["detail"]


def test_doctor_imports_tensorflow_only_in_a_subprocess():
    code = (
        "import sys; from orchestrator.cli import main; rc = main(['doctor', '--workers', '1']);"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras', 'keras')];"
        "print('LEAKED', bad); sys.exit(rc or (3 if bad else 0))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=REPO,
                            env=test_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "LEAKED []" in result.stdout
    assert "tf import" in result.stdout and "tf.keras is tf-keras" in result.stdout


def test_a_fixed_port_left_in_time_wait_by_the_last_run_does_not_block_the_next(tmp_path):
    port = free_port()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorFlow's gRPC server does
        server.bind(("127.0.0.1", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn, _ = server.accept()
        conn.close()  # the server side closes first: its end of the connection goes to TIME_WAIT
        client.close()
    with socket.socket() as plain:
        try:
            plain.bind(("0.0.0.0", port))
            pytest.skip("the kernel did not keep the connection in TIME_WAIT")
        except OSError:
            pass
    backend = LocalBackend()
    try:
        spec = build_spec({"addresses": {"worker": [f"127.0.0.1:{port}"]}})
        assert backend.allocate(spec) == {TaskId("worker", 0): f"127.0.0.1:{port}"}
    finally:
        backend.close()
