"""A user's own program (``launch ... -- PROGRAM``) under supervision: tiny Python programs, no
TensorFlow, run through ``execwrap`` as any user's program is; the reporting client, prompt stops,
and injected faults fired from outside the program."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import api, env
from orchestrator.spec import JobSpec
from orchestrator.spec.faults import Fault
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, all_pids, assert_no_process_left, wait_until

DEADLINE_S = 20.0
"""Every job here ends within this: a wrong behaviour fails in seconds, not at pytest's timeout."""


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)


def launch(tmp_path: Path, source: str, *, workers: int = 1, faults=(), **supervision):
    supervision.setdefault("backoff_s", 0.1)
    supervision.setdefault("deadline_s", DEADLINE_S)
    spec = JobSpec.create(workers=workers, heartbeat_interval_s=0.2)
    spec = dataclasses.replace(spec, supervision=SupervisionSpec.create(**supervision))
    program = [sys.executable, "-c", source]
    job = api.prepare(spec, runs_dir=tmp_path, commands={"worker": program}, faults=list(faults))
    started = time.monotonic()
    result, summary = api.run(job)
    elapsed_s = time.monotonic() - started
    assert_no_process_left(all_pids(summary))
    return job, result, summary, elapsed_s


def log(job, task: str, name: str, attempt: int = 0) -> str:
    return (job.plan.run_dir / f"attempt-{attempt}" / task / name).read_text()


# -- the reporting client -------------------------------------------------------------------


EXITS_AT_ONCE = """
import logging, sys, threading
refused = threading.Event()
class Seen(logging.Handler):
    def emit(self, record):
        print(record.getMessage(), file=sys.stderr, flush=True)
        refused.set()
logger = logging.getLogger("orchestrator.task.reporter")
logger.addHandler(Seen()); logger.setLevel(logging.DEBUG)
from orchestrator.client import report
report(step=7)
refused.wait(20)  # its first heartbeat was refused: the health server does not serve yet
print("reported; exiting", file=sys.stderr, flush=True)
"""


def test_a_report_before_the_health_server_serves_is_not_lost_when_the_program_exits_at_once(tmp_path, monkeypatch):
    """A launch's tasks start before its health server serves (it imports grpc, the CLI its supervisor, after them):
    a program that reports and exits at once keeps trying its last heartbeat until the server serves (within the
    client's close timeout) instead of dropping it at the first refusal while closing."""
    spec = JobSpec.create(workers=1, heartbeat_interval_s=0.2)
    job = api.prepare(spec, runs_dir=tmp_path, commands={"worker": [sys.executable, "-c", EXITS_AT_ONCE]})
    stderr = job.plan.run_dir / "attempt-0" / "worker-0" / "stderr.log"
    start = job.server.start

    def refused_while_exiting() -> bool:  # a heartbeat refused after the program was done: it is closing
        text = stderr.read_text() if stderr.exists() else ""
        return "reported; exiting" in text and "heartbeat stream broke" in text.split("reported; exiting", 1)[1]

    def serve_once_it_is_exiting(*args, **kwargs):
        wait_until(refused_while_exiting, 20, what="a heartbeat refused while the program exits")
        return start(*args, **kwargs)

    monkeypatch.setattr(job.server, "start", serve_once_it_is_exiting)
    result, summary = api.run(job)
    assert_no_process_left(all_pids(summary))
    assert (result.exit_code, summary["tasks"][0]["last_heartbeat"]["step"]) == (0, 7), stderr.read_text()


def test_a_program_that_imports_the_client_and_hangs_is_caught_by_the_startup_timeout(tmp_path):
    source = "import time, orchestrator.client; time.sleep(60)"  # e.g. stuck creating its strategy
    _, result, summary, elapsed_s = launch(tmp_path, source, startup_timeout_s=2.0, restart_policy={"all": "never"})
    assert result.exit_code == 1
    assert "not training or serving" in summary["root_cause"]["message"], summary["reason"]
    assert summary["tasks"][0]["last_heartbeat"]["phase"] == "initializing"
    assert elapsed_s < 10


