"""Static validation of rendered Kubernetes manifests, as close to an API server as this machine allows.

No API server can run here (see the project's engine notes), so each manifest goes through
every independent check we can get, each returning a list of problems (empty: valid):

* :func:`pod_and_job_schemas`, :func:`strict_pod_template`: ``kubernetes-validate``'s strict
  JSON schemas (the Kubernetes OpenAPI schemas of :data:`K8S_VERSION`, shipped in its wheel), which
  rejects unknown fields and wrong types, on every pod template (as a ``core/v1 PodTemplate``) and, for a JobSet,
  on every Job template (as a ``batch/v1 Job``: ``podFailurePolicy``, ``successPolicy``,
  ``completionMode`` ...).
* :func:`tfjob_model_roundtrip`: the Kubeflow training SDK (``kubeflow-training``)
  deserializes the TFJob into ``KubeflowOrgV1TFJob`` (with the kubernetes client's
  ``V1PodTemplateSpec`` inside) and serializes it back; a field the models do not know is
  dropped, a value they coerce changes type: both are reported.
* :func:`jobset_model_roundtrip`: the same with the JobSet models of Kubeflow Trainer's API
  package (``kubeflow-trainer-api``: ``JobsetV1alpha2JobSet``, pydantic), which
  Trainer v2 uses for the JobSet it runs on.
* :func:`jobset_crd_schema`: the JobSet CRD's own OpenAPI schema (vendored from
  kubernetes-sigs/jobset v0.12.0 beside this file, Apache-2.0) with ``jsonschema``, made
  strict as ``kubectl apply --validate=strict`` is (unknown fields are errors, not pruned).
  It has enums (``operator``, ``action``, ``restartPolicy``), required fields, minimums and
  the ``resource.Quantity`` pattern.
* :func:`quantities`: every ``resources.requests`` / ``limits`` value parsed with the
  kubernetes client's ``parse_quantity`` (the reference check missed a malformed quantity:
  the Kubernetes JSON schemas type quantities as int-or-string, with no pattern).
* :func:`labels`: every ``metadata.labels`` key and value against apimachinery's rules
  (``validation.IsQualifiedName``, ``IsValidLabelValue``): the schemas type labels as a
  plain string map.
* :func:`tls_secret`: the job's certificates, where a pod has ``ORCH_TLS_DIR``: one Secret for
  every pod, mounted read-only there, files at most 0440.
* :func:`tfjob_semantics` / :func:`jobset_semantics`: what the operator or the JobSet
  webhook and controller enforce that no schema says, and what this project relies on
  (a container named ``tensorflow``, targets that exist, the JobSet env that
  :mod:`orchestrator.task.jobset` needs, hostnames within 63 characters).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import yaml
from kubernetes.utils import parse_quantity

K8S_VERSION = "1.37.0"
"""The Kubernetes schemas ``kubernetes-validate`` checks against."""
JOBSET_CRD = Path(__file__).parent / "jobset" / "jobset.x-k8s.io_jobsets.yaml"

# apimachinery pkg/util/validation/validation.go
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# jobset api/jobset/v1alpha2/jobset_types.go, FailurePolicyRule.Name
_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
# jobset pkg/webhooks/jobset_webhook.go validOnJobFailureReasons (batch/v1 Job failure reasons)
_JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                        "PodFailurePolicy")


# --- shared checks ---------------------------------------------------------------------------


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def quantities(doc: dict) -> list[str]:
    """Every resource quantity (``resources.requests`` / ``resources.limits``) must parse."""
    errs = []
    for path, node in _walk(doc):
        if not path.endswith("/resources") or not isinstance(node, dict):
            continue
        for kind in ("requests", "limits"):
            for resource, value in (node.get(kind) or {}).items():
                try:
                    parse_quantity(value)
                except (ValueError, TypeError) as exc:
                    errs.append(f"quantity: {path}/{kind}/{resource}: {value!r}: {exc}")
    return errs


def label_problems(key: str, value: Any) -> list[str]:
    """apimachinery's label rules: key ``[prefix/]name`` (prefix a DNS-1123 subdomain <= 253,
    name a qualified name <= 63), value empty or a qualified name <= 63."""
    errs = []
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errs.append(f"label key prefix {prefix!r} is not a DNS subdomain")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errs.append(f"label key {key!r}: name part must be <= 63 characters of [A-Za-z0-9_.-], "
                    "alphanumeric at both ends")
    if not isinstance(value, str):
        errs.append(f"label {key!r}: value {value!r} is not a string")
    elif value and (len(value) > 63 or not _QUALIFIED_NAME.match(value)):
        errs.append(f"label {key!r}: value {value!r} must be <= 63 characters of [A-Za-z0-9_.-], "
                    "alphanumeric at both ends")
    return errs


def labels(doc: dict) -> list[str]:
    """Every ``metadata.labels`` of the manifest, nested templates included."""
    errs = []
    for path, node in _walk(doc):
        if path.endswith("/metadata") and isinstance(node, dict):
            for key, value in (node.get("labels") or {}).items():
                errs += [f"label: {path}/labels: {e}" for e in label_problems(key, value)]
    return errs


@functools.lru_cache(maxsize=None)
def _k8s_validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's strict schema of ``kind`` with its definitions, built once (its own
    ``validate`` reads the 2 MB definitions file on every call; this is the same schema and
    validator class, cached)."""
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    schema_dir = f"kubernetes-json-schema/v{K8S_VERSION}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = schema_contents(f"{schema_dir}/{kind.lower()}-{group}.json", K8S_VERSION)
    definitions = schema_contents(f"{schema_dir}/_definitions.json", K8S_VERSION)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _strict(kind: str, api_version: str, spec_key: str, spec: Any) -> list[str]:
    doc = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, spec_key: spec}
    return [f"schema {kind}: {'/'.join(str(p) for p in e.absolute_path)}: {e.message[:200]}"
            for e in _k8s_validator(kind, api_version).iter_errors(doc)]


