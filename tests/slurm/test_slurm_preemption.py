"""Batch jobs from ``python -m orchestrator sbatch`` that Slurm really preempts and time-limits,
on the simulated cluster (conftest.py): partitions ``low`` (PreemptMode=REQUEUE, GraceTime=15)
and ``high`` (preempts low) on osl1 and osl2 (``.ci/slurm-setup``).

A requeued job is held ``Reason=BeginTime`` for about 2 minutes; the tests release it at once
(``scontrol update JobId=N StartTime=now``, as root), once the requeue is a second old: slurmd
revokes the old run's credential with one-second resolution, and a job started again within
that second is killed ("Job credential revoked").
"""

from __future__ import annotations

import calendar
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, wait_until

pytestmark = pytest.mark.slurm

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def _run(slurm_env, *argv: str, timeout_s: float = 30) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, env=slurm_env, timeout=timeout_s, cwd=REPO)
    assert result.returncode == 0, f"{' '.join(argv)}: {result.stderr or result.stdout}"
    return result.stdout


def submit(slurm_env, tmp_path: Path, *args: str) -> str:
    """Write the script with ``orchestrator sbatch`` (runs under tmp_path/runs) and submit it."""
    script = tmp_path / "job.sh"
    _run(slurm_env, sys.executable, "-m", "orchestrator", "sbatch", "-o", str(script), "--partition", "low",
         "--runs-dir", str(tmp_path / "runs"), *args)
    return _run(slurm_env, "sbatch", "--parsable", str(script)).strip().split(";")[0]


