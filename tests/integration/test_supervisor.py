"""The supervisor with real processes (tiny programs, real runtime and gRPC, no TensorFlow)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator import api
from orchestrator.spec import JobSpec
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, all_pids, assert_no_process_left, wait_until

PROGRAM = [sys.executable, "-m", "tests.programs.task"]
COMMANDS = {"chief": PROGRAM, "worker": PROGRAM, "ps": PROGRAM}


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)


DEADLINE_S = 30.0
"""Every job of these tests ends within this: a wrong decision (a restart that never ends, a
success never seen) fails in seconds with its reason instead of at pytest's timeout."""


def launch(tmp_path: Path, spec: JobSpec, behaviors: dict[str, str], monkeypatch, **options):
    for key, value in behaviors.items():
        monkeypatch.setenv(key, value)
    if spec.supervision.deadline_s is None:
        spec = dataclasses.replace(spec, supervision=dataclasses.replace(spec.supervision, deadline_s=DEADLINE_S))
    job = api.prepare(spec, runs_dir=tmp_path, commands=COMMANDS, **options)
    result, summary = api.run(job)
    assert_no_process_left(all_pids(summary))
    assert json.loads((job.plan.run_dir / "summary.json").read_text())["status"] == summary["status"]
    return job, result, summary


def by_task(summary: dict) -> dict[str, dict]:
    return {t["task"]: t for t in summary["tasks"]}


def test_job_succeeds_when_every_worker_exits_0(tmp_path, monkeypatch):
    job, result, summary = launch(tmp_path, JobSpec.create(workers=2), {"TEST_BEHAVIOR": "succeed"}, monkeypatch)
    assert (result.exit_code, summary["status"]) == (0, "Succeeded")
    assert [t["state"] for t in summary["tasks"]] == ["Succeeded", "Succeeded"]
    assert summary["metrics"]["test_accuracy"] == pytest.approx(0.9)
    assert summary["root_cause"] is None
    for t in summary["tasks"]:
        assert Path(t["stdout"]).parent == job.plan.run_dir / "attempt-0" / t["task"].replace(":", "-")
        assert "behavior=succeed" in Path(t["stdout"]).read_text()
        assert t["last_heartbeat"]["phase"] == "done"


def test_servers_are_stopped_once_the_chief_succeeds(tmp_path, monkeypatch):
    spec = JobSpec.create(strategy="parameter_server", workers=1, ps=1)
    _, result, summary = launch(
        tmp_path, spec, {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_chief_0": "succeed-when-ready:2"}, monkeypatch
    )
    assert (result.exit_code, summary["status"]) == (0, "Succeeded")
    tasks = by_task(summary)
    assert tasks["chief:0"]["state"] == "Succeeded"
    for name in ("worker:0", "ps:0"):
        assert tasks[name]["state"] == "Stopped"
        assert tasks[name]["signal"] == "SIGTERM"
        assert "serves until stopped" in tasks[name]["reason"]


def test_a_task_exiting_3_fails_the_job_and_is_named(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=3)
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_worker_1": "exit:3"},
                                monkeypatch)
    assert (result.exit_code, summary["status"]) == (1, "Failed")
    root = summary["root_cause"]
    assert (root["task"], root["exit_code"], root["attempt"]) == ("worker:1", 3, 0)
    assert "about to exit" in root["stderr_tail"]
    assert "worker-1" in summary["reason"] and "exit code 3" in summary["reason"]
    states = {k: v["state"] for k, v in by_task(summary).items()}
    assert states == {"worker:0": "Stopped", "worker:1": "Failed", "worker:2": "Stopped"}


def test_an_uncaught_exception_becomes_the_root_cause_message(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=2)
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_worker_0": "raise"},
                                monkeypatch)
    assert result.exit_code == 1
    root = summary["root_cause"]
    assert root["task"] == "worker:0" and root["exit_code"] == 1
    assert root["message"] == "ValueError: boom from the test program"
    error = json.loads((Path(root["log_path"]).parent / "error.json").read_text())
    assert "Traceback" in error["traceback"] and error["timestamp"] > 0


def test_a_ps_that_exits_on_its_own_fails_the_job(tmp_path, monkeypatch):
    spec = JobSpec.create(strategy="parameter_server", workers=1, ps=1)
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_ps_0": "succeed"},
                                monkeypatch)
    assert result.exit_code == 1
    assert summary["root_cause"]["task"] == "ps:0"
    assert "serves until stopped" in summary["root_cause"]["message"]


