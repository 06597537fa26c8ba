"""GPUs without a GPU: the inventory interface (its fake of our own), placement on devices, the
task environment, every rendering's request, and bad input (issue 20).

The fake inventory is ``ORCH_FAKE_GPUS`` (our own interface: a JSON list of GPUs); NVML itself is
never faked. Where NVML is installed but no GPU answers (this machine) the real discovery is asked
too and must say why it found none.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.plan import make_plan
from orchestrator.render.compose import render_compose
from orchestrator.render.jobset import jobset_manifest
from orchestrator.render.kubernetes import GPU_RESOURCE, tfjob_manifest
from orchestrator.resources import gpus
from orchestrator.resources.gpus import Gpu, Inventory
from orchestrator.resources.placement import GROWTH_ENV, place
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import JobSpec, TaskId
from tests.conftest import REPO, test_env
from tests.k8s.validators import validate_jobset, validate_tfjob

GIB = 2**30


def node(n: int) -> Inventory:
    return Inventory(tuple(Gpu(i, f"GPU-{i:04d}-uuid", "Fake H100", 80 * GIB) for i in range(n)), "555.1", "fake:test")


def fake_file(tmp_path: Path, n: int, used_bytes: int = 0, util: float = 0.0) -> Path:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps([{"uuid": f"GPU-{i:04d}-uuid", "name": "Fake H100", "memory_total_bytes": 80 * GIB,
                                 "memory_used_bytes": used_bytes, "utilization_percent": util} for i in range(n)]))
    return path


def visible_of(spec: JobSpec, inventory: Inventory) -> dict[str, str]:
    placement = place(spec, inventory)
    return {t.name: placement.env(t).get("CUDA_VISIBLE_DEVICES", "<unset>") for t in spec.tasks()}


# -- placement ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fields, gpus_on_node, expected", [
    # default: the node's GPUs split evenly over the training tasks, disjoint, by UUID
    ({"workers": 2}, 2, {"worker-0": "GPU-0000-uuid", "worker-1": "GPU-0001-uuid"}),
    ({"workers": 2}, 4, {"worker-0": "GPU-0000-uuid,GPU-0001-uuid", "worker-1": "GPU-0002-uuid,GPU-0003-uuid"}),
    ({"workers": 2}, 3, {"worker-0": "GPU-0000-uuid", "worker-1": "GPU-0001-uuid"}),
    # too few for one each: none, rather than every task on every device (tensorflow#39110)
    ({"workers": 4}, 2, {f"worker-{i}": "" for i in range(4)}),
    # a node without GPUs: nothing set, the job runs as before
    ({"workers": 2}, 0, {"worker-0": "<unset>", "worker-1": "<unset>"}),
    # explicit counts; the chief of MWMS trains too
    ({"workers": 2, "chief": 1, "gpus_per_task": {"chief": 1, "worker": 1}}, 4,
     {"chief-0": "GPU-0000-uuid", "worker-0": "GPU-0001-uuid", "worker-1": "GPU-0002-uuid"}),
    # PSS: workers compute; chief and ps get none, the evaluator only when named
    ({"strategy": "parameter_server", "workers": 2, "ps": 1, "evaluator": 1}, 2,
     {"chief-0": "", "worker-0": "GPU-0000-uuid", "worker-1": "GPU-0001-uuid", "ps-0": "", "evaluator-0": ""}),
    ({"strategy": "parameter_server", "workers": 1, "ps": 1, "evaluator": 1,
      "gpus_per_task": {"worker": 1, "evaluator": 1}}, 2,
     {"chief-0": "", "worker-0": "GPU-0000-uuid", "ps-0": "", "evaluator-0": "GPU-0001-uuid"}),
    # shared: round-robin, every task gets one
    ({"workers": 3, "share_gpus": True}, 2, {"worker-0": "GPU-0000-uuid", "worker-1": "GPU-0001-uuid",
                                            "worker-2": "GPU-0000-uuid"}),
    ({"workers": 2, "share_gpus": True, "gpus_per_task": {"worker": 1}}, 1,
     {"worker-0": "GPU-0000-uuid", "worker-1": "GPU-0000-uuid"}),
])
def test_placement_gives_each_task_its_own_devices(fields, gpus_on_node, expected):
    assert visible_of(JobSpec.create(**fields), node(gpus_on_node)) == expected


def test_devices_are_disjoint_unless_shared_and_growth_is_on_only_when_shared():
    spec = JobSpec.create(workers=4, gpus_per_task={"worker": 2})
    placement = place(spec, node(8))
    held = [g.uuid for t in spec.tasks() for g in placement.of(t).devices]
    assert len(held) == len(set(held)) == 8
    assert all(GROWTH_ENV not in placement.env(t) for t in spec.tasks())
    shared = place(JobSpec.create(workers=4, share_gpus=True), node(2))
    assert all(shared.env(t)[GROWTH_ENV] == "true" for t in shared.tasks)
    assert all(shared.env(t)[env.GPUS] == "1" for t in shared.tasks)


@pytest.mark.parametrize("fields, gpus_on_node, words", [
    ({"workers": 1, "gpus_per_task": {"worker": 1}}, 0, ["gpus-per-task=1", "no GPU was found on this node"]),
    ({"workers": 2, "gpus_per_task": {"worker": 1}}, 1, ["gpus-per-task=1", "2 GPUs together", "this node has 1 GPU ",
                                                         "GPU-0000-uuid", "--share-gpus"]),
    ({"workers": 1, "gpus_per_task": {"worker": 3}}, 2, ["gpus-per-task=3", "a task asks for 3 GPUs",
                                                         "this node has 2 GPUs"]),
    ({"workers": 1, "share_gpus": True, "gpus_per_task": {"worker": 3}}, 2, ["a task asks for 3 GPUs"]),
    ({"strategy": "parameter_server", "workers": 1, "ps": 1, "gpus_per_task": {"worker": 1, "ps": 1}}, 1,
     ["gpus-per-task='worker=1,ps=1'", "2 GPUs together"]),
])
def test_more_than_the_node_has_is_bad_input_naming_the_flag_and_the_node(fields, gpus_on_node, words):
    with pytest.raises(SpecError) as caught:
        place(JobSpec.create(**fields), node(gpus_on_node))
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_a_scheduler_gets_counts_and_no_devices():
    placement = place(JobSpec.create(workers=2, gpus_per_task={"worker": 2}), None)
    assert placement.by_scheduler and placement.of(TaskId("worker", 1)).count == 2
    assert placement.env(TaskId("worker", 0)) == {env.GPUS: "2"}  # Slurm sets CUDA_VISIBLE_DEVICES per step
    assert place(JobSpec.create(workers=2), None).env(TaskId("worker", 0)) == {}


@pytest.mark.parametrize("raw, flag, expected", [
    ({}, 2, {"chief": 2, "worker": 2}),
    ({"strategy": "parameter_server"}, 1, {"worker": 1}),
    ({"gpus_per_task": 1}, None, {"chief": 1, "worker": 1}),
    ({"gpus_per_task": {"evaluator": 1}, "evaluator": 1}, 2, {"evaluator": 1, "chief": 2, "worker": 2}),
    ({"gpus_per_task": {"worker": 4}}, 1, {"chief": 1, "worker": 1}),
])
def test_the_flag_and_the_spec_file_field(raw, flag, expected):
    overrides = {"gpus_per_task": flag} if flag is not None else {}
    assert dict(build_spec(raw, overrides).gpus_per_task) == expected


@pytest.mark.parametrize("raw, words", [
    ({"gpus_per_task": -1}, ["gpus-per-task=-1", ">= 0"]),
    ({"gpus_per_task": {"wrker": 1}}, ["gpus_per_task='wrker'", "not a task type"]),
    ({"gpus_per_task": "two"}, ["gpus_per_task='two'", "count or a mapping"]),
    ({"share_gpus": "yes"}, ["share_gpus='yes'", "true or false"]),
])
def test_bad_gpu_fields(raw, words):
    with pytest.raises(SpecError) as caught:
        build_spec(raw)
    for word in words:
        assert word in str(caught.value)


# -- the environment ---------------------------------------------------------------------------------------
def _plan(spec: JobSpec, inventory: Inventory | None):
    addresses = {t: f"127.0.0.1:{20000 + i}" for i, t in enumerate(spec.tasks())}
    return make_plan(spec, addresses, run_id="r", run_dir=Path("/tmp/r"), health_address="127.0.0.1:1", token="t",
                     placement=place(spec, inventory))


def test_the_plan_carries_each_tasks_devices_in_its_env_and_plan_json():
    plan = _plan(JobSpec.create(workers=2), node(2))
    w1 = plan.task_plan(TaskId("worker", 1))
    assert w1.env["CUDA_VISIBLE_DEVICES"] == "GPU-0001-uuid" and w1.env[env.GPUS] == "1"
    data = plan.to_dict()
    assert data["gpus"] == {"node_gpus": 2, "share": False, "assigned_by": "orchestrator"}
    assert data["tasks"][1]["gpus"]["devices"][0]["uuid"] == "GPU-0001-uuid"
    assert "worker-1 1 (GPU-0001-uuid)" in plan.placement.describe()


def test_a_node_without_gpus_changes_nothing_in_the_plan():
    plan = _plan(JobSpec.create(workers=2), node(0))
    assert "gpus" not in plan.to_dict()
    assert not any(k in tp.env for tp in plan.tasks for k in ("CUDA_VISIBLE_DEVICES", env.GPUS, GROWTH_ENV))


def test_one_builder_of_the_environment_for_the_plan_and_the_pods():
    """The variables every process gets are the same list for a launch and a Kubernetes pod
    (issue 19 item 4): only what needs this orchestrator (health, token, pid) or a node differs."""
    spec = JobSpec.create(workers=2, threads_per_task=2)
    planned = set(_plan(spec, None).tasks[0].env)
    from orchestrator.render.kubernetes import pod_env
    pod = set(pod_env(spec, "job"))
    assert planned - pod == {env.HEALTH_ADDRESS, env.JOB_TOKEN, "TF_CONFIG", env.TASK}  # a pod computes its own task
    assert pod <= planned


# -- the inventory interface -------------------------------------------------------------------------------
def test_the_fake_inventory_and_its_samples(tmp_path, monkeypatch):
    path = fake_file(tmp_path, 2, used_bytes=3 * GIB, util=55.0)
    monkeypatch.setenv(gpus.FAKE_ENV, str(path))
    inventory = gpus.discover()
    assert [g.uuid for g in inventory.gpus] == ["GPU-0000-uuid", "GPU-0001-uuid"] and not inventory.problem
    [usage] = gpus.sample(["GPU-0001-uuid"])
    assert (usage.index, usage.memory_used_bytes, usage.memory_total_bytes, usage.utilization_percent) == \
        (1, 3 * GIB, 80 * GIB, 55.0)
    assert gpus.sample_visible({"CUDA_VISIBLE_DEVICES": "GPU-0001-uuid"})[0].uuid == "GPU-0001-uuid"
    assert gpus.sample_visible({"CUDA_VISIBLE_DEVICES": ""}) == ()


@pytest.mark.parametrize("value, expected", [
    (None, ["GPU-0000-uuid", "GPU-0001-uuid", "GPU-0002-uuid"]),
    ("", []),
    ("GPU-0002-uuid,GPU-0000-uuid", ["GPU-0002-uuid", "GPU-0000-uuid"]),
    ("GPU-0001", ["GPU-0001-uuid"]),  # a unique prefix, as CUDA takes it
    ("1,0", ["GPU-0001-uuid", "GPU-0000-uuid"]),
    ("0,7,1", ["GPU-0000-uuid"]),  # CUDA stops at the first device it cannot resolve
    ("GPU-00", []),  # ambiguous
])
def test_visible_devices_as_cuda_reads_them(value, expected):
    assert [g.uuid for g in gpus.visible(value, node(3))] == expected


def test_a_bad_fake_file_is_an_empty_inventory_with_the_reason(tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text('{"uuid": "GPU-1"}')
    monkeypatch.setenv(gpus.FAKE_ENV, str(bad))
    inventory = gpus.discover()
    assert not inventory.gpus and gpus.FAKE_ENV in inventory.problem


def test_nvml_answers_with_gpus_or_says_why_not(monkeypatch):
    """The real discovery (no fake): NVML missing, no driver or no device is an empty inventory
    with its reason, never an error."""
    monkeypatch.delenv(gpus.FAKE_ENV, raising=False)
    inventory = gpus._nvml_inventory()
    assert bool(inventory.gpus) != bool(inventory.problem), inventory
    assert gpus.sample(["GPU-not-a-device"]) == ()


# -- renderings --------------------------------------------------------------------------------------------
def test_tfjob_and_jobset_request_nvidia_gpus_and_validate():
    spec = JobSpec.create(strategy="parameter_server", workers=2, ps=1, evaluator=1,
                          gpus_per_task={"worker": 1, "evaluator": 1})
    for build, validate in ((tfjob_manifest, validate_tfjob), (jobset_manifest, validate_jobset)):
        doc = build(spec, name="digits-gpu", image="registry.example.com/tf:1", cpu="2", memory="4Gi")
        assert validate(doc) == []
        pods = _pod_specs(doc)
        for role, wanted in (("worker", "1"), ("evaluator", "1"), ("chief", None), ("ps", None)):
            resources = pods[role]["containers"][0]["resources"]
            for part in ("requests", "limits"):
                assert resources[part].get(GPU_RESOURCE) == wanted, (build.__name__, role, resources)
            assert resources["limits"]["memory"] == "4Gi"
        env_names = {e["name"] for e in pods["worker"]["containers"][0]["env"]}
        assert "CUDA_VISIBLE_DEVICES" not in env_names  # the device plugin decides what the pod sees


def _pod_specs(doc: dict) -> dict[str, dict]:
    if doc["kind"] == "TFJob":
        names = {"Chief": "chief", "Worker": "worker", "PS": "ps", "Evaluator": "evaluator"}
        return {names[k]: v["template"]["spec"] for k, v in doc["spec"]["tfReplicaSpecs"].items()}
    return {r["name"]: r["template"]["spec"]["template"]["spec"] for r in doc["spec"]["replicatedJobs"]}


def test_shared_gpus_on_kubernetes_turn_memory_growth_on():
    doc = tfjob_manifest(JobSpec.create(workers=2, gpus_per_task={"worker": 1}, share_gpus=True), name="g",
                         image="x/y:1")
    assert validate_tfjob(doc) == []
    worker = doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert {"name": GROWTH_ENV, "value": "true"} in worker["env"]


def test_compose_reserves_exactly_each_services_devices_or_a_count():
    spec = JobSpec.create(workers=2, gpus_per_task={"chief": 1, "worker": 1})
    by_uuid = render_compose(spec, image="x/y:1", token="t", run_id="r", inventory=node(2))["services"]
    for i in range(2):
        [request] = by_uuid[f"worker-{i}"]["deploy"]["resources"]["reservations"]["devices"]
        assert request == {"driver": "nvidia", "capabilities": ["gpu"], "device_ids": [f"GPU-000{i}-uuid"]}
        assert by_uuid[f"worker-{i}"]["environment"]["CUDA_VISIBLE_DEVICES"] == f"GPU-000{i}-uuid"
    counted = render_compose(spec, image="x/y:1", token="t", run_id="r", inventory=node(0))["services"]
    [request] = counted["worker-0"]["deploy"]["resources"]["reservations"]["devices"]
    assert request == {"driver": "nvidia", "capabilities": ["gpu"], "count": 1}
    assert "CUDA_VISIBLE_DEVICES" not in counted["worker-0"]["environment"]
    assert "deploy" not in render_compose(JobSpec.create(workers=1), image="x/y:1", inventory=node(0))["services"][
        "worker-0"]


def test_docker_requests_exactly_the_tasks_devices():
    pytest.importorskip("docker")
    from orchestrator.backends.docker import device_requests

    [request] = device_requests({"CUDA_VISIBLE_DEVICES": "GPU-0001-uuid,GPU-0003-uuid"})
    assert request["DeviceIDs"] == ["GPU-0001-uuid", "GPU-0003-uuid"] and request["Driver"] == "nvidia"
    assert request["Capabilities"] == [["gpu"]]
    assert device_requests({"CUDA_VISIBLE_DEVICES": ""}) == [] and device_requests({}) == []


@pytest.mark.parametrize("task_env, options", [
    ({env.GPUS: "2"}, ["--gpus-per-task=2"]),
    ({env.GPUS: "0"}, ["--gres=none"]),  # a step without a request would get every GRES of the allocation
    ({}, []),  # a job without GPUs: srun as before
])
def test_slurm_steps_ask_srun_for_the_tasks_gpus(task_env, options):
    from orchestrator.resources.placement import srun_gpu_options

    assert srun_gpu_options(task_env) == options


# -- the command line --------------------------------------------------------------------------------------
def run_cli(*args: str, fake: Path | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    environ = test_env()
    if fake is not None:
        environ[gpus.FAKE_ENV] = str(fake)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=60, check=False)


def test_launch_on_a_node_without_gpus_exits_2_with_one_line(tmp_path):
    runs = tmp_path / "runs"
    result = run_cli("launch", "--gpus-per-task", "1", "--workers", "2", "--runs-dir", str(runs),
                     fake=fake_file(tmp_path, 0))
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "gpus-per-task=1" in line and "no GPU was found" in line
    assert result.stdout == "" and not runs.exists()  # nothing started, nothing created


def test_launch_asking_more_than_the_node_has_exits_2(tmp_path):
    runs = tmp_path / "runs"
    result = run_cli("launch", "--gpus-per-task", "1", "--workers", "3", "--runs-dir", str(runs), "--", "true",
                     fake=fake_file(tmp_path, 2))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "--share-gpus" in line and "this node has 2 GPUs" in line and not runs.exists()


def test_the_dry_run_shows_each_tasks_devices(tmp_path):
    result = run_cli("launch", "--workers", "2", "--share-gpus", "--dry-run", fake=fake_file(tmp_path, 1))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [t["env"]["CUDA_VISIBLE_DEVICES"] for t in plan["tasks"]] == ["GPU-0000-uuid"] * 2
    assert all(t["env"][GROWTH_ENV] == "true" for t in plan["tasks"]) and plan["gpus"]["share"] is True


def test_render_compose_and_sbatch_carry_the_request_on_a_node_without_gpus(tmp_path):
    fake = fake_file(tmp_path, 0)
    for fmt in ("tfjob", "jobset"):
        result = run_cli("render", "--format", fmt, "--image", "x/y:1", "--gpus-per-task", "1", "--workers", "2",
                         fake=fake)
        assert result.returncode == 0, result.stderr
        doc = yaml.safe_load(result.stdout)
        assert (validate_tfjob if fmt == "tfjob" else validate_jobset)(doc) == []
        assert f"{GPU_RESOURCE}: '1'" in result.stdout
    result = run_cli("compose", "--workers", "2", "--gpus-per-task", "1", "-o", "-", fake=fake)
    assert result.returncode == 0 and "count: 1" in result.stdout and "engine gives every service" in result.stderr
    result = run_cli("sbatch", "--workers", "2", "--gpus-per-task", "2", "--tasks-per-node", "2", "-o", "-", fake=fake)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --gpus-per-node=4" in result.stdout and "--gpus-per-task 2" in result.stdout


def test_doctor_reports_the_gpus(tmp_path):
    result = run_cli("doctor", "--quick", "--workers", "2", "--json", fake=fake_file(tmp_path, 2))
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["gpus"]["status"] == "ok" and "GPU-0001-uuid" in checks["gpus"]["detail"]
    assert "worker-1 1 (GPU-0001-uuid)" in checks["placement"]["detail"]
    result = run_cli("doctor", "--quick", "--gpus-per-task", "1", "--json", fake=fake_file(tmp_path, 0))
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert result.returncode == 1 and checks["gpus"]["status"] == "FAIL"


def test_the_heartbeat_carries_the_tasks_own_devices(tmp_path, monkeypatch):
    """Sampled by the task's reporter thread, on the task's node: the figures exist wherever the
    task runs (a Slurm node, a container), not only where the orchestrator can ask NVML."""
    from orchestrator.task.reporter import HeartbeatReporter

    monkeypatch.setenv(gpus.FAKE_ENV, str(fake_file(tmp_path, 3, used_bytes=7 * GIB, util=30.0)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0002-uuid")
    beat = HeartbeatReporter("", "token", "worker", 1)._snapshot()
    assert [(g.uuid, g.index, g.memory_used_bytes, g.memory_total_bytes, g.utilization_percent) for g in beat.gpus] == \
        [("GPU-0002-uuid", 2, 7 * GIB, 80 * GIB, 30.0)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert list(HeartbeatReporter("", "token", "worker", 1)._snapshot().gpus) == []
