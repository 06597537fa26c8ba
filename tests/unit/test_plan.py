"""Planning: addresses, TF_CONFIG, thread limits and environment of every task."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from orchestrator import env
from orchestrator.api import check_job
from orchestrator.errors import SpecError
from orchestrator.plan import attempt_env, held_at_max, make_plan, threads_per_task
from orchestrator.spec import JobSpec, TaskId, TrainingSpec
from orchestrator.spec.data import DIGITS_TRAIN_EXAMPLES, train_examples
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.spec.faults import Fault


def plan_for(spec: JobSpec, **kw):
    addresses = {t: f"127.0.0.1:{20000 + i}" for i, t in enumerate(spec.tasks())}
    return make_plan(spec, addresses, run_id="r1", run_dir=Path("/tmp/runs/r1"), health_address="127.0.0.1:1",
                     token="secret", orchestrator_pid=42, cores=2, **kw)


def test_every_task_gets_its_tf_config_token_and_thread_limits():
    plan = plan_for(JobSpec.create(strategy="parameter_server", workers=2, ps=1))
    assert [str(tp.task) for tp in plan.tasks] == ["chief:0", "worker:0", "worker:1", "ps:0"]
    for tp in plan.tasks:
        cfg = json.loads(tp.env["TF_CONFIG"])
        assert cfg["task"] == {"type": tp.task.task_type, "index": tp.task.task_index}
        assert cfg["cluster"] == {"chief": ["127.0.0.1:20000"], "worker": ["127.0.0.1:20001", "127.0.0.1:20002"],
                                  "ps": ["127.0.0.1:20003"]}
        assert tp.env[env.JOB_TOKEN] == "secret"
        assert tp.env["TF_NUM_INTRAOP_THREADS"] == "1"
        assert tp.env[env.ORCHESTRATOR_PID] == "42"
        assert tp.env["GRPC_FAIL_FAST"] == "use_caller"
        assert tp.argv[1:] == ("-m", "ps" if tp.task.task_type == "ps" else "worker")
    assert [tp.serves_forever for tp in plan.tasks] == [False, True, True, True]


def test_dry_run_dict_masks_the_token():
    text = json.dumps(plan_for(JobSpec.create(workers=2)).to_dict())
    assert "secret" not in text and "***" in text


def test_attempt_env_points_at_the_attempt_directory():
    plan = plan_for(JobSpec.create(workers=2))
    e = attempt_env(plan, TaskId("worker", 1), 2)
    assert e[env.ATTEMPT] == "2"
    assert e[env.TASK_DIR] == "/tmp/runs/r1/attempt-2/worker-1"
    assert e[env.ERROR_FILE].endswith("attempt-2/worker-1/error.json")


@pytest.mark.parametrize("tasks, cores, expected", [(4, 2, 1), (1, 8, 8), (2, 8, 4), (3, 8, 2)])
def test_threads_divide_the_cores(tasks, cores, expected):
    assert threads_per_task(JobSpec.create(workers=tasks), cores) == expected


def test_faults_land_in_their_task_only_and_unknown_tasks_are_rejected():
    plan = plan_for(JobSpec.create(workers=2), faults=[Fault.parse("worker:1:kill@step=3")])
    assert "ORCH_FAULTS" not in plan.task_plan(TaskId("worker", 0)).env
    assert json.loads(plan.task_plan(TaskId("worker", 1)).env["ORCH_FAULTS"])[0]["kind"] == "kill"
    with pytest.raises(SpecError):  # checked once, before planning: api.check_job
        check_job(JobSpec.create(workers=2), backend="local", faults=[Fault.parse("worker:7:kill@step=3")])


# --- issue 11, item 8: epochs that over-cover the data are a warning, with the numbers


def test_steps_per_epoch_over_the_data_is_a_warning_with_the_numbers():
    plan = plan_for(JobSpec.create(workers=2, training=TrainingSpec(steps_per_epoch=90)))
    assert plan.warnings == (
        "training.steps_per_epoch=90 x global batch 32 (16 per replica x 2 replica(s)) = 2,880 examples per epoch, "
        "2x the 1,437 train examples of the digits: each epoch passes over the data 2 times; "
        "for one pass per epoch use --steps-per-epoch 45 or leave it out",
    )
    assert plan.to_dict()["warnings"] == list(plan.warnings)


@pytest.mark.parametrize("steps, workers, commands", [(None, 2, None), (45, 2, None), (90, 1, None),
                                                      (90, 2, {"worker": ["python", "train.py"]})])
def test_no_warning_for_one_pass_or_a_users_program(steps, workers, commands):
    plan = plan_for(JobSpec.create(workers=workers, training=TrainingSpec(steps_per_epoch=steps)), commands=commands)
    assert plan.warnings == () and plan.to_dict()["warnings"] == []


def test_train_examples_of_npz_and_tfrecord_data_are_read_cheaply(tmp_path):
    import struct

    np = pytest.importorskip("numpy")
    np.savez(tmp_path / "d.npz", x_train=np.zeros((100, 3, 2)), y_train=np.zeros(100), x_test=np.zeros((7, 6)),
             y_test=np.zeros(7))
    assert train_examples(str(tmp_path / "d.npz")) == 100
    spec = JobSpec.create(workers=2, training=TrainingSpec(steps_per_epoch=5, data=str(tmp_path / "d.npz")))
    assert ("5 x global batch 32" in plan_for(spec).warnings[0]
            and f"of {tmp_path / 'd.npz'}" in plan_for(spec).warnings[0])
    records = tmp_path / "tfr"
    records.mkdir()
    for name, n in (("train-0", 3), ("train-1", 2), ("test-0", 9)):  # TFRecord framing: length, crc, data, crc
        (records / name).write_bytes(b"".join(struct.pack("<Q", 5) + b"\0" * 4 + b"abcde" + b"\0" * 4
                                              for _ in range(n)))
    assert train_examples(str(records)) == 5
    (records / "metadata.json").write_text('{"num_train": 1437}')
    assert train_examples(str(records)) == 1437
    (tmp_path / "bad.npz").write_text("not a zip")
    assert train_examples(str(tmp_path / "bad.npz")) is None  # unknown: no warning rather than a guess


def test_the_digits_count_matches_the_task_programs_split():
    from worker.data import load_digits_split

    assert all(len(load_digits_split(seed)[0]) == DIGITS_TRAIN_EXAMPLES for seed in (0, 1))


def test_tf_config_made_from_the_shared_cluster_is_the_one_rendered_alone():
    from orchestrator.spec.tfconfig import ClusterConfig, tf_config, tf_config_json

    spec = JobSpec.create(strategy="parameter_server", workers=3, ps=2, evaluator=1)
    addresses = {t: f"10.0.0.{i}:2222" for i, t in enumerate(spec.tasks())}
    config = ClusterConfig(addresses)
    plan = make_plan(spec, addresses, run_id="r", run_dir=Path("/tmp/r"), health_address="127.0.0.1:1", token="t")
    for task in spec.tasks():
        assert config.text(task) == tf_config_json(addresses, task)
        assert config.tf_config(task) == tf_config(addresses, task)
        env_ = plan.task_plan(task).env
        assert env_["TF_CONFIG"] == tf_config_json(addresses, task) and "TF_CONFIG" in env_
        assert dict(env_)["TF_CONFIG"] == env_["TF_CONFIG"] and len(dict(env_)) == len(env_)


def test_a_tf_config_past_the_kernels_limit_on_one_environment_string_is_refused_at_plan_time():
    """10,000 tasks' TF_CONFIG is ~170 KB, past MAX_ARG_STRLEN (128 KiB): execve would fail with E2BIG."""
    from orchestrator.checks import ENV_STRING_MAX_BYTES, check_environment

    def plan_of(workers: int):
        spec = JobSpec.create(strategy="parameter_server", workers=workers, ps=1)
        addresses = {t: f"127.0.0.1:{20000 + i}" for i, t in enumerate(spec.tasks())}
        return make_plan(spec, addresses, run_id="r", run_dir=Path("/tmp/r"), health_address="127.0.0.1:1", token="t")

    check_environment(plan_of(5000))  # ~90 KB: fits
    big = plan_of(10000)
    assert len(big.task_plan(TaskId("worker", 9999)).env["TF_CONFIG"]) > ENV_STRING_MAX_BYTES
    with pytest.raises(SpecError) as err:
        check_environment(big)
    text = str(err.value)
    assert text.startswith("workers=10000: the TF_CONFIG of this 10002-task job is ") and "MAX_ARG_STRLEN" in text
    assert "E2BIG" in text and "split it into jobs of at most ~" in text