def test_sigterm_is_followed_by_sigkill_and_children_of_a_task_die_too(tmp_path, monkeypatch):
    spec = JobSpec.create(strategy="parameter_server", workers=1, ps=1)
    behaviors = {"TEST_BEHAVIOR_chief_0": "succeed-when-ready:2", "TEST_BEHAVIOR_worker_0": "ignore-term",
                 "TEST_BEHAVIOR_ps_0": "spawn-child"}
    job, result, summary = launch(tmp_path, spec, behaviors, monkeypatch, stop_timeout_s=1.0)
    assert result.exit_code == 0
    tasks = by_task(summary)
    assert tasks["worker:0"]["signal"] == "SIGKILL"
    child = int((job.plan.run_dir / "attempt-0" / "ps-0" / "child.pid").read_text())
    assert_no_process_left([child])


def test_request_stop_stops_everything_with_exit_130(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_BEHAVIOR", "serve")
    job = api.prepare(JobSpec.create(workers=2), runs_dir=tmp_path, commands=COMMANDS)
    sup = job.supervisor

    errors: list[BaseException] = []

    def interrupt_when_running():
        try:
            wait_until(lambda: sup.state.value == "Running", 30, what="job running")
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
        finally:
            sup.request_stop("interrupted by SIGINT")  # never leave the job running

    thread = threading.Thread(target=interrupt_when_running)
    thread.start()
    result, summary = api.run(job)
    thread.join(5)
    assert not errors, errors
    assert (result.exit_code, summary["status"], summary["reason"]) == (130, "Interrupted", "interrupted by SIGINT")
    assert [t["state"] for t in summary["tasks"]] == ["Stopped", "Stopped"]
    assert_no_process_left([t["pid"] for t in summary["tasks"]])


def test_a_launchs_first_tasks_start_in_prepare_and_a_stop_before_the_run_still_stops_them(tmp_path, monkeypatch):
    """``prepare(start_early=True)`` (the CLI) starts the first tasks before the supervisor's modules are
    imported; ``run`` takes them over: a stop requested before it ends the job Interrupted with both
    tasks recorded as started and stopped, none left running."""
    monkeypatch.setenv("TEST_BEHAVIOR", "stall")  # runs until stopped
    job = api.prepare(JobSpec.create(workers=2), runs_dir=tmp_path, commands=COMMANDS, start_early=True)
    logs = [job.plan.run_dir / "attempt-0" / name / "stdout.log" for name in ("worker-0", "worker-1")]
    assert [log.exists() for log in logs] == [True, True]  # started by prepare
    job.supervisor.request_stop("interrupted by SIGINT")
    result, summary = api.run(job)
    assert (result.exit_code, summary["status"], summary["reason"]) == (130, "Interrupted", "interrupted by SIGINT")
    assert [(t["state"], bool(t["pid"])) for t in summary["tasks"]] == [("Stopped", True)] * 2
    assert_no_process_left([t["pid"] for t in summary["tasks"]])


DRIVER = """
import sys
from orchestrator import api
from orchestrator.spec import JobSpec
prog = [sys.executable, "-m", "tests.programs.task"]
job = api.prepare(JobSpec.create(workers=2), runs_dir=sys.argv[1], run_id="r", commands={"worker": prog})
api.run(job)
"""


def test_tasks_die_within_seconds_when_the_orchestrator_is_sigkilled(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TEST_BEHAVIOR": "serve"}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], cwd=REPO, env=env)
    try:
        plan = tmp_path / "r" / "plan.json"
        wait_until(plan.exists, 30, what="plan.json")

        def pids():
            found = []
            for task in ("worker-0", "worker-1"):
                out = tmp_path / "r" / "attempt-0" / task / "stdout.log"
                if out.exists() and "behavior=serve" in out.read_text():
                    found.append(task)
            return len(found) == 2

        wait_until(pids, 30, what="both tasks serving")
        import psutil

        children = [p.pid for p in psutil.Process(driver.pid).children()]
        assert len(children) == 2
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        assert_no_process_left(children, timeout_s=5.0)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)


# -- restart policies, hang detection, deadlines (issue #3) ----------------------------


def supervised(**fields) -> SupervisionSpec:
    fields.setdefault("backoff_s", 0.1)
    return SupervisionSpec.create(**fields)


def test_mwms_failure_restarts_the_whole_group_which_then_succeeds(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=2, supervision=supervised())
    behaviors = {"TEST_BEHAVIOR": "succeed", "TEST_BEHAVIOR_worker_0_0": "serve",
                 "TEST_BEHAVIOR_worker_1_0": "exit:137"}
    _, result, summary = launch(tmp_path, spec, behaviors, monkeypatch)
    assert result.exit_code == 0, summary["reason"]
    assert summary["restarts"] == 1
    (recovery,) = summary["recoveries"]
    assert (recovery["scope"], recovery["tasks"]) == ("group", ["worker-0", "worker-1"])
    assert "worker-1 (attempt 0) failed: exit code 137" in recovery["cause"]
    tasks = by_task(summary)
    assert [tasks[t]["attempts"] for t in ("worker:0", "worker:1")] == [2, 2]
    assert tasks["worker:0"]["earlier_attempts"][0]["state"] == "Stopped"
    assert tasks["worker:1"]["earlier_attempts"][0]["exit"] == "exit code 137"


def test_pss_worker_failure_restarts_that_worker_alone(tmp_path, monkeypatch):
    spec = JobSpec.create(strategy="parameter_server", workers=2, ps=1, supervision=supervised())
    behaviors = {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_worker_1_0": "exit:143",
                 "TEST_BEHAVIOR_chief_0": "succeed-when-ready:3"}  # worker-0, ps-0, worker-1 (attempt 1)
    _, result, summary = launch(tmp_path, spec, behaviors, monkeypatch)
    assert result.exit_code == 0, summary["reason"]
    (recovery,) = summary["recoveries"]
    assert (recovery["scope"], recovery["tasks"]) == ("task", ["worker-1"])
    assert 0 < recovery["detection_to_resumed_training_s"] < DEADLINE_S
    assert {t: v["restarts"] for t, v in by_task(summary).items()} == {"chief:0": 0, "worker:0": 0, "worker:1": 1,
                                                                       "ps:0": 0}


def test_exit_code_policy_treats_1_to_127_as_permanent(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=2, supervision=supervised())
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_worker_1": "exit:3"},
                                monkeypatch)
    assert result.exit_code == 1 and summary["restarts"] == 0
    assert "exit-code restart policy of worker does not retry exit code 3" in summary["reason"]


