"""Slurm preemption and time limits, the parts without a cluster: the batch script's requeue and
``--continue`` lines, the job record ``scontrol show job`` gives, when the orchestrator requeues
its own job, and the bad input of ``--continue`` (tests/slurm runs them on a real cluster)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from orchestrator.backends.slurm_job import parse_job, requeue_decision
from orchestrator.cli import main
from orchestrator.cli.requeue import TIME_LIMIT_REASON, SlurmContinuation
from orchestrator.cli.sbatch import launch_argv

# `scontrol show job -o` of a job in the grace of a preemption (Slurm 22.05, the simulated cluster)
RUNNING_PREEMPTED = ("JobId=10 JobName=tf-multi_worker_mirrored UserId=root(0) JobState=RUNNING Reason=None "
                     "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
                     "PreemptEligibleTime=2026-12-01T11:31:33 PreemptTime=2026-12-01T11:31:55 Partition=low")
RUNNING = RUNNING_PREEMPTED.replace("PreemptTime=2026-12-01T11:31:55", "PreemptTime=None")


def _script(tmp_path, *args: str) -> str:
    out = tmp_path / "job.sh"
    assert main(["sbatch", "-o", str(out), "--workers", "2", "--epochs", "3", "--runs-dir", str(tmp_path / "runs"),
                 *args]) == 0
    return out.read_text()


def test_the_script_is_requeueable_appends_its_output_and_names_the_run_after_the_job(tmp_path, capsys):
    text = _script(tmp_path)
    assert "#SBATCH --requeue" in text and "#SBATCH --open-mode=append" in text and "--signal" not in text
    assert 'run_id="slurm-${SLURM_JOB_ID}"' in text
    fresh = text.strip().splitlines()[-1]
    assert fresh.startswith("exec ") and "--plain --workers 2 --epochs 3 --runs-dir" in fresh
    assert fresh.endswith('--run-id "$run_id"')
    resumed = next(ln for ln in text.splitlines() if "--resume" in ln).strip()
    assert resumed.startswith("exec ") and resumed.replace('--resume "$run_id"', '--run-id "$run_id"') == fresh
    assert 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]' in text and '/"$run_id"/plan.json' in text


def test_the_scripts_branches_run_in_bash(tmp_path, capsys):
    """The script's shell, run with a fake python that prints its arguments: a fresh job launches
    slurm-<job id>, a requeued one with the run's plan resumes it."""
    text = _script(tmp_path, "--run-id", "digits-1", "--", "python", "train.py", "--lr", "0.1")
    text = text.replace(text.split("exec ", 1)[1].split(" -m orchestrator")[0], "echo")  # python -> echo
    script = tmp_path / "run.sh"
    script.write_text(text)
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "77"}
    fresh = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, check=True).stdout
    assert fresh.strip().endswith("--run-id digits-1 -- python train.py --lr 0.1")
    requeued = {**env, "SLURM_RESTART_COUNT": "1"}
    no_plan = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=requeued, check=True).stdout
    assert "--run-id digits-1" in no_plan  # requeued before the plan was written: a fresh start
    (tmp_path / "runs" / "digits-1").mkdir(parents=True)
    (tmp_path / "runs" / "digits-1" / "plan.json").write_text("{}")
    resumed = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=requeued, check=True).stdout
    assert "continuing run digits-1" in resumed
    assert resumed.strip().splitlines()[-1].endswith("--resume digits-1 -- python train.py --lr 0.1")


def test_no_requeue_turns_both_off(tmp_path, capsys):
    text = _script(tmp_path, "--no-requeue")
    assert "#SBATCH --no-requeue" in text and "--requeue\n" not in text and "open-mode" not in text
    assert "--resume" not in text and 'run_id="slurm-${SLURM_JOB_ID}"' in text


def test_continue_asks_for_the_time_limits_warning_and_passes_continue_on(tmp_path, capsys):
    text = _script(tmp_path, "--time-limit", "4:00:00", "--continue")
    assert "#SBATCH --time=4:00:00" in text and "#SBATCH --signal=B:USR1@90" in text
    assert text.strip().splitlines()[-1].count(" --continue ") == 1
    text = _script(tmp_path, "--continue", "--time-warning", "45", "--preemption-grace", "20")
    assert "#SBATCH --signal=B:USR1@45" in text and "--time-warning" not in text.split("#SBATCH --signal")[1]


