"""Tasks -> GPUs: which devices each task of a job gets (pure: a spec and an inventory in, a
:class:`Placement` out).

The rules (issue 20; the failure they prevent is tensorflow#39110: every task of a node sees
every GPU, the first TensorFlow process maps nearly all memory of each, the others fail with
CUDA out-of-memory at start):

* Each task gets a **disjoint** set of devices, named by UUID in its ``CUDA_VISIBLE_DEVICES``
  (indices could shift between enumerations; UUIDs cannot).
* ``gpus_per_task`` (``--gpus-per-task N``: chief and worker N each) says how many; a role left
  out: a training task (chief and worker; worker alone under ParameterServerStrategy, whose chief
  only dispatches) gets the node's remaining GPUs split evenly, ps and evaluator get none (a ps
  holds variables on its CPU; an evaluator asks for one explicitly).
* A task with no device on a node with GPUs gets ``CUDA_VISIBLE_DEVICES=""``: it sees none,
  rather than all of them.
* More asked than the node has is bad input (:class:`~orchestrator.errors.SpecError`), and so
  is any GPU asked on a node without one; both name the flag and what the node has.
* Sharing only when asked (``--share-gpus``): devices are then dealt round-robin, and every task
  on a GPU gets ``TF_FORCE_GPU_ALLOW_GROWTH=true`` so none maps a whole device (TF's
  ``allow_growth`` option: allocate as needed instead of up front).
* A backend whose scheduler assigns devices (Slurm: ``srun --gpus-per-task``, which sets
  ``CUDA_VISIBLE_DEVICES`` per step) is given counts only (no inventory, ``devices`` empty).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.resources.cores import training_roles
from orchestrator.resources.elastic import largest_that_fits, shrunk_note
from orchestrator.resources.gpus import VISIBLE_ENV, Gpu, Inventory
from orchestrator.spec.model import JobSpec, TaskId

GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
"""TensorFlow's switch for ``allow_growth`` on every GPU of the process (``gpu_bfc_allocator``)."""


@dataclass(frozen=True)
class TaskGpus:
    """The GPUs of one task.

    Attributes:
        count: how many it holds (or asks its scheduler for).
        devices: the devices, when this orchestrator assigns them; () when the scheduler does.
    """

    count: int = 0
    devices: tuple[Gpu, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"count": self.count, "devices": [g.to_dict() for g in self.devices]}


@dataclass(frozen=True)
class Placement:
    """Every task's GPUs.

    Attributes:
        tasks: task -> its GPUs (every task of the spec).
        node_gpus: how many GPUs the node has (0 also when unknown: the scheduler assigns).
        share: devices may be shared (``--share-gpus``).
        by_scheduler: the backend's scheduler assigns the devices (Slurm).
        warnings: one line each, for the plan.
    """

    tasks: Mapping[TaskId, TaskGpus] = field(default_factory=dict)
    node_gpus: int = 0
    share: bool = False
    by_scheduler: bool = False
    warnings: tuple[str, ...] = ()

    def of(self, task: TaskId) -> TaskGpus:
        return self.tasks.get(task, TaskGpus())

    def env(self, task: TaskId) -> dict[str, str]:
        """The variables of ``task``: ``ORCH_GPUS`` (its count) when any task holds a GPU;
        ``CUDA_VISIBLE_DEVICES`` by UUID (empty: no device) on a node with GPUs whose devices
        this orchestrator assigns; ``TF_FORCE_GPU_ALLOW_GROWTH=true`` on shared devices."""
        mine = self.of(task)
        out = {env.GPUS: str(mine.count)} if self.any else {}
        if self.node_gpus and not self.by_scheduler:
            out[VISIBLE_ENV] = ",".join(g.uuid for g in mine.devices)
        if self.share and mine.count:
            out[GROWTH_ENV] = "true"
        return out

    def describe(self) -> str:
        """The header line: ``GPUs: worker-0 0 (GPU-8f3c...), worker-1 1 (GPU-...), ps-0 none``."""
        if self.by_scheduler:
            return "GPUs (assigned by the scheduler): " + ", ".join(
                f"{t.name} {g.count}" for t, g in self.tasks.items() if g.count)
        parts = []
        for task, mine in self.tasks.items():
            held = ", ".join(f"{g.index} ({g.uuid})" for g in mine.devices) if mine.devices else "none"
            parts.append(f"{task.name} {held}")
        return ("GPUs (shared, memory growth on): " if self.share else "GPUs: ") + "; ".join(parts)

    @property
    def any(self) -> bool:
        """Some task holds (or asks for) a GPU."""
        return any(t.count for t in self.tasks.values())


NO_GPUS = Placement()
"""No task holds a GPU (a node without one, nothing asked)."""


def _flag_value(spec: JobSpec) -> int | str:
    counts = dict(spec.gpus_per_task)
    if counts and set(counts) <= set(training_roles(spec)) and len(set(counts.values())) == 1:
        return next(iter(counts.values()))
    return ",".join(f"{role}={n}" for role, n in counts.items())


