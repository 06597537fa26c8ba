"""A JobSet pod computes its own TF_CONFIG (orchestrator.task.jobset): the pure function, and its wiring
into every task entrypoint (run_task: ``python -m worker`` / ``python -m ps``; execwrap: a user's program)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator import env
from orchestrator.task.jobset import ensure_tf_config, pod_hostname, tf_config_from_jobset
from tests.conftest import REPO, test_env

COUNTS = {"chief": 1, "worker": 3, "ps": 2, "evaluator": 1}


def jobset_env(task_type: str = "worker", index: int = 1, **extra: str) -> dict[str, str]:
    """What a pod of ``render --format jobset`` named ``digits`` sees (labels resolved as the controller sets them)."""
    environ = {
        env.JOBSET_NAME: "digits",
        env.JOBSET_REPLICATED_JOB: task_type,
        env.JOBSET_JOB_INDEX: "0",
        env.JOB_COMPLETION_INDEX: str(index),
        env.JOBSET_CLUSTER: json.dumps(COUNTS),
        env.JOBSET_SUBDOMAIN: "digits",
        env.JOBSET_PORT: "2222",
        env.JOBSET_PEER_WAIT_S: "0",  # these names resolve nowhere but in the set (test_jobset_peer_wait.py)
    }
    environ.update(extra)
    return environ


def test_every_pod_gets_the_same_cluster_of_stable_hostnames_and_its_own_task():
    configs = {(t, i): tf_config_from_jobset(jobset_env(t, i)) for t, n in COUNTS.items() for i in range(n)}
    expected_cluster = {
        "chief": ["digits-chief-0-0.digits:2222"],
        "worker": [f"digits-worker-0-{i}.digits:2222" for i in range(3)],
        "ps": ["digits-ps-0-0.digits:2222", "digits-ps-0-1.digits:2222"],
    }  # the evaluator is never in the training cluster (tensorflow#46169)
    for (task_type, index), config in configs.items():
        assert config == {"cluster": expected_cluster, "task": {"type": task_type, "index": index}, "rpc_layer": "grpc"}
    assert pod_hostname("digits", "ps", 0, 1, "digits") == "digits-ps-0-1.digits"


def test_defaults_subdomain_is_the_jobset_name_and_port_2222():
    environ = jobset_env("chief", 0)
    del environ[env.JOBSET_SUBDOMAIN], environ[env.JOBSET_PORT], environ[env.JOBSET_JOB_INDEX]
    assert tf_config_from_jobset(environ)["cluster"]["chief"] == ["digits-chief-0-0.digits:2222"]


def test_other_subdomain_and_port_are_used():
    config = tf_config_from_jobset(jobset_env("ps", 1, **{env.JOBSET_SUBDOMAIN: "net", env.JOBSET_PORT: "5000"}))
    assert config["cluster"]["ps"][1] == "digits-ps-0-1.net:5000"


def test_not_a_jobset_pod_gives_none():
    assert tf_config_from_jobset({}) is None
    assert tf_config_from_jobset({"TF_CONFIG": "{}", "JOB_COMPLETION_INDEX": "0"}) is None


@pytest.mark.parametrize("change, variable", [
    ({env.JOBSET_REPLICATED_JOB: "master"}, env.JOBSET_REPLICATED_JOB),      # TF1 name, not a task type
    ({env.JOBSET_REPLICATED_JOB: ""}, env.JOBSET_REPLICATED_JOB),
    ({env.JOB_COMPLETION_INDEX: None}, env.JOB_COMPLETION_INDEX),            # a NonIndexed Job
    ({env.JOB_COMPLETION_INDEX: "3"}, env.JOB_COMPLETION_INDEX),             # 3 workers: 0..2
    ({env.JOB_COMPLETION_INDEX: "one"}, env.JOB_COMPLETION_INDEX),
    ({env.JOB_COMPLETION_INDEX: "-1"}, env.JOB_COMPLETION_INDEX),
    ({env.JOBSET_JOB_INDEX: "1"}, env.JOBSET_JOB_INDEX),                     # replicas > 1
    ({env.JOBSET_CLUSTER: None}, env.JOBSET_CLUSTER),
    ({env.JOBSET_CLUSTER: "worker=3"}, env.JOBSET_CLUSTER),
    ({env.JOBSET_CLUSTER: '{"worker": "3"}'}, env.JOBSET_CLUSTER),
    ({env.JOBSET_CLUSTER: '{"master": 1, "worker": 3}'}, env.JOBSET_CLUSTER),
    ({env.JOBSET_PORT: "70000"}, env.JOBSET_PORT),
    ({env.JOBSET_PORT: "http"}, env.JOBSET_PORT),
])
def test_an_inconsistent_jobset_environment_is_an_error_naming_the_variable(change, variable):
    environ = jobset_env("worker", 1)
    for k, v in change.items():
        if v is None:
            environ.pop(k)
        else:
            environ[k] = v
    with pytest.raises(ValueError) as info:
        tf_config_from_jobset(environ)
    assert str(info.value).startswith(variable) and "\n" not in str(info.value)


def test_ensure_sets_tf_config_only_when_absent():
    environ = jobset_env("worker", 2)
    assert ensure_tf_config(environ) is True
    assert json.loads(environ["TF_CONFIG"])["task"] == {"type": "worker", "index": 2}
    given = {"TF_CONFIG": '{"task": {"type": "worker", "index": 0}}', **jobset_env("worker", 2)}
    assert ensure_tf_config(given) is False and given["TF_CONFIG"].endswith('"index": 0}}')  # never overridden
    plain: dict[str, str] = {}
    assert ensure_tf_config(plain) is False and "TF_CONFIG" not in plain


def _run(code_or_argv, environ: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in test_env().items() if k != "TF_CONFIG" and not k.startswith(("ORCH_", "JOB"))}
    argv = [sys.executable, "-c", code_or_argv] if isinstance(code_or_argv, str) else code_or_argv
    return subprocess.run(argv, env={**base, **environ}, cwd=REPO, capture_output=True, text=True, timeout=60)


RUN_TASK = ("import sys; from orchestrator.task.runtime import run_task; "
            "sys.exit(run_task(lambda c, r: print(c.task_type, c.task_index, c.attempt, c.is_chief, "
            "c.tf_config['cluster']['worker'][2])))")


def test_run_task_the_frame_of_python_m_worker_and_ps_computes_tf_config_in_a_jobset_pod():
    result = _run(RUN_TASK, {**jobset_env("ps", 1), env.ATTEMPT: "2"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ps", "1", "2", "False", "digits-worker-0-2.digits:2222"]


def test_run_task_with_a_bad_jobset_environment_exits_2_with_one_line():
    result = _run(RUN_TASK, jobset_env("worker", 7))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: JOB_COMPLETION_INDEX=7 is out of range: ORCH_JOBSET_CLUSTER has 3 worker task(s)"]


def test_execwrap_gives_a_users_program_the_computed_tf_config():
    program = [sys.executable, "-c", "import os; print(os.environ['TF_CONFIG'])"]
    result = _run([sys.executable, "-m", "orchestrator.task.execwrap", "--", *program], jobset_env("chief", 0))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == tf_config_from_jobset(jobset_env("chief", 0))
    bad = _run([sys.executable, "-m", "orchestrator.task.execwrap", "--", *program],
               jobset_env("chief", 0, **{env.JOBSET_REPLICATED_JOB: "launcher"}))
    assert bad.returncode == 2 and bad.stderr.startswith("error: JOBSET_REPLICATED_JOB_NAME='launcher'")
