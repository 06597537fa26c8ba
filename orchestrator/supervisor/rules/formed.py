"""The formed-vs-planned check: did the training tasks form the cluster the orchestrator planned?

A program that builds its own cluster (a hard-coded ``TF_CONFIG``, ``SlurmClusterResolver``
inside one-task steps) trains alone in every task: N solo trainings that each exit 0 look
like one N-worker success. Each training task reports what its strategy formed
(:mod:`orchestrator.task.formed`: ``replicas_in_sync`` and ``cluster_workers``, from the Keras
callback, ``report(strategy=...)`` or the built-in worker), and this module compares it with
the plan (docs/failure-handling.md, "Formed vs planned"):

* the cluster its strategy resolved must have the planned chief and workers (MWMS and PSS);
* under MultiWorkerMirroredStrategy every worker adds at least one replica in sync
  (``tf.distribute`` docs: ``num_replicas_in_sync`` counts the replicas of every worker), so
  ``replicas_in_sync`` below the planned workers is a cluster that never formed.

A mismatch is a loud warning in the live view and the final report; under MWMS it fails the
job unless ``supervision.allow_cluster_mismatch`` (``--allow-cluster-mismatch``) says it is
intended. Other strategies (``mirrored``, ``hogwild``: one task) are not checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.spec.model import JobSpec, Strategy, TaskId

REPLICAS_IN_SYNC = "replicas_in_sync"
CLUSTER_WORKERS = "cluster_workers"
"""The heartbeat metrics a task reports (the names of :mod:`orchestrator.task.formed`)."""

CHECKED = (Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER)


def planned_workers(spec: JobSpec, workers: int | None = None) -> int:
    """The chief and workers of the planned training cluster (what a strategy's cluster
    resolver should count); ``workers``: the workers its ``TF_CONFIG`` names (a PSS job below MAX
    whose slots above its start are held: docs/elastic.md), None: the spec's."""
    return spec.chief + (spec.workers if workers is None else workers)


def checked_tasks(spec: JobSpec) -> set[TaskId]:
    """The tasks whose report is compared: the training tasks (chief and MWMS workers, the PSS
    coordinator); none for a strategy that is not checked."""
    return set(spec.trainers()) | {spec.coordinator} if spec.strategy in CHECKED else set()


def is_checked(spec: JobSpec, task: TaskId) -> bool:
    """``task in checked_tasks(spec)`` in O(1) (a status of 10,000 tasks asks it of each)."""
    if spec.strategy not in CHECKED:
        return False
    return task == spec.coordinator or (task.task_type in ("chief", "worker") and not spec.serves_forever(task))


def mismatch(spec: JobSpec, task: TaskId, metrics: Mapping[str, float], in_cluster: int | None = None) -> str | None:
    """What ``task`` formed, in words, when it is not the planned cluster; None when it is, or
    when the task reported nothing to compare (``metrics``: its heartbeat metrics; ``in_cluster``:
    the workers its ``TF_CONFIG`` named, :func:`planned_workers`).

    Returns:
        e.g. ``worker-0 formed replicas_in_sync 1 and a cluster of 1 worker(s), 2 planned``.
    """
    if not is_checked(spec, task):
        return None
    replicas, workers = metrics.get(REPLICAS_IN_SYNC), metrics.get(CLUSTER_WORKERS)
    planned = planned_workers(spec, in_cluster)
    wrong = workers is not None and int(workers) != planned
    if spec.strategy is Strategy.MULTI_WORKER_MIRRORED and replicas is not None and int(replicas) < planned:
        wrong = True
    if not wrong:
        return None
    parts = []
    if replicas is not None:
        parts.append(f"replicas_in_sync {int(replicas)}")
    if workers is not None:
        parts.append(f"a cluster of {int(workers)} worker(s)")
    return f"{task.name} formed {' and '.join(parts)}, {planned} planned (chief + workers)"


def mismatches(spec: JobSpec, reports: Iterable[tuple[TaskId, Mapping[str, float]]],
               in_cluster: int | None = None) -> list[str]:
    """:func:`mismatch` of every task's report (``(task, metrics)`` pairs), in order."""
    return [m for task, metrics in reports if (m := mismatch(spec, task, metrics, in_cluster)) is not None]


def fails_job(spec: JobSpec) -> bool:
    """Whether a mismatch fails the job: under MWMS, unless the user said it is intended."""
    return spec.strategy is Strategy.MULTI_WORKER_MIRRORED and not spec.supervision.allow_cluster_mismatch


def warning(text: str, spec: JobSpec) -> str:
    """The loud line for a mismatch ``text`` (:func:`mismatch`), with what happens and the fix."""
    head = f"WARNING: {text}: the tasks did not train as one cluster (a TF_CONFIG or cluster resolver of the " \
           "program's own?)"
    if spec.strategy is not Strategy.MULTI_WORKER_MIRRORED:
        return head
    if spec.supervision.allow_cluster_mismatch:
        return head + "; allowed by supervision.allow_cluster_mismatch"
    return head + "; failing the job: train with the TF_CONFIG the orchestrator sets, or pass " \
                  "--allow-cluster-mismatch if this is intended"


def summary_field(spec: JobSpec, reports: Iterable[tuple[TaskId, Mapping[str, float]]],
                  in_cluster: int | None = None) -> dict[str, object]:
    """``summary.json``'s ``cluster_check``: the planned chief + workers (``in_cluster``: the workers
    the last ``TF_CONFIG`` named, :func:`planned_workers`), what each checked task reported it formed,
    the mismatches, and whether they were allowed."""
    reports = list(reports)
    formed = {task.name: {k: int(metrics[k]) for k in (REPLICAS_IN_SYNC, CLUSTER_WORKERS) if k in metrics}
              for task, metrics in reports if is_checked(spec, task)}
    return {
        "checked": spec.strategy in CHECKED,
        "planned_workers": planned_workers(spec, in_cluster),
        "formed": {name: values for name, values in formed.items() if values},
        "mismatches": mismatches(spec, reports, in_cluster),
        "allowed": bool(spec.supervision.allow_cluster_mismatch),
    }


class FormedCheck:
    """The check as the supervisor runs it: each task's report compared once per attempt.

    Args:
        spec: the job's spec.
    """

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self._said: set[tuple[str, int, str]] = set()
        self.failure: str | None = None  # the mismatch that fails the job (MWMS, not allowed)

    def beat(self, task: TaskId, attempt: int, metrics: Mapping[str, float],
             in_cluster: int | None = None) -> list[str]:
        """A heartbeat's metrics of ``task``'s ``attempt`` (``in_cluster``: the workers its ``TF_CONFIG``
        names, :func:`planned_workers`): the warning to show when it reports a mismatch not shown
        before (else none); sets :attr:`failure` when it fails the job."""
        if REPLICAS_IN_SYNC not in metrics and CLUSTER_WORKERS not in metrics:
            return []
        text = mismatch(self.spec, task, metrics, in_cluster)
        if text is None or (task.name, attempt, text) in self._said:
            return []
        self._said.add((task.name, attempt, text))
        if fails_job(self.spec) and self.failure is None:
            self.failure = f"{text}: the tasks did not train as one cluster; pass --allow-cluster-mismatch " \
                           "if this is intended"
        return [warning(text, self.spec)]