@pytest.mark.parametrize("fields, planned", [
    ({"strategy": "parameter_server", "ps": 1, "workers": 1, "elastic": ElasticSpec(1, 3)}, 3),  # held above 1
    ({"strategy": "parameter_server", "ps": 1, "workers": 3, "elastic": ElasticSpec(1, 3)}, None),  # at MAX
    ({"strategy": "parameter_server", "ps": 1, "workers": 1}, None),  # a fixed count
    ({"strategy": "multi_worker_mirrored", "workers": 1, "elastic": ElasticSpec(1, 3)}, None),  # a new group anyway
    ({"strategy": "parameter_server", "ps": 1, "workers": 1, "elastic": ElasticSpec(1, 3),
      "gpus_per_task": {"worker": 1}}, None),  # a held worker has no device dealt
])
def test_a_pss_job_below_max_is_planned_at_max(fields, planned):
    at_max = held_at_max(JobSpec.create(**fields))
    assert (at_max.workers if at_max is not None else None) == planned


def test_a_held_plan_starts_its_tasks_with_a_tf_config_naming_the_started_workers_only():
    spec = JobSpec.create(strategy="parameter_server", ps=1, workers=1, elastic=ElasticSpec(1, 2))
    at_max = held_at_max(spec)
    assert at_max is not None
    plan = dataclasses.replace(plan_for(at_max), started_workers=1)
    assert plan.held == ("worker-1",)
    workers = {t: json.loads(attempt_env(plan, t, 0)["TF_CONFIG"])["cluster"]["worker"]
               for t in (TaskId("chief", 0), TaskId("ps", 0), TaskId("worker", 0))}
    assert all(len(w) == 1 for w in workers.values())  # the held worker is in no started task's cluster
    grown = json.loads(attempt_env(plan, TaskId("chief", 0), 1, workers=2)["TF_CONFIG"])
    assert len(grown["cluster"]["worker"]) == 2 and grown["task"] == {"type": "chief", "index": 0}
    shown = plan.to_dict()
    assert (shown["started_workers"], shown["held"], shown["spec"]["workers"]["start"]) == (1, ["worker-1"], 1)
    assert [len(t["tf_config"]["cluster"]["worker"]) for t in shown["tasks"]] == [1, 1, 2, 1]