def strict_pod_template(template: Any) -> list[str]:
    """A pod template, validated strictly as a ``core/v1 PodTemplate``."""
    return _strict("PodTemplate", "v1", "template", template)


def strict_job_spec(job_spec: Any) -> list[str]:
    """A Job spec, validated strictly as a ``batch/v1 Job`` (its pod template included)."""
    return _strict("Job", "batch/v1", "spec", job_spec)


def _diff(a: Any, b: Any, path: str, errs: list[str], what: str) -> None:
    """Report what a model round trip lost or changed (``a`` sent, ``b`` back)."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            errs.append(f"model: {path}: became {type(b).__name__}")
            return
        for k in a:
            if k not in b:
                errs.append(f"model: {path}/{k}: unknown field (dropped by the {what} models)")
            else:
                _diff(a[k], b[k], f"{path}/{k}", errs, what)
    elif isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            errs.append(f"model: {path}: list changed")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", errs, what)
    elif type(a) is not type(b) or a != b:
        errs.append(f"model: {path}: {a!r} came back as {b!r}")


def _pod_specs(doc: dict) -> Iterator[tuple[str, dict]]:
    spec = doc.get("spec") or {}
    for rtype, replica in (spec.get("tfReplicaSpecs") or {}).items():
        yield rtype, ((replica.get("template") or {}).get("spec") or {})
    for rjob in spec.get("replicatedJobs") or []:
        job = (rjob.get("template") or {}).get("spec") or {}
        yield str(rjob.get("name")), ((job.get("template") or {}).get("spec") or {})


def tls_secret(doc: dict) -> list[str]:
    """The job's certificates (``render``'s default, :mod:`orchestrator.render.secret`): where a
    pod's ``tensorflow`` container has ``ORCH_TLS_DIR``, a volume from a Secret (a DNS-1123
    subdomain) is mounted there read-only, its files readable by owner and group at most
    (``defaultMode`` within 0440); every pod of the job mounts the same Secret, or none does."""
    from orchestrator import env

    errs, secrets = [], {}
    for where, pod in _pod_specs(doc):
        tf = [c for c in pod.get("containers") or [] if c.get("name") == "tensorflow"]
        path = next((e.get("value") for e in (tf[0].get("env") if tf else None) or []
                     if e.get("name") == env.TLS_DIR), None)
        if path is None:
            secrets[where] = None
            continue
        mounts = [m for m in tf[0].get("volumeMounts") or [] if m.get("mountPath") == path]
        if len(mounts) != 1:
            errs.append(f"semantics: {where}: {env.TLS_DIR}={path} but no one volume is mounted there")
            continue
        if mounts[0].get("readOnly") is not True:
            errs.append(f"semantics: {where}: the certificates at {path} must be mounted readOnly")
        volume = next((v for v in pod.get("volumes") or [] if v.get("name") == mounts[0].get("name")), {})
        secret = volume.get("secret") or {}
        name = str(secret.get("secretName", ""))
        if not _DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
            errs.append(f"semantics: {where}: the volume at {path} is not from a named Secret: {volume}")
        mode = secret.get("defaultMode", 0o644)
        if not isinstance(mode, int) or mode & ~0o440:
            errs.append(f"semantics: {where}: the certificates' defaultMode {mode!r} allows more than 0440")
        secrets[where] = name
    if len(set(secrets.values())) > 1:
        errs.append(f"semantics: the pods do not share one Secret: {secrets}")
    return errs


# --- TFJob -----------------------------------------------------------------------------------


def tfjob_model_roundtrip(doc: dict) -> list[str]:
    """Round trip through the Kubeflow training SDK's ``KubeflowOrgV1TFJob`` (kubeflow-training)."""
    from kubeflow.training import ApiClient

    api = ApiClient()
    try:
        obj = api._ApiClient__deserialize(copy.deepcopy(doc), "KubeflowOrgV1TFJob")
    except (ValueError, TypeError) as exc:
        return [f"model: {exc}"]
    errs: list[str] = []
    _diff(doc, api.sanitize_for_serialization(obj), "", errs, "TFJob/Pod")
    return errs


