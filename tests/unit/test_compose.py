"""Rendering the Compose file and the docker backend's pure parts (no engine, no TensorFlow)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from orchestrator import env
from orchestrator.backends import docker, image
from orchestrator.render import compose
from orchestrator.spec import JobSpec
from tests.conftest import REPO, test_env


def services(spec: JobSpec, **options) -> dict:
    return compose.render_compose(spec, token="secret-token", run_id="r1", cores=4, **options)["services"]


def test_one_service_per_task_with_tf_config_from_service_names():
    spec = JobSpec.create(strategy="parameter_server", workers=2, ps=1)
    svc = services(spec)
    assert list(svc) == ["chief-0", "worker-0", "worker-1", "ps-0"]
    cluster = {"chief": ["chief-0:2222"], "worker": ["worker-0:2222", "worker-1:2222"], "ps": ["ps-0:2222"]}
    for name, service in svc.items():
        tf_config = json.loads(service["environment"]["TF_CONFIG"])
        assert tf_config["cluster"] == cluster
        assert f"{tf_config['task']['type']}-{tf_config['task']['index']}" == name
        assert service["hostname"] == name
        assert service["command"][:2] == ["python", "-m"]
    assert svc["ps-0"]["command"] == ["python", "-m", "ps"]
    assert svc["chief-0"]["command"] == ["python", "-m", "worker"]


def test_health_endpoint_token_network_volume_and_healthcheck():
    svc = services(JobSpec.create(workers=2), health_address="host.docker.internal:6000")
    for service in svc.values():
        e = service["environment"]
        assert e[env.HEALTH_ADDRESS] == "host.docker.internal:6000"
        assert e[env.JOB_TOKEN] == "secret-token"
        assert env.ORCHESTRATOR_PID not in e  # no parent-death signal in a container
        assert e[env.BACKUP_DIR] == "/job/backup" and e[env.MODEL_DIR] == "/job/model"
        assert e[env.TASK_DIR].startswith("/job/attempt-0/")
        assert service["extra_hosts"] == ["host.docker.internal:host-gateway"]
        assert service["networks"] == ["cluster"]
        assert "ports" not in service  # nothing published: TF's server has no authentication
        assert service["volumes"] == ["job:/job"]
        assert service["init"] is True
        assert e[env.TASK_HEALTH_PORT] == "2223"
        assert service["healthcheck"]["test"] == ["CMD", "python", "-m", "orchestrator.task.probe", "127.0.0.1:2223"]
    document = compose.render_compose(JobSpec.create(workers=2))
    assert document["networks"]["cluster"]["driver"] == "bridge"
    assert "job" in document["volumes"]
    tokens = {s["environment"][env.JOB_TOKEN] for s in document["services"].values()}
    assert len(tokens) == 1 and len(tokens.pop()) >= 24  # one random token for the job


def test_only_tasks_that_would_end_the_cluster_early_wait_to_be_stopped():
    mwms = services(JobSpec.create(workers=3))
    assert env.STAY_UNTIL_STOPPED not in mwms["worker-0"]["environment"]  # the coordinator ends the job
    assert mwms["worker-1"]["environment"][env.STAY_UNTIL_STOPPED] == "1"
    assert mwms["worker-2"]["environment"][env.STAY_UNTIL_STOPPED] == "1"
    pss = services(JobSpec.create(strategy="parameter_server", workers=1, ps=1))
    assert all(env.STAY_UNTIL_STOPPED not in s["environment"] for s in pss.values())  # they serve until stopped


def test_image_is_built_from_this_checkout_or_taken_as_given():
    svc = services(JobSpec.create(workers=2), base_image="my-base:1")
    worker = svc["worker-0"]
    assert worker["image"] == image.image_tag("my-base:1")
    assert worker["build"] == {"context": str(REPO), "dockerfile": "docker/Dockerfile",
                               "args": {"BASE_IMAGE": "my-base:1"}}
    given = services(JobSpec.create(workers=2), image="registry.example/tf:7")["worker-1"]
    assert given["image"] == "registry.example/tf:7" and "build" not in given


def test_yaml_round_trips_without_anchors_and_names_the_up_command():
    spec = JobSpec.create(strategy="parameter_server", workers=1, ps=1)
    document = compose.render_compose(spec, token="t", run_id="r")
    text = compose.dump_compose(document, spec)
    assert yaml.safe_load(text) == document
    assert "&id" not in text and "*id" not in text
    assert "docker compose up --abort-on-container-exit --exit-code-from chief-0" in text
    assert "docker-compose up --abort-on-container-exit --exit-code-from chief-0" in text
    assert compose.up_command(JobSpec.create(workers=2), "x/c.yml") == (
        "docker compose -f x/c.yml up --abort-on-container-exit --exit-code-from worker-0"
    )


def test_fixed_addresses_of_a_spec_file_give_way_to_service_names():
    from orchestrator.spec.loader import build_spec

    spec = build_spec({"workers": 1, "addresses": {"worker": ["127.0.0.1:5000"]}})
    tf_config = json.loads(services(spec)["worker-0"]["environment"]["TF_CONFIG"])
    assert tf_config["cluster"] == {"worker": ["worker-0:2222"]}
    assert docker.DockerBackend().allocate(spec) == {spec.tasks()[0]: "worker-0:2222"}


def test_image_tag_follows_the_files_and_the_base(tmp_path):
    root = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", "docker/Dockerfile", "orchestrator/a.py", "worker/b.py", "ps/c.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    (root / "orchestrator/__pycache__").mkdir()
    (root / "orchestrator/__pycache__/a.cpython-311.pyc").write_bytes(b"x")
    tag = image.image_tag("base:1", root)
    assert tag.startswith("tf-cluster-orchestrator:") and tag == image.image_tag("base:1", root)
    assert "orchestrator/__pycache__/a.cpython-311.pyc" not in image.image_files(root)
    assert image.image_tag("base:2", root) != tag
    (root / "worker/b.py").write_text("changed")
    assert image.image_tag("base:1", root) != tag
    context = tmp_path / "context"
    image.write_context(root, context, ca_bundle=root / "README.md")
    assert (context / "orchestrator/a.py").read_text() == "orchestrator/a.py"
    assert (context / "docker/certs/host-ca.crt").read_text() == "README.md"


@pytest.mark.parametrize(
    ("status", "oom", "code"),
    [(0, False, 0), (3, False, 3), (137, False, -9), (143, False, -15), (128, False, 128), (255, False, 255),
     (1, True, -9)],
)
def test_container_exit_status_reads_like_popen(status, oom, code):
    assert docker.exit_code_of(status, oom) == code


def test_addresses_are_service_names_on_one_fixed_port():
    spec = JobSpec.create(strategy="parameter_server", workers=1, ps=2)
    assert sorted(docker.addresses(spec).values()) == ["chief-0:2222", "ps-0:2222", "ps-1:2222", "worker-0:2222"]


def run_cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=test_env(),
                          capture_output=True, text=True, timeout=60)


def test_compose_cli_writes_the_file_and_says_how_to_run_it(tmp_path):
    out = tmp_path / "docker-compose.yml"
    result = run_cli("compose", "--strategy", "parameter_server", "--workers", "1", "--epochs", "2", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "--exit-code-from chief-0" in result.stdout
    document = yaml.safe_load(out.read_text())
    assert list(document["services"]) == ["chief-0", "worker-0", "ps-0"]
    assert json.loads(document["services"]["chief-0"]["environment"][env.TRAINING])["epochs"] == 2
    build = document["services"]["ps-0"]["build"]
    assert (out.parent / build["context"] / build["dockerfile"]).resolve() == REPO / "docker" / "Dockerfile"


def test_compose_cli_reads_a_spec_file(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("strategy: multi_worker_mirrored\nworkers: 3\ntraining: {epochs: 1}\n")
    result = run_cli("compose", str(spec), "--workers", "2", "-o", "-")
    assert result.returncode == 0, result.stderr
    assert list(yaml.safe_load(result.stdout)["services"]) == ["worker-0", "worker-1"]


@pytest.mark.parametrize(
    "args",
    [
        ("compose", "--workers", "0"),
        ("compose", "--strategy", "nope"),
        ("compose", "--health-address", "nohost"),
        ("compose", "--bogus"),
        ("launch", "--backend", "kubernetes", "--workers", "1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args):
    result = run_cli(*args, "-o", str(tmp_path / "c.yml")) if args[0] == "compose" else run_cli(*args)
    assert result.returncode == 2, result
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error:")
    assert not (tmp_path / "c.yml").exists()


def test_launch_dry_run_with_the_docker_backend_needs_no_engine(tmp_path):
    result = run_cli("launch", "--backend", "docker", "--workers", "2", "--dry-run", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["cluster"] == {"worker": ["worker-0:2222", "worker-1:2222"]}
    assert plan["tasks"][0]["argv"] == ["python", "-m", "worker"]
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (v1) is not installed")
def test_docker_compose_v1_accepts_the_file(tmp_path):
    out = tmp_path / "docker-compose.yml"
    assert run_cli("compose", "--workers", "2", "-o", str(out)).returncode == 0
    result = subprocess.run(["docker-compose", "-f", str(out), "config", "-q"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
