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

Preemption: TFJob's API (``kubeflow.org/v1`` ``RunPolicy`` and ``ReplicaSpec``) has no rule
that keeps a disruption out of ``backoffLimit``: a preempted pod's restart is counted like a
failure, and under ``ExitCode`` only 128-255 are retried, so TF's own handler's default exit 42
is permanent there. The built-in trainers exit 143 (retried); a user's program under TFJob should
exit 143 after its preemption save too (``TerminationConfig(exit_fn=lambda: sys.exit(143))``) and
leave room in ``--max-restarts`` for preemptions. The JobSet rendering
(:mod:`orchestrator.render.jobset`) has the rules: prefer it on a preemptible cluster.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.plan import task_module
from orchestrator.resources.placement import GROWTH_ENV
from orchestrator.spec.model import JobSpec
from orchestrator.spec.sizes import DEFAULT_SHM_SIZE_BYTES, quantity
from orchestrator.spec.supervision import RestartPolicy
from orchestrator.taskenv import common_env

REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
"""Our task types -> TFJob replica types."""
RESTART_POLICIES = {RestartPolicy.NEVER: "Never", RestartPolicy.ON_FAILURE: "OnFailure",
                    RestartPolicy.EXIT_CODE: "ExitCode"}
"""Our restart policies -> Kubeflow's (the same semantics: ExitCode retries 128-255 and signals)."""
TFJOB_PORT = 2222
"""The port Kubeflow's operator puts in TF_CONFIG (``tfjob-port``)."""
RUNS_MOUNT = "/runs"

MANAGED_BY = "tf-cluster-orchestrator"
"""The value of every rendered object's ``app.kubernetes.io/managed-by`` label."""

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
"""A Kubernetes resource quantity: the pattern controller-gen writes for ``resource.Quantity``."""


def check_name(name: str) -> None:
    """Raise SpecError unless ``name`` is a DNS label (RFC 1123: the name of a TFJob's pods and Services).

    Raises:
        SpecError: naming ``name`` and the fix.
    """
    if not _NAME.match(name):
        raise SpecError("name", name, "not a Kubernetes name", "use lowercase letters, digits and -, e.g. digits-mwms")


def check_quantity(field: str, value: str) -> None:
    """Raise SpecError unless ``value`` is a Kubernetes resource quantity.

    The grammar is apimachinery's ``resource.Quantity`` (``pkg/api/resource/quantity.go``):
    a signed decimal number, then a binary suffix (``Ki`` ... ``Ei``), a decimal suffix
    (``n u m k M G T P E``) or a decimal exponent (``e3``); the pattern is the one
    controller-gen writes into CRD schemas for it. ``2Gi``, ``500m``, ``1.5`` pass;
    ``2 gigs``, ``2GB``, ``-`` do not.

    Args:
        field: the flag or field, for the message (``cpu``, ``memory``).
        value: the quantity as written.

    Raises:
        SpecError: naming the field and the fix.
    """
    if not QUANTITY.fullmatch(value):
        raise SpecError(field, value, "not a Kubernetes quantity",
                        "write a number with an optional suffix, e.g. 2Gi, 512Mi, 500m, 2")
    if value.startswith("-") or not any(c in "123456789" for c in value.split("e")[0].split("E")[0]):
        raise SpecError(field, value, "a resource amount must be positive", "e.g. 2Gi, 512Mi, 500m, 2")


def resources(cpu: str | None, memory: str | None) -> dict:
    """The container's ``resources``: requests = limits for the given quantities (empty when none).

    Requests equal to limits give the pod the ``Guaranteed`` QoS class when both are set,
    so a TF task is the last to be evicted under memory pressure.

    Raises:
        SpecError: a malformed quantity (:func:`check_quantity`).
    """
    wanted = {}
    for field, value in (("cpu", cpu), ("memory", memory)):
        if value is None:
            continue
        check_quantity(field, value)
        wanted[field] = value
    return {"requests": dict(wanted), "limits": dict(wanted)} if wanted else {}


def container_sizes(spec: JobSpec, memory: str | None, shm_size_bytes: int | None) -> tuple[str | None, int]:
    """Each pod's memory (a quantity, or None: unset) and ``/dev/shm`` (bytes): the arguments (``render
    --memory``, ``--shm-size``) where given, else the spec's ``containers`` section
    (:mod:`orchestrator.spec.containers`), its memory written in binary units (``8Gi``)."""
    if memory is None and spec.containers.memory is not None:
        memory = quantity(spec.containers.memory)
    return memory, spec.containers.shm_size if shm_size_bytes is None else shm_size_bytes


