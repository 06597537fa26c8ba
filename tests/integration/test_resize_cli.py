"""``python -m orchestrator resize RUN --workers N`` against a real running elastic job (the tiny
program, no TensorFlow; real launcher, real gRPC with the run's certificates): every refusal is
one line and exit 2 (a size outside MIN..MAX, the size it runs at, a run that is not running or
not elastic), and the ``lose`` fault kind is refused outside an elastic job's workers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, orchestrator_cmd, test_env, wait_until

PROGRAM = [sys.executable, "-m", "tests.programs.task"]


def cli(*args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run(orchestrator_cmd(*args), env=test_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


def one_line_exit_2(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    field = lines[0].removeprefix("error: ").split(": ", 1)[0]
    assert f"{field}: {field}: " not in lines[0], lines[0]  # the field named once


@pytest.fixture
def elastic_job(tmp_path: Path):
    env = test_env()
    env["TEST_BEHAVIOR"] = "train:0:0.1"
    out = open(tmp_path / "launcher.out", "w+")
    proc = subprocess.Popen(
        orchestrator_cmd("launch", "--workers", "1:2", "--runs-dir", str(tmp_path), "--run-id", "el", "--plain",
                         "--stop-timeout", "5", "--deadline", "120", "--", *PROGRAM),
        env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: (tmp_path / "el" / "endpoint.json").is_file() or proc.poll() is not None, 30,
                   what="endpoint.json")
        assert proc.poll() is None, (tmp_path / "launcher.out").read_text()
        yield tmp_path
    finally:
        if proc.poll() is None:
            proc.terminate()  # a preemption: the launcher saves and leaves
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        out.close()


def test_resize_refusals_are_one_line_and_exit_2(elastic_job: Path):
    runs = str(elastic_job)
    one_line_exit_2(cli("resize", "el", "--runs-dir", runs, "--workers", "3"),
                    "workers=3", "outside the job's elastic range 1..2")
    one_line_exit_2(cli("resize", "el", "--runs-dir", runs, "--workers", "0"), "workers=0", "1..2")
    one_line_exit_2(cli("resize", "el", "--runs-dir", runs, "--workers", "2"), "workers=2", "runs at 2 already")
    done = cli("stop", "el", "--runs-dir", runs)
    assert done.returncode == 0, done.stderr
    one_line_exit_2(cli("resize", "el", "--runs-dir", runs, "--workers", "1"), "RUN='el'", "is not running",
                    "launch --resume el --workers 1")


def test_resize_of_a_run_that_is_not_elastic_or_not_there(tmp_path: Path):
    run = tmp_path / "fixed"
    run.mkdir()
    (run / "plan.json").write_text(json.dumps({"spec": {"strategy": "multi_worker_mirrored", "workers": 2}}))
    one_line_exit_2(cli("resize", "fixed", "--runs-dir", str(tmp_path), "--workers", "1"),
                    "workers=1", "fixed count (2), not elastic")
    one_line_exit_2(cli("resize", "nope", "--runs-dir", str(tmp_path), "--workers", "1"), "RUN='nope'")


def test_resize_of_a_run_that_succeeded_does_not_point_at_a_resume_that_is_refused(tmp_path: Path):
    planned = cli("launch", "--dry-run", "--json", "--runs-dir", str(tmp_path), "--workers", "1:2")
    assert planned.returncode == 0, planned.stderr
    run = tmp_path / "done"
    run.mkdir()
    (run / "plan.json").write_text(planned.stdout)  # the plan launch writes
    (run / "summary.json").write_text(json.dumps({"status": "Succeeded"}))
    done = cli("resize", "done", "--runs-dir", str(tmp_path), "--workers", "1")
    one_line_exit_2(done, "RUN='done'", "Succeeded", "nothing left to train", "new run")
    assert "--resume" not in done.stderr  # launch --resume refuses a run that succeeded


@pytest.mark.parametrize("args, words", [
    (("--workers", "2", "--inject-fault", "worker:1:lose@step=3"), ("lose needs elastic workers",)),
    (("--workers", "1:2", "--chief", "--inject-fault", "chief:0:lose@step=3"), ("chief:0 is not a worker",)),
    (("--workers", "1:2", "--inject-fault", "worker:1:lost@step=3"), ("unknown kind 'lost'", "lose")),
])
def test_the_lose_fault_is_for_an_elastic_jobs_workers(tmp_path: Path, args, words):
    one_line_exit_2(cli("launch", "--dry-run", "--runs-dir", str(tmp_path), *args), "inject-fault", *words)


@pytest.mark.parametrize("args, words", [
    (("--workers", "1:2", "--grow-back", "soon"), ("workers.grow_back='soon'", "must be on, off or a cooldown",
                                                   "e.g. --grow-back 60, --grow-back off")),
    (("--workers", "1:2", "--grow-back", "-5"), ("workers.grow_back='-5'",)),
    (("--workers", "2", "--grow-back", "10"), ("grow-back='10'", "is for elastic workers", "--workers MIN:MAX")),
])
def test_grow_back_refusals_are_one_line_and_exit_2(tmp_path: Path, args, words):
    one_line_exit_2(cli("launch", "--dry-run", "--runs-dir", str(tmp_path), *args), *words)


def test_grow_back_is_in_the_plan(tmp_path: Path):
    done = cli("launch", "--dry-run", "--json", "--runs-dir", str(tmp_path), "--workers", "1:2", "--grow-back", "off")
    assert done.returncode == 0, done.stderr
    assert '"grow_back": "off"' in done.stdout, done.stdout
