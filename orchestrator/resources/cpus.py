"""A job's tasks -> this machine's CPU cores (:func:`plan_cpus`), and each task's share of its
node's cores on a backend whose tasks run on other nodes (:func:`node_share_env`). The rules and
the pure division are :mod:`orchestrator.resources.cores` (shared with the task side)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator import env
from orchestrator.resources.cores import (
    INTEROP,
    INTRAOP,
    OMP,
    CpuPlan,
    allowed_cores,
    assign_cores,
    cpu_order,
    format_cpus,
    node_share,
    training_roles,
)
from orchestrator.spec.model import JobSpec, TaskId

SLURM_CPU_BIND = "SLURM_CPU_BIND"
"""Set by ``srun``/``sbatch --cpu-bind`` (Slurm's srun(1)); the steps then inherit the user's binding."""

__all__ = ["INTEROP", "INTRAOP", "OMP", "CpuPlan", "allowed_cores", "assign_cores", "cpu_order", "format_cpus",
           "node_cpus_plan", "node_share_env", "plan_cpus"]


def plan_cpus(spec: JobSpec, cores: Sequence[int] | None = None) -> CpuPlan:
    """Every task of ``spec`` on this machine's cores: :func:`assign_cores` over ``cores``
    (default: this process's own affinity, :func:`allowed_cores`: a user's ``taskset``, a
    container's cpuset or a Slurm step's binding is respected: pinning stays within it)."""
    roles = training_roles(spec)
    tasks = spec.tasks()
    return assign_cores(allowed_cores() if cores is None else cores, [t for t in tasks if t.task_type in roles],
                        [t for t in tasks if t.task_type not in roles], pin=spec.pin_cpus,
                        threads=spec.threads_per_task)


def node_cpus_plan(spec: JobSpec, environ: Mapping[str, str]) -> CpuPlan:
    """The plan's ``cpus`` on a backend whose tasks run on other nodes (Slurm): each task divides
    its node's cores there (:func:`node_share_env`), unless ``--no-pin`` or the user binds the
    steps themselves (``SLURM_CPU_BIND`` in ``environ``: ``--cpu-bind`` of their ``sbatch`` or
    ``salloc``; Slurm then binds every step and the orchestrator leaves it so)."""
    if not spec.pin_cpus:
        return CpuPlan(reason="--no-pin")
    if environ.get(SLURM_CPU_BIND):
        return CpuPlan(reason=f"Slurm binds the steps ({SLURM_CPU_BIND}={environ[SLURM_CPU_BIND]})")
    return CpuPlan(nodes="each node's cores divided among the job's tasks on it, by each task (its step's cores)")


def node_share_env(spec: JobSpec, placement: Mapping[TaskId, str], task: TaskId) -> dict[str, str]:
    """``ORCH_NODE_CPUS`` for ``task`` on its node of ``placement`` (task -> node; Slurm places the
    tasks, several per node with ``--tasks-per-node``): the task divides the cores its step may
    run on among the job's tasks on that node there, as :func:`plan_cpus` does on one machine
    (:func:`orchestrator.resources.cores.node_share_cores`). Empty with ``--no-pin``.

    Slurm binds a step only with a task plugin (``task/affinity``, ``task/cgroup``) and binds
    steps run with ``--overlap`` to the same cores, so the division is the task's own; a user who
    binds steps themselves (``SLURM_CPU_BIND``, their ``--cpu-bind``) gets no division (the backend
    does not call this).
    """
    if not spec.pin_cpus or task not in placement:
        return {}
    roles = training_roles(spec)
    here = [t for t in spec.tasks() if placement.get(t) == placement[task]]
    training = [t for t in here if t.task_type in roles]
    others = [t for t in here if t.task_type not in roles]
    slot, group = ("training", training) if task in training else ("others", others)
    return {env.NODE_CPUS: node_share(len(training), len(others), slot, group.index(task), spec.threads_per_task)}
