"""Rendered TFJob and JobSet manifests pass every static check we have (tests/k8s/validators.py), and
every kind of planted error is caught, by the validators named in the tables below.

Validators (prefix of the problems each reports): ``schema`` kubernetes-validate strict (Kubernetes
1.37 OpenAPI schemas) on pod / Job templates; ``model`` a round trip through the Kubeflow SDK
models (kubeflow-training's TFJob, kubeflow-trainer-api's JobSet); ``crd`` the JobSet CRD's own
schema (v0.12.0, vendored) with jsonschema, strict; ``quantity`` the kubernetes client's
``parse_quantity``; ``label`` apimachinery's label rules; ``semantics`` what the operator /
JobSet controller and this project's pods rely on.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Callable

import grpc
import pytest
import yaml

from orchestrator import env, tls
from orchestrator.errors import SpecError
from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
from orchestrator.render.elastic import bounds_not_rendered
from orchestrator.render.jobset import jobset_manifest
from orchestrator.render.kubernetes import tfjob_manifest
from orchestrator.render.networkpolicy import POD_LABEL
from orchestrator.render.secret import MOUNT_PATH, with_tls_secret
from orchestrator.spec import JobSpec, TaskId
from orchestrator.spec.loader import build_spec, read_spec_file
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.task.jobset import tf_config_from_jobset
from tests.conftest import REPO, orchestrator_cmd, test_env
from tests.k8s.validators import validate_jobset, validate_network_policy, validate_tfjob

SPECS = sorted((REPO / "cluster_specs").glob("*.yaml")) + sorted((REPO / "cluster_specs").glob("*.json"))


def _spec(**kw) -> JobSpec:
    return JobSpec.create(**kw)


PSS = dict(strategy="parameter_server", workers=3, ps=2, evaluator=1,
           supervision=SupervisionSpec.create(restart_policy={"ps": "never", "worker": "on-failure"},
                                              max_restarts=5, deadline_s=3600))
SPECS_KW = {
    "mwms 2 workers": dict(workers=2),
    "mwms chief + 2 workers, success on worker 0": dict(workers=2, chief=1),
    "mwms 2 workers, chief policy": dict(workers=2, supervision=SupervisionSpec.create(success_policy="chief")),
    "pss chief + 3 workers + 2 ps + evaluator": PSS,
    "mirrored": dict(strategy="mirrored", workers=1),
}


def _from_file(path: Path) -> JobSpec:
    raw = read_spec_file(str(path))
    raw.pop("addresses", None)  # Kubernetes assigns addresses
    return build_spec(raw, {})


@pytest.mark.parametrize("case", list(SPECS_KW))
@pytest.mark.parametrize("fmt", ["tfjob", "jobset"])
def test_rendered_manifests_pass_every_validator(case, fmt):
    build, validate = (tfjob_manifest, validate_tfjob) if fmt == "tfjob" else (jobset_manifest, validate_jobset)
    doc = build(_spec(**SPECS_KW[case]), name="digits", image="reg.example/tfo:1", volume_claim="tf-runs",
                cpu="2", memory="4Gi")
    assert validate(doc) == []


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_example_spec_renders_valid_manifests(path):
    spec = _from_file(path)
    assert validate_tfjob(tfjob_manifest(spec, name="ex", image="reg/tfo:1")) == []
    assert validate_jobset(jobset_manifest(spec, name="ex", image="reg/tfo:1")) == []


def test_render_cli_prints_a_valid_jobset_and_tfjob():
    for fmt, validate in (("jobset", validate_jobset), ("tfjob", validate_tfjob)):
        result = subprocess.run(
            orchestrator_cmd("render", "--spec", "cluster_specs/pss-2ps-3workers-chief.yaml", "--format", fmt,
                             "--image", "reg/tfo:1", "--name", "digits-pss", "--volume-claim", "tf-runs",
                             "--memory", "3Gi", "--cpu", "1500m"),
            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
        assert result.returncode == 0, result.stderr
        assert "&id" not in result.stdout  # no YAML aliases
        (doc,) = yaml.safe_load_all(result.stdout)
        assert validate(doc) == []


def _workers_rendered(doc: dict) -> int:
    if doc["kind"] == "TFJob":
        return doc["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
    (job,) = [r for r in doc["spec"]["replicatedJobs"] if r["name"] == "worker"]
    return job["replicas"] * job["template"]["spec"]["parallelism"]


def _worker_env(doc: dict) -> dict[str, str]:
    if doc["kind"] == "TFJob":
        container = doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    else:
        (job,) = [r for r in doc["spec"]["replicatedJobs"] if r["name"] == "worker"]
        container = job["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize("fmt, engine", [("tfjob", "the TFJob (kubeflow.org/v1) has no field for worker bounds"),
                                         ("jobset", "the JobSet (jobset.x-k8s.io/v1alpha2) has no field for worker "
                                                    "bounds")])
@pytest.mark.parametrize("args, size", [
    (["--spec", "cluster_specs/mwms-elastic.yaml"], "2 workers (MAX)"),
    (["--strategy", "parameter_server", "--ps", "1", "--workers", "1:3"], "3 workers (MAX)"),
])
def test_render_elastic_workers_says_in_one_line_the_bounds_are_not_rendered_and_renders_max(fmt, engine, args, size):
    result = subprocess.run(orchestrator_cmd("render", *args, "--format", fmt, "--image", "reg/tfo:1", "--insecure"),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "elastic" in line]
    low, high = (1, 2) if "--spec" in args else (1, 3)
    assert len(notes) == 1, result.stderr  # one line
    assert notes[0].startswith(f"note: elastic workers {low}..{high} are not rendered: {engine} (")
    assert f"; it is rendered at {size}, each pod told the bounds in ORCH_WORKERS_MIN/ORCH_WORKERS_MAX" in notes[0]
    (doc,) = yaml.safe_load_all(result.stdout)
    validate = validate_tfjob if fmt == "tfjob" else validate_jobset
    assert validate(doc) == [] and _workers_rendered(doc) == high
    assert (_worker_env(doc)["ORCH_WORKERS_MIN"], _worker_env(doc)["ORCH_WORKERS_MAX"]) == (str(low), str(high))
    fixed = subprocess.run(orchestrator_cmd("render", "--workers", "2", "--format", fmt, "--image", "reg/tfo:1",
                                            "--insecure"), capture_output=True, text=True, timeout=60, cwd=REPO,
                           env=test_env())
    assert fixed.returncode == 0 and "elastic" not in fixed.stderr, fixed.stderr  # a fixed count: nothing to say


def test_the_bounds_line_names_a_start_below_max():
    spec = build_spec({"workers": {"min": 1, "max": 2, "start": 1}}, {})
    assert bounds_not_rendered(spec, "jobset").endswith(  # type: ignore[union-attr]
        "; it is rendered at 1 worker, each pod told the bounds in ORCH_WORKERS_MIN/ORCH_WORKERS_MAX (docs/elastic.md)")
    assert bounds_not_rendered(build_spec({"workers": 2}, {}), "tfjob") is None


@pytest.mark.parametrize("fmt, label", [("jobset", "jobset.sigs.k8s.io/jobset-name"),
                                        ("tfjob", "training.kubeflow.org/job-name")])
def test_render_isolate_network_adds_a_valid_network_policy_admitting_only_the_job_s_pods(fmt, label):
    result = subprocess.run(
        orchestrator_cmd("render", "--workers", "2", "--format", fmt, "--image", "reg/tfo:1", "--name", "digits",
                         "--isolate-network"),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 0, result.stderr
    assert "&id" not in result.stdout  # no YAML aliases
    job, policy = yaml.safe_load_all(result.stdout)
    assert (validate_jobset if fmt == "jobset" else validate_tfjob)(job) == []
    assert policy["kind"] == "NetworkPolicy"
    assert validate_network_policy(policy, "digits", label) == []
    # planted errors are caught: a policy admitting every pod, one selecting another job, one restricting nothing
    for broken in ({"ingress": [{}]}, {"podSelector": {"matchLabels": {label: "other"}}}, {"policyTypes": ["Egress"]},
                   {"podSelector": {"matchLabel": {}}}):
        planted = copy.deepcopy(policy)
        planted["spec"].update(broken)
        assert validate_network_policy(planted, "digits", label), broken


def _render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(orchestrator_cmd("render", "--format", *args), capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=test_env())


def _pods(doc: dict) -> list[tuple[str, dict]]:
    spec = doc["spec"]
    if "tfReplicaSpecs" in spec:
        return [(r, s["template"]["spec"]) for r, s in spec["tfReplicaSpecs"].items()]
    return [(r["name"], r["template"]["spec"]["template"]["spec"]) for r in spec["replicatedJobs"]]


@pytest.mark.parametrize("fmt, extra", [("tfjob", ()), ("jobset", ()), ("jobset", ("--data-service", "2"))])
def test_render_mounts_the_job_s_secret_and_writes_what_it_holds(fmt, extra, tmp_path):
    """Every pod mounts the one Secret of the job read-only (0400) at ORCH_TLS_DIR; --tls-out writes
    exactly the Secret's files (the CA and every task's certificate, no server or user key, no CA
    key) and says how to create it; the manifest, with the NetworkPolicy, passes every validator."""
    out = tmp_path / "certs"
    result = _render(fmt, "--spec", "cluster_specs/pss-2ps-3workers-chief.yaml", *extra, "--image", "reg/tfo:1",
                     "--name", "digits", "--tls-out", str(out), "--isolate-network")
    assert result.returncode == 0, result.stderr
    job, policy = yaml.safe_load_all(result.stdout)
    assert (validate_jobset if fmt == "jobset" else validate_tfjob)(job) == []
    assert validate_network_policy(policy, "digits", POD_LABEL[fmt]) == []
    for role, pod in _pods(job):
        assert _tls_volume(pod)["secret"] == {"secretName": "digits-tls", "defaultMode": 0o400}, role
        (tf,) = pod["containers"]
        assert _tls_mount(tf)["readOnly"] is True and _tls_env(tf)["value"] == MOUNT_PATH
    assert f"kubectl create secret generic digits-tls --from-file={out}" in result.stderr
    tasks = read_spec(extra)
    secret_files = sorted(p.name for p in out.iterdir() if p.is_file())  # what kubectl --from-file=DIR takes
    assert secret_files == sorted(["ca.crt", "tasks.crt", "tasks.key",
                                   *(f"{t}.{x}" for t in tasks for x in ("crt", "key"))])
    assert all(oct(p.stat().st_mode & 0o777) == oct(0o600) for p in out.glob("*.key"))
    assert sorted(p.name for p in (out / "endpoint").iterdir()) == ["ca.crt", "server.crt", "server.key", "user.crt",
                                                                    "user.key"]
    assert not list(out.rglob("ca.key"))
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    for task in tasks:  # the file a task picks by its own name: its own certificate, signed by the job's CA
        files = tls.files_for(out, task)
        assert files is not None and files.cert.name == f"{task}.crt"
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == task
        cert.verify_directly_issued_by(ca)


def read_spec(extra: tuple[str, ...]) -> list[str]:
    """The task names of pss-2ps-3workers-chief.yaml (with ``--data-service N``: its roles too)."""
    service = ["dispatcher-0", *(f"data_worker-{i}" for i in range(int(extra[1])))] if extra else []
    return [*service, "chief-0", "worker-0", "worker-1", "worker-2", "ps-0", "ps-1"]


def test_each_jobset_pod_finds_its_own_certificate_and_a_real_endpoint_takes_only_its_reports(tmp_path):
    """The task side as a pod runs it: each JobSet pod's TaskContext (from the rendered env) picks its
    own certificate from the mounted Secret; with the endpoint's half of --tls-out, a real server
    takes worker-1's heartbeats and refuses them as worker-0."""
    from orchestrator.health.endpoint import HealthEndpoint
    from orchestrator.health.store import HeartbeatStore
    from orchestrator.proto import supervisor_pb2 as pb
    from orchestrator.task.context import TaskContext
    from orchestrator.task.reporter import HeartbeatReporter
    from tests.conftest import wait_until

    out = tmp_path / "certs"
    result = _render("jobset", "--workers", "2", "--ps", "1", "--strategy", "parameter_server", "--image", "r/t:1",
                     "--name", "digits", "--tls-out", str(out))
    assert result.returncode == 0, result.stderr
    (doc,) = yaml.safe_load_all(result.stdout)
    names = set()
    for rjob in doc["spec"]["replicatedJobs"]:
        for i in range(rjob["template"]["spec"]["completions"]):
            environ = _pod_env(doc, rjob, i)
            environ["TF_CONFIG"] = json.dumps(tf_config_from_jobset(environ))
            context = TaskContext.from_env(environ)
            assert context.tls_dir == MOUNT_PATH
            files = tls.files_for(str(out), context.name)  # the mount, here
            assert files is not None and files.cert.name == f"{context.name}.crt"
            names.add(context.name)
    assert names == {"chief-0", "worker-0", "worker-1", "ps-0"}  # PSS adds a chief
    store = HeartbeatStore()
    endpoint = HealthEndpoint("127.0.0.1", token="t", store=store)
    endpoint.tls = tls.RunPki(out / "endpoint")
    endpoint.start()
    try:
        reporter = HeartbeatReporter(endpoint.address, "t", "worker", 1, interval_s=0.05, tls_dir=str(out)).start()
        try:
            wait_until(lambda: store.get(TaskId("worker", 1), 0), 10, what="worker-1's heartbeat")
        finally:
            reporter.close(pb.PHASE_DONE, timeout_s=2.0)
        with tls.channel(endpoint.address, tls.files_for(out, "worker-1")) as channel:
            beat = pb.Heartbeat(task=pb.TaskKey(task_type="worker", task_index=0), sequence=1)
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.SupervisorStub(channel).StreamHeartbeats(
                    iter([beat]), metadata=((env.TOKEN_METADATA_KEY, "t"),), timeout=5)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        endpoint.stop()


