"""A spec file's ``containers: {shm_size, memory}`` (issue 35, item 4) reaches every rendering of a
container: the docker backend's options, the Compose file's ``shm_size`` / ``mem_limit``, and the
``/dev/shm`` emptyDir's ``sizeLimit`` and the pods' memory of TFJob and JobSet; the flags
(``--shm-size``, ``--memory``) override the file field by field, as every flag does; a bad size in
the file is one line naming ``containers.<field>`` and the fix, exit 2.

Nothing here starts Docker: the docker backend is built by a ``launch --dry-run`` (no engine)."""

from __future__ import annotations

import json

import pytest
import yaml

from orchestrator import api
from orchestrator.cli import main
from orchestrator.errors import SpecError
from orchestrator.resume import resumed_spec
from orchestrator.spec.fields import spec_fields
from orchestrator.spec.loader import build_spec, load_spec
from orchestrator.spec.sizes import DEFAULT_SHM_SIZE_BYTES
from tests.k8s.validators import validate_jobset, validate_tfjob

GIB = 1 << 30


def _spec_file(tmp_path, containers: object, name: str = "job.yaml", **fields) -> str:
    path = tmp_path / name
    document = {"strategy": "multi_worker_mirrored", "workers": 2, "containers": containers, **fields}
    path.write_text(json.dumps(document) if name.endswith(".json") else yaml.safe_dump(document))
    return str(path)


def _pods(manifest: dict) -> list[dict]:
    return [r["template"]["spec"] for r in manifest["spec"].get("tfReplicaSpecs", {}).values()] or [
        j["template"]["spec"]["template"]["spec"] for j in manifest["spec"]["replicatedJobs"]]


@pytest.mark.parametrize("name", ["job.yaml", "job.json"])
def test_the_spec_file_sizes_the_containers_and_plan_json_keeps_them(tmp_path, name):
    spec = load_spec(_spec_file(tmp_path, {"shm_size": "2G", "memory": "8Gi"}, name))
    assert (spec.containers.shm_size, spec.containers.memory) == (2 * GIB, 8 * GIB)
    assert spec_fields(spec)["containers"] == {"shm_size": 2 * GIB, "memory": 8 * GIB}
    assert build_spec(spec_fields(spec)) == spec  # launch --resume builds the same spec
    default = build_spec({})
    assert default.containers.shm_size == DEFAULT_SHM_SIZE_BYTES and default.containers.memory is None
    assert "containers" not in spec_fields(default)  # an old plan.json resumes unchanged


def test_a_resumed_run_may_be_given_bigger_containers_and_keeps_its_own_otherwise():
    plan = {"spec": spec_fields(build_spec({"workers": 2}))}  # a run that died of a full /dev/shm
    bigger = resumed_spec(plan, {"containers": {"shm_size": "4G", "memory": "16G"}})  # launch --resume --shm-size 4G
    assert (bigger.containers.shm_size, bigger.containers.memory) == (4 * GIB, 16 * GIB)
    kept = resumed_spec({"spec": spec_fields(bigger)}, {})
    assert kept.containers == bigger.containers
    with pytest.raises(SpecError, match="workers"):
        resumed_spec(plan, {"workers": 3})  # the rest of the spec is still the run's own


