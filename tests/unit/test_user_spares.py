"""Warm spares for a user's program (``launch --spares N -- python ...``): which programs a spare
can become, what it is started as, and the refusal of the rest (exit 2, nothing started)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.api import check_job
from orchestrator.errors import SpecError
from orchestrator.plan import make_plan, user_spare
from orchestrator.spec import JobSpec
from orchestrator.spec.program import PythonProgram, python_program
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO

PY = sys.executable


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "train.py"], PythonProgram("python", "train.py", None, ())),
        (["python3", "dir/train.py", "--epochs", "3", "-m", "x"], PythonProgram("python3", "dir/train.py", None,
                                                                                ("--epochs", "3", "-m", "x"))),
        (["/venv/bin/python3.11", "-m", "pkg.train", "--lr", "0.1"], PythonProgram("/venv/bin/python3.11", None,
                                                                                   "pkg.train", ("--lr", "0.1"))),
        ([PY, "train.py"], PythonProgram(PY, "train.py", None, ())),
    ],
)
def test_python_script_and_module_programs_are_parsed(argv, expected):
    assert python_program(argv) == expected


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["bash", "train.sh"], "--spares needs a Python program"),
        (["./train.sh", "--epochs", "3"], "--spares needs a Python program"),
        (["pythonic", "train.py"], "--spares needs a Python program"),
        (["python"], "--spares needs a script or -m MODULE"),
        (["python", "-m"], "no module after -m"),
        (["python", "-u", "train.py"], "the interpreter option '-u'"),
        (["python", "-c", "print(1)"], "the interpreter option '-c'"),
        (["python", "-X", "dev", "train.py"], "the interpreter option '-X'"),
    ],
)
def test_other_programs_are_refused_naming_spares_and_the_fix(argv, problem):
    with pytest.raises(SpecError) as err:
        python_program(argv, spares=2)
    message = str(err.value)
    assert message.startswith("spares=2: ") and problem in message and "drop --spares" in message
    assert "\n" not in message


def test_a_spare_for_a_users_program_is_execwraps_spare_mode_with_tensorflow_preloaded():
    argv = (PY, "-m", "orchestrator.task.execwrap", "--", "python", "train.py", "--epochs", "3")
    command, preload = user_spare(argv, {"TF_USE_LEGACY_KERAS": "1"})
    assert command == (PY, "-m", "orchestrator.task.execwrap", "--spare", "--", "python", "train.py", "--epochs", "3")
    assert preload == ("tensorflow", "tf_keras?")
    assert user_spare(argv, {"TF_USE_LEGACY_KERAS": "0"}) == (command, ("tensorflow",))
    module = (PY, "-m", "orchestrator.task.execwrap", "--", PY, "-m", "pkg.train")
    assert user_spare(module, {})[0][-4:] == ("--", PY, "-m", "pkg.train")


def test_no_spare_for_the_built_in_program_or_a_program_a_spare_cannot_become():
    assert user_spare((PY, "-m", "worker"), {}) is None  # the built-in spare handles it
    assert user_spare((PY, "-m", "orchestrator.task.execwrap", "--", "bash", "train.sh"), {}) is None
    assert user_spare((PY, "-m", "orchestrator.task.execwrap", "--", "python", "-c", "pass"), {}) is None


def test_the_plan_of_a_users_program_keeps_zero_spares_by_default():
    from orchestrator.spec import Strategy
    from orchestrator.supervisor.rules.decisions import spare_count

    assert spare_count(Strategy.MULTI_WORKER_MIRRORED, 2, None, builtin=False) == 0
    assert spare_count(Strategy.MULTI_WORKER_MIRRORED, 2, 2, builtin=False) == 2
    spec = JobSpec.create(workers=2)
    plan = make_plan(spec, {t: f"127.0.0.1:{20000 + i}" for i, t in enumerate(spec.tasks())}, run_id="r",
                     run_dir=Path("/tmp/r"), health_address="127.0.0.1:1", token="t",
                     commands={"worker": ["python", "train.py"]})
    assert plan.tasks[0].argv[1:4] == ("-m", "orchestrator.task.execwrap", "--")  # what user_spare() recognises


def test_check_job_accepts_a_python_script_whose_interpreter_runs_the_spare(monkeypatch):
    monkeypatch.chdir(REPO)
    spec = JobSpec.create(workers=2, supervision=SupervisionSpec.create(spares=2))
    check_job(spec, backend="local", commands={"worker": [PY, "examples/mwms_train.py"]})
    check_job(spec, backend="local", commands={"worker": [PY, "-m", "examples.mwms_train"]})


def test_an_interpreter_that_cannot_run_the_spare_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "python3"  # a Python by name, not one of this environment
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'orchestrator'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    spec = JobSpec.create(workers=2, supervision=SupervisionSpec.create(spares=2))
    with pytest.raises(SpecError) as err:
        check_job(spec, backend="local", commands={"worker": [str(fake), "train.py"]})
    message = str(err.value)
    assert message.startswith("spares=2: --spares: ") and "No module named 'orchestrator'" in message
    assert f"-- {sys.executable} train.py" in message
