"""Spec rules and TF_CONFIG rendering: pure, no TensorFlow."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec, Strategy, TaskId, TrainingSpec, cluster_spec, tf_config, tf_config_json
from orchestrator.spec.faults import Fault


def addrs(spec: JobSpec) -> dict[TaskId, str]:
    return {t: f"10.0.0.{i}:2222" for i, t in enumerate(spec.tasks())}


def test_mwms_default_topology_has_worker0_as_coordinator():
    spec = JobSpec.create(workers=4)
    assert [str(t) for t in spec.tasks()] == ["worker:0", "worker:1", "worker:2", "worker:3"]
    assert spec.coordinator == TaskId("worker", 0)
    assert spec.replicas == 4
    assert spec.global_batch_size == 4 * spec.training.batch_size_per_replica


def test_pss_adds_a_chief_as_coordinator_and_serving_tasks():
    spec = JobSpec.create(strategy="parameter_server", workers=2, ps=1)
    assert spec.chief == 1
    assert spec.coordinator == TaskId("chief", 0)
    assert spec.serves_forever(TaskId("ps", 0)) and spec.serves_forever(TaskId("worker", 1))
    assert not spec.serves_forever(TaskId("chief", 0))
    assert not JobSpec.create(workers=2).serves_forever(TaskId("worker", 1))


@pytest.mark.parametrize(
    "fields, field, fragment",
    [
        (dict(workers=2, ps=1), "ps", "no parameter servers"),
        (dict(workers=0), "workers", "no chief and no worker"),
        (dict(workers=-1), "workers", ">= 0"),
        (dict(chief=2), "chief", "at most one chief"),
        (dict(evaluator=2), "evaluator", "at most one evaluator"),
        (dict(strategy="parameter_server", workers=0, ps=1), "workers", "at least one worker"),
        (dict(strategy="parameter_server", workers=1, ps=0), "ps", "at least one parameter server"),
        (dict(strategy="mirror"), "strategy", "unknown strategy"),
        (dict(training=TrainingSpec(epochs=0)), "training.epochs", ">= 1"),
        (dict(training=TrainingSpec(batch_size_per_replica=0)), "training.batch_size_per_replica", ">= 1"),
        (dict(training=TrainingSpec(learning_rate=-1.0)), "training.learning_rate", "(0, 10]"),
        (dict(heartbeat_interval_s=0.0), "heartbeat_interval_s", "between"),
        (dict(threads_per_task=0), "threads_per_task", ">= 1"),
        (dict(workers=True), "workers", ">= 0"),
    ],
)
def test_bad_specs_name_the_field(fields, field, fragment):
    with pytest.raises(SpecError) as info:
        JobSpec.create(**fields)
    assert info.value.field == field
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_strategy_aliases():
    assert Strategy.parse("MWMS") is Strategy.MULTI_WORKER_MIRRORED
    assert Strategy.parse("parameter-server") is Strategy.PARAMETER_SERVER


def test_tf_config_is_pure_and_excludes_the_evaluator():
    spec = JobSpec.create(strategy="parameter_server", workers=2, ps=2, evaluator=1)
    a = addrs(spec)
    cfg = tf_config(a, TaskId("worker", 1))
    assert cfg["task"] == {"type": "worker", "index": 1}
    assert set(cfg["cluster"]) == {"chief", "worker", "ps"}
    assert cfg["cluster"]["worker"] == [a[TaskId("worker", 0)], a[TaskId("worker", 1)]]
    ev = tf_config(a, TaskId("evaluator", 0))
    assert "evaluator" not in ev["cluster"] and ev["task"]["type"] == "evaluator"
    assert tf_config(a, TaskId("worker", 1)) == cfg
    assert json.loads(tf_config_json(a, TaskId("ps", 1)))["task"] == {"type": "ps", "index": 1}


def test_cluster_spec_rejects_gaps_in_indices():
    with pytest.raises(ValueError):
        cluster_spec({TaskId("worker", 0): "a:1", TaskId("worker", 2): "b:1"})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("worker:1:kill@step=20", ("worker:1", "kill", "step", 20.0, 0, 0)),
        ("worker-0:exit=3@step=5", ("worker:0", "exit", "step", 5.0, 3, 0)),
        ("ps:0:stop@time=2.5,attempt=1", ("ps:0", "stop", "time", 2.5, 0, 1)),
    ],
)
def test_fault_syntax(text, expected):
    f = Fault.parse(text)
    assert (str(f.task), f.kind, f.trigger, f.at, f.exit_code, f.attempt) == expected


@pytest.mark.parametrize(
    "text", ["worker:1", "worker:1:boom@step=3", "worker:1:exit@step=3", "worker:1:kill=3@step=3",
             "worker:1:exit=300@step=1", "gpu:0:kill@step=1"]
)
def test_bad_faults(text):
    with pytest.raises(SpecError) as info:
        Fault.parse(text)
    assert info.value.field == "inject-fault"
