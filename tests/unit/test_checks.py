"""``launch -- PROGRAM``: a program that cannot run is bad input before anything starts (issue 11, 17a)."""

from __future__ import annotations

import os

import pytest

from orchestrator.cli.checks import check_program
from orchestrator.errors import SpecError


def test_programs_that_run_pass(tmp_path, monkeypatch):
    from tests.conftest import REPO

    monkeypatch.chdir(REPO)
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    check_program(["python", "examples/mwms_train.py"])  # run from the repo root (conftest)
    check_program([str(script)])
    check_program([])  # the built-in program


@pytest.mark.parametrize("name, problem", [("/nonexistent", "no such file"),
                                           ("no-such-program-x9", "not found on PATH"),
                                           ("{dir}", "is a directory"), ("{dir}/train.py", "is not executable")])
def test_programs_that_cannot_run_are_bad_input(tmp_path, name, problem):
    (tmp_path / "train.py").write_text("print(1)\n")
    program = name.format(dir=tmp_path)
    with pytest.raises(SpecError) as info:
        check_program([program, "--epochs", "1"])
    assert info.value.field == "program" and info.value.value == program and problem in info.value.problem
    if problem == "is not executable":
        assert info.value.fix == f"chmod +x {program}, or run it with its interpreter: -- python {program}"


def test_a_file_in_this_directory_by_bare_name_suggests_dot_slash(tmp_path, monkeypatch):
    (tmp_path / "train.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "train.sh", 0o755)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=r"write \./train\.sh"):
        check_program(["train.sh"])


def test_docker_skips_the_check_the_program_is_in_the_image():
    check_program(["/opt/in-the-image/train"], backend="docker")