def test_on_failure_policy_retries_any_exit_code(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=1, supervision=supervised(restart_policy={"worker": "on-failure"}))
    behaviors = {"TEST_BEHAVIOR_worker_0_0": "exit:3", "TEST_BEHAVIOR_worker_0_1": "succeed"}
    _, result, summary = launch(tmp_path, spec, behaviors, monkeypatch)
    assert result.exit_code == 0 and summary["restarts"] == 1


def test_never_policy_fails_the_job_at_once_with_the_root_cause(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=2, supervision=supervised(restart_policy={"all": "never"}))
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_worker_1": "exit:137"},
                                monkeypatch)
    assert result.exit_code == 1 and summary["restarts"] == 0
    assert summary["root_cause"]["task"] == "worker:1" and summary["root_cause"]["exit_code"] == 137
    assert "never restart policy" in summary["reason"]


def test_restarts_exhausted_fail_the_job_naming_task_and_attempts(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=1, supervision=supervised(max_restarts=2))
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "exit:137"}, monkeypatch)
    assert result.exit_code == 1
    assert summary["restarts"] == 2
    assert "restarts exhausted: worker-0 failed on attempt 3 of 3" in summary["reason"]
    assert len(summary["failures"]) == 3
    assert summary["root_cause"]["attempt"] == 2  # the failure that ended the job; the others are history


def test_backoff_doubles_and_is_capped():
    s = SupervisionSpec.create(backoff_s=1.0, backoff_max_s=5.0)
    assert [s.backoff_for(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]


def test_a_stalled_task_is_dumped_killed_and_restarted(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=1, heartbeat_interval_s=0.2, supervision=supervised(stall_timeout_s=1.5))
    behaviors = {"TEST_BEHAVIOR_worker_0_0": "stall", "TEST_BEHAVIOR_worker_0_1": "succeed"}
    job, result, summary = launch(tmp_path, spec, behaviors, monkeypatch)
    assert result.exit_code == 0, summary["reason"]
    (failure,) = summary["failures"]
    assert failure["signal"] == "SIGKILL"
    assert "no training progress" in failure["message"] and "stall timeout 1.5 s" in failure["message"]
    stacks = job.plan.run_dir / "attempt-0" / "worker-0" / "stacks.txt"
    dump = stacks.read_text()
    # a user's program (here through execwrap): read from outside by py-spy, never signalled
    assert "Thread" in dump and "programs/task.py" in dump  # the frame the task is stuck in
    assert "SIGUSR1" not in failure["message"]


def test_a_frozen_task_is_caught_by_the_heartbeat_timeout_with_a_stack_dump(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=2, heartbeat_interval_s=0.2, supervision=supervised(heartbeat_timeout_s=1.0))
    behaviors = {"TEST_BEHAVIOR": "succeed", "TEST_BEHAVIOR_worker_0_0": "serve", "TEST_BEHAVIOR_worker_1_0": "freeze"}
    job, result, summary = launch(tmp_path, spec, behaviors, monkeypatch)
    assert result.exit_code == 0, summary["reason"]
    failure = summary["failures"][0]
    assert failure["task"] == "worker:1" and "no heartbeat for" in failure["message"]
    assert "programs/task.py" in (job.plan.run_dir / "attempt-0" / "worker-1" / "stacks.txt").read_text()


def test_a_peer_that_never_starts_is_caught_by_the_startup_deadline(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=2, supervision=supervised(startup_timeout_s=2.0, restart_policy={"all": "never"}))
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "serve", "TEST_BEHAVIOR_worker_1": "never-start"},
                                monkeypatch)
    assert result.exit_code == 1
    assert summary["root_cause"]["task"] == "worker:1"
    assert "not training or serving" in summary["root_cause"]["message"]