def pod_env(spec: JobSpec, name: str) -> dict[str, str]:
    """The environment every pod of the job gets (no TF_CONFIG, no health endpoint: there is no
    orchestrator process on Kubernetes; tasks report nowhere and run as they would by hand).
    Built by the one builder of task environments (:func:`orchestrator.taskenv.common_env`);
    devices come from the ``nvidia.com/gpu`` limit (the device plugin sets what the container
    sees), so no ``CUDA_VISIBLE_DEVICES``; ``--share-gpus`` adds ``TF_FORCE_GPU_ALLOW_GROWTH``."""
    out = common_env(spec, run_id=name, run_dir=f"{RUNS_MOUNT}/{name}", threads=spec.threads_per_task,
                     training_json=json.dumps(dataclasses.asdict(spec.training), sort_keys=True))
    if spec.share_gpus:
        out[GROWTH_ENV] = "true"
    service = spec.data_service
    if service is not None:  # the dispatcher's stable JobSet hostname (orchestrator.task.jobset.pod_hostname)
        out[env.DATA_SERVICE_ADDRESS] = f"{name}-dispatcher-0-0.{name}:{TFJOB_PORT}"
        out[env.DATA_SERVICE_JOB] = name
        out[env.DATA_SERVICE_SHARDING] = service.sharding
        out[env.DATA_SERVICE_WORK_DIR] = service.work_dir or f"{RUNS_MOUNT}/{name}/data-service"
        out[env.DATA_SERVICE_JOB_GC_S] = repr(float(service.job_gc_timeout_s))
    return out


GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource NVIDIA's device plugin advertises (k8s-device-plugin); Kubernetes takes
extended resources in whole units with requests equal to limits."""


def gpu_resources(container_resources: dict, gpus: int) -> dict:
    """``container_resources`` with ``nvidia.com/gpu: gpus`` in its requests and limits (a copy;
    unchanged for 0)."""
    if not gpus:
        return container_resources
    out = copy.deepcopy(container_resources) or {"requests": {}, "limits": {}}
    for part in ("requests", "limits"):
        out.setdefault(part, {})[GPU_RESOURCE] = str(gpus)
    return out


def role_gpus(spec: JobSpec, task_type: str) -> int:
    """GPUs per pod of ``task_type``: what ``gpus_per_task`` asks for the role (0 when not asked:
    a rendering knows no node to split)."""
    return int(spec.gpus_per_task.get(task_type, 0))


def pod_spec(task_type: str, image: str, environment: list[dict], volume_claim: str | None,
             container_resources: dict, shm_size_bytes: int = DEFAULT_SHM_SIZE_BYTES) -> dict:
    """The pod spec of one task type: one container named ``tensorflow`` running the project image,
    with a memory-backed ``emptyDir`` of ``shm_size_bytes`` mounted at ``/dev/shm`` (a container
    runtime's default ``/dev/shm`` is 64 MB, outgrown by multi-process data loading and NCCL; the
    volume's memory counts against the pod's memory limit).

    Every list and dict is the pod's own (copied), so YAML output has no aliases."""
    environment = copy.deepcopy(environment)
    container_resources = copy.deepcopy(container_resources)
    container: dict = {
        "name": "tensorflow",  # the TFJob operator looks for this container name
        "image": image,
        "command": ["python", "-m", task_module(task_type)],
        "env": environment,
        "ports": [{"name": "tfjob-port", "containerPort": TFJOB_PORT}],
    }
    if container_resources:
        container["resources"] = container_resources
    pod: dict = {"containers": [container]}
    if volume_claim:
        container["volumeMounts"] = [{"name": "runs", "mountPath": RUNS_MOUNT}]
        pod["volumes"] = [{"name": "runs", "persistentVolumeClaim": {"claimName": volume_claim}}]
    container.setdefault("volumeMounts", []).append({"name": "dshm", "mountPath": "/dev/shm"})
    pod.setdefault("volumes", []).append({"name": "dshm", "emptyDir": {"medium": "Memory",
                                                                       "sizeLimit": quantity(shm_size_bytes)}})
    return pod


