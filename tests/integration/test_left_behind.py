"""Nothing a task started outlives the task (issue 21, item 1): a user's program that starts a
daemon in its own session (``start_new_session=True``), run as a user runs it
(``python -m orchestrator launch ... -- python tests/programs/user_daemon.py``). The wrapper is a
child subreaper, so the orphaned daemon stays its descendant; it is ended when the program exits
and when the job is stopped, and the report and ``summary.json`` count it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from orchestrator import env
from tests.conftest import REPO, alive, all_pids, assert_no_process_left, orchestrator_cmd, test_env, wait_until

LAUNCH_TIMEOUT_S = 60


def _launch(tmp_path: Path, run_id: str, mode: str) -> subprocess.Popen:
    return subprocess.Popen(orchestrator_cmd("launch", "--workers", "1", "--strategy", "mirrored", "--plain",
                                             "--runs-dir", str(tmp_path), "--run-id", run_id, "--spares", "0",
                                             "--", sys.executable, "tests/programs/user_daemon.py", mode),
                            cwd=REPO, env=test_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _daemon_pid(task_dir: Path) -> int:
    path = task_dir / "daemon.pid"
    wait_until(lambda: path.exists(), LAUNCH_TIMEOUT_S, what="the program started its daemon")
    return int(path.read_text())


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"launch did not end within {LAUNCH_TIMEOUT_S} s:\n{out[-3000:]}")
    return proc.returncode, out


def _check(tmp_path: Path, run_id: str, daemon: int, out: str) -> dict:
    try:
        return _checked(tmp_path, run_id, daemon, out)
    finally:  # a daemon that outlived the job must not outlive the test too
        assert_no_process_left([daemon], timeout_s=0.0)


def _checked(tmp_path: Path, run_id: str, daemon: int, out: str) -> dict:
    summary = json.loads((tmp_path / run_id / "summary.json").read_text())
    (task,) = summary["tasks"]
    assert [e["pid"] for e in task["left_behind"]] == [daemon], task["left_behind"]
    assert "time.sleep(300)" in task["left_behind"][0]["cmdline"]
    assert f"ended 1 process the task left behind (pid {daemon}:" in out, out[-3000:]
    assert not alive(daemon), f"the daemon pid {daemon} outlived its job"
    assert_no_process_left(all_pids(summary))  # the daemon's pid is among them now
    return summary


def test_a_daemon_in_its_own_session_does_not_outlive_a_job_that_succeeded(tmp_path):
    proc = _launch(tmp_path, "daemon", "succeed")
    daemon = _daemon_pid(tmp_path / "daemon" / "attempt-0" / "worker-0")
    code, out = _finish(proc)
    assert code == 0 and "Job Succeeded" in out, out[-3000:]
    _check(tmp_path, "daemon", daemon, out)


def test_a_daemon_in_its_own_session_does_not_outlive_a_job_stopped_while_it_runs(tmp_path):
    proc = _launch(tmp_path, "stopped", "wait")
    daemon = _daemon_pid(tmp_path / "stopped" / "attempt-0" / "worker-0")
    assert alive(daemon)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: every task is stopped (SIGTERM, then SIGKILL), then it exits 130
    code, out = _finish(proc)
    assert code == 130, out[-3000:]
    _check(tmp_path, "stopped", daemon, out)


def test_a_daemon_of_a_program_that_ignores_sigterm_is_killed_with_the_stopped_task(tmp_path):
    # the wrapper SIGKILLs the program's group after its grace: first what runs outside it
    proc = _launch(tmp_path, "stubborn", "stubborn")
    daemon = _daemon_pid(tmp_path / "stubborn" / "attempt-0" / "worker-0")
    proc.send_signal(signal.SIGINT)
    code, out = _finish(proc)
    assert code == 130, out[-3000:]
    _check(tmp_path, "stubborn", daemon, out)


def test_orphans_that_exit_while_the_program_runs_are_reaped_not_left_as_zombies(tmp_path):
    # the wrapper is their parent now: it must reap them, or zombies pile up while the program runs
    ready, release = tmp_path / "ready", tmp_path / "release"
    source = (f"import subprocess, time, os; subprocess.run(['sh', '-c', 'sleep 0.2 &'])\n"
              f"open({str(ready)!r}, 'w').write(str(os.getpid()))\n"
              f"deadline = time.monotonic() + 30\n"
              f"while not os.path.exists({str(release)!r}) and time.monotonic() < deadline: time.sleep(0.05)")
    environ = {**os.environ, "PYTHONPATH": str(REPO), env.ORCHESTRATOR_PID: str(os.getpid()),
               env.TASK_DIR: str(tmp_path)}
    environ.pop("ORCH_FAULTS", None)
    wrapper = psutil.Popen([sys.executable, "-m", "orchestrator.task.execwrap", "--", sys.executable, "-c", source],
                           cwd=REPO, env=environ, start_new_session=True)
    try:
        wait_until(lambda: ready.exists() and ready.read_text(), 30, what="the program to start its orphan")
        program = int(ready.read_text())

        def orphans() -> list[int]:  # the wrapper's children other than the program: the orphan, alive or a zombie
            return [c.pid for c in wrapper.children() if c.pid != program]

        wait_until(lambda: orphans() == [], 10, what="the exited orphan reaped by the wrapper")
        release.touch()
        assert wrapper.wait(timeout=10) == 0
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
            wrapper.wait(10)
