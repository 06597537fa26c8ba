"""The same job on Kubernetes, through Kubeflow's training operator: a ``TFJob`` manifest.

Beyond one machine the orchestrator does not run its own scheduler: it renders the spec as
a Kubeflow ``TFJob`` (``kubeflow.org/v1``), and the operator creates one pod per task, sets
each pod's ``TF_CONFIG`` from service names, restarts pods by the replica's
``restartPolicy`` (the same ``Never`` / ``OnFailure`` / ``ExitCode`` values this
orchestrator uses), bounds restarts with ``runPolicy.backoffLimit``, ends the job when the
chief (worker 0 without one) succeeds, and deletes the pods still running then (ps tasks,
PSS workers: ``cleanPodPolicy: Running``). Checkpoints and the exported model go to a
``PersistentVolumeClaim`` mounted at ``/runs`` in every pod.

Apply it with ``kubectl apply -f tfjob.yaml`` on a cluster with the training operator.
"""

from __future__ import annotations

import dataclasses
import json
import re

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.spec.model import JobSpec, Strategy
from orchestrator.spec.supervision import RestartPolicy

REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
"""Our task types -> TFJob replica types."""
RESTART_POLICIES = {RestartPolicy.NEVER: "Never", RestartPolicy.ON_FAILURE: "OnFailure", RestartPolicy.EXIT_CODE: "ExitCode"}
"""Our restart policies -> Kubeflow's (the same semantics: ExitCode retries 128-255 and signals)."""
TFJOB_PORT = 2222
"""The port Kubeflow's operator puts in TF_CONFIG (``tfjob-port``)."""
RUNS_MOUNT = "/runs"

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def tfjob_manifest(spec: JobSpec, *, name: str, image: str, volume_claim: str | None = None) -> dict:
    """The ``TFJob`` of a spec (pure).

    Args:
        spec: validated job spec (MWMS or PSS; ``mirrored`` is one task, a TFJob with one worker).
        name: the TFJob name (a DNS label: lowercase letters, digits, ``-``).
        image: the project image (see ``docker/Dockerfile``) in a registry the cluster can pull from.
        volume_claim: a ReadWriteMany PVC mounted at ``/runs`` for checkpoints and the model;
            None keeps them in each pod (lost with it; no resume after a restart).

    Returns:
        The manifest as a dict (dump it as YAML or JSON).

    Raises:
        SpecError: for a bad name or image, or fixed addresses (the operator assigns them).
    """
    if not _NAME.match(name):
        raise SpecError("name", name, "not a Kubernetes name", "use lowercase letters, digits and -, e.g. digits-mwms")
    if not image or any(c.isspace() for c in image):
        raise SpecError("image", image, "not an image reference", "e.g. --image registry.example.com/tf-orchestrator:0.1")
    if spec.addresses:
        raise SpecError("addresses", "...", "Kubernetes gives every pod its address", "drop addresses from the spec")
    run_dir = f"{RUNS_MOUNT}/{name}"
    common_env = {
        env.RUN_ID: name,
        env.RUN_DIR: run_dir,
        env.STRATEGY: spec.strategy.value,
        env.TRAINING: json.dumps(dataclasses.asdict(spec.training), sort_keys=True),
        env.BACKUP_DIR: f"{run_dir}/backup",
        env.MODEL_DIR: f"{run_dir}/model",
        env.HEARTBEAT_INTERVAL_S: repr(float(spec.heartbeat_interval_s)),
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if spec.threads_per_task:
        common_env["TF_NUM_INTRAOP_THREADS"] = str(spec.threads_per_task)
        common_env["OMP_NUM_THREADS"] = str(spec.threads_per_task)
    if spec.strategy is Strategy.PARAMETER_SERVER:
        common_env["GRPC_FAIL_FAST"] = "use_caller"
    replicas = {}
    for task_type, replica_type in REPLICA_TYPES.items():
        count = spec.count(task_type)
        if not count:
            continue
        container = {
            "name": "tensorflow",  # the operator looks for this container name
            "image": image,
            "command": ["python", "-m", "ps" if task_type == "ps" else "worker"],
            "env": [{"name": k, "value": v} for k, v in sorted(common_env.items())],
            "ports": [{"name": "tfjob-port", "containerPort": TFJOB_PORT}],
        }
        pod: dict = {"containers": [container]}
        if volume_claim:
            container["volumeMounts"] = [{"name": "runs", "mountPath": RUNS_MOUNT}]
            pod["volumes"] = [{"name": "runs", "persistentVolumeClaim": {"claimName": volume_claim}}]
        replicas[replica_type] = {
            "replicas": count,
            "restartPolicy": RESTART_POLICIES[spec.supervision.policy(task_type)],
            "template": {"spec": pod},
        }
    run_policy: dict = {"backoffLimit": spec.supervision.max_restarts, "cleanPodPolicy": "Running"}
    if spec.supervision.deadline_s is not None:
        run_policy["activeDeadlineSeconds"] = int(spec.supervision.deadline_s)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "tf-cluster-orchestrator"}},
        "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replicas},
    }