def tfjob_semantics(doc: dict) -> list[str]:
    """What Kubeflow's training operator v1 enforces or relies on (its validation webhook:
    ``pkg/webhooks/tensorflow``; ``tfjob-port``; the ``tensorflow`` container)."""
    if doc.get("apiVersion") != "kubeflow.org/v1" or doc.get("kind") != "TFJob":
        return [f"semantics: not a kubeflow.org/v1 TFJob: {doc.get('apiVersion')}/{doc.get('kind')}"]
    errs = []
    name = (doc.get("metadata") or {}).get("name", "")
    if not _DNS1035_LABEL.match(name) or len(name) > 63:
        errs.append(f"semantics: metadata.name {name!r} is not a DNS-1035 label (the operator names Services after it)")
    specs = (doc.get("spec") or {}).get("tfReplicaSpecs") or {}
    if not specs:
        errs.append("semantics: spec.tfReplicaSpecs missing")
    for rtype, rs in specs.items():
        if rtype not in ("Chief", "Master", "Worker", "PS", "Evaluator"):
            errs.append(f"semantics: replica type {rtype!r} unknown to the operator")
        if rs.get("restartPolicy") not in (None, "Always", "OnFailure", "Never", "ExitCode"):
            errs.append(f"semantics: {rtype}.restartPolicy {rs.get('restartPolicy')!r} "
                        "is not Always/OnFailure/Never/ExitCode")
        containers = ((rs.get("template") or {}).get("spec") or {}).get("containers") or []
        if not any(c.get("name") == "tensorflow" for c in containers):
            errs.append(f"semantics: {rtype}: no container named 'tensorflow' (the operator sets TF_CONFIG only there)")
        if rtype in ("Chief", "Master", "Evaluator") and rs.get("replicas", 1) != 1:
            errs.append(f"semantics: {rtype} replicas must be 1")
    if (doc.get("spec") or {}).get("enableDynamicWorker"):  # pkg/controller.v1/tensorflow/tensorflow.go
        errs.append("semantics: enableDynamicWorker: the operator then writes TF_CONFIG as {\"sparseCluster\": ...}, "
                    "which TensorFlow 2's TFConfigClusterResolver does not read (no cluster)")
    return errs


def validate_tfjob(doc: dict) -> list[str]:
    """Every check of a TFJob: semantics, SDK round trip, strict pod templates, quantities, labels."""
    errs = tfjob_semantics(doc) + tfjob_model_roundtrip(doc) + quantities(doc) + labels(doc) + tls_secret(doc)
    for rtype, rs in ((doc.get("spec") or {}).get("tfReplicaSpecs") or {}).items():
        errs += [f"{rtype}: {e}" for e in strict_pod_template(rs.get("template", {}))]
    return errs


# --- JobSet ----------------------------------------------------------------------------------


