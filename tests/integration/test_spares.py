"""Warm spares with real processes (no TensorFlow): a restart takes ready spares instead of new processes."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator import tls
from orchestrator.api import Job, run
from orchestrator.backends.base import SpareRequest
from orchestrator.backends.local import MAX_SPARE_DEATHS, LocalBackend
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.resources.cpus import plan_cpus
from orchestrator.resources.pinning import parse_cpus
from orchestrator.spec import JobSpec
from orchestrator.spec.model import TaskId
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import Supervisor
from tests.conftest import REPO, all_pids, assert_no_process_left, wait_until

PROGRAM = (sys.executable, "-m", "tests.programs.task")


def job_with_spares(tmp_path, spares: int | None) -> Job:
    """A job whose tasks run the tiny test program as if it were the built-in one (it reports
    heartbeats), so the supervisor keeps spares for it."""
    spec = JobSpec.create(workers=2, supervision=SupervisionSpec.create(deadline_s=30.0, spares=spares))
    backend = LocalBackend()
    store = HeartbeatStore()
    # mutual TLS as a launch has it: a spare that becomes a task streams with that task's certificate
    pki = tls.make_run_pki(tmp_path / "r", "r", tls.server_hosts("127.0.0.1"), ["worker-0", "worker-1"])
    server = HealthServer("t0ken", store, backend.release_port, tls=pki).start()
    plan = make_plan(spec, backend.allocate(spec), run_id="r", run_dir=tmp_path / "r", health_address=server.address,
                     token="t0ken", orchestrator_pid=os.getpid(), cpus=plan_cpus(spec), tls_dir=str(pki.folder))
    plan = dataclasses.replace(plan, tasks=tuple(dataclasses.replace(tp, argv=PROGRAM) for tp in plan.tasks))
    return Job(plan, Supervisor(plan, backend, store, stop_timeout_s=5.0), server, store)


def test_a_group_restart_takes_the_ready_spares(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    # attempt 0: worker-1 waits until two spares exist, then dies like a SIGKILLed task (137)
    monkeypatch.setenv("TEST_BEHAVIOR_worker_0_0", "serve")
    monkeypatch.setenv("TEST_BEHAVIOR_worker_1_0", "exit-when:spares/spare-*.ready:2:137")
    monkeypatch.setenv("TEST_BEHAVIOR", "succeed")
    job = job_with_spares(tmp_path, spares=None)  # default: the MWMS group, 2
    result, summary = run(job)
    spare_pids = [s["pid"] for s in summary["spares"]]
    assert_no_process_left(all_pids(summary) + spare_pids)
    assert result.exit_code == 0, summary["reason"]
    used = {s["task"]: s["pid"] for s in summary["spares"] if s["state"] == "used"}
    assert sorted(used) == ["worker-0", "worker-1"]
    tasks = {t["task"]: t for t in summary["tasks"]}
    assert {name: tasks[name.replace("-", ":")]["pid"] for name in used} == used  # attempt 1 ran in the spares
    assert all(t["attempts"] == 2 for t in tasks.values())
    out = (job.plan.run_dir / "attempt-1" / "worker-1" / "stdout.log").read_text()
    assert "worker-1 behavior=succeed" in out  # the spare became worker-1, attempt 1, and logged where it should
    # it runs the task at normal priority (its imports ran at SCHED_IDLE in another thread) on the task's cores
    assert f"policy={os.SCHED_OTHER}" in out
    planned = job.plan.task_plan(TaskId("worker", 1)).env.get("ORCH_CPUS")
    if planned:
        assert f"cpus={','.join(map(str, parse_cpus(planned)))} " in out
    assert json.loads((job.plan.run_dir / "summary.json").read_text())["spares"] == summary["spares"]
    assert job.store.get(TaskId("worker", 1), 1) is not None  # the spare's heartbeats came in over mutual TLS


def test_spares_zero_starts_none_and_unused_spares_are_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TEST_BEHAVIOR", "succeed")
    result, summary = run(job_with_spares(tmp_path / "none", spares=0))
    assert result.exit_code == 0 and summary["spares"] == []
    monkeypatch.setenv("TEST_BEHAVIOR_worker_0", "succeed-when:spares/spare-*.log:1")
    monkeypatch.setenv("TEST_BEHAVIOR_worker_1", "succeed-when:spares/spare-*.log:1")
    result, summary = run(job_with_spares(tmp_path / "one", spares=1))
    assert result.exit_code == 0, summary["reason"]
    assert [s["state"] for s in summary["spares"]] == ["stopped"]
    assert_no_process_left([s["pid"] for s in summary["spares"]])


def test_spares_that_end_before_they_are_used_are_not_started_again_forever(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    backend = LocalBackend()
    # every spare dies of its import at once; the supervisor asks for one spare on every tick
    request = SpareRequest(1, PROGRAM, {}, ("no_such_module_for_a_spare",), tmp_path / "spares")
    try:
        for _ in range(MAX_SPARE_DEATHS + 3):
            backend.keep_spares(request)
            for spare in backend.spares():
                psutil.Process(spare.pid).wait(timeout=60) if psutil.pid_exists(spare.pid) else None
        states = [s.state for s in backend.spares()]
    finally:
        backend.close()
    assert states == ["died"] * MAX_SPARE_DEATHS
    assert "No module named 'no_such_module_for_a_spare'" in (tmp_path / "spares" / "spare-0.log").read_text()


PARENT = """
import os, sys, time
from pathlib import Path
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.base import SpareRequest
b = LocalBackend()
b.keep_spares(SpareRequest(1, (sys.executable, "-m", "tests.programs.task"),
                           {"ORCH_ORCHESTRATOR_PID": str(os.getpid())}, ("tests.programs.slow_import",),
                           Path(sys.argv[1])))