def test_the_job_deadline_fails_the_job_cleanly(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=2, supervision=supervised(deadline_s=2.0))
    _, result, summary = launch(tmp_path, spec, {"TEST_BEHAVIOR": "serve"}, monkeypatch)
    assert result.exit_code == 1
    assert summary["reason"] == "the job deadline of 2 s passed"
    assert [t["state"] for t in summary["tasks"]] == ["Stopped", "Stopped"]


def test_an_evaluator_failure_is_retried_and_never_fails_the_job(tmp_path, monkeypatch):
    spec = JobSpec.create(workers=1, evaluator=1, supervision=supervised(max_restarts=1))
    behaviors = {"TEST_BEHAVIOR_evaluator_0": "raise",  # fails on every attempt
                 "TEST_BEHAVIOR_worker_0": "succeed-when:attempt-*/evaluator-0/error.json:2"}
    for key, value in behaviors.items():
        monkeypatch.setenv(key, value)
    job = api.prepare(spec, runs_dir=tmp_path, commands={**COMMANDS, "evaluator": PROGRAM})
    result, summary = api.run(job)
    assert_no_process_left(all_pids(summary))
    assert result.exit_code == 0, summary["reason"]
    ev = by_task(summary)["evaluator:0"]
    assert ev["restarts"] == 1 and ev["earlier_attempts"][0]["state"] == "Failed"
    assert ev["state"] in ("Failed", "Stopped")  # its second failure may race the worker's success
    assert summary["restarts"] == 0  # the evaluator does not use up the training's restarts


# -- a user's program and the processes it starts (launch ... -- PROGRAM) ----------------


def test_background_children_of_a_users_program_die_with_the_task(tmp_path):
    pidfile = tmp_path / "child.pid"
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "launch", "--quiet", "--workers", "1",
         "--runs-dir", str(tmp_path / "runs"),
         "--", "sh", "-c", f"sleep 600 & echo $! > {pidfile}; exit 0"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert_no_process_left([int(pidfile.read_text())])


def test_a_users_program_and_its_children_die_when_the_orchestrator_is_sigkilled(tmp_path):
    import psutil

    pidfile = tmp_path / "child.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "launch", "--quiet", "--workers", "1",
         "--runs-dir", str(tmp_path / "runs"),
         "--", "sh", "-c", f"sleep 600 & echo $! > {pidfile}; wait"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 30, what="the program's child")
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert int(pidfile.read_text()) in tree and len(tree) >= 3  # execwrap, sh, sleep
        proc.kill()
        proc.wait(10)
        assert_no_process_left(tree, timeout_s=5.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_the_health_server_starts_once_every_task_has_and_a_failure_there_stops_them(tmp_path, monkeypatch):
    """A launch's tasks start before its health server (the CLI imports grpc after them): the
    port is held and nothing answers on it until then, and ``endpoint.json`` waits for the server.
    When the server cannot start, the run ends with that error and no task left running."""
    import socket

    monkeypatch.setenv("TEST_BEHAVIOR", "stall")  # runs until stopped
    job = api.prepare(JobSpec.create(workers=2), runs_dir=tmp_path, commands=COMMANDS)
    assert not job.endpoint_path.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(job.server.address.rsplit(":", 1)[1])), timeout=5).close()
    seen: dict[str, list[int]] = {}

    def cannot_start(timeout_s: float = 10.0):
        seen["pids"] = [rt.current.pid for rt in job.supervisor.tasks]
        raise RuntimeError("health server did not start (from the test)")

    monkeypatch.setattr(job.server, "start", cannot_start)
    with pytest.raises(RuntimeError, match="from the test"):
        api.run(job)
    assert len(seen["pids"]) == 2 and all(seen["pids"])  # both tasks had started first
    assert_no_process_left(seen["pids"])
    assert not job.endpoint_path.exists()
