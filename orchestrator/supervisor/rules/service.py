"""Rules for the tasks outside the training cluster, as pure functions over plain data: the
tf.data service's ``dispatcher`` and ``data_worker`` (:mod:`orchestrator.spec.dataservice`) and
the ``evaluator``. The supervisor's parts ask them (:mod:`~orchestrator.supervisor.failures`,
:mod:`~orchestrator.supervisor.waves`); ``tests/decisions/test_service_rules.py`` holds
their tables.

Rules and their sources:

* Alone (:func:`restarts_alone`): the evaluator, the dispatcher and each data worker restart
  alone, never with the trainers' group and never restarting a trainer: they are not in any
  collective nor in TF_CONFIG's cluster. A restarted dispatcher on the same port reads its
  journal (``DispatcherConfig(work_dir, fault_tolerant_mode=True)``) and the trainers' clients
  reconnect; a restarted data worker registers again and the dispatcher hands it tasks (TF's
  ``tf.data.experimental.service`` docs, "Fault tolerance").
* Survival (:func:`survives_group_restart`): a trainers' group restart (MWMS, or a PSS ps or
  coordinator failure) leaves the tf.data service running, so that the restarted group
  re-attaches to the same job (same ``job_name``) within ``job_gc_timeout_ms``.
* End (:func:`unrestarted_failure_ends_job`): a dispatcher that cannot be restarted (policy or
  budget) fails the job, since no trainer can read without it; an evaluator or a data worker
  that cannot be restarted does not (the others go on serving; the report says so).
* Start order (:func:`start_wave`, :func:`startable`): the dispatcher first, then the data
  workers, then the trainers; a wave starts once every task of the previous ones reports
  ``serving`` (a data worker says so only once registered with the dispatcher).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from orchestrator.spec.dataservice import start_wave as start_wave  # re-exported: the waves' order

SERVICE_ROLES = ("dispatcher", "data_worker")
"""The tf.data service's task types."""

ALONE_ROLES = ("evaluator", *SERVICE_ROLES)
"""Task types that restart alone and are never part of a training restart."""


def restarts_alone(task_type: str) -> bool:
    """True for the evaluator and the tf.data service's dispatcher and data workers."""
    return task_type in ALONE_ROLES


def survives_group_restart(task_type: str) -> bool:
    """True for a tf.data service task: a trainers' group restart leaves it running."""
    return task_type in SERVICE_ROLES


def unrestarted_failure_ends_job(task_type: str) -> bool:
    """Whether a failure of a task that restarts alone and may not be restarted again fails
    the job: only the dispatcher's (the trainers' every read goes through it)."""
    return task_type == "dispatcher"


def startable(task_type: str, planned: Sequence[tuple[str, str]], serving: Collection[str]) -> bool:
    """Whether a task of ``task_type`` may start now: every planned task of an earlier wave
    reports ``serving``.

    Args:
        task_type: the task's type.
        planned: (task name, task type) of every task of the job.
        serving: names of the tasks whose latest heartbeat says ``serving``.

    Returns:
        True when no task of an earlier wave is missing from ``serving``.
    """
    wave = start_wave(task_type)
    return all(name in serving for name, kind in planned if start_wave(kind) < wave)
