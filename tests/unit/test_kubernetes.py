"""The Kubeflow TFJob rendering of a spec (pure)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from orchestrator.errors import SpecError
from orchestrator.render.kubernetes import tfjob_manifest
from orchestrator.spec import JobSpec
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, orchestrator_cmd, test_env


def test_pss_spec_becomes_a_tfjob_with_one_replica_spec_per_task_type():
    spec = JobSpec.create(strategy="parameter_server", workers=3, ps=2, evaluator=1,
                          supervision=SupervisionSpec.create(restart_policy={"ps": "never", "worker": "on-failure"},
                                                             max_restarts=5, deadline_s=3600))
    m = tfjob_manifest(spec, name="digits", image="reg/tfo:1", volume_claim="runs")
    assert (m["apiVersion"], m["kind"]) == ("kubeflow.org/v1", "TFJob")
    replicas = m["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Chief": 1, "Worker": 3, "PS": 2, "Evaluator": 1}
    assert {k: v["restartPolicy"] for k, v in replicas.items()} == {
        "Chief": "ExitCode", "Worker": "OnFailure", "PS": "Never", "Evaluator": "OnFailure"}
    assert m["spec"]["runPolicy"] == {"backoffLimit": 5, "cleanPodPolicy": "Running", "activeDeadlineSeconds": 3600}
    ps = replicas["PS"]["template"]["spec"]
    (container,) = ps["containers"]
    assert container["name"] == "tensorflow" and container["command"] == ["python", "-m", "ps"]
    assert container["volumeMounts"] == [{"name": "runs", "mountPath": "/runs"},
                                         {"name": "dshm", "mountPath": "/dev/shm"}]
    assert ps["volumes"][0]["persistentVolumeClaim"]["claimName"] == "runs"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["ORCH_BACKUP_DIR"] == "/runs/digits/backup" and env["GRPC_FAIL_FAST"] == "use_caller"
    assert json.loads(env["ORCH_TRAINING"])["epochs"] == spec.training.epochs
    assert "TF_CONFIG" not in env and "ORCH_HEALTH_ADDRESS" not in env  # the operator sets TF_CONFIG


@pytest.mark.parametrize("kwargs, field", [
    (dict(name="Digits_1", image="x"), "name"),
    (dict(name="digits", image=""), "image"),
])
def test_bad_names_and_images_are_rejected(kwargs, field):
    with pytest.raises(SpecError) as info:
        tfjob_manifest(JobSpec.create(workers=2), **kwargs)
    assert info.value.field == field


def test_render_prints_the_manifest_as_yaml():
    result = subprocess.run(
        orchestrator_cmd("render", "--spec", "cluster_specs/mwms-4-workers.yaml", "--format", "tfjob",
                         "--image", "reg/tfo:1"),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env(),
    )
    assert result.returncode == 0, result.stderr
    manifest = yaml.safe_load(result.stdout)
    assert manifest["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 4
    assert "Chief" not in manifest["spec"]["tfReplicaSpecs"]
