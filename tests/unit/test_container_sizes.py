"""Containers' /dev/shm and memory (issue 35, item 4): the docker backend's --shm-size / --memory,
the Compose file's shm_size / mem_limit, and a memory-backed emptyDir at /dev/shm in TFJob and
JobSet pods, checked by every validator of tests/k8s."""

from __future__ import annotations

import pytest

from orchestrator.backends.options import DockerOptions
from orchestrator.errors import SpecError
from orchestrator.render.compose import render_compose
from orchestrator.render.jobset import jobset_manifest
from orchestrator.render.kubernetes import tfjob_manifest
from orchestrator.spec import JobSpec
from orchestrator.spec.sizes import DEFAULT_SHM_SIZE_BYTES, parse_size, quantity
from tests.k8s.validators import validate_jobset, validate_tfjob

GIB = 1 << 30


@pytest.mark.parametrize("text, size", [("1G", GIB), ("512Mi", 512 << 20), ("64k", 64 << 10), ("2GiB", 2 * GIB),
                                        ("1048576", 1 << 20), (4096, 4096), ("1.5G", int(1.5 * GIB))])
def test_sizes_as_users_write_them(text, size):
    assert parse_size("shm-size", text, "e.g. 1G") == size


@pytest.mark.parametrize("text", ["lots", "1X", "-1G", "", True])
def test_a_bad_size_names_the_field(text):
    with pytest.raises(SpecError, match="shm-size"):
        parse_size("shm-size", text, "e.g. 1G")


def test_docker_options_default_to_a_training_sized_dev_shm_and_no_memory_limit():
    options = DockerOptions()
    assert options.shm_size_bytes == DEFAULT_SHM_SIZE_BYTES == GIB and options.memory_bytes is None
    assert DockerOptions(shm_size="2G", memory="8G").memory_bytes == 8 * GIB


@pytest.mark.parametrize("kwargs, field", [({"shm_size": "64k"}, "shm-size"), ({"shm_size": "big"}, "shm-size"),
                                           ({"memory": "1M"}, "memory")])
def test_bad_docker_sizes_are_refused_at_the_flag(kwargs, field):
    with pytest.raises(SpecError, match=field):
        DockerOptions(**kwargs)


def test_compose_services_get_shm_size_and_mem_limit():
    spec = JobSpec.create(workers=2)
    default = render_compose(spec, image="img:1", token="t", run_id="r")
    assert {s["shm_size"] for s in default["services"].values()} == {GIB}
    assert all("mem_limit" not in s for s in default["services"].values())
    sized = render_compose(spec, image="img:1", token="t", run_id="r", shm_size_bytes=2 * GIB, memory_bytes=4 * GIB)
    assert {(s["shm_size"], s["mem_limit"]) for s in sized["services"].values()} == {(2 * GIB, 4 * GIB)}


@pytest.mark.parametrize("render, validate", [(tfjob_manifest, validate_tfjob), (jobset_manifest, validate_jobset)])
@pytest.mark.parametrize("shm", [DEFAULT_SHM_SIZE_BYTES, 3 * GIB, 300 << 20])
def test_every_pod_mounts_a_memory_backed_dev_shm_and_passes_the_validators(render, validate, shm):
    spec = JobSpec.create(strategy="parameter_server", workers=2, ps=1)
    manifest = render(spec, name="digits", image="registry.example.com/tf:1", volume_claim="runs", memory="8Gi",
                      shm_size_bytes=shm)
    assert validate(manifest) == []
    pods = [r["template"]["spec"] for r in manifest["spec"].get("tfReplicaSpecs", {}).values()] or [
        j["template"]["spec"]["template"]["spec"] for j in manifest["spec"]["replicatedJobs"]]
    assert pods
    for pod in pods:
        (volume,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": quantity(shm)}
        assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
