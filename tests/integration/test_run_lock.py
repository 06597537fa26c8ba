"""One life of a run at a time (issue 36 item 2): the run directory's lock, with real orchestrators.

Two ``launch --resume RUN`` started together: one runs, the other is refused at once (exit 2, one
line naming the pid that holds the run), and so is a new launch with the run's ``--run-id``; a lock
left by a dead orchestrator is taken over. No TensorFlow: the tasks are ``tests.programs.task``,
held at a known point (they wait for a file the test writes), not for a guessed number of seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys

from orchestrator.resources import runlock
from orchestrator.rundir import RunDir
from tests.conftest import REPO, orchestrator_cmd, test_env, wait_until
from tests.integration.test_resume_input import _run_dir

PROGRAM = [sys.executable, "-m", "tests.programs.task"]


def _refused_by(result_err: str, pid: int, field: str) -> None:
    lines = result_err.strip().splitlines()
    assert len(lines) == 1 and f"(pid {pid} holds its lock)" in lines[0], result_err
    assert lines[0].startswith(f"error: {field}='r': a life of this run is running in "), lines


def test_two_resumes_of_one_run_one_refused_naming_the_pid_and_a_stale_lock_is_taken_over(tmp_path):
    runs = tmp_path / "runs"
    run = _run_dir(runs, "r", status="Preempted", program=PROGRAM)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    (run / runlock.LOCK_FILE).write_text(dead.stdout)  # left by an orchestrator that is gone: taken over
    env = {**test_env(), "TEST_BEHAVIOR": "succeed-when:go:1"}  # the tasks wait (bounded) for runs/r/go
    resume = orchestrator_cmd("launch", "--runs-dir", str(runs), "--resume", "r", "--quiet")
    both = [subprocess.Popen(resume, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
            for _ in range(2)]
    try:
        wait_until(lambda: any(p.poll() is not None for p in both), 60, what="one of the two resumes to end")
        loser = next(p for p in both if p.poll() is not None)
        winner = next(p for p in both if p is not loser)
        out, err = loser.communicate()
        assert loser.returncode == 2, out + err
        _refused_by(err, winner.pid, "resume")
        assert winner.poll() is None and runlock.holder(RunDir(run)) == winner.pid
        again = subprocess.run(orchestrator_cmd("launch", "--runs-dir", str(runs), "--run-id", "r", "--quiet", "--",
                                                *PROGRAM), capture_output=True, text=True, timeout=60, cwd=REPO,
                               env=env)
        assert again.returncode == 2, again.stdout + again.stderr  # a new launch with the run's id
        _refused_by(again.stderr, winner.pid, "run-id")
        (run / "go").write_text("")
        out, err = winner.communicate(timeout=60)
    finally:
        for p in both:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert winner.returncode == 0, out + err
    assert json.loads((run / "summary.json").read_text())["status"] == "Succeeded"
    assert runlock.holder(RunDir(run)) is None  # released at the end of the life