print(b.spares()[0].pid, flush=True)
time.sleep(60)
"""


def test_a_spare_still_importing_dies_with_the_orchestrator(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        spare = int(parent.stdout.readline())
        parent.kill()  # SIGKILL: no cleanup runs; the spare is in its 30 s import
        parent.wait(10)
        assert_no_process_left([spare], timeout_s=5.0)
    finally:
        if parent.poll() is None:
            parent.kill()


# -- a user's program (``--spares N -- python script.py``): execwrap's spare mode, no TensorFlow -------

USER_SCRIPT = """
import json, os, signal, sys, time
print("program " + json.dumps({"argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0],
      "ppid": os.getppid(), "var": os.environ.get("MY_VAR"), "spare_env": sorted(k for k in os.environ if "SPARE" in k),
      "preloaded": "tests.programs.tiny_preload" in sys.modules}), flush=True)
if sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
if sys.argv[1] == "raise":
    raise ValueError("boom")
signal.signal(signal.SIGTERM, lambda *_: print("got SIGTERM, ignored", flush=True))  # like TF's preemption notifier
for _ in range(600):
    time.sleep(0.1)
"""


def _user_spare(tmp_path: Path, preload: tuple[str, ...], *args: str, pid: int | None = None):
    """A SpareRequest for ``python tmp_path/train.py ARGS`` as the supervisor builds it (plan.user_spare)."""
    from orchestrator.backends.base import SpareRequest
    from orchestrator.plan import user_spare

    script = tmp_path / "train.py"
    script.write_text(USER_SCRIPT)
    argv = (sys.executable, "-m", "orchestrator.task.execwrap", "--", sys.executable, str(script), *args)
    command, _ = user_spare(argv, {})
    return SpareRequest(1, argv, {"ORCH_ORCHESTRATOR_PID": str(pid or os.getpid())}, preload,
                        tmp_path / "spares", command=command)


def _ready(log_dir: Path) -> bool:
    return any(": ready" in p.read_text() for p in log_dir.glob("spare-*.log"))


def _interpreter(wrapper: int) -> int:
    """The pid of the interpreter a user's spare wrapper started (its one child)."""
    children = wait_until(lambda: psutil.Process(wrapper).children(), 30, what="the spare's interpreter")
    return children[0].pid


