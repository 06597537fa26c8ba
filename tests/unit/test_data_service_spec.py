"""The tf.data service in the spec, the plan and the CLI (issue 38): roles outside TF_CONFIG's
cluster, their environment, bad set-ups as one line and exit 2 with nothing started."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.plan import make_plan
from orchestrator.spec.dataservice import DataServiceSpec
from orchestrator.spec.fields import spec_fields
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import TaskId
from tests.conftest import REPO, test_env


def test_the_flag_adds_a_dispatcher_and_n_data_workers_before_the_trainers():
    spec = build_spec({}, {"workers": 2, "data_service": {"workers": 2}})
    assert [t.name for t in spec.tasks()] == ["dispatcher-0", "data_worker-0", "data_worker-1", "worker-0",
                                              "worker-1"]
    assert spec.data_service == DataServiceSpec(workers=2, sharding="dynamic")
    assert all(spec.serves_forever(t) for t in spec.tasks()[:3]) and spec.trainers() == [TaskId("worker", 0),
                                                                                         TaskId("worker", 1)]
    assert build_spec(spec_fields(spec)) == spec  # plan.json keeps it (launch --resume)


def test_a_spec_file_mapping_and_the_sharding_flag():
    spec = build_spec({"strategy": "parameter_server", "data_service": {"workers": 1, "sharding": "off",
                                                                        "work_dir": "/shared/d"}})
    assert (spec.data_service.sharding, spec.data_service.work_dir) == ("off", "/shared/d")
    assert build_spec({}, {"data_service": {"sharding": "off"}}).data_service == DataServiceSpec(1, "off")
    assert build_spec({"data_service": 0}).data_service is None


@pytest.mark.parametrize(
    "raw, field",
    [
        ({"strategy": "hogwild", "data_service": 1}, "data_service"),
        ({"strategy": "mirrored", "data_service": 1}, "data_service"),
        ({"data_service": {"workers": -1}}, "data_service.workers"),
        ({"data_service": {"workers": 1, "sharding": "static"}}, "data_service.sharding"),
        ({"data_service": {"workers": 1, "shards": 2}}, "data_service.shards"),
        ({"data_service": "yes"}, "data_service"),
    ],
)
def test_bad_set_ups_name_the_field(raw, field):
    with pytest.raises(SpecError) as info:
        build_spec(raw)
    assert info.value.field == field


def test_the_plan_keeps_the_service_out_of_tf_config_and_gives_every_task_its_address(tmp_path: Path):
    spec = build_spec({}, {"workers": 2, "data_service": {"workers": 1}})
    addresses = {t: f"127.0.0.1:{3000 + i}" for i, t in enumerate(spec.tasks())}
    plan = make_plan(spec, addresses, run_id="r1", run_dir=tmp_path, health_address="127.0.0.1:1", token="x",
                     cores=2)
    assert plan.cluster == {"worker": ["127.0.0.1:3002", "127.0.0.1:3003"]}
    by = {tp.task.name: tp for tp in plan.tasks}
    assert by["dispatcher-0"].argv[1:] == ("-m", "dataservice") and by["worker-0"].argv[1:] == ("-m", "worker")
    for tp in plan.tasks:
        assert tp.env[env.DATA_SERVICE_ADDRESS] == "127.0.0.1:3000" and tp.env[env.DATA_SERVICE_JOB] == "r1"
        assert tp.env[env.DATA_SERVICE_SHARDING] == "dynamic"
    assert by["dispatcher-0"].env[env.DATA_SERVICE_WORK_DIR] == str(tmp_path / "data-service")
    assert by["data_worker-0"].env[env.TASK_ADDRESS] == "127.0.0.1:3001"
    assert env.TASK_ADDRESS not in by["worker-0"].env and env.DATA_SERVICE_WORK_DIR not in by["worker-0"].env


def test_without_the_service_nothing_changes(tmp_path: Path):
    spec = build_spec({}, {"workers": 2})
    plan = make_plan(spec, {t: "127.0.0.1:1" for t in spec.tasks()}, run_id="r", run_dir=tmp_path,
                     health_address="127.0.0.1:1", token="x", cores=2)
    assert not any(k.startswith("ORCH_DATA_SERVICE") for tp in plan.tasks for k in tp.env)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=REPO, env=test_env(),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args",
    [
        ("--strategy", "hogwild", "--data-service", "1"),
        ("--strategy", "mirrored", "--data-service", "2"),
        ("--data-service", "-1"),
    ],
)
def test_bad_set_ups_are_one_line_and_exit_2_with_nothing_started(tmp_path, args):
    command = ("sbatch", "-o", str(tmp_path / "job.sbatch"), *args[1:]) if args[0] == "sbatch" else ("launch", *args)
    result = run_cli(command[0], "--runs-dir", str(tmp_path), *command[1:])
    assert result.returncode == 2, result
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error:")
    assert "data_service" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_sbatch_writes_a_script_with_the_roles_placed(tmp_path):
    # issue 38: the Slurm backend runs the roles (it refused them before); the script asks for a node per task
    result = run_cli("sbatch", "--runs-dir", str(tmp_path / "runs"), "-o", str(tmp_path / "job.sh"), "--workers", "2",
                     "--data-service", "1")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "job.sh").read_text()
    assert "#SBATCH --nodes=4" in text and "--data-service 1" in text.strip().splitlines()[-1]


def test_the_dry_run_lists_the_roles(tmp_path):
    result = run_cli("launch", "--workers", "2", "--data-service", "2", "--dry-run", "--runs-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [t["task"] for t in plan["tasks"]][:3] == ["dispatcher:0", "data_worker:0", "data_worker:1"]
    assert set(plan["cluster"]) == {"worker"} and plan["spec"]["data_service"]["workers"] == 2


def test_the_compose_file_has_the_roles_in_the_start_order():
    from orchestrator.render.compose import render_compose

    services = render_compose(build_spec({}, {"workers": 2, "data_service": {"workers": 1}}), cores=2)["services"]
    assert list(services) == ["dispatcher-0", "data_worker-0", "worker-0", "worker-1"]
    assert services["dispatcher-0"]["command"] == ["python", "-m", "dataservice"]
    assert "depends_on" not in services["dispatcher-0"]
    assert services["data_worker-0"]["depends_on"] == {"dispatcher-0": {"condition": "service_healthy"}}
    assert set(services["worker-1"]["depends_on"]) == {"dispatcher-0", "data_worker-0"}
    assert services["worker-1"]["environment"][env.DATA_SERVICE_ADDRESS] == "dispatcher-0:2222"
    assert services["data_worker-0"]["environment"][env.TASK_ADDRESS] == "data_worker-0:2222"
    assert json.loads(services["worker-0"]["environment"]["TF_CONFIG"])["cluster"] == {
        "worker": ["worker-0:2222", "worker-1:2222"]}


def test_the_tfjob_rendering_refuses_the_service_in_one_line():
    result = run_cli("render", "--workers", "2", "--data-service", "1", "--format", "tfjob", "--image", "r/x:1")
    assert result.returncode == 2, result
    assert len(result.stderr.strip().splitlines()) == 1 and "data_service" in result.stderr


@pytest.mark.parametrize("raw", [{"workers": 2, "data_service": {"workers": 2}},
                                 {"strategy": "parameter_server", "workers": 1, "ps": 1, "data_service": 1}])
def test_the_jobset_has_the_roles_in_order_and_passes_every_validator(raw):
    from orchestrator.render.jobset import jobset_manifest
    from orchestrator.task.jobset import ensure_tf_config
    from tests.k8s.validators import validate_jobset
    from tests.unit.test_k8s_manifests import _pod_env

    doc = jobset_manifest(build_spec({}, raw), name="digits", image="reg/tfo:1", volume_claim="tf-runs")
    assert validate_jobset(doc) == []
    rjobs = doc["spec"]["replicatedJobs"]
    assert [r["name"] for r in rjobs][:2] == ["dispatcher", "data-worker"]  # a DNS label: no "_"
    assert doc["spec"]["startupPolicy"] == {"startupPolicyOrder": "InOrder"}
    for r in rjobs[:2]:
        job = r["template"]["spec"]
        assert job["backoffLimit"] == 3  # restarted alone, within the job's max_restarts
        assert job["template"]["spec"]["containers"][0]["command"] == ["python", "-m", "dataservice"]
    for r in rjobs:
        environ = _pod_env(doc, r, 0)
        assert ensure_tf_config(environ)
        config = json.loads(environ["TF_CONFIG"])
        assert not {"dispatcher", "data_worker"} & set(config["cluster"])  # outside the trainers' cluster
        assert environ[env.DATA_SERVICE_ADDRESS] == "digits-dispatcher-0-0.digits:2222"
        if r["name"] == "data-worker":
            assert config["task"] == {"type": "data_worker", "index": 0}
            assert environ[env.TASK_ADDRESS] == "digits-data-worker-0-0.digits:2222"
        elif r["name"] != "dispatcher":
            assert env.TASK_ADDRESS not in environ


def test_a_jobset_without_the_service_has_no_startup_order():
    from orchestrator.render.jobset import jobset_manifest

    doc = jobset_manifest(build_spec({}, {"workers": 2}), name="digits", image="reg/tfo:1")
    assert "startupPolicy" not in doc["spec"]
