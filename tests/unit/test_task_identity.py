"""A task is the task the orchestrator started (``ORCH_TASK``), even when its program rewrites
``TF_CONFIG`` before the health client reads it (a script copied from a one-machine tutorial)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator import env
from orchestrator.plan import make_plan
from orchestrator.spec import JobSpec
from orchestrator.task.context import TaskContext

OWN = json.dumps({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})


def test_orch_task_names_the_task_whatever_tf_config_says():
    context = TaskContext.from_env({"TF_CONFIG": OWN, env.TASK: "worker-1"})
    assert (context.task_type, context.task_index, context.name) == ("worker", 1, "worker-1")
    assert context.tf_config["cluster"] == {"worker": ["127.0.0.1:1"]}  # the program's cluster, as it asked
    assert TaskContext.from_env({"TF_CONFIG": OWN}).name == "worker-0"  # without it (a JobSet pod): TF_CONFIG's
    assert TaskContext.from_env({"TF_CONFIG": OWN, env.TASK: "garbage"}).name == "worker-0"


def test_every_planned_task_carries_its_name():
    spec = JobSpec.create(workers=2, ps=1, strategy="parameter_server")
    addresses = {t: f"127.0.0.1:{3000 + i}" for i, t in enumerate(spec.tasks())}
    plan = make_plan(spec, addresses, run_id="r", run_dir=Path("/tmp/r"), health_address="h:1", token="t")
    assert {t.task.name: t.env[env.TASK] for t in plan.tasks} == {t.name: t.name for t in spec.tasks()}