def _become(backend, request, tmp_path: Path, **env: str):
    """Hand the ready spare a task attempt, as the supervisor's restart does."""
    from orchestrator.backends.base import LaunchRequest
    from orchestrator.spec import TaskId

    log_dir = tmp_path / "attempt-1" / "worker-0"
    full_env = {"ORCH_TASK_DIR": str(log_dir), "ORCH_ATTEMPT": "1", "TF_CONFIG": "{}", **env}
    handle = backend.start(LaunchRequest(TaskId("worker", 0), 1, request.argv, full_env, log_dir, runtime=False))
    program = wait_until(lambda: re.search(r"^program (\{.*\})$", (log_dir / "stdout.log").read_text(), re.M), 30,
                         what="the program's first line")
    return handle, json.loads(program[1]), log_dir


def _policies(pid: int) -> dict[int, int]:
    """Thread id -> scheduling policy of every thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = os.sched_getscheduler(int(tid))
        except OSError:
            continue
    return out


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_a_spare_imports_at_sched_idle_and_gets_no_task_before_its_imports_are_done(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    backend = LocalBackend()
    request = _user_spare(tmp_path, ("tests.programs.slow_import",), "serve")  # a 30 s import
    handle = None
    try:
        backend.keep_spares(request)
        (spare,) = backend.spares()
        interpreter = _interpreter(spare.pid)
        policies = wait_until(lambda: (p := _policies(interpreter)) and os.SCHED_IDLE in p.values() and p, 30,
                              what="the spare's importing thread")
        assert policies[interpreter] == os.SCHED_OTHER  # the main thread, which will run the task, is not lowered
        handle, program, _ = _become(backend, request, tmp_path)
        # still importing: the task starts cold instead of waiting on a starved import
        assert handle.pid != spare.pid and program["preloaded"] is False
        assert backend.spares()[0].state == "ready" and not (request.log_dir / "spare-0.ready").exists()
    finally:
        if handle is not None:
            backend.stop([handle], timeout_s=5.0)
        backend.close()
    assert_no_process_left([spare.pid, interpreter])


def test_a_users_program_runs_in_its_spare_as_python_would_run_it_and_keeps_execwraps_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    backend = LocalBackend()
    request = _user_spare(tmp_path, ("tests.programs.tiny_preload",), "serve", "--flag")
    handle = None
    try:
        backend.keep_spares(request)
        (spare,) = backend.spares()
        interpreter = _interpreter(spare.pid)
        wait_until(lambda: _ready(request.log_dir), 30, what="the spare to be ready")
        handle, program, log_dir = _become(backend, request, tmp_path, MY_VAR="from the assignment")
        assert handle.pid == spare.pid and backend.spares()[0].state == "used"
        assert program == {"argv": [str(tmp_path / "train.py"), "serve", "--flag"], "name": "__main__",
                           "file": str(tmp_path / "train.py"), "path0": str(tmp_path), "ppid": spare.pid,
                           "var": "from the assignment", "spare_env": [], "preloaded": True}
        # a SIGTERM from outside (a preemption) reaches the program untouched: it ignores it and lives on
        backend.signal(handle, signal.SIGTERM)
        wait_until(lambda: "got SIGTERM, ignored" in (log_dir / "stdout.log").read_text(), 10,
                   what="the program's handler")
        time.sleep(1.5)  # longer than execwrap's grace
        assert backend.poll(handle) is None
        # the orchestrator's own stop (stop-requested marker): SIGKILL after execwrap's 1 s grace, not --stop-timeout
        started = time.monotonic()
        backend.stop([handle], timeout_s=30.0)
        stopped_s = time.monotonic() - started
        assert stopped_s < 5.0 and backend.poll(handle) == -signal.SIGKILL
        assert_no_process_left([spare.pid, interpreter])
    finally:
        if handle is not None:
            backend.stop([handle], timeout_s=1.0)
        backend.close()
    assert os.path.exists(log_dir / "stop-requested")


def test_a_users_spare_exits_as_the_program_does_and_fires_time_faults_from_outside(tmp_path, monkeypatch):
    from orchestrator.spec.faults import Fault, encode

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    for args, env, code in ((("exit", "3"), {}, 3), (("raise",), {}, 1),
                            (("serve",),
                             {"ORCH_FAULTS": encode([dataclasses.replace(Fault.parse("worker:0:exit=7@time=0.5"),
                                                                         attempt=1)])},
                             7)):
        backend = LocalBackend()
        request = _user_spare(tmp_path, (), *args)
        try:
            backend.keep_spares(request)
            # the lambda is called within this iteration, so the loop variable cannot go stale
            wait_until(lambda: _ready(request.log_dir), 30, what="the spare to be ready")  # noqa: B023
            handle, _, log_dir = _become(backend, request, tmp_path, **env)
            assert backend.wait(handle, 20.0) == code
        finally:
            backend.close()
        if env:
            assert "injecting fault: exit at time=0.5" in (log_dir / "stdout.log").read_text()
        if args == ("raise",):  # the traceback `python train.py` prints: from the script, no spare frames
            lines = (log_dir / "stderr.log").read_text().splitlines()
            assert lines[:2] == ["Traceback (most recent call last):",
                                 f'  File "{tmp_path / "train.py"}", line 9, in <module>']
            assert lines[-1] == "ValueError: boom"
        for old in (tmp_path / "spares", tmp_path / "attempt-1"):
            shutil.rmtree(old)


def test_a_users_spare_runs_the_program_only_once_the_tasks_port_is_free(tmp_path, monkeypatch):
    # the previous attempt, SIGKILLed a moment ago, may still hold the port: a spare's program would
    # bind it at once and fail ("Could not start gRPC server"), where a cold start imports TensorFlow first
    import socket

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    old_attempt = socket.socket()
    old_attempt.bind(("127.0.0.1", 0))
    old_attempt.listen(1)
    port = old_attempt.getsockname()[1]
    tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0}})
    backend = LocalBackend()
    request = _user_spare(tmp_path, (), "serve")
    handle = None
    try:
        backend.keep_spares(request)
        wait_until(lambda: _ready(request.log_dir), 30, what="the spare to be ready")
        log_dir = tmp_path / "attempt-1" / "worker-0"
        from orchestrator.backends.base import LaunchRequest
        from orchestrator.spec import TaskId

        handle = backend.start(LaunchRequest(TaskId("worker", 0), 1, request.argv, {"ORCH_TASK_DIR": str(log_dir),
                                             "ORCH_ATTEMPT": "1", "TF_CONFIG": tf_config}, log_dir, runtime=False))
        time.sleep(1.5)
        assert "program" not in (log_dir / "stdout.log").read_text()  # waits while the port is held
        old_attempt.close()
        wait_until(lambda: "program" in (log_dir / "stdout.log").read_text(), 10, what="the program to start")
        interpreter = _interpreter(handle.pid)
        backend.stop([handle], timeout_s=5.0)
        assert_no_process_left([handle.pid, interpreter])
    finally:
        old_attempt.close()
        if handle is not None:
            backend.stop([handle], timeout_s=1.0)
        backend.close()


def test_a_users_spare_ends_at_the_end_of_its_stdin_leaving_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    request = _user_spare(tmp_path, ())
    wrapper = subprocess.Popen(request.command, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, **request.env}, start_new_session=True)
    try:
        interpreter = _interpreter(wrapper.pid)
        assert ": ready" in wrapper.stdout.readline()
        wrapper.stdin.close()  # the job ended: no assignment
        assert wrapper.wait(10) == 0
        assert_no_process_left([wrapper.pid, interpreter])
    finally:
        if wrapper.poll() is None:
            wrapper.kill()


USER_PARENT = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, os.getcwd())
from orchestrator.backends.local import LocalBackend
from tests.integration.test_spares import _user_spare
b = LocalBackend()
b.keep_spares(_user_spare(Path(sys.argv[1]), tuple(filter(None, [sys.argv[2]])), pid=os.getpid()))
print(b.spares()[0].pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("preload", ["tests.programs.slow_import", ""], ids=["importing", "ready"])
def test_a_users_spare_leaves_no_process_behind_when_the_orchestrator_is_sigkilled(tmp_path, preload):
    parent = subprocess.Popen([sys.executable, "-c", USER_PARENT, str(tmp_path), preload], cwd=REPO,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        wrapper = int(parent.stdout.readline())
        interpreter = _interpreter(wrapper)
        if not preload:
            wait_until(lambda: _ready(tmp_path / "spares"), 30, what="the spare to be ready")
        parent.kill()  # SIGKILL: no cleanup runs
        parent.wait(10)
        assert_no_process_left([wrapper, interpreter], timeout_s=5.0)
    finally:
        if parent.poll() is None:
            parent.kill()
