"""The same job on Kubernetes without Kubeflow's legacy operator: a ``JobSet`` manifest.

**Which objects, and why.** A JobSet (``jobset.x-k8s.io/v1alpha2``, kubernetes-sigs/jobset)
rather than plain Indexed Jobs plus a headless Service. Both give the stable pod names
TF_CONFIG needs, but only JobSet ends and restarts the job *as a whole*: with bare Jobs,
nothing deletes the ps Jobs when the chief's Job completes (they would serve forever,
tensorflow#25858), nothing restarts the other Jobs when one fails (MWMS needs every worker
in every collective), and there is no job-wide restart budget. JobSet does all three with
its own fields, creates the headless Service itself, and is what Kubeflow Trainer v2
(``TrainJob``) runs on, so clusters that dropped the v1 Training Operator (``TFJob``) have it.

**The layout.** One replicated job per task type, named after it (``chief``, ``worker``,
``ps``, ``evaluator``), each one Indexed Job (``replicas: 1``, ``completionMode: Indexed``,
``completions`` = ``parallelism`` = the task count); ``network.enableDNSHostnames`` makes task
``<type>:<i>`` reachable at ``<jobset>-<type>-0-<i>.<jobset>`` through the headless Service
JobSet creates (``publishNotReadyAddresses``: names resolve before pods are ready, as TF's
servers need to find each other while starting). No pod gets a ``TF_CONFIG``: each computes
its own at start from its JobSet name, replicated-job name and Job index (pod labels, through
the downward API), its ``JOB_COMPLETION_INDEX`` and the counts written here
(:mod:`orchestrator.task.jobset`).

**Supervision, mapped to JobSet's and Job's own fields** (jobset ``jobset_types.go``;
Kubernetes ``batch/v1`` Job):

* Success: ``successPolicy: {operator: All, targetReplicatedJobs: [chief]}`` (``worker``
  without a chief): the set completes when the coordinator's Job does, and JobSet then
  deletes the Jobs still active (``jobset_controller.go``: a finished JobSet deletes its
  active Jobs), so ps pods and PSS workers are stopped (SIGTERM, then SIGKILL after the pod's
  grace period). Under MWMS without a chief the worker Job completes when every worker
  exited 0: ``all-workers``; with ``success_policy: chief`` the worker Job gets a Job
  ``successPolicy`` (``succeededIndexes: "0"``, Kubernetes 1.33+): worker 0's exit 0 is enough.
* Restarts: pods have ``restartPolicy: Never`` and (but see PSS workers) ``backoffLimit: 0``,
  so a failed pod fails its Job and JobSet restarts the whole set (it recreates every Job:
  ``restartStrategy: BlockingRecreate`` waits until the old pods are gone, so two
  generations never share a hostname), at most ``failurePolicy.maxRestarts`` =
  ``max_restarts`` times. That is MWMS's rule (the whole group restarts and resumes from
  the last ``BackupAndRestore`` checkpoint) and PSS's rule for the chief and ps.
* Preemptions are free: every Job's ``podFailurePolicy`` first ``Ignore`` s a pod disrupted by
  Kubernetes (condition ``DisruptionTarget``) and a trainer's preemption exit (143, 42 or the
  spec's ``preemption_exit_codes``): the Job recreates the pod at its index without counting it
  against ``backoffLimit``, and JobSet does not restart the set (under MWMS every worker saves
  and leaves together, so the recreated pods resume from the checkpoint together). Not for a
  role whose policy is ``never``.
* Restart policies per role: ``never`` is a failure-policy rule ``FailJobSet`` targeting the
  role's replicated job; ``exit-code`` is a Job ``podFailurePolicy`` that fails the Job at
  once on exit codes 1-127 (reason ``PodFailurePolicy``) plus a rule ``FailJobSet`` on that
  reason for the role, while 128-255 and deaths by signal (137: SIGKILL, OOM kill) exhaust
  ``backoffLimit`` and take the default action, ``RestartJobSet``; ``on-failure`` is the
  default action alone.
* The deadline: Job ``activeDeadlineSeconds`` on every Job (JobSet has no field of its own),
  plus a rule ``FailJobSet`` on reason ``DeadlineExceeded`` so running out of time is never
  restarted.

**Where this differs from the orchestrator's own supervisor** (say so to users):

* PSS workers are restarted alone (their Job has ``backoffLimit`` = ``max_restarts``; the
  pod comes back with the same index and hostname and the coordinator re-dispatches), but
  that budget is the worker Job's own, not shared with the set's ``maxRestarts``. The
  evaluator is restarted alone the same way; when its budget is spent its Job fails and,
  unlike locally, the set restarts (JobSet has no "ignore this failure" action).
* The deadline is per attempt: a restart recreates the Jobs and their clocks.
* There is no health channel: hangs (a stalled collective, a frozen task) are not detected;
  TensorFlow's own timeouts end them, or the deadline.
* ``exit-code`` sees exit codes only: a worker that exits 1 because a peer died (a
  collective error) is a permanent failure here, where locally it is retried; in practice
  JobSet reacts to the first failed Job within seconds and deletes the others before
  TensorFlow's collective timeouts fire.

Apply it with ``kubectl apply -f jobset.yaml`` on a cluster with JobSet installed (v0.7 or
later for ``BlockingRecreate`` and failure-policy rules; the tests validate against the
v0.12.0 CRD).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.render.kubernetes import (
    MANAGED_BY,
    TFJOB_PORT,
    check_common,
    container_sizes,
    gpu_resources,
    pod_env,
    pod_spec,
    resources,
    role_gpus,
)
from orchestrator.spec.dataservice import SERVICE_TASK_TYPES, dns_name
from orchestrator.spec.model import TASK_TYPES, JobSpec, Strategy
from orchestrator.spec.supervision import RestartPolicy, SuccessPolicy

API_VERSION = "jobset.x-k8s.io/v1alpha2"
PERMANENT_EXIT_CODES = list(range(1, 128))
"""Exit codes a ``exit-code`` role never retries (Kubeflow's rule: 1-127 permanent, 128-255 retryable)."""
MAX_HOSTNAME = 63
"""A pod's hostname is a DNS label: at most 63 characters (RFC 1123)."""


def coordinator_job(spec: JobSpec) -> str:
    """The replicated job whose success ends the set: ``chief``, or ``worker`` without one."""
    return spec.coordinator.task_type


def _job_spec(spec: JobSpec, task_type: str, count: int, pod: dict) -> dict:
    policy = spec.supervision.policy(task_type)
    alone = (task_type in ("evaluator", *SERVICE_TASK_TYPES)  # restarted alone (supervisor/rules/service.py)
             or (spec.strategy is Strategy.PARAMETER_SERVER and task_type == "worker"))
    job: dict = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": count,
        "backoffLimit": spec.supervision.max_restarts if alone and policy is not RestartPolicy.NEVER else 0,
    }
    rules = _pod_failure_rules(spec, policy)
    if rules:
        job["podFailurePolicy"] = {"rules": rules}
    if spec.supervision.deadline_s is not None:
        job["activeDeadlineSeconds"] = max(1, int(spec.supervision.deadline_s))
    if (task_type == "worker" and not spec.chief and spec.success_policy is SuccessPolicy.CHIEF
            and spec.strategy is not Strategy.PARAMETER_SERVER):
        job["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}
    pod["restartPolicy"] = "Never"
    job["template"] = {"metadata": {"labels": _labels()}, "spec": pod}
    return job


def _pod_failure_rules(spec: JobSpec, policy: RestartPolicy) -> list[dict]:
    """A Job's ``podFailurePolicy`` rules, first match wins (Kubernetes' pod failure policy):
    unless the role's policy is ``never``, a pod disrupted by Kubernetes (condition
    ``DisruptionTarget``: preemption, eviction, a node drain) and a trainer that saved and left on
    a preemption notice (the spec's ``preemption_exit_codes``) are ``Ignore``: the Job makes a new
    pod at the same index (same hostname, same TF_CONFIG) without counting it against
    ``backoffLimit``, and the set is not restarted: a preemption never uses up the budget. Then,
    under ``exit-code``, exit codes 1-127 (but the preemption codes) fail the Job at once."""
    rules: list[dict] = []
    preemption = sorted(set(spec.supervision.preemption_exit_codes))
    if policy is not RestartPolicy.NEVER:
        rules.append({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
        rules.append({"action": "Ignore",
                      "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": preemption}})
    if policy is RestartPolicy.EXIT_CODE:
        permanent = [c for c in PERMANENT_EXIT_CODES if c not in preemption]
        rules.append({"action": "FailJob",
                      "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": permanent}})
    return rules


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/component": "tensorflow"}


def _failure_rules(spec: JobSpec, types: list[str]) -> list[dict]:
    rules = []
    if spec.supervision.deadline_s is not None:
        rules.append({"name": "deadline", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]})
    never = [dns_name(t) for t in types if spec.supervision.policy(t) is RestartPolicy.NEVER]
    if never:
        rules.append({"name": "restartPolicyNever", "action": "FailJobSet", "targetReplicatedJobs": never})
    exit_code = [dns_name(t) for t in types if spec.supervision.policy(t) is RestartPolicy.EXIT_CODE]
    if exit_code:
        rules.append({"name": "permanentExitCode", "action": "FailJobSet",
                      "onJobFailureReasons": ["PodFailurePolicy"], "targetReplicatedJobs": exit_code})
    return rules


