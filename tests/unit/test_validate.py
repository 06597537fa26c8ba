"""Malformed TF_CONFIGs, cluster specs and spec files: each names the field, the value and the fix."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec.address import check_addresses, parse_address
from orchestrator.spec.loader import build_spec, check_spec_mapping
from orchestrator.spec.model import Strategy, TaskId
from orchestrator.spec.validate import check_cluster, check_consistent, check_tf_config

W2 = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}


def tfc(cluster=None, task=None, **extra):
    return {"cluster": W2 if cluster is None else cluster, "task": task or {"type": "worker", "index": 0}, **extra}


def check(kind, document, strategy=None):
    if kind == "tf_config":
        return check_tf_config(document, strategy)
    if kind == "cluster":
        return check_cluster(document, "cluster", strategy)
    return build_spec(check_spec_mapping(document, "spec.yaml"))


CASES = [
    # --- TF_CONFIG: syntax and keys
    ("tf_config", '{"cluster": {"worker": ["a:1"]}, ', None, "TF_CONFIG", "not valid JSON"),
    ("tf_config", "{'cluster': {'worker': ['a:1']}}", None, "TF_CONFIG", "double quotes"),
    ("tf_config", "--worker_hosts=a:1,b:1", None, "TF_CONFIG", "TF1 host flags"),
    ("tf_config", '["a:1"]', None, "TF_CONFIG", "must be a JSON object"),
    ("tf_config", {"ps_hosts": "a:1", "worker_hosts": "b:1"}, None, "ps_hosts", "TF1 command-line flag"),
    ("tf_config", tfc(clusterr=1), None, "clusterr", "did you mean cluster?"),
    ("tf_config", {"task": {"type": "worker", "index": 0}}, None, "cluster", "has no cluster"),
    ("tf_config", {"cluster": W2}, None, "task", "has no task"),
    ("tf_config", tfc(rpc_layer="http"), None, "rpc_layer", "gRPC"),
    ("tf_config", tfc(environment=3), None, "environment", "must be text"),
    # --- TF_CONFIG: task
    ("tf_config", tfc(task={"type": "master", "index": 0}), None, "task.type", "TF1 name of the chief"),
    ("tf_config", tfc(task={"type": "wroker", "index": 0}), None, "task.type", "did you mean worker?"),
    ("tf_config", tfc(task={"type": "worker", "index": "1"}), None, "task.index", 'write "index": 1'),
    ("tf_config", tfc(task={"type": "worker", "index": True}), None, "task.index", "must be a number"),
    ("tf_config", tfc(task={"type": "worker", "index": 2}), None, "task.index", "use 0..1"),
    ("tf_config", tfc(task={"type": "worker", "index": -1}), None, "task.index", "out of range"),
    ("tf_config", tfc(task={"type": "chief", "index": 0}), None, "task.type", "the cluster has no chief"),
    ("tf_config", tfc(task={"type": "evaluator", "index": 1}), None, "task.index", "use 0"),
    ("tf_config", tfc(task={"type": "worker", "id": 0}), None, "task.id", "unknown task key"),
    # --- cluster: task types and shape
    ("cluster", {"master": ["a:1"], "worker": ["b:1"]}, None, "cluster.master", "rename master to chief"),
    ("cluster", {"worker": "a:1,b:1"}, None, "cluster.worker", "--worker_hosts format"),
    ("cluster", {"worker": "a:1"}, None, "cluster.worker", "write a list"),
    ("cluster", {"worker": {0: "a:1", 2: "b:1"}}, None, "cluster.worker", "sparse cluster"),
    ("cluster", {"worker": ["a:1"], "evaluator": ["e:1"]}, None, "cluster.evaluator", "tensorflow#46169"),
    ("cluster", {"workers": ["a:1"]}, None, "cluster.workers", "did you mean worker?"),
    ("cluster", {"worker": ["a:1"], "ps_hosts": ["b:1"]}, None, "cluster.ps_hosts", "TF1 command-line flag"),
    ("cluster", {}, None, "cluster", "no tasks"),
    ("cluster", ["a:1"], None, "cluster", "must map task types"),
    ("cluster", {"worker": []}, None, "cluster.worker", "no worker addresses"),
    ("cluster", {"worker": 3}, None, "cluster.worker", "must be a list"),
    ("cluster", {"chief": ["a:1", "b:1"], "worker": ["c:1"]}, None, "cluster.chief", "at most one chief"),
    # --- cluster: strategy rules
    ("cluster", {"worker": ["a:1"], "ps": ["b:1"]}, None, "cluster.chief", "needs a chief"),
    ("cluster", {"chief": ["a:1"], "ps": ["b:1"]}, None, "cluster.worker", "at least one worker"),
    ("cluster", {"chief": ["a:1"], "worker": ["b:1"]}, "parameter_server", "cluster.ps",
     "at least one parameter server"),
    ("cluster", {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]}, "multi_worker_mirrored", "cluster.ps",
     "no parameter servers"),
    # --- addresses, every one through the same parser
    ("cluster", {"worker": ["10.0.0.1"]}, None, "cluster.worker[0]", "has no port"),
    ("cluster", {"worker": ["10.0.0.1:0"]}, None, "cluster.worker[0]", "port 0 is out of range"),
    ("cluster", {"worker": ["10.0.0.1:70000"]}, None, "cluster.worker[0]", "out of range"),
    ("cluster", {"worker": ["10.0.0.1:http"]}, None, "cluster.worker[0]", "not a number"),
    ("cluster", {"worker": ["fe80::1:2222"]}, None, "cluster.worker[0]", "[fe80::1]:2222"),
    ("cluster", {"worker": ["fe80::1"]}, None, "cluster.worker[0]", "must be in brackets"),
    ("cluster", {"worker": ["[fe80::zz]:2222"]}, None, "cluster.worker[0]", "not an IPv6 address"),
    ("cluster", {"worker": ["[fe80::1]2222"]}, None, "cluster.worker[0]", "]:port"),
    ("cluster", {"worker": ["grpc://a:1"]}, None, "cluster.worker[0]", "drop the 'grpc://'"),
    ("cluster", {"worker": ["a:1/x"]}, None, "cluster.worker[0]", "no path"),
    ("cluster", {"worker": [" a:1"]}, None, "cluster.worker[0]", "no spaces"),
    ("cluster", {"worker": ["bad_host!:1"]}, None, "cluster.worker[0]", "not a hostname"),
    ("cluster", {"worker": [2222]}, None, "cluster.worker[0]", "quote it"),
    ("cluster", {"worker": [":2222"]}, None, "cluster.worker[0]", "has no host"),
    ("cluster", {"worker": ["a:1", "a:1"]}, None, "cluster.worker[1]", "cluster.worker[0] already uses"),
    ("cluster", {"chief": ["127.0.0.1:1"], "worker": ["localhost:1"]}, None, "cluster.worker[0]", "already uses"),
    ("cluster", {"chief": ["localhost:1"], "worker": ["10.0.0.2:1"]}, None, "cluster.chief[0]",
     "loopback address in a cluster that also has other hosts"),
    # --- spec files (this orchestrator's format)
    ("spec", {"workers": 2, "epochs": 3}, None, "epochs", "move it under training"),
    ("spec", {"worker": 2}, None, "worker", "did you mean workers?"),
    ("spec", {"cluster": {"worker": ["a:1"]}}, None, "cluster", "did you mean addresses?"),
    ("spec", {"training": {"epoch": 3}}, None, "training.epoch", "did you mean training.epochs?"),
    ("spec", {"training": {"batch_size": 3}}, None, "training.batch_size", "batch_size_per_replica"),
    ("spec", {"supervision": {"max_restart": 3}}, None, "supervision.max_restart", "supervision.max_restarts"),
    ("spec", {"training": 5}, None, "training", "must be a mapping"),
    ("spec", {"workers": "two"}, None, "workers", "whole number"),
    ("spec", {"strategy": "horovod"}, None, "strategy", "unknown strategy"),
    ("spec", {"strategy": "parameter_server", "ps": 0}, None, "ps", "at least one parameter server"),
    ("spec", {"supervision": {"max_restarts": -1}}, None, "supervision.max_restarts", ">= 0"),
    ("spec", {"supervision": {"restart_policy": {"worker": "always"}}}, None, "supervision.restart_policy.worker",
     "unknown restart policy"),
    ("spec", {"supervision": {"restart_policy": ["never"]}}, None, "supervision.restart_policy", "mapping role"),
    ("spec", {"addresses": {"master": ["127.0.0.1:1"]}}, None, "addresses.master", "rename it to chief"),
    ("spec", {"addresses": {"worker": {"0": "127.0.0.1:1"}}}, None, "addresses.worker", "sparse"),
    ("spec", {"addresses": ["127.0.0.1:1"]}, None, "addresses", "must map task types"),
    ("spec", {"workers": 3, "addresses": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}}, None, "addresses.worker",
     "the job has workers=3"),
    ("spec", {"addresses": {"worker": ["127.0.0.1:1", "127.0.0.1:1"]}}, None, "addresses.worker[1]", "already uses"),
    ("spec", {"addresses": {"worker": ["127.0.0.1"]}}, None, "addresses.worker[0]", "has no port"),
    ("spec", {"strategy": "pss", "addresses": {"worker": ["h1:1"], "ps": ["h2:1"]}}, None, "addresses.chief",
     "the job has chief=1"),
    ("spec", {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}, None, "spec",
     "this is a TF_CONFIG"),
    ("spec", ["workers", 2], None, "spec", "not a mapping"),
]


@pytest.mark.parametrize("kind, document, strategy, field, fragment", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_malformed_input_names_field_value_and_fix(kind, document, strategy, field, fragment):
    with pytest.raises(SpecError) as info:
        check(kind, document, strategy)
    message = str(info.value)
    assert info.value.field == field, message
    assert fragment in message, message
    assert "\n" not in message
    assert info.value.fix, "every error says what to do next"
    assert message.startswith(f"{field}=")  # field=value: problem; fix


@pytest.mark.parametrize(
    "document, strategy, expected",
    [
        (tfc(), None, (Strategy.MULTI_WORKER_MIRRORED, TaskId("worker", 0))),
        (json.dumps(tfc(task={"type": "worker", "index": 1})), None,
         (Strategy.MULTI_WORKER_MIRRORED, TaskId("worker", 1))),
        (tfc({"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]}, {"type": "ps", "index": 0}), None,
         (Strategy.PARAMETER_SERVER, TaskId("ps", 0))),
        # the evaluator's own TF_CONFIG: the training cluster and task evaluator:0
        (tfc({"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]}, {"type": "evaluator", "index": 0}), None,
         (Strategy.PARAMETER_SERVER, TaskId("evaluator", 0))),
        (tfc({"worker": ["[::1]:2222", "[::1]:2223"]}), None, (Strategy.MULTI_WORKER_MIRRORED, TaskId("worker", 0))),
        (tfc({"worker": ["localhost:2222", "127.0.0.1:2223"]}), "mwms",
         (Strategy.MULTI_WORKER_MIRRORED, TaskId("worker", 0))),
        (tfc(rpc_layer="grpc", environment="cloud"), None, (Strategy.MULTI_WORKER_MIRRORED, TaskId("worker", 0))),
    ],
)
def test_valid_tf_configs_pass(document, strategy, expected):
    report = check_tf_config(document, strategy)
    assert (report.strategy, report.task) == expected
    assert "TF_CONFIG of" in report.describe()


def test_tf_configs_of_one_job_must_agree():
    a = check_tf_config(tfc(task={"type": "worker", "index": 0}))
    b = check_tf_config(tfc(task={"type": "worker", "index": 1}))
    check_consistent({"a": a, "b": b})
    with pytest.raises(SpecError, match="same task"):
        check_consistent({"a": a, "b": a})
    other = check_tf_config(tfc({"worker": ["10.0.0.1:2222", "10.0.0.3:2222"]}, {"type": "worker", "index": 1}))
    with pytest.raises(SpecError, match="differs from the cluster in a"):
        check_consistent({"a": a, "c": other})


def test_address_parser_accepts_the_usual_forms():
    assert str(parse_address("10.0.0.5:2222", "f")) == "10.0.0.5:2222"
    assert parse_address("[fe80::1]:2222", "f").host == "fe80::1"
    assert parse_address("worker-1.default.svc.cluster.local:2222", "f").port == 2222
    assert parse_address("localhost:1", "f").is_loopback and parse_address("127.0.0.2:1", "f").is_loopback
    assert parse_address("[::1]:1", "f").is_loopback and not parse_address("10.0.0.1:1", "f").is_loopback
    assert len(check_addresses([("a", "h1:1"), ("b", "h1:2"), ("c", "h2:1")])) == 3


TF1_STRINGS = [
    # (kind, document, field): a TF1 comma-separated host string wherever it appears
    ("cluster", {"worker": "h1:2222,h2:2222"}, "cluster.worker"),
    ("cluster", {"worker": ["h1:2222,h2:2222"]}, "cluster.worker[0]"),
    ("cluster", {"worker": ["h1,h2:2222"]}, "cluster.worker[0]"),
    ("tf_config", tfc(cluster={"worker": ["10.0.0.1:2222,10.0.0.2:2222"]}), "cluster.worker[0]"),
    ("tf_config", tfc(cluster={"worker": "10.0.0.1:2222, 10.0.0.2:2222"}), "cluster.worker"),
    ("spec", {"addresses": {"worker": "127.0.0.1:2222,127.0.0.1:2223"}}, "addresses.worker"),
    ("spec", {"workers": 2, "addresses": {"worker": "127.0.0.1:2222,127.0.0.1:2223"}}, "addresses.worker"),
    ("spec", {"addresses": {"worker": ["127.0.0.1:2222,127.0.0.1:2223"]}}, "addresses.worker[0]"),
]


@pytest.mark.parametrize("kind, document, field", TF1_STRINGS)
def test_comma_separated_hosts_get_the_tf1_message_not_the_ipv6_one(kind, document, field):
    with pytest.raises(SpecError) as info:
        check(kind, document)
    assert info.value.field == field
    assert "TF1 comma-separated hosts" in info.value.problem and "write a list" in info.value.fix
    assert "IPv6" not in str(info.value)


def test_comma_separated_hosts_list_their_items_in_the_fix():
    with pytest.raises(SpecError) as info:
        parse_address("h1:2222,h2:2222", "cluster.worker[0]")
    assert info.value.fix == 'write a list: ["h1:2222", "h2:2222"]'


def test_render_host_flag_with_commas_says_to_repeat_the_flag():
    from orchestrator.cli.render import addresses_for
    from orchestrator.spec.model import JobSpec

    with pytest.raises(SpecError) as info:
        addresses_for(JobSpec.create(workers=2), ["h1,h2"], None)
    assert info.value.field == "host" and info.value.fix.endswith("--host h1 --host h2")