def _strictify(schema: Any) -> Any:
    """The CRD schema as ``--validate=strict`` applies it: objects with declared properties
    accept no others (the API server would prune them; strict field validation rejects them)."""
    if isinstance(schema, dict):
        out = {k: _strictify(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strictify(v) for v in schema]
    return schema


@functools.lru_cache(maxsize=1)
def _jobset_validator() -> jsonschema.protocols.Validator:
    with JOBSET_CRD.open(encoding="utf-8") as fh:
        crd = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema = _strictify(version["schema"]["openAPIV3Schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def jobset_crd_schema(doc: dict) -> list[str]:
    """The JobSet CRD's OpenAPI v3 schema (kubernetes-sigs/jobset v0.12.0), strictly."""
    errs = []
    for e in sorted(_jobset_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        errs.append(f"crd: {'/'.join(str(p) for p in e.absolute_path)}: {e.message[:200]}")
    return errs


def jobset_model_roundtrip(doc: dict) -> list[str]:
    """Round trip through ``JobsetV1alpha2JobSet`` of kubeflow-trainer-api (pydantic models)."""
    import pydantic
    from kubeflow_trainer_api.models import JobsetV1alpha2JobSet

    try:
        obj = JobsetV1alpha2JobSet.from_dict(copy.deepcopy(doc))
    except (pydantic.ValidationError, ValueError, TypeError) as exc:
        return [f"model: {str(exc).splitlines()[0]}: {str(exc).splitlines()[1:3]}"]
    errs: list[str] = []
    _diff(doc, obj.to_dict(), "", errs, "JobSet/Job/Pod")
    return errs


def jobset_semantics(doc: dict) -> list[str]:
    """What the JobSet webhook (``pkg/webhooks/jobset_webhook.go``: rule names, failure reasons,
    targets) and controller enforce beyond the schema, and what this
    project's pods need to compute their TF_CONFIG (:mod:`orchestrator.task.jobset`)."""
    from orchestrator import env

    if doc.get("apiVersion") != "jobset.x-k8s.io/v1alpha2" or doc.get("kind") != "JobSet":
        return [f"semantics: not a jobset.x-k8s.io/v1alpha2 JobSet: {doc.get('apiVersion')}/{doc.get('kind')}"]
    errs = []
    name = (doc.get("metadata") or {}).get("name", "")
    spec = doc.get("spec") or {}
    subdomain = (spec.get("network") or {}).get("subdomain") or name
    if not _DNS1035_LABEL.match(subdomain) or len(subdomain) > 63:
        errs.append(f"semantics: subdomain {subdomain!r} is not a DNS-1035 label (it names the headless Service)")
    if not (spec.get("network") or {}).get("enableDNSHostnames"):
        errs.append("semantics: network.enableDNSHostnames must be true: pods find each other by hostname")
    rjobs = spec.get("replicatedJobs") or []
    names = [r.get("name") for r in rjobs]
    if len(set(names)) != len(names):
        errs.append(f"semantics: replicated job names repeat: {names}")
    targets = list((spec.get("successPolicy") or {}).get("targetReplicatedJobs") or [])
    rules = (spec.get("failurePolicy") or {}).get("rules") or []
    rule_names = [rule.get("name") for rule in rules]
    if len(set(map(str, rule_names))) != len(rule_names):
        errs.append(f"semantics: failure rule names repeat: {rule_names}")
    for rule in rules:
        if not _RULE_NAME.match(str(rule.get("name", ""))):
            errs.append(f"semantics: failure rule name {rule.get('name')!r} does not match {_RULE_NAME.pattern}")
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in _JOB_FAILURE_REASONS:
                errs.append(f"semantics: failure reason {reason!r} is not one of {', '.join(_JOB_FAILURE_REASONS)}")
        targets += rule.get("targetReplicatedJobs") or []
    for t in targets:
        if t not in names:
            errs.append(f"semantics: policy targets replicated job {t!r}, not in {names}")
    for r in rjobs:
        rname = str(r.get("name"))
        if not _DNS1123_LABEL.match(rname):
            errs.append(f"semantics: replicated job name {rname!r} is not a DNS label")
        job = (r.get("template") or {}).get("spec") or {}
        pod = (job.get("template") or {}).get("spec") or {}
        if job.get("podFailurePolicy") and pod.get("restartPolicy") != "Never":
            errs.append(f"semantics: {rname}: podFailurePolicy needs the pod's restartPolicy Never, "
                        f"got {pod.get('restartPolicy')!r}")
        if pod.get("restartPolicy") != "Never":
            errs.append(f"semantics: {rname}: pods must have restartPolicy Never "
                        "so failures reach JobSet's failurePolicy")
        if job.get("completionMode") != "Indexed":
            errs.append(f"semantics: {rname}: completionMode must be Indexed (JOB_COMPLETION_INDEX is the task index)")
        if r.get("replicas", 1) != 1 or job.get("completions") != job.get("parallelism"):
            errs.append(f"semantics: {rname}: one Job (replicas 1) with completions == parallelism, one pod per task")
        count = int(job.get("completions") or 0)
        host = f"{name}-{rname}-{r.get('replicas', 1) - 1}-{max(count - 1, 0)}"
        if len(host) > 63:
            errs.append(f"semantics: pod hostname {host!r} is over 63 characters")
        containers = pod.get("containers") or []
        tf = [c for c in containers if c.get("name") == "tensorflow"]
        if not tf:
            errs.append(f"semantics: {rname}: no container named 'tensorflow'")
            continue
        env_vars = {e.get("name"): e for e in tf[0].get("env") or []}
        for var, label in env.JOBSET_LABELS.items():
            ref = ((env_vars.get(var) or {}).get("valueFrom") or {}).get("fieldRef") or {}
            if ref.get("fieldPath") != f"metadata.labels['{label}']":
                errs.append(f"semantics: {rname}: env {var} must come from the pod label {label}")
        cluster = (env_vars.get(env.JOBSET_CLUSTER) or {}).get("value")
        if cluster is None:
            errs.append(f"semantics: {rname}: env {env.JOBSET_CLUSTER} missing")
        elif yaml.safe_load(cluster) != {r2.get("name"):
                                         ((r2.get("template") or {}).get("spec") or {}).get("completions")
                                         for r2 in rjobs}:
            errs.append(f"semantics: {rname}: env {env.JOBSET_CLUSTER}={cluster} disagrees with the replicated jobs")
    return errs


def validate_jobset(doc: dict) -> list[str]:
    """Every check of a JobSet: semantics, CRD schema, model round trip, strict Job and pod
    templates, quantities, labels."""
    errs = (jobset_semantics(doc) + jobset_crd_schema(doc) + jobset_model_roundtrip(doc)
            + quantities(doc) + labels(doc) + tls_secret(doc))
    errs += pod_and_job_schemas(doc)
    return errs


def pod_and_job_schemas(doc: dict) -> list[str]:
    """Strict Kubernetes schemas on every Job template of a JobSet (its pod template included)."""
    errs = []
    for r in (doc.get("spec") or {}).get("replicatedJobs") or []:
        errs += [f"{r.get('name')}: {e}" for e in strict_job_spec((r.get("template") or {}).get("spec", {}))]
    return errs



def validate_network_policy(doc: dict, name: str, pod_label: str) -> list[str]:
    """A NetworkPolicy of ``render --isolate-network``: kubernetes-validate's strict
    ``networking.k8s.io/v1 NetworkPolicy`` schema, label rules, and what it must mean: it selects
    the job's pods (``pod_label: name``, the label the job's controller sets on every pod), it
    restricts ingress, and its only rule admits those same pods."""
    problems = [f"schema NetworkPolicy: {'/'.join(str(p) for p in e.absolute_path)}: {e.message[:200]}"
                for e in _k8s_validator("NetworkPolicy", "networking.k8s.io/v1").iter_errors(doc)]
    problems += labels(doc)
    if not _DNS1123_SUBDOMAIN.match(str((doc.get("metadata") or {}).get("name", ""))):
        problems.append("semantics: metadata.name is not a DNS-1123 subdomain")
    spec = doc.get("spec") or {}
    pods = {"matchLabels": {pod_label: name}}
    if spec.get("podSelector") != pods:
        problems.append(f"semantics: podSelector does not select the job's pods ({pod_label}={name})")
    if "Ingress" not in (spec.get("policyTypes") or []):
        problems.append("semantics: policyTypes lacks Ingress: nothing is restricted")
    if spec.get("ingress") != [{"from": [{"podSelector": pods}]}]:
        problems.append("semantics: ingress admits more than the job's own pods")
    return problems
