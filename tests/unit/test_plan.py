"""Planning: addresses, TF_CONFIG, thread limits and environment of every task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.spec.faults import Fault
from orchestrator.plan import attempt_env, make_plan, threads_per_task
from orchestrator.spec import JobSpec, TaskId


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
        assert cfg["cluster"] == plan.cluster
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
    with pytest.raises(SpecError):
        plan_for(JobSpec.create(workers=2), faults=[Fault.parse("worker:7:kill@step=3")])