def wanted(spec: JobSpec) -> dict[TaskId, int | None]:
    """GPUs each task asks for; None: a training task left to the even split."""
    out: dict[TaskId, int | None] = {}
    for task in spec.tasks():
        if task.task_type in spec.gpus_per_task:
            out[task] = spec.gpus_per_task[task.task_type]
        else:
            out[task] = None if task.task_type in training_roles(spec) else 0
    return out


def place(spec: JobSpec, inventory: Inventory | None) -> Placement:
    """Place the tasks of ``spec`` on the GPUs of ``inventory`` (one node: local, docker).

    Args:
        spec: the validated spec (``gpus_per_task``, ``share_gpus``).
        inventory: the node's GPUs; None when the backend's scheduler assigns them (Slurm):
            then only the counts asked are kept, and a task left out asks for none.

    Returns:
        The placement.

    Raises:
        SpecError: GPUs asked on a node without one, more asked than it has, or one task
            asking for more than the node has (``--share-gpus`` included); the message names
            ``--gpus-per-task`` and the node's GPUs.
    """
    asked = wanted(spec)
    if inventory is None:
        return Placement({t: TaskGpus(n or 0) for t, n in asked.items()}, share=spec.share_gpus, by_scheduler=True)
    gpus = inventory.gpus
    explicit = {t: n for t, n in asked.items() if n}
    if explicit and not gpus:
        why = f" ({inventory.problem})" if inventory.problem else ""
        raise SpecError("gpus-per-task", _flag_value(spec), f"no GPU was found on this node{why}",
                        "drop --gpus-per-task, or run on a node with NVIDIA GPUs (`doctor` lists what it finds)")
    if not gpus:
        return NO_GPUS
    biggest = max(explicit.values(), default=0)
    total = sum(explicit.values())
    listing = "; ".join(g.describe() for g in gpus)
    have = f"this node has {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({listing})"
    if biggest > len(gpus):
        raise SpecError("gpus-per-task", _flag_value(spec), f"a task asks for {biggest} GPUs, {have}",
                        f"use --gpus-per-task {len(gpus)} or less")
    if total > len(gpus) and not spec.share_gpus:
        raise SpecError("gpus-per-task", _flag_value(spec),
                        f"{len(explicit)} task(s) ask for {total} GPUs together, {have}",
                        f"use --gpus-per-task {max(1, len(gpus) // len(explicit))} with fewer tasks, "
                        "or --share-gpus to share devices (memory growth on)")
    default = [t for t, n in asked.items() if n is None]
    warnings: list[str] = []
    counts = {t: n or 0 for t, n in asked.items()}
    if default:
        free = len(gpus) if spec.share_gpus else len(gpus) - total
        per = free // len(default)
        if spec.share_gpus:
            per = max(1, per)
        elif per == 0:
            warnings.append(f"{len(default)} training task(s) and {free} free GPU(s) on this node: too few for one "
                            "each, so they run without a GPU; --share-gpus shares the devices (memory growth on), "
                            "or use fewer workers")
        counts.update({t: per for t in default})
    placed: dict[TaskId, TaskGpus] = {}
    cursor = 0
    for task in spec.tasks():
        n = counts[task]
        if spec.share_gpus:
            devices = tuple(gpus[(cursor + j) % len(gpus)] for j in range(n))
        else:
            devices = tuple(gpus[cursor:cursor + n])
        cursor += n
        placed[task] = TaskGpus(n, devices)
    return Placement(placed, len(gpus), spec.share_gpus, warnings=tuple(warnings))


def place_elastic(spec: JobSpec, inventory: Inventory | None) -> tuple[JobSpec, Placement]:
    """:func:`place`, and for elastic workers (``--workers MIN:MAX``) that cannot all be placed at
    their size, the largest size down to MIN that can (docs/elastic.md;
    :func:`orchestrator.resources.elastic.largest_that_fits`): the spec at that size and its
    placement, with a warning naming both sizes.

    Raises:
        SpecError: as :func:`place` at the spec's size, when no size down to MIN can be placed either.
    """
    def attempt(sized: JobSpec) -> Placement | SpecError:
        try:
            return place(sized, inventory)
        except SpecError as exc:
            return exc

    tried, fit = largest_that_fits(spec, attempt, lambda outcome: isinstance(outcome, Placement))
    refusal = tried[0][1]
    if fit is None:
        assert isinstance(refusal, SpecError)
        raise refusal
    sized, placement = tried[fit]
    assert isinstance(placement, Placement)
    if fit == 0:
        return spec, placement
    assert isinstance(refusal, SpecError)
    note = shrunk_note(spec, sized.workers, refusal.problem)
    return sized, dataclasses.replace(placement, warnings=(*placement.warnings, note))


def srun_gpu_options(task_env: Mapping[str, str]) -> list[str]:
    """``srun`` options for the task's GPUs (``ORCH_GPUS``, set when a task of the job holds one):
    ``--gpus-per-task=N``, Slurm then picks the devices on the node and sets the step's
    ``CUDA_VISIBLE_DEVICES`` (and confines it to them with ``ConstrainDevices``); a task with none
    gets ``--gres=none``, since a step without a request is otherwise given every GRES of the
    allocation (``srun --gres``). A job without GPUs gets no option at all."""
    count = task_env.get(env.GPUS)
    if count is None:
        return []
    return [f"--gpus-per-task={int(count)}"] if int(count) else ["--gres=none"]