def jobset_manifest(spec: JobSpec, *, name: str, image: str, volume_claim: str | None = None,
                    cpu: str | None = None, memory: str | None = None,
                    shm_size_bytes: int | None = None) -> dict:
    """The ``JobSet`` of a spec (pure).

    Args:
        spec: validated job spec (MWMS, PSS, or ``mirrored``: one worker).
        name: the JobSet name, also the headless Service's: a DNS-1035 label (a lowercase
            letter first), short enough that ``<name>-evaluator-0-<index>`` fits in 63 characters.
        image: the project image (see ``docker/Dockerfile``) in a registry the cluster can pull from.
        volume_claim: a ReadWriteMany PVC mounted at ``/runs`` for checkpoints and the model;
            None keeps them in each pod (lost with it; a restart starts training again).
        cpu: CPU of every pod (requests = limits), a Kubernetes quantity (``2``, ``500m``); None: unset.
        memory: memory of every pod (requests = limits), a quantity in bytes (``4Gi``); None: the
            spec's ``containers.memory``, unset unless given.
        shm_size_bytes: each pod's ``/dev/shm``, bytes; None: the spec's ``containers.shm_size``
            (:func:`~orchestrator.render.kubernetes.container_sizes`).

    Returns:
        The manifest as a dict (dump it as YAML or JSON).

    Raises:
        SpecError: for a bad or too long name, a bad image, claim or quantity, or fixed
            addresses (Kubernetes assigns them).
    """
    check_common(spec, name, image, volume_claim)
    if not name[0].isalpha():
        raise SpecError("name", name, "the JobSet name is also its Service's, which must start with a letter",
                        f"e.g. --name tf-{name}")
    types = [t for t in TASK_TYPES if spec.count(t)]
    longest = max((f"{name}-{dns_name(t)}-0-{spec.count(t) - 1}" for t in types), key=len)
    if len(longest) > MAX_HOSTNAME:
        raise SpecError("name", name, f"the pod hostname {longest!r} would be {len(longest)} characters, over "
                        f"{MAX_HOSTNAME}", f"shorten the name by {len(longest) - MAX_HOSTNAME} characters or more")
    memory, shm_size_bytes = container_sizes(spec, memory, shm_size_bytes)
    container_resources = resources(cpu, memory)
    environment: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(pod_env(spec, name).items())]
    environment += [
        {"name": env.JOBSET_CLUSTER,
         "value": json.dumps({dns_name(t): spec.count(t) for t in types}, separators=(",", ":"))},
        {"name": env.JOBSET_SUBDOMAIN, "value": name},
        {"name": env.JOBSET_PORT, "value": str(TFJOB_PORT)},
        {"name": env.JOBSET_PEER_WAIT_S, "value": f"{env.JOBSET_PEER_WAIT_DEFAULT_S:g}"},
    ]
    environment += [{"name": var, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}
                    for var, label in env.JOBSET_LABELS.items()]
    replicated_jobs = []
    for task_type in types:
        pod = pod_spec(task_type, image, environment, volume_claim,
                       gpu_resources(container_resources, role_gpus(spec, task_type)), shm_size_bytes)
        replicated_jobs.append({
            "name": dns_name(task_type),
            "replicas": 1,
            "template": {"spec": _job_spec(spec, task_type, spec.count(task_type), pod)},
        })
    failure_policy: dict = {"maxRestarts": spec.supervision.max_restarts, "restartStrategy": "BlockingRecreate"}
    rules = _failure_rules(spec, types)
    if rules:
        failure_policy["rules"] = rules
    # with a tf.data service: its replicated jobs first (dispatcher, data-worker), each started once the one
    # before is ready (JobSet's startupPolicy InOrder), as the orchestrator's start waves
    order = {"startupPolicy": {"startupPolicyOrder": "InOrder"}} if spec.data_service is not None else {}
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [coordinator_job(spec)]},
            "failurePolicy": failure_policy,
            **order,
            "replicatedJobs": replicated_jobs,
        },
    }