def test_a_program_that_hangs_after_its_first_report_is_caught_as_a_stall(tmp_path):
    # past its first step (step 0 -> 1): a first step is judged by the startup timeout (test_training_health)
    source = "import time; from orchestrator.client import report; report(step=0); report(step=1); time.sleep(60)"
    _, result, summary, elapsed_s = launch(tmp_path, source, stall_timeout_s=1.5, restart_policy={"all": "never"})
    assert result.exit_code == 1
    assert "no training progress" in summary["root_cause"]["message"], summary["reason"]
    assert elapsed_s < 10


def test_training_finished_reports_phase_finishing_with_final_metrics(tmp_path):
    source = ("import time; from orchestrator.client import report, training_finished\n"
              "for step in range(1, 4): report(step=step, loss=1.0 / step)\n"
              "training_finished(step=3, loss=0.3, accuracy=0.9); time.sleep(0.5)")
    _, result, summary, _ = launch(tmp_path, source)
    assert result.exit_code == 0, summary["reason"]
    heartbeat = summary["tasks"][0]["last_heartbeat"]
    assert heartbeat["phase"] == "finishing" and heartbeat["step"] == 3
    assert summary["metrics"]["accuracy"] == pytest.approx(0.9)


def test_a_program_whose_interpreter_takes_long_to_exit_is_not_hung_on_its_way_out(tmp_path):
    # the handler registered first runs last (atexit is LIFO): after the client's last heartbeat,
    # a teardown longer than the heartbeat timeout (TensorFlow's can take seconds on a busy machine)
    source = ("import atexit, time; atexit.register(time.sleep, 2.5)\n"
              "from orchestrator.client import report, training_finished\n"
              "report(step=1); training_finished(step=1)")
    _, result, summary, _ = launch(tmp_path, source, heartbeat_timeout_s=1.0, restart_policy={"all": "never"})
    assert result.exit_code == 0, summary["reason"]
    assert summary["tasks"][0]["last_heartbeat"]["phase"] == "finishing"


