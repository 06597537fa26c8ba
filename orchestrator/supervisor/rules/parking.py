"""Parking a ParameterServerStrategy worker: the rule, as a pure function over plain data (docs/elastic.md).

A PSS job with elastic workers (``--strategy parameter_server --workers MIN:MAX``) goes on
without a worker that will not come back by a restart: TF's ``ClusterCoordinator`` carries on with
the remaining workers by design (TF 2.21, ``tensorflow/python/distribute/coordinator/
cluster_coordinator.py``, ``ClusterCoordinator`` docstring, "Handling Task Failure": *when some
workers are not available ... the training progress continues to be made with the remaining
workers*; the failed worker's closures are put back on the queue for the others, and its own
thread waits up to ``_WORKER_MAXIMUM_RECOVERY_SEC`` (an hour) in ``wait_on_failure`` for it to come
back at the same address, when it is added back after its per-worker datasets are rebuilt). Such a
worker is *parked*: not restarted, not failed, and the job's restart budget is not spent on it,
while at least MIN workers remain; one parked below MIN fails the job as today.

A worker is parked when it will not come back by a restart:

* it crash-loops (:func:`~orchestrator.supervisor.rules.exitrules.crash_loop`: a restart would fail
  the same way);
* the job's restarts are spent (``--max-restarts``) on a failure its restart policy would retry;
* its slot is lost (the fault kind ``lose``): parked at once, no restart tried; below MIN the job fails;
* its node is lost (Slurm: the node's slurmd does not answer, or its step did not end after SIGKILL):
  parked at once, no restart tried; below MIN it is restarted on a node left as for a fixed count (a
  restart elsewhere can bring it back, where a withdrawn slot cannot).

A failure the restart policy refuses on its own (``never``, an exit code 1-127 under ``exit-code``:
a bug in the program) fails the job as without elastic workers: every worker would meet it.
Under MultiWorkerMirroredStrategy nothing is parked (every worker is in every collective: the group
restarts at another size instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.spec.model import Strategy

CRASH_LOOP, RESTARTS_SPENT, LOST, NODE_LOST = "crash loop", "restarts spent", "lost", "node lost"
"""Why a worker will not come back by a restart (``gone`` of :func:`worker_fate`)."""

RESTART, PARK, FAIL = "restart", "park", "fail"


@dataclass(frozen=True)
class WorkerFate:
    """What becomes of failed workers (:func:`worker_fate`).

    Attributes:
        kind: :data:`RESTART`, :data:`PARK` or :data:`FAIL`.
        why: for :data:`PARK` and :data:`FAIL`, one clause for the events and the report.
    """

    kind: str
    why: str = ""


def worker_fate(*, strategy: Strategy, task_types: tuple[str, ...], elastic_min: int | None, workers_now: int,
                retry: bool, why_not: str, gone: str) -> WorkerFate:
    """Restart, park or fail the tasks of one task-scope restart.

    Args:
        strategy: the job's strategy.
        task_types: the types of the failed tasks (a PSS task restart: workers).
        elastic_min: MIN of ``--workers MIN:MAX``; None for a fixed count (nothing is parked).
        workers_now: the workers the job trains with now (not parked), these failed ones included.
        retry: the restart policy and budget allow a restart.
        why_not: why not, when not.
        gone: why they will not come back by a restart: :data:`CRASH_LOOP`, :data:`RESTARTS_SPENT`,
            :data:`LOST`, :data:`NODE_LOST`, or "" (the policy refuses, or nothing keeps them away).

    Returns:
        :data:`PARK` for elastic PSS workers that are ``gone`` when at least MIN workers remain
        without them; :data:`FAIL` when they are gone and fewer would remain, or when the policy
        refuses; :data:`RESTART` otherwise (a lost worker of a fixed-count job is restarted in place
        when the policy allows; a worker whose node is lost, below MIN, is restarted (on Slurm, on a
        node left) when the policy allows, as for a fixed count).
    """
    parkable = (strategy is Strategy.PARAMETER_SERVER and elastic_min is not None and bool(task_types)
                and all(t == "worker" for t in task_types))
    if not parkable or not gone or (retry and gone not in (LOST, NODE_LOST)):
        return WorkerFate(RESTART) if retry else WorkerFate(FAIL, why_not)
    assert elastic_min is not None
    left = workers_now - len(task_types)
    if left < elastic_min and gone == NODE_LOST and retry:  # another node can bring it back: as a fixed count
        return WorkerFate(RESTART)
    if left < elastic_min:
        return WorkerFate(FAIL, f"{why_not or gone}; parking it would leave {left} worker(s), below the MIN of "
                                f"{elastic_min} (--workers {elastic_min}:...)")
    return WorkerFate(PARK, f"parked ({gone}): training goes on with {left} worker(s), MIN {elastic_min}")
