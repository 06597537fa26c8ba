"""Who removes the Slurm test cluster (tests/slurm/conftest.py): only its last live user among the pytest runs
that used it, never a run that merely exists beside them (a ``pytest --co`` in a second shell once tore down a
running CI's cluster and five of its Slurm tests failed). Real processes stand for the runs; no Slurm needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.slurm.conftest import live_users, register, run_id, should_tear_down, this_run


@pytest.fixture
def other_run():
    """A live process standing for another pytest run's controller; it exits when its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def cluster(tmp_path, set_up_by_tests: bool = True) -> str:
    directory = tmp_path / "cluster"
    directory.mkdir()
    if set_up_by_tests:
        (directory / "set-up-by-tests").write_text("1 0\n")
    return str(directory)


def test_a_run_that_never_used_the_cluster_leaves_it_alone(tmp_path):
    directory = cluster(tmp_path)  # set up by another run's tests, e.g. a CI run going on
    assert should_tear_down(this_run(), directory) is False


def test_the_last_user_of_a_cluster_tests_set_up_removes_it(tmp_path):
    directory = cluster(tmp_path)
    register(this_run(), users=f"{directory}/users")
    assert should_tear_down(this_run(), directory) is True


def test_a_cluster_started_by_hand_is_left_up(tmp_path):
    directory = cluster(tmp_path, set_up_by_tests=False)
    register(this_run(), users=f"{directory}/users")
    assert should_tear_down(this_run(), directory) is False


def test_a_run_still_using_the_cluster_keeps_it_up_and_removes_it_at_its_own_end(tmp_path, other_run):
    directory = cluster(tmp_path)
    users = f"{directory}/users"
    other = run_id(other_run.pid)
    register(this_run(), users=users)
    register(other, users=users)
    assert should_tear_down(this_run(), directory) is False  # the other run's tests still need it
    assert live_users(users=users) == [other]
    assert should_tear_down(other, directory) is True  # the other run, last, removes it


def test_a_run_killed_before_its_end_does_not_hold_the_cluster_forever(tmp_path, other_run):
    directory = cluster(tmp_path)
    users = f"{directory}/users"
    register(run_id(other_run.pid), users=users)
    other_run.kill()
    other_run.wait(timeout=30)
    register(this_run(), users=users)
    assert live_users(users=users) == [this_run()]
    assert should_tear_down(this_run(), directory) is True