def test_importing_the_client_outside_a_task_starts_nothing():
    code = ("import sys, orchestrator.client as c; c.report(step=1); c.training_finished(); "
            "print(sorted(m for m in ('grpc', 'psutil', 'tensorflow') if m in sys.modules))")
    environ = {k: v for k, v in os.environ.items() if k not in (env.HEALTH_ADDRESS, "TF_CONFIG")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


# -- stops ------------------------------------------------------------------------------------


IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
"""Stands in for TensorFlow's preemption notifier, which catches SIGTERM in an MWMS program."""


def test_the_orchestrators_own_stop_of_a_program_ignoring_sigterm_is_prompt(tmp_path):
    job = api.prepare(
        dataclasses.replace(JobSpec.create(workers=2), supervision=SupervisionSpec.create(deadline_s=2.0)),
        runs_dir=tmp_path, commands={"worker": [sys.executable, "-c", IGNORES_SIGTERM]}, stop_timeout_s=20.0,
    )
    started = time.monotonic()
    result, summary = api.run(job)
    elapsed_s = time.monotonic() - started
    assert_no_process_left(all_pids(summary))
    assert summary["reason"] == "the job deadline of 2 s passed"
    assert [t["state"] for t in summary["tasks"]] == ["Stopped", "Stopped"]
    assert elapsed_s < 10, f"the stop waited {elapsed_s:.1f} s: the stop timeout, not the wrapper's grace"
    assert (job.plan.run_dir / "attempt-0" / "worker-0" / env.STOP_REQUESTED_FILE).exists()


def _execwrap(tmp_path: Path, source: str) -> subprocess.Popen:
    environ = {**os.environ, "PYTHONPATH": str(REPO), env.ORCHESTRATOR_PID: str(os.getpid()),
               env.TASK_DIR: str(tmp_path)}
    environ.pop("ORCH_FAULTS", None)
    return subprocess.Popen([sys.executable, "-m", "orchestrator.task.execwrap", "--", sys.executable, "-c", source],
                            cwd=REPO, env=environ, start_new_session=True)


def test_an_external_sigterm_reaches_the_program_untouched(tmp_path):
    ready = tmp_path / "ready"
    source = (f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              f"open({str(ready)!r}, 'w'); time.sleep(60)")
    wrapper = _execwrap(tmp_path, source)
    try:
        wait_until(ready.exists, 30, what="the program to start")
        os.killpg(wrapper.pid, signal.SIGTERM)  # a preemption: no stop-requested marker
        time.sleep(2.5)  # longer than the wrapper's grace
        assert wrapper.poll() is None, "the wrapper killed a program on an external SIGTERM"
        (tmp_path / env.STOP_REQUESTED_FILE).touch()  # now the orchestrator stops it
        os.killpg(wrapper.pid, signal.SIGTERM)
        assert wrapper.wait(timeout=5) == -signal.SIGKILL
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
            wrapper.wait(10)


def test_an_external_sigterm_ends_a_program_that_does_not_catch_it(tmp_path):
    ready = tmp_path / "ready"
    wrapper = _execwrap(tmp_path, f"import time; open({str(ready)!r}, 'w'); time.sleep(60)")
    try:
        wait_until(ready.exists, 30, what="the program to start")
        os.killpg(wrapper.pid, signal.SIGTERM)
        assert wrapper.wait(timeout=5) == -signal.SIGTERM  # the program's own death, as before
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
            wrapper.wait(10)


# -- injected faults ----------------------------------------------------------------------------


def test_a_time_kill_fault_fires_on_a_users_program_and_the_group_restarts(tmp_path):
    faults = [Fault.parse("worker:1:kill@time=2")]
    job, result, summary, elapsed_s = launch(tmp_path, "import time; time.sleep(5)", workers=2, faults=faults)
    assert result.exit_code == 0, summary["reason"]
    (failure,) = summary["failures"]
    assert failure["task"] == "worker:1" and failure["signal"] == "SIGKILL"
    assert summary["restarts"] == 1
    line = next(x for x in log(job, "worker-1", "stdout.log").splitlines() if x.startswith("injecting fault:"))
    assert line.startswith("injecting fault: kill at time=2 (unix ")
    assert line in log(job, "worker-1", "stderr.log")
    assert "injecting fault" not in log(job, "worker-1", "stdout.log", attempt=1)  # attempt 1 runs clean


def test_a_time_exit_fault_exits_with_its_code(tmp_path):
    faults = [Fault.parse("worker:0:exit=3@time=1")]
    job, result, summary, elapsed_s = launch(tmp_path, "import time; time.sleep(30)", faults=faults)
    assert result.exit_code == 1
    root = summary["root_cause"]
    assert (root["task"], root["exit_code"]) == ("worker:0", 3)
    assert "injecting fault: exit at time=1 (unix " in log(job, "worker-0", "stdout.log")
    assert elapsed_s < 10


def test_a_time_stop_fault_freezes_a_reporting_program_until_the_heartbeat_timeout(tmp_path):
    faults = [Fault.parse("worker:0:stop@time=1")]
    source = ("import time; from orchestrator.client import report\n"
              "for step in range(100): report(step=step); time.sleep(0.1)")
    job, result, summary, _ = launch(tmp_path, source, faults=faults, heartbeat_timeout_s=1.5,
                                     restart_policy={"all": "never"})
    assert result.exit_code == 1
    assert "no heartbeat for" in summary["root_cause"]["message"], summary["reason"]
    assert "injecting fault: stop at time=1 (unix " in log(job, "worker-0", "stdout.log")


@pytest.mark.parametrize("kind, expect", [("kill", "SIGKILL"), ("raise", "InjectedFault: injected fault at step=3")])
def test_a_step_fault_fires_through_report(tmp_path, kind, expect):
    faults = [Fault.parse(f"worker:0:{kind}@step=3")]
    source = ("import time; from orchestrator.client import report\n"
              "for step in range(1, 100): report(step=step); time.sleep(0.05)")
    job, result, summary, _ = launch(tmp_path, source, faults=faults, restart_policy={"all": "never"})
    assert result.exit_code == 1
    root = summary["root_cause"]
    assert root["task"] == "worker:0"
    assert expect == root.get("signal") or expect in root["stderr_tail"], root
    assert f"injecting fault: {kind} at step=3 (unix " in log(job, "worker-0", "stderr.log")
    assert json.loads((job.plan.run_dir / "summary.json").read_text())["status"] == "Failed"