@pytest.mark.parametrize("args, message", [
    (["--continue", "--no-requeue"], "continue=True: requeues the job before its time limit, --no-requeue forbids"),
    (["--time-warning", "60"], "time-warning=60: is the warning of --continue"),
    (["--continue", "--time-warning", "10"], "time-warning=10: must be in [--preemption-grace (30 s), 65535]"),
    (["--resume", "slurm-3"], "resume='slurm-3': a batch script resumes its run by itself"),
])
def test_sbatch_bad_input(tmp_path, capsys, args, message):
    assert main(["sbatch", "--workers", "2", *args, "-o", str(tmp_path / "job.sh")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "job.sh").exists()


def test_launch_continue_needs_a_slurm_job(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert main(["launch", "--workers", "2", "--continue", "--runs-dir", str(tmp_path)]) == 2
    assert "continue=True: requeues a Slurm batch job: it needs --backend slurm" in capsys.readouterr().err
    assert main(["launch", "--backend", "slurm", "--workers", "2", "--continue", "--runs-dir", str(tmp_path)]) == 2
    assert "not inside a Slurm job (SLURM_JOB_ID is not set)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_launch_argv_leaves_out_sbatchs_own_requeue_options():
    assert launch_argv(["sbatch", "--workers", "2", "--no-requeue", "--time-warning", "60", "--run-id", "r",
                        "--continue", "-o", "job.sh"]) == ["--workers", "2", "--continue"]


def test_the_job_record_says_when_slurm_preempts_the_job():
    record = parse_job(RUNNING_PREEMPTED)
    assert record is not None and record.job_id == "10" and record.state == "RUNNING"
    assert record.preempted and record.requeue and record.batch and record.restarts == 0
    assert parse_job(RUNNING) is not None and not parse_job(RUNNING).preempted
    assert parse_job(RUNNING.replace("JobState=RUNNING", "JobState=PREEMPTED")).preempted
    assert parse_job("slurm_load_jobs error: Invalid job id specified") is None


def test_the_orchestrator_requeues_its_job_after_a_preemption_or_the_time_limits_warning_only():
    preempted, running = parse_job(RUNNING_PREEMPTED), parse_job(RUNNING)
    assert requeue_decision(preempted, time_limit=False) == (True, "Slurm preempts the job")
    assert requeue_decision(running, time_limit=True) == (True, "the time limit is near")
    go, why = requeue_decision(running, time_limit=False)  # scancel, or the time limit itself: stop
    assert not go and "not preempting" in why
    go, why = requeue_decision(parse_job(RUNNING_PREEMPTED.replace("Requeue=1", "Requeue=0")), time_limit=False)
    assert not go and "--no-requeue" in why
    go, why = requeue_decision(parse_job(RUNNING_PREEMPTED.replace("BatchFlag=1", "BatchFlag=0")), time_limit=True)
    assert not go and "not a batch job (salloc)" in why
    assert requeue_decision(None, time_limit=True)[0] is False


@pytest.mark.parametrize("phases, saves", [(["training", "training"], True), (["saving", "training"], False)])
def test_the_time_limits_warning_saves_while_training_and_lets_a_finishing_job_finish(phases, saves, capsys):
    """SIGUSR1 to this process under ``--continue`` (no scontrol here: the job's record is unknown,
    so it counts as the time limit): a job still training saves and leaves; one whose training
    has ended is left to finish its evaluation and export (nothing to save)."""
    slurm = SlurmContinuation(True, "slurm", {"SLURM_JOB_ID": "7", "PATH": "/nonexistent"})
    requested: list[str] = []
    decided = threading.Event()

    def request(reason: str) -> None:
        requested.append(reason)
        decided.set()

    class Out:  # the one line said instead of a save ends the wait too
        text = ""

        def write(self, text: str) -> None:
            Out.text += text
            decided.set()

        def flush(self) -> None:
            pass

    previous = signal.getsignal(signal.SIGUSR1)
    try:
        slurm.install(request, lambda: phases, Out())
        os.kill(os.getpid(), signal.SIGUSR1)
        assert decided.wait(10.0)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    if saves:
        assert requested == [TIME_LIMIT_REASON] and slurm.time_limit
    else:
        assert requested == [] and "but training has ended: the job finishes" in Out.text
