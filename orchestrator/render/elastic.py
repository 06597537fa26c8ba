"""Elastic workers (``--workers MIN:MAX``) in the Kubernetes renderings (issue 34 item 5): what the
engines have for worker bounds, and the one line ``render`` prints where they have none.

What each engine has (checked against its API; docs/elastic.md, Backends):

* **TFJob** (Kubeflow training operator v1, ``kubeflow.org/v1``): ``TFJobSpec`` has
  ``runPolicy``, ``successPolicy``, ``tfReplicaSpecs`` and ``enableDynamicWorker``
  (``pkg/apis/kubeflow.org/v1/tensorflow_types.go``; the same four in the ``kubeflow-training``
  SDK's ``KubeflowOrgV1TFJobSpec``, 1.9.4). No field holds worker bounds: ``elasticPolicy``
  (``minReplicas``, ``maxReplicas``) belongs to ``PyTorchJobSpec`` only. ``enableDynamicWorker``
  is a switch: the operator then lets the job go on when workers fail, deletes the surplus
  worker pods when ``replicas`` is lowered, and writes each pod's TF_CONFIG as
  ``{"sparseCluster": ..., "task": ...}`` (``pkg/controller.v1/tensorflow/tensorflow.go``,
  ``genTFConfigJSONStr``: a TF1 sparse cluster, the chief's empty), which TensorFlow 2's
  ``TFConfigClusterResolver`` does not read (``cluster_spec``: no ``cluster`` key, an empty
  ClusterSpec; TF 2.21), so MWMS and ParameterServerStrategy would find no cluster: not rendered.
  ``runPolicy.schedulingPolicy.minAvailable`` (gang scheduling) is not a bound either: the
  operator still creates every worker's pod and TF_CONFIG names them all, so a group started at
  fewer pods would wait for the missing ones.
* **JobSet** (``jobset.x-k8s.io/v1alpha2``, the CRD of v0.12.0 vendored in tests/k8s/jobset):
  ``replicatedJobs[].replicas`` and the Job template's ``parallelism`` / ``completions``, no
  bounds. Elastic JobSets (kubernetes-sigs/jobset KEP-463, PR #1179) make ``parallelism`` and
  ``completions`` mutable on a running JobSet: a resize is a patch, not a field of the manifest.
* **Kubeflow Trainer v2** (``TrainJob``): its ``MLPolicy`` has ``numNodes`` and torch, MPI, JAX,
  Flux and XGBoost sources (``kubeflow-trainer-api`` 2.3.0), no TensorFlow and no worker bounds;
  it runs a JobSet, as rendered here.

So the renderings carry the job at its size (``spec.workers``: MAX, or a spec file's ``start``),
every pod told the bounds and the batch facts at that size (``ORCH_WORKERS_MIN`` /
``ORCH_WORKERS_MAX``, ``ORCH_GLOBAL_BATCH_SIZE`` ...: :func:`orchestrator.taskenv.common_env`),
and ``render`` says so on stderr.
"""

from __future__ import annotations

from orchestrator.spec.model import JobSpec

ENGINES = {
    "tfjob": ("the TFJob (kubeflow.org/v1)", "has no field for worker bounds (elasticPolicy is PyTorchJob's; "
              "enableDynamicWorker rewrites TF_CONFIG as a sparse cluster TensorFlow 2 cannot read)"),
    "jobset": ("the JobSet (jobset.x-k8s.io/v1alpha2)", "has no field for worker bounds (an elastic JobSet is "
               "resized by patching the running one)"),
}
"""Format -> (what is rendered, why the bounds are not)."""


def bounds_not_rendered(spec: JobSpec, fmt: str) -> str | None:
    """The line ``render --format tfjob|jobset`` prints on stderr for elastic workers: the bounds
    are not rendered, and what is; None for a fixed count (or another format).

    Example: ``note: elastic workers 1..2 are not rendered: the JobSet (jobset.x-k8s.io/v1alpha2)
    has no field for worker bounds (...); it is rendered at 2 workers (MAX), each pod told the
    bounds in ORCH_WORKERS_MIN/ORCH_WORKERS_MAX (docs/elastic.md)``.
    """
    if spec.elastic is None or fmt not in ENGINES:
        return None
    what, why = ENGINES[fmt]
    size = f"{spec.workers} worker{'s' if spec.workers != 1 else ''}" + (" (MAX)" if spec.workers == spec.elastic.max
                                                                           else "")
    return (f"note: elastic workers {spec.elastic.min}..{spec.elastic.max} are not rendered: {what} {why}; "
            f"it is rendered at {size}, each pod told the bounds in ORCH_WORKERS_MIN/ORCH_WORKERS_MAX "
            "(docs/elastic.md)")