def check_common(spec: JobSpec, name: str, image: str, volume_claim: str | None) -> None:
    """Checks every Kubernetes rendering shares.

    Raises:
        SpecError: a bad name, image or claim, or fixed addresses (Kubernetes assigns them).
    """
    check_name(name)
    if not image or any(c.isspace() for c in image):
        raise SpecError("image", image, "not an image reference",
                        "e.g. --image registry.example.com/tf-orchestrator:0.1")
    if volume_claim is not None and not _SUBDOMAIN.fullmatch(volume_claim):
        raise SpecError("volume-claim", volume_claim, "not a Kubernetes name", "e.g. --volume-claim tf-runs")
    if spec.addresses:
        raise SpecError("addresses", "...", "Kubernetes gives every pod its address", "drop addresses from the spec")


def tfjob_manifest(spec: JobSpec, *, name: str, image: str, volume_claim: str | None = None,
                   cpu: str | None = None, memory: str | None = None,
                   shm_size_bytes: int | None = None) -> dict:
    """The ``TFJob`` of a spec (pure).

    Args:
        spec: validated job spec (MWMS or PSS; ``mirrored`` is one task, a TFJob with one worker).
        name: the TFJob name (a DNS label: lowercase letters, digits, ``-``).
        image: the project image (see ``docker/Dockerfile``) in a registry the cluster can pull from.
        volume_claim: a ReadWriteMany PVC mounted at ``/runs`` for checkpoints and the model;
            None keeps them in each pod (lost with it; no resume after a restart).
        cpu: CPU of every pod (requests = limits), a Kubernetes quantity (``2``, ``500m``); None: unset.
        memory: memory of every pod (requests = limits), a quantity in bytes (``4Gi``); None: the
            spec's ``containers.memory`` (:func:`container_sizes`), unset unless given.
        shm_size_bytes: each pod's ``/dev/shm`` (:func:`pod_spec`), bytes; None: the spec's
            ``containers.shm_size`` (1 GiB unless set).

    Returns:
        The manifest as a dict (dump it as YAML or JSON).

    Raises:
        SpecError: for a bad name, image, claim or quantity, or fixed addresses (the operator assigns them).
    """
    check_common(spec, name, image, volume_claim)
    if spec.data_service is not None:  # a TFJob has replica types Chief, Worker, PS, Evaluator only
        raise SpecError("data_service", spec.data_service.workers,
                        "a TFJob has no replica type for the tf.data service's dispatcher and data workers",
                        "render --format jobset, or drop --data-service; docs/data-service.md")
    memory, shm_size_bytes = container_sizes(spec, memory, shm_size_bytes)
    container_resources = resources(cpu, memory)
    environment = [{"name": k, "value": v} for k, v in sorted(pod_env(spec, name).items())]
    replicas = {}
    for task_type, replica_type in REPLICA_TYPES.items():
        count = spec.count(task_type)
        if not count:
            continue
        replicas[replica_type] = {
            "replicas": count,
            "restartPolicy": RESTART_POLICIES[spec.supervision.policy(task_type)],
            "template": {"spec": pod_spec(task_type, image, environment, volume_claim,
                                          gpu_resources(container_resources, role_gpus(spec, task_type)),
                                          shm_size_bytes)},
        }
    run_policy: dict = {"backoffLimit": spec.supervision.max_restarts, "cleanPodPolicy": "Running"}
    if spec.supervision.deadline_s is not None:
        run_policy["activeDeadlineSeconds"] = int(spec.supervision.deadline_s)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replicas},
    }


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label that hands a Job, JobSet or Kubeflow TFJob to Kueue's ``LocalQueue`` of that name
(Kueue's "Run a JobSet" / "Run a Kubeflow Job" tasks): Kueue's webhook suspends it, and admits
it (every pod of the gang at once) when the queue's quota allows."""

_DNS_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")


def with_queue(manifest: dict, queue: str) -> dict:
    """``manifest`` (a TFJob or JobSet) labelled for Kueue's local queue ``queue``.

    Raises:
        SpecError: naming ``queue``: not a label value (<= 63 characters of [A-Za-z0-9_.-],
            alphanumeric at both ends: apimachinery's ``IsValidLabelValue``) or not a DNS-1123
            label (what a LocalQueue's name is).
    """
    if not _DNS_LABEL.match(queue):
        raise SpecError("queue", queue, "is not a Kueue LocalQueue name (a DNS-1123 label: lower-case letters, "
                        "digits and '-', at most 63, alphanumeric at both ends)", "e.g. --queue team-a")
    out = dict(manifest)
    metadata = dict(out["metadata"])
    metadata["labels"] = {**metadata.get("labels", {}), KUEUE_QUEUE_LABEL: queue}
    out["metadata"] = metadata
    return out