@pytest.mark.parametrize("fmt", ["tfjob", "jobset"])
def test_render_insecure_has_no_secret_and_the_default_says_how_to_make_it(fmt, tmp_path):
    result = _render(fmt, "--workers", "2", "--image", "reg/tfo:1", "--name", "digits", "--insecure")
    assert result.returncode == 0, result.stderr
    (doc,) = yaml.safe_load_all(result.stdout)
    assert (validate_jobset if fmt == "jobset" else validate_tfjob)(doc) == []
    assert "tls" not in result.stdout.lower() and env.TLS_DIR not in result.stdout
    assert "--insecure" in result.stderr
    result = _render(fmt, "--workers", "2", "--image", "reg/tfo:1", "--name", "digits", "--tls-secret", "team.certs")
    assert result.returncode == 0, result.stderr
    (doc,) = yaml.safe_load_all(result.stdout)
    assert {_tls_volume(pod)["secret"]["secretName"] for _, pod in _pods(doc)} == {"team.certs"}
    assert "kubectl create secret generic team.certs --from-file=DIR" in result.stderr


@pytest.mark.parametrize("args, line", [
    (("--insecure", "--tls-out", "x"),
     "error: tls-out='x': --insecure renders no certificates; drop --tls-out or --insecure"),
    (("--tls-secret", "Team_Certs"), "error: tls-secret='Team_Certs': not a Kubernetes Secret name; use lowercase "
     "letters, digits, - and ., e.g. --tls-secret digits-tls"),
    (("--tls-out", "."), "error: tls-out='.': has files already, and every file in it would join the Secret; give a "
     "new or empty folder"),
])
def test_render_bad_tls_input_is_one_line_and_exit_2(args, line):
    result = _render("jobset", "--workers", "2", "--image", "reg/tfo:1", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [line]


def test_tls_flags_are_for_kubernetes_formats_only():
    result = subprocess.run(orchestrator_cmd("render", "--workers", "2", "--tls-secret", "x"),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 2 and "tls-secret" in result.stderr


def test_isolate_network_is_for_kubernetes_formats_only():
    result = subprocess.run(orchestrator_cmd("render", "--workers", "2", "--isolate-network"),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 2 and "isolate-network" in result.stderr


@pytest.mark.parametrize("fmt", ["jobset", "tfjob"])
def test_render_queue_labels_the_manifest_for_kueue_and_it_stays_valid(fmt):
    validate = validate_jobset if fmt == "jobset" else validate_tfjob
    result = subprocess.run(orchestrator_cmd("render", "--workers", "2", "--format", fmt, "--image", "reg/tfo:1",
                                             "--queue", "team-a"),
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 0, result.stderr
    (doc,) = yaml.safe_load_all(result.stdout)
    assert doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert validate(doc) == []


@pytest.mark.parametrize("args, line", [
    (["--format", "jobset", "--image", "r/x:1", "--queue", "Team_A"],
     "error: queue='Team_A': is not a Kueue LocalQueue name (a DNS-1123 label: lower-case letters, digits and '-', "
     "at most 63, alphanumeric at both ends); e.g. --queue team-a"),
    (["--queue", "team-a"],
     "error: queue='team-a': only for --format tfjob or jobset; drop it, or add --format jobset"),
])
def test_render_bad_queue_is_one_line_and_exit_2(args, line):
    result = subprocess.run(orchestrator_cmd("render", "--workers", "2", *args), capture_output=True, text=True,
                            timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [line] and result.stdout == ""


# --- what the JobSet means ------------------------------------------------------------------


def _pod_env(doc: dict, rjob: dict, index: int, attempt: int = 0) -> dict[str, str]:
    """The environment of pod ``index`` of a replicated job, as Kubernetes would build it: literal
    values, downward-API label references resolved to the labels the JobSet controller sets
    (jobset_controller.go labelAndAnnotateObject), and JOB_COMPLETION_INDEX (Indexed Job)."""
    pod_labels = {"jobset.sigs.k8s.io/jobset-name": doc["metadata"]["name"],
                  "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                  "jobset.sigs.k8s.io/job-index": "0",
                  "jobset.sigs.k8s.io/restart-attempt": str(attempt)}
    (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    environ = {"JOB_COMPLETION_INDEX": str(index)}
    for e in container["env"]:
        if "value" in e:
            environ[e["name"]] = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            label = path.removeprefix("metadata.labels['").removesuffix("']")
            environ[e["name"]] = pod_labels[label]
    return environ


def test_each_jobset_pod_computes_a_tf_config_matching_the_spec():
    spec = _spec(**PSS)
    doc = jobset_manifest(spec, name="digits", image="reg/tfo:1")
    seen = {}
    for rjob in doc["spec"]["replicatedJobs"]:
        for i in range(rjob["template"]["spec"]["completions"]):
            environ = _pod_env(doc, rjob, i, attempt=1)
            assert environ[env.ATTEMPT] == "1"
            seen[(rjob["name"], i)] = tf_config_from_jobset(environ)
    assert sorted(seen) == sorted((t.task_type, t.task_index) for t in spec.tasks())
    clusters = {yaml.safe_dump(c["cluster"]) for c in seen.values()}
    assert len(clusters) == 1  # every pod agrees on the cluster
    cluster = seen[("chief", 0)]["cluster"]
    assert cluster["ps"] == ["digits-ps-0-0.digits:2222", "digits-ps-0-1.digits:2222"]
    assert "evaluator" not in cluster and seen[("evaluator", 0)]["task"] == {"type": "evaluator", "index": 0}


def _rjob(doc: dict, name: str) -> dict:
    (r,) = [r for r in doc["spec"]["replicatedJobs"] if r["name"] == name]
    return r["template"]["spec"]


def test_jobset_maps_success_restarts_and_deadline_to_its_own_fields():
    doc = jobset_manifest(_spec(**PSS), name="digits", image="reg/tfo:1")
    spec = doc["spec"]
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief"]}
    assert spec["network"] == {"enableDNSHostnames": True, "subdomain": "digits", "publishNotReadyAddresses": True}
    policy = spec["failurePolicy"]
    assert policy["maxRestarts"] == 5 and policy["restartStrategy"] == "BlockingRecreate"
    assert policy["rules"] == [
        {"name": "deadline", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
        {"name": "restartPolicyNever", "action": "FailJobSet", "targetReplicatedJobs": ["ps"]},
        {"name": "permanentExitCode", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
         "targetReplicatedJobs": ["chief"]},
    ]
    chief, worker, ps, evaluator = (_rjob(doc, n) for n in ("chief", "worker", "ps", "evaluator"))
    assert all(j["template"]["spec"]["restartPolicy"] == "Never" for j in (chief, worker, ps, evaluator))
    assert all(j["activeDeadlineSeconds"] == 3600 for j in (chief, worker, ps, evaluator))
    # chief and ps: any failure ends the Job and reaches JobSet (whole-set restart); PSS workers
    # (on-failure) and the evaluator are restarted alone, by their own Job
    assert (chief["backoffLimit"], ps["backoffLimit"], worker["backoffLimit"],
            evaluator["backoffLimit"]) == (0, 0, 5, 5)
    codes = chief["podFailurePolicy"]["rules"][-1]["onExitCodes"]
    # 128-255 and signals: retried; 42 (TF's handler off Google Cloud) is a preemption, not permanent
    assert codes["operator"] == "In" and codes["values"] == [c for c in range(1, 128) if c != 42]
    assert chief["podFailurePolicy"]["rules"][-1]["action"] == "FailJob"
    assert all(r["action"] != "FailJob" for r in worker["podFailurePolicy"]["rules"])  # on-failure
    assert "podFailurePolicy" not in ps  # never: a preemption of a ps ends the set like any failure


def test_jobset_keeps_preemptions_out_of_the_restart_budget():
    doc = jobset_manifest(_spec(workers=2), name="p", image="reg/tfo:1")
    rules = _rjob(doc, "worker")["podFailurePolicy"]["rules"]
    # first match wins: a disruption (preemption, eviction, drain) and a preemption exit are Ignore
    # (the pod comes back at its index, not counted), before the permanent exit codes
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1] == {"action": "Ignore",
                        "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": [42, 143]}}
    assert rules[2]["action"] == "FailJob" and 42 not in rules[2]["onExitCodes"]["values"]
    custom = jobset_manifest(_spec(workers=2, supervision=SupervisionSpec.create(preemption_exit_codes=[143, 7])),
                             name="p", image="reg/tfo:1")
    custom_rules = _rjob(custom, "worker")["podFailurePolicy"]["rules"]
    assert custom_rules[1]["onExitCodes"]["values"] == [7, 143] and 7 not in custom_rules[2]["onExitCodes"]["values"]
    validate_jobset(custom)


def test_mwms_restarts_the_whole_set_and_success_follows_the_policy():
    doc = jobset_manifest(_spec(workers=3), name="m", image="reg/tfo:1")
    worker = _rjob(doc, "worker")
    assert worker["backoffLimit"] == 0 and worker["completions"] == worker["parallelism"] == 3
    assert doc["spec"]["successPolicy"]["targetReplicatedJobs"] == ["worker"] and "successPolicy" not in worker
    chief_policy = jobset_manifest(_spec(workers=3, supervision=SupervisionSpec.create(success_policy="chief")),
                                   name="m", image="reg/tfo:1")
    assert _rjob(chief_policy, "worker")["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}


@pytest.mark.parametrize("kwargs, field", [
    (dict(name="1digits"), "name"),                      # the Service name must start with a letter
    (dict(name="d" * 55), "name"),                       # d...d-worker-0-1 is 64 characters
    (dict(memory="2 gigs"), "memory"),
    (dict(memory="2GB"), "memory"),
    (dict(cpu="-1"), "cpu"),
    (dict(cpu="0"), "cpu"),
    (dict(volume_claim="Runs_PVC"), "volume-claim"),
    (dict(image="reg/tfo 1"), "image"),
])
def test_bad_jobset_input_is_refused_naming_the_field(kwargs, field):
    with pytest.raises(SpecError) as info:
        jobset_manifest(_spec(workers=2), **{"name": "digits", "image": "reg/tfo:1", **kwargs})
    assert info.value.field == field


def test_render_cli_bad_quantity_is_one_line_and_exit_2():
    result = subprocess.run(
        orchestrator_cmd("render", "--workers", "2", "--format", "jobset", "--image", "r/x:1", "--memory", "2 gigs"),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: memory='2 gigs': not a Kubernetes quantity; "
        "write a number with an optional suffix, e.g. 2Gi, 512Mi, 500m, 2"]


# --- planted errors -------------------------------------------------------------------------

Mutate = Callable[[dict], None]


def _tf_container(d: dict) -> dict:
    return d["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


def _tls_volume(pod: dict) -> dict:
    (v,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    return v


def _tls_mount(container: dict) -> dict:
    (m,) = [m for m in container["volumeMounts"] if m["mountPath"] == MOUNT_PATH]
    return m


def _tls_env(container: dict) -> dict:
    (e,) = [e for e in container["env"] if e["name"] == env.TLS_DIR]
    return e


def _tfjob_pod(d: dict, replica: str = "Worker") -> dict:
    return d["spec"]["tfReplicaSpecs"][replica]["template"]["spec"]


TLS_PLANTED: dict[str, tuple[Callable[[dict, dict], None], set[str]]] = {
    # (pod, tensorflow container) -> mutation; validators that must catch it
    "certificates mounted writable": (lambda p, c: _tls_mount(c).pop("readOnly"), {"semantics"}),
    "certificates world-readable (defaultMode 0644)": (
        lambda p, c: _tls_volume(p)["secret"].__setitem__("defaultMode", 0o644), {"semantics"}),
    "defaultMode as a string ('0400')": (
        lambda p, c: _tls_volume(p)["secret"].__setitem__("defaultMode", "0400"), {"schema", "semantics"}),
    "unknown field in the secret volume (secretname)": (
        lambda p, c: _rename(_tls_volume(p)["secret"], "secretName", "secretname"), {"schema", "semantics"}),
    "certificates from an emptyDir, not a Secret": (
        lambda p, c: _tls_volume(p).update({"emptyDir": {}}) or _tls_volume(p).pop("secret"), {"semantics"}),
    "ORCH_TLS_DIR where nothing is mounted": (
        lambda p, c: _tls_env(c).__setitem__("value", "/etc/tls"), {"semantics"}),
    "one role's pods mount another Secret": (
        lambda p, c: _tls_volume(p)["secret"].__setitem__("secretName", "other-tls"), {"semantics"}),
}


TFJOB_PLANTED: dict[str, tuple[Mutate, set[str]]] = {
    # kind of error: (mutation, validators that must catch it)
    # elastic bounds a TFJob has no field for (orchestrator/render/elastic.py): PyTorchJob's elasticPolicy, and the
    # enableDynamicWorker switch, whose sparse TF_CONFIG TensorFlow 2 cannot read
    "worker bounds as PyTorchJob's elasticPolicy": (
        lambda d: d["spec"].__setitem__("elasticPolicy", {"minReplicas": 1, "maxReplicas": 3}), {"model"}),
    "enableDynamicWorker (a sparse TF_CONFIG)": (
        lambda d: d["spec"].__setitem__("enableDynamicWorker", True), {"semantics"}),
    "unknown field in a container (imagePullPolicyy)": (
        lambda d: _tf_container(d).__setitem__("imagePullPolicyy", "Always"), {"schema", "model"}),
    "unknown field in the TFJob spec (tfReplicaSpec)": (
        lambda d: _rename(d["spec"], "tfReplicaSpecs", "tfReplicaSpec"), {"model", "semantics"}),
    "unknown field in runPolicy (backofLimit)": (
        lambda d: _rename(d["spec"]["runPolicy"], "backoffLimit", "backofLimit"), {"model"}),
    "env value not a string": (
        lambda d: _tf_container(d)["env"].append({"name": "X", "value": 5}), {"schema"}),
    "containerPort as a string": (
        lambda d: _tf_container(d)["ports"][0].__setitem__("containerPort", "2222"), {"schema"}),
    "malformed resource quantity (2 gigs)": (
        lambda d: _tf_container(d).__setitem__("resources", {"limits": {"memory": "2 gigs"}}), {"quantity"}),
    "wrong restartPolicy (Sometimes)": (
        lambda d: d["spec"]["tfReplicaSpecs"]["Worker"].__setitem__("restartPolicy", "Sometimes"), {"semantics"}),
    "bad label value (spaces)": (
        lambda d: d["metadata"]["labels"].__setitem__("app.kubernetes.io/name", "digits job"), {"label"}),
    "bad label key (two slashes)": (
        lambda d: d["metadata"]["labels"].__setitem__("a/b/c", "x"), {"label"}),
    "container not named tensorflow": (
        lambda d: _tf_container(d).__setitem__("name", "tf"), {"semantics"}),
    "replica type lowercase (worker)": (
        lambda d: _rename(d["spec"]["tfReplicaSpecs"], "Worker", "worker"), {"semantics"}),
    "two chiefs": (
        lambda d: d["spec"]["tfReplicaSpecs"]["Chief"].__setitem__("replicas", 2), {"semantics"}),
    **{kind: ((lambda d, f=f: f(_tfjob_pod(d), _tf_container(d))), caught)
       for kind, (f, caught) in TLS_PLANTED.items()},
}


def _js_job(d: dict, name: str = "worker") -> dict:
    return _rjob(d, name)


def _js_container(d: dict, name: str = "worker") -> dict:
    return _js_job(d, name)["template"]["spec"]["containers"][0]


def _js_env(d: dict, var: str) -> dict:
    (e,) = [e for e in _js_container(d)["env"] if e["name"] == var]
    return e


JOBSET_PLANTED: dict[str, tuple[Mutate, set[str]]] = {
    "worker bounds in a replicated job (minReplicas: no such field)": (
        lambda d: next(r for r in d["spec"]["replicatedJobs"] if r["name"] == "worker").__setitem__("minReplicas", 1),
        {"model", "crd"}),
    "unknown field in a container (imagePullPolicyy)": (
        lambda d: _js_container(d).__setitem__("imagePullPolicyy", "Always"), {"schema", "model", "crd"}),
    "unknown field in the JobSet spec (replicatedJob)": (
        lambda d: _rename(d["spec"], "replicatedJobs", "replicatedJob"), {"model", "crd"}),
    "unknown field in failurePolicy (maxRestart)": (
        lambda d: _rename(d["spec"]["failurePolicy"], "maxRestarts", "maxRestart"), {"model", "crd"}),
    "malformed resource quantity (2 gigs)": (
        lambda d: _js_container(d).__setitem__("resources", {"limits": {"memory": "2 gigs"}}), {"quantity", "crd"}),
    "wrong pod restartPolicy (OnFailure: JobSet never sees the failure)": (
        lambda d: _js_job(d, "chief")["template"]["spec"].__setitem__("restartPolicy", "OnFailure"), {"semantics"}),
    "invalid pod restartPolicy (Sometimes)": (
        lambda d: _js_job(d)["template"]["spec"].__setitem__("restartPolicy", "Sometimes"), {"model", "semantics"}),
    "bad label value (spaces)": (
        lambda d: _js_job(d)["template"]["metadata"]["labels"].__setitem__("app.kubernetes.io/name", "a b"), {"label"}),
    "bad label key (empty name)": (
        lambda d: d["metadata"]["labels"].__setitem__("example.com/", "x"), {"label"}),
    "successPolicy operator not All/Any": (
        lambda d: d["spec"]["successPolicy"].__setitem__("operator", "Most"), {"crd"}),
    "failure action unknown (RestartEverything)": (
        lambda d: d["spec"]["failurePolicy"]["rules"][0].__setitem__("action", "RestartEverything"), {"crd"}),
    "failure rule without a name": (
        lambda d: d["spec"]["failurePolicy"]["rules"][0].pop("name"), {"crd", "semantics"}),
    "failure reason JobSet does not know (Deadline)": (
        lambda d: d["spec"]["failurePolicy"]["rules"][0].__setitem__("onJobFailureReasons", ["Deadline"]),
        {"semantics"}),
    "two failure rules with one name": (
        lambda d: d["spec"]["failurePolicy"]["rules"][1].__setitem__("name", "deadline"), {"semantics"}),
    "maxRestarts as a string": (
        lambda d: d["spec"]["failurePolicy"].__setitem__("maxRestarts", "5"), {"crd", "model"}),
    "success targets a replicated job that does not exist (master)": (
        lambda d: d["spec"]["successPolicy"].__setitem__("targetReplicatedJobs", ["master"]), {"semantics"}),
    "Job not Indexed (no JOB_COMPLETION_INDEX)": (
        lambda d: _js_job(d).__setitem__("completionMode", "NonIndexed"), {"semantics"}),
    "task counts in the env disagree with the Jobs": (
        lambda d: _js_job(d, "ps").__setitem__("completions", 3) or _js_job(d, "ps").__setitem__("parallelism", 3),
        {"semantics"}),
    "replicated-job name not read from the pod label": (
        lambda d: _js_env(d, env.JOBSET_REPLICATED_JOB).__setitem__("valueFrom", {"fieldRef": {
            "fieldPath": "metadata.labels['jobset.sigs.k8s.io/replicated-job-name']"}}), {"semantics"}),
    "podFailurePolicy exit code as a string": (
        lambda d: _js_job(d, "chief")["podFailurePolicy"]["rules"][-1]["onExitCodes"]["values"].__setitem__(0, "1"),
        {"schema", "crd", "model"}),
    "backoffLimit not an integer (1.5)": (
        lambda d: _js_job(d).__setitem__("backoffLimit", 1.5), {"schema", "crd", "model"}),
    **{kind: ((lambda d, f=f: f(_js_job(d)["template"]["spec"], _js_container(d))),
              caught | {"crd"} if "schema" in caught else caught)  # the CRD embeds the pod schema too
       for kind, (f, caught) in TLS_PLANTED.items()},
}


def _caught_by(errs: list[str]) -> set[str]:
    layers = set()
    for e in errs:
        head = e.split(": ", 1)[1] if e.split(": ", 1)[0] in ("Chief", "Worker", "PS", "Evaluator", "chief",
                                                              "worker", "ps", "evaluator") else e
        layers.add(head.split(":", 1)[0].split()[0])
    return layers


@pytest.fixture(scope="module")
def tfjob_base() -> dict:
    return with_tls_secret(tfjob_manifest(_spec(**{**PSS, "chief": 1}), name="digits", image="reg/tfo:1", cpu="1",
                                          memory="2Gi"), "digits-tls")


@pytest.fixture(scope="module")
def jobset_base() -> dict:
    return with_tls_secret(jobset_manifest(_spec(**PSS), name="digits", image="reg/tfo:1", cpu="1", memory="2Gi"),
                           "digits-tls")


@pytest.mark.parametrize("kind", list(TFJOB_PLANTED))
def test_planted_tfjob_error_is_caught(kind, tfjob_base):
    assert validate_tfjob(tfjob_base) == []
    mutate, expected = TFJOB_PLANTED[kind]
    doc = copy.deepcopy(tfjob_base)
    mutate(doc)
    errs = validate_tfjob(doc)
    assert expected <= _caught_by(errs), f"{kind}: expected {expected}, caught by {_caught_by(errs)}: {errs}"


@pytest.mark.parametrize("kind", list(JOBSET_PLANTED))
def test_planted_jobset_error_is_caught(kind, jobset_base):
    assert validate_jobset(jobset_base) == []
    mutate, expected = JOBSET_PLANTED[kind]
    doc = copy.deepcopy(jobset_base)
    mutate(doc)
    errs = validate_jobset(doc)
    assert expected <= _caught_by(errs), f"{kind}: expected {expected}, caught by {_caught_by(errs)}: {errs}"