def _compose(tmp_path, capsys, *args: str) -> dict:
    assert main(["compose", *args, "--image", "img:1", "-o", "-"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_compose_takes_shm_size_and_mem_limit_from_the_file_and_the_flags_override_it(tmp_path, capsys):
    spec = _spec_file(tmp_path, {"shm_size": "2G", "memory": "8G"})
    services = _compose(tmp_path, capsys, spec)["services"]
    assert {(s["shm_size"], s["mem_limit"]) for s in services.values()} == {(2 * GIB, 8 * GIB)}
    services = _compose(tmp_path, capsys, spec, "--shm-size", "3G")["services"]
    assert {(s["shm_size"], s["mem_limit"]) for s in services.values()} == {(3 * GIB, 8 * GIB)}
    services = _compose(tmp_path, capsys, "--workers", "2")["services"]
    assert {s["shm_size"] for s in services.values()} == {GIB} and all("mem_limit" not in s for s in services.values())


def _render(capsys, *args: str) -> dict:
    assert main(["render", *args, "--image", "reg/tfo:1", "--insecure"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("fmt, validate", [("tfjob", validate_tfjob), ("jobset", validate_jobset)])
def test_kubernetes_pods_take_dev_shm_and_memory_from_the_file_and_the_flags_override_it(tmp_path, capsys, fmt,
                                                                                         validate):
    spec = _spec_file(tmp_path, {"shm_size": "2G", "memory": "8G"})
    for flags, shm, memory in (((), "2Gi", "8Gi"), (("--shm-size", "512M"), "512Mi", "8Gi"),
                               (("--memory", "6G"), "2Gi", "6G")):  # render --memory: a Kubernetes quantity
        manifest = _render(capsys, "--spec", spec, "--format", fmt, *flags)
        assert validate(manifest) == []
        pods = _pods(manifest)
        assert pods
        for pod in pods:
            (volume,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
            assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": shm}
            resources = pod["containers"][0]["resources"]
            assert resources["limits"]["memory"] == resources["requests"]["memory"] == memory


@pytest.mark.parametrize("flags, shm, memory", [((), 2 * GIB, 8 * GIB), (("--shm-size", "3G"), 3 * GIB, 8 * GIB),
                                                (("--memory", "4G"), 2 * GIB, 4 * GIB)])
def test_the_docker_backend_takes_its_sizes_from_the_file_and_the_flags_override_it(tmp_path, capsys, monkeypatch,
                                                                                    flags, shm, memory):
    engines = []

    def capture(*args, **kwargs):
        engines.append(get_backend(*args, **kwargs))
        return engines[-1]

    get_backend = api.get_backend
    monkeypatch.setattr(api, "get_backend", capture)
    spec = _spec_file(tmp_path, {"shm_size": "2G", "memory": "8G"})
    code = main(["launch", "--backend", "docker", "--spec", spec, *flags, "--dry-run", "--runs-dir", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    (engine,) = engines
    assert (engine.shm_size_bytes, engine.memory_bytes) == (shm, memory)  # what containers.create is given
    plan = json.loads(capsys.readouterr().out)
    assert plan["spec"]["containers"] == {"shm_size": shm, "memory": memory}


def test_the_python_api_takes_the_spec_sizes_unless_its_options_give_them():
    spec = build_spec({"containers": {"shm_size": "2G"}})
    assert api.get_backend("docker", None, spec.containers).shm_size_bytes == 2 * GIB
    assert api.get_backend("docker", {"shm_size": "3G"}, spec.containers).shm_size_bytes == 3 * GIB
    assert api.get_backend("docker", None, build_spec({}).containers).shm_size_bytes == GIB
    assert api.get_backend("local", None, spec.containers).name == "local"  # no containers: nothing to size


@pytest.mark.parametrize("containers, field, problem", [
    ({"shm_size": "huge"}, "containers.shm_size", "is not a size"),
    ({"shm_size": "64k"}, "containers.shm_size", "must be a size of at least 1M"),
    ({"shm_size": True}, "containers.shm_size", "is not a size"),
    ({"memory": "1M"}, "containers.memory", "must be a size of at least 64M"),
    ({"memory": "lots"}, "containers.memory", "is not a size"),
    ({"shm": "2G"}, "containers.shm", "unknown key"),
    ("2G", "containers", "must be a mapping"),
])
def test_a_bad_containers_section_names_its_field(tmp_path, containers, field, problem):
    with pytest.raises(SpecError) as info:
        load_spec(_spec_file(tmp_path, containers))
    assert info.value.field == field and problem in info.value.problem


def test_shm_size_at_the_top_of_the_file_is_moved_under_containers(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("workers: 2\nshm_size: 2G\n")
    with pytest.raises(SpecError, match=r"move it under containers: \(containers.shm_size\)"):
        load_spec(path)


@pytest.mark.parametrize("command", [
    ["launch", "--backend", "docker", "--dry-run"],
    ["compose", "-o", "-"],
    ["render", "--format", "jobset", "--image", "reg/tfo:1", "--insecure"],
])
def test_every_command_refuses_a_bad_size_in_the_file_with_one_line_and_exit_2(tmp_path, capsys, command):
    spec = _spec_file(tmp_path, {"shm_size": "2 gigs"})
    argv = [*command[:1], spec, *command[1:]] if command[0] == "compose" else [*command, "--spec", spec]
    if command[0] == "launch":
        argv += ["--runs-dir", str(tmp_path / "runs")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        "error: containers.shm_size='2 gigs': is not a size; e.g. --shm-size 2G, or containers: {shm_size: 2G} "
        "in the spec file (K, M, G: KiB, MiB, GiB)"]
    assert not (tmp_path / "runs").exists()