def job(slurm_env, job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` as a dict."""
    out = _run(slurm_env, "scontrol", "show", "job", "-o", job_id)
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


def steps_of(slurm_env, job_id: str) -> list[str]:
    return _run(slurm_env, "squeue", "-h", "-s", "-j", job_id, "-o", "%i %j %N").splitlines()


def output(tmp_path: Path, job_id: str) -> str:
    path = tmp_path / "runs" / f"slurm-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def release_if_requeued(slurm_env, job_id: str) -> bool:
    """Release the job when it waits out its requeue hold (see the module docstring)."""
    record = job(slurm_env, job_id)
    if record.get("JobState") != "PENDING" or record.get("Reason") != "BeginTime":
        return False
    requeued_at = calendar.timegm(time.strptime(record["SubmitTime"], "%Y-%m-%dT%H:%M:%S"))  # the cluster runs UTC
    if time.time() < requeued_at + 1.5:
        return False
    _run(slurm_env, "scontrol", "update", f"JobId={job_id}", "StartTime=now")
    return True


def cancel(slurm_env, *job_ids: str) -> None:
    """Cancel the jobs and wait (bounded) until none is listed any more (their steps gone too)."""
    ids = [j for j in job_ids if j]
    if not ids:
        return
    subprocess.run(["scancel", *ids], env=slurm_env, capture_output=True, timeout=30)

    def gone() -> bool:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T"], env=slurm_env,
                             capture_output=True, text=True, timeout=30).stdout
        return not out.strip()

    wait_until(gone, timeout_s=60, interval_s=0.5, what=f"jobs {ids} to leave squeue")


def training_step(text: str) -> int:
    """The last training step the ``--plain`` lines show (-1 before training)."""
    steps = [int(s) for s in re.findall(r"Running/training step (\d+)", text)]
    return steps[-1] if steps else -1


def saved_step(run_dir: Path, attempt: int) -> int:
    """The step worker-0 checkpointed at on the preemption notice (its own log line)."""
    text = (run_dir / f"attempt-{attempt}" / "worker-0" / "stdout.log").read_text()
    m = re.search(r"checkpoint saved after step (\d+)", text)
    assert m, text[-2000:]
    return int(m.group(1))


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_a_job_preempted_by_a_higher_priority_job_saves_is_requeued_and_resumes_its_run(slurm_env, tmp_path):
    """MWMS, 2 workers on ``low``; a 2-node job on ``high`` mid-training: Slurm SIGTERMs every
    step at once, the orchestrator takes it as the job's preemption (confirmed by the job's
    PreemptTime): every worker saves, the job ends Preempted and the orchestrator requeues it
    (Slurm would not: the batch script ended within the grace). Released, the job resumes the
    same run from the saved step and succeeds: two lives, no step lost, no restart used."""
    started = time.monotonic()
    ours = theirs = ""
    try:
        # 40 epochs: 1800 steps. The plain lines come every 5 s, so step 90 is seen as late as step ~550 on a quiet
        # run of this machine (~100 steps/s); ~1250 steps (~12 s) are then left for the preemption to land in (it
        # takes ~1-2 s, longer under load, when training slows down too). With 16 epochs (720 steps) a CI run
        # under load saw the job finish before Slurm preempted it.
        ours = submit(slurm_env, tmp_path, "--workers", "2", "--epochs", "40", "--preemption-grace", "10")
        run_dir = tmp_path / "runs" / f"slurm-{ours}"
        wait_until(lambda: training_step(output(tmp_path, ours)) >= 90, timeout_s=180, interval_s=0.5,
                   what=f"job {ours} training past step 90:\n{output(tmp_path, ours)[-1500:]}")
        theirs = _run(slurm_env, "sbatch", "--parsable", "-p", "high", "-N2", "--exclusive", "-o",
                      str(tmp_path / "high-%j.out"), "--wrap", "srun hostname").strip()
        requeued = wait_until(lambda: job(slurm_env, ours).get("Restarts") == "1" and job(slurm_env, ours),
                              timeout_s=60, interval_s=0.5,
                              what=f"job {ours} requeued:\n{output(tmp_path, ours)[-1500:]}")
        text = output(tmp_path, ours)
        assert "job Preempted" in text and f"Slurm preempts the job: requeueing Slurm job {ours}" in text, text
        assert requeued["JobState"] in ("PENDING", "REQUEUED", "COMPLETING"), requeued
        first = summary_of(run_dir)
        assert first["status"] == "Preempted" and first["exit_code"] == 75, first["reason"]
        wait_until(lambda: release_if_requeued(slurm_env, ours), timeout_s=60, interval_s=0.5,
                   what=f"job {ours} held for its requeue")
        final = wait_until(lambda: job(slurm_env, ours).get("JobState") in ENDED and job(slurm_env, ours),
                           timeout_s=240, interval_s=1.0, what=f"job {ours} to end:\n{output(tmp_path, ours)[-1500:]}")
        text = output(tmp_path, ours)
        assert final["JobState"] == "COMPLETED", text[-3000:]
        assert f"Slurm job {ours} requeued (SLURM_RESTART_COUNT=1): continuing run slurm-{ours}" in text, text
        summary = summary_of(run_dir)
        assert summary["status"] == "Succeeded", summary["reason"]
        assert summary["metrics"]["test_accuracy"] >= 0.85
        assert [p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()] == [f"slurm-{ours}"]  # the same run
        lives = summary["lives"]
        assert [(life["life"], life["ended"], life["cause"]) for life in lives] == [
            (1, "Preempted", "preempted"), (2, "Succeeded", "succeeded")], lives
        assert lives[0]["steps_lost"] == 0, lives
        assert lives[1]["resumed_from_step"] == saved_step(run_dir, 0) > 0, lives
        assert summary["restarts"] == 0, summary["failures"]  # the preemption notice is recorded, never counted
        record = json.loads((run_dir / "run.json").read_text())
        assert record["restarts_used"] == 0, record
        assert steps_of(slurm_env, ours) == []
    finally:
        cancel(slurm_env, ours, theirs)
    print(f"\npreempted and resumed in {time.monotonic() - started:.0f} s")


def test_a_run_longer_than_its_time_limit_continues_in_three_lives(slurm_env, tmp_path):
    """``sbatch --time-limit 1 --continue`` with a user's program: Slurm's SIGUSR1 before each 1-minute limit
    makes the orchestrator save and requeue its own job; every life continues the same run from where the
    last one saved, the job never hits its time limit (no TIMEOUT), and the run succeeds."""
    started = time.monotonic()
    ours = ""
    try:
        # Slurm sends the warning at its time-limit checks, 30 s apart: a requeued life, started right after the
        # check that warned the previous one, gets its warning at the next check (~27 s of life); the first life
        # gets it 10-40 s after its start. A job sized in epochs of the built-in program took 2 lives on a fast
        # run of this machine and 5 on a slow one, so the program is a user's that takes 3 lives by construction:
        # it trains until the notice in lives 1 and 2 and ends 100 steps (2 s) into life 3.
        # (The built-in program's save and resume under Slurm: the preemption test above.)
        ours = submit(slurm_env, tmp_path, "--workers", "1", "--time-limit", "1", "--continue",
                      "--time-warning", "20", "--preemption-grace", "6", "--",
                      sys.executable, str(REPO / "tests" / "programs" / "user_lives.py"), "3", "100")
        run_dir = tmp_path / "runs" / f"slurm-{ours}"

        def ended() -> dict | None:
            record = job(slurm_env, ours)
            if record.get("JobState") in ENDED:
                return record
            release_if_requeued(slurm_env, ours)
            return None

        final = wait_until(ended, timeout_s=540, interval_s=1.0,
                           what=f"job {ours} to end:\n{output(tmp_path, ours)[-2000:]}")
        text = output(tmp_path, ours)
        assert final["JobState"] == "COMPLETED", text[-3000:]
        summary = summary_of(run_dir)
        assert summary["status"] == "Succeeded", summary["reason"]
        lives = summary["lives"]
        assert len(lives) == 3, lives
        assert int(final["Restarts"]) == len(lives) - 1, final
        assert text.count(f"the time limit is near: requeueing Slurm job {ours}") == len(lives) - 1, text
        for life in lives[:-1]:
            assert (life["ended"], life["cause"]) == ("Preempted", "time limit"), lives
        # nothing lost: each life that trained resumed at or after the last step of the one that trained before it
        # (a life warned before its training started has no step of its own and resumes nothing)
        trained = [life for life in lives if life["last_step"] is not None]
        for before, after in zip(trained, trained[1:]):
            assert after["resumed_from_step"] is not None and after["resumed_from_step"] >= before["last_step"], lives
        assert lives[-1]["ended"] == "Succeeded" and summary["restarts"] == 0, lives
        logs = "".join(p.read_text(errors="replace") for p in sorted(run_dir.rglob("stdout.log")))
        assert logs.count("saved at step") == 2 and "life 3: done at step" in logs, logs[-3000:]
        assert steps_of(slurm_env, ours) == []
    finally:
        cancel(slurm_env, ours)
    print(f"\n{len(lives)} lives in {time.monotonic() - started:.0f} s")
