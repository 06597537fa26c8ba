"""Tables of the rules for tasks outside the training cluster (tf.data service, evaluator)."""

from __future__ import annotations

import pytest

from orchestrator.spec.dataservice import registration_needs
from orchestrator.supervisor.rules.service import (
    restarts_alone,
    start_wave,
    startable,
    survives_group_restart,
    unrestarted_failure_ends_job,
)


@pytest.mark.parametrize(
    "task_type, alone, survives, ends_job",
    [
        ("dispatcher", True, True, True),  # restarted alone on its port; without it no trainer reads
        ("data_worker", True, True, False),  # restarted alone; the other data workers go on serving
        ("evaluator", True, False, False),  # never fails the job
        ("chief", False, False, False),
        ("worker", False, False, False),
        ("ps", False, False, False),
    ],
)
def test_which_role_restarts_alone(task_type: str, alone: bool, survives: bool, ends_job: bool) -> None:
    assert restarts_alone(task_type) is alone
    assert survives_group_restart(task_type) is survives
    assert unrestarted_failure_ends_job(task_type) is ends_job


JOB = [("dispatcher-0", "dispatcher"), ("data_worker-0", "data_worker"), ("data_worker-1", "data_worker"),
       ("worker-0", "worker"), ("worker-1", "worker")]


@pytest.mark.parametrize(
    "task_type, serving, may_start",
    [
        ("dispatcher", set(), True),
        ("data_worker", set(), False),  # the dispatcher first
        ("data_worker", {"dispatcher-0"}, True),
        ("worker", {"dispatcher-0"}, False),  # every data worker registered first
        ("worker", {"dispatcher-0", "data_worker-0"}, False),
        ("worker", {"dispatcher-0", "data_worker-0", "data_worker-1"}, True),
        ("ps", {"dispatcher-0", "data_worker-0", "data_worker-1"}, True),
    ],
)
def test_start_order(task_type: str, serving: set[str], may_start: bool) -> None:
    assert startable(task_type, JOB, serving) is may_start


def test_a_job_without_the_service_starts_at_once() -> None:
    assert startable("worker", [("worker-0", "worker"), ("worker-1", "worker")], set())
    assert [start_wave(t) for t in ("dispatcher", "data_worker", "chief", "evaluator")] == [0, 1, 2, 2]


@pytest.mark.parametrize(
    "task_type, service, needs",
    [
        ("dispatcher", True, ()),  # registers first, waits for nobody (Slurm: its reply is ready at once)
        ("data_worker", True, ("dispatcher",)),  # its dispatcher_address
        ("worker", True, ("training", "dispatcher")),  # its TF_CONFIG and ORCH_DATA_SERVICE_ADDRESS
        ("chief", True, ("training", "dispatcher")),
        ("evaluator", True, ("training", "dispatcher")),
        ("worker", False, ("training",)),  # no service: the training cluster only, as before
        ("ps", False, ("training",)),
    ],
)
def test_what_a_registering_task_waits_for(task_type: str, service: bool, needs: tuple[str, ...]) -> None:
    assert registration_needs(task_type, service) == needs
