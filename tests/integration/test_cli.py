"""Bad input: one line naming the field and the fix, exit code 2, nothing started."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO, orchestrator_cmd, test_env


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--workers", "2", "--ps", "1"], "ps=1: MultiWorkerMirroredStrategy has no parameter servers"),
        (["--workers", "0"], "workers=0"),
        (["--strategy", "ring"], "strategy='ring': unknown strategy"),
        (["--strategy", "parameter_server", "--ps", "0"], "ps=0"),
        (["--epochs", "0"], "training.epochs=0"),
        (["--batch-size", "-3"], "training.batch_size_per_replica=-3"),
        (["--inject-fault", "worker:9:kill@step=1", "--workers", "2"], "inject-fault='worker:9'"),
        (["--inject-fault", "worker:1:explode@step=1"], "unknown kind"),
        (["--stop-timeout", "0"], "stop-timeout=0"),
        (["--workers", "two"], "invalid int value: 'two'"),
        (["--run-id", "../x"], "run-id='../x'"),
        (["--workers", "2", "--", "/nonexistent"], "program='/nonexistent': no such file"),
        (["--workers", "2", "--", "no-such-program-x9", "--epochs", "1"],
         "program='no-such-program-x9': not found on PATH"),
        (["--workers", "2", "--", "./README.md"], "program='./README.md': is not executable; chmod +x ./README.md"),
    ],
)
def test_bad_launch_input_exits_2_with_one_line_and_starts_nothing(tmp_path, args, fragment):
    runs = tmp_path / "runs"
    result = subprocess.run(
        orchestrator_cmd("launch", "--runs-dir", str(runs), *args),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env(),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert result.stdout == ""
    assert not runs.exists()


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path):
    import json

    result = subprocess.run(
        orchestrator_cmd("launch", "--workers", "3", "--dry-run", "--runs-dir", str(tmp_path / "runs")),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env(),
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert len(plan["cluster"]["worker"]) == 3
    assert [t["tf_config"]["task"]["index"] for t in plan["tasks"]] == [0, 1, 2]
    assert not (tmp_path / "runs").exists()


def test_a_cluster_that_cannot_fit_in_memory_is_refused_before_anything_starts(tmp_path):
    import psutil

    from orchestrator.backends.local import TASK_RSS_BYTES

    too_many = int(psutil.virtual_memory().total // TASK_RSS_BYTES) + 1
    runs = tmp_path / "runs"
    result = subprocess.run(
        orchestrator_cmd("launch", "--runs-dir", str(runs), "--workers", str(too_many)),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env(),
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"tasks={too_many}: {too_many} TensorFlow processes need" in line and "use at most" in line
    assert not runs.exists()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--workers", "2", "--replicas", "3"], "replicas=3"),
        (["--stop-timeout", "nan"], "stop-timeout=nan"),
        (["--workers", "1", "--"], "no program after --"),
        (["--workers", "2", "--runs-dir", "/etc/passwd"], "is not a directory"),
        (["--workers", "2", "--runs-dir", "/proc/no-such-dir"], "runs-dir='/proc/no-such-dir': cannot be created"),
    ],
)
def test_more_bad_launch_input_exits_2_with_one_line(args, fragment):
    result = subprocess.run(orchestrator_cmd("launch", *args), capture_output=True, text=True, timeout=60, cwd=REPO,
                            env=test_env())
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert fragment in line


def test_dry_run_warns_when_epochs_over_cover_the_data(tmp_path):
    import json

    result = subprocess.run(
        orchestrator_cmd("launch", "--workers", "2", "--steps-per-epoch", "90", "--dry-run",
                         "--runs-dir", str(tmp_path)),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env(),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: training.steps_per_epoch=90 x global batch 32"), lines
    assert "2,880 examples per epoch, 2x the 1,437 train examples" in lines[0]
    assert json.loads(result.stdout)["warnings"] == [lines[0].removeprefix("warning: ")]


def test_launch_warns_on_stderr_and_in_plan_json_before_the_job_runs(tmp_path, monkeypatch, capsys):
    import json

    from orchestrator import api
    from orchestrator.cli import main

    class Stop(Exception):
        pass

    seen = {}

    def run_nothing(job, **_options):  # stands in for supervising the job: the warning came before it
        seen["stderr"] = capsys.readouterr().err
        seen["plan"] = json.loads((job.plan.run_dir / "plan.json").read_text())
        job.server.stop()
        job.supervisor.backend.close()
        raise Stop

    monkeypatch.setattr(api, "run", run_nothing)
    with pytest.raises(Stop):
        main(["launch", "--workers", "2", "--steps-per-epoch", "90", "--plain", "--runs-dir", str(tmp_path)])
    warning = next(line for line in seen["stderr"].splitlines() if line.startswith("warning: "))
    assert "steps_per_epoch=90 x global batch 32" in warning
    assert seen["plan"]["warnings"] == [warning.removeprefix("warning: ")]
