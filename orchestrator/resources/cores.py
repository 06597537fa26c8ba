"""Tasks -> CPU cores: which cores each task of a job runs on, and its TensorFlow thread pools
(pure: the cores and the tasks in, a :class:`CpuPlan` out; :func:`assign_cores`). Shared by the
control plane (:mod:`orchestrator.resources.cpus` plans a job on this machine) and the task side (a task on
another node divides its own cores: :func:`node_share_cores`).

Several TensorFlow processes on one machine each size their thread pools to every core they
may run on, and the kernel migrates their threads between cores: co-located MWMS workers
reached 0.72-0.81 of one process's examples/s on 2 cores (issue 23). The rules:

* The **training tasks** (:func:`orchestrator.resources.cores.training_roles`: chief and workers
  under MWMS, workers alone under ParameterServerStrategy) each get their own block of
  adjacent cores, the same number each, and intra-op threads = their cores
  (``TF_NUM_INTRAOP_THREADS``, ``OMP_NUM_THREADS``; inter-op: at least 2).
* The cores the even split leaves over are kept **off the training cores** for the rest (the
  orchestrator, the warm spares, the health client's thread, the tasks that do not train: a
  PSS chief, ps, an evaluator); a job with tasks that do not train keeps at least one core
  for them when there are more cores than training tasks ("where cores allow": a core is
  taken from training only for processes that compute, never for the orchestrator's ~1 %).
  With nothing kept, the rest float over every core.
* Fewer cores than training tasks: nothing is pinned (a core per task is the least pinning
  gives), the threads are divided as before (``cores // tasks``).
* The cores divided are those this orchestrator may run on (its affinity: a user's
  ``taskset``, a container's cpuset, a Slurm step's binding): pinning stays within them.
* ``--no-pin`` (``pin_cpus: false``) turns it off: threads as before, no affinity set.

Adjacent cores (``cpu_order``: by package, then core, hyperthread siblings together) keep a
task's threads on one socket and its sibling threads on one core.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import env
from orchestrator.spec.model import JobSpec, Strategy, TaskId

INTRAOP = "TF_NUM_INTRAOP_THREADS"
INTEROP = "TF_NUM_INTEROP_THREADS"
OMP = "OMP_NUM_THREADS"


def training_roles(spec: JobSpec) -> tuple[str, ...]:
    """The roles whose tasks compute, and share the node's GPUs by default: chief and worker
    (MWMS: each holds a replica); workers alone under ParameterServerStrategy (the chief's
    ``ClusterCoordinator`` only dispatches; the workers run the steps)."""
    return ("worker",) if spec.strategy is Strategy.PARAMETER_SERVER else ("chief", "worker")


def format_cpus(cpus: Sequence[int]) -> str:
    """``0-3,8`` for cores 0, 1, 2, 3 and 8 (the kernel's cpu-list syntax, as ``taskset -c``,
    ``docker --cpuset-cpus`` and ``/proc/self/status`` write it)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class CpuPlan:
    """Every task's cores and threads.

    Attributes:
        tasks: task -> its cores, for the tasks that are pinned (absent: it floats).
        threads: task -> its intra-op threads (every task).
        service: cores kept for the orchestrator, the tasks that do not train and the spares;
            () when none are kept (they float).
        reason: why nothing is pinned ("" when something is).
        nodes: tasks on other nodes divide their node's cores there (:func:`node_share_cores`):
            what the plan says of it ("" on one machine).
    """

    tasks: Mapping[TaskId, tuple[int, ...]] = field(default_factory=dict)
    threads: Mapping[TaskId, int] = field(default_factory=dict)
    service: tuple[int, ...] = ()
    reason: str = ""
    nodes: str = ""

    @property
    def pinned(self) -> bool:
        return bool(self.tasks)

    def env(self, task: TaskId) -> dict[str, str]:
        """The task's variables: its thread limits, ``ORCH_CPUS`` (its cores: the task sets its
        own affinity before TensorFlow starts its pools) and ``ORCH_SERVICE_CPUS`` when kept."""
        out: dict[str, str] = {}
        if task in self.threads:
            n = self.threads[task]
            out.update({INTRAOP: str(n), INTEROP: str(max(2, n)), OMP: str(n)})
        if task in self.tasks:
            out[env.CPUS] = format_cpus(self.tasks[task])
        if self.service:
            out[env.SERVICE_CPUS] = format_cpus(self.service)
        return out

    def describe(self) -> str:
        """The header line: ``CPU cores: worker-0 0, worker-1 1 (others float)``."""
        if self.nodes:
            return f"CPU cores: {self.nodes}"
        if not self.pinned:
            return f"CPU cores: not pinned ({self.reason})"
        parts = [f"{t.name} {format_cpus(c)}" for t, c in self.tasks.items()]
        rest = f"orchestrator, spares and other tasks {format_cpus(self.service)}" if self.service else "others float"
        return f"CPU cores: {', '.join(parts)}; {rest}"

    def to_dict(self) -> dict[str, object]:
        return {"pinned": self.pinned, "reason": self.reason, "nodes": self.nodes, "service": format_cpus(self.service),
                "tasks": {t.name: format_cpus(c) for t, c in self.tasks.items()},
                "threads": {t.name: n for t, n in self.threads.items()}}


def assign_cores(cores: Sequence[int], training: Sequence[TaskId], others: Sequence[TaskId], *,
                 pin: bool = True, threads: int | None = None) -> CpuPlan:
    """Divide ``cores`` among the tasks (the rules of the module docstring).

    Args:
        cores: the cores this orchestrator may run on, adjacent ones next to each other
            (:func:`cpu_order`).
        training: the training tasks, in order (they get the cores in that order).
        others: the job's other tasks (PSS chief, ps, evaluator).
        pin: False for ``--no-pin``.
        threads: the spec's ``threads_per_task`` (it wins over the cores' count).

    Returns:
        The plan.
    """
    cores = list(dict.fromkeys(cores))
    everyone = [*training, *others]
    floating = max(1, len(cores) // max(1, len(everyone)))
    default = {t: threads or floating for t in everyone}
    if not pin:
        return CpuPlan(threads=default, reason="--no-pin")
    if not training:
        return CpuPlan(threads=default, reason="no training task")
    if len(cores) < len(training):
        return CpuPlan(threads=default, reason=f"{len(cores)} core(s) for {len(training)} training tasks: "
                       "pinning needs one core each")
    keep = 1 if others and len(cores) > len(training) else 0
    per = (len(cores) - keep) // len(training)
    placed = {t: tuple(cores[i * per:(i + 1) * per]) for i, t in enumerate(training)}
    service = tuple(cores[len(training) * per:])
    counts = {t: threads or per for t in training}
    for t in others:
        if service:
            placed[t] = service
        counts[t] = threads or (len(service) if service else floating)
    return CpuPlan(placed, counts, service)


def allowed_cores() -> list[int]:
    """The cores this process may run on (its affinity), adjacent ones together (:func:`cpu_order`)."""
    try:
        mine = os.sched_getaffinity(0)
    except AttributeError:  # not Linux: every core, in order
        return list(range(os.cpu_count() or 1))
    return cpu_order(mine)


def cpu_order(cpus: Sequence[int] | set[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> list[int]:
    """``cpus`` sorted by (package, core, cpu) from sysfs topology (hyperthread siblings next
    to each other); by number where the topology cannot be read."""
    def key(cpu: int) -> tuple[int, int, int]:
        try:
            top = sysfs / f"cpu{cpu}" / "topology"
            return (int((top / "physical_package_id").read_text()), int((top / "core_id").read_text()), cpu)
        except (OSError, ValueError):
            return (0, cpu, cpu)

    return sorted(cpus, key=key)


def node_share(training: int, others: int, slot: str, index: int, threads: int | None) -> str:
    """``ORCH_NODE_CPUS`` of a task on another node (Slurm): how many training and other tasks
    of the job share its node, which one it is (``slot`` ``training`` or ``others``, ``index``
    in that order) and the spec's ``threads_per_task`` (None: from the cores). The task divides
    the cores it may run on there by :func:`node_share_cores`: the same rules as one machine."""
    return json.dumps({"training": training, "others": others, "slot": slot, "index": index, "threads": threads},
                      separators=(",", ":"))


def node_share_plan(text: str, cores: Sequence[int]) -> tuple[CpuPlan, TaskId]:
    """The plan of ``cores`` (its step's cores, :func:`allowed_cores`) among the node's tasks that
    a task's ``ORCH_NODE_CPUS`` (:func:`node_share`) describes (:func:`assign_cores`), and which of
    them the task is: its variables are ``plan.env(task)``, as on one machine.

    Raises:
        ValueError: text that is not such a share.
    """
    try:
        share = json.loads(text)
        training = [TaskId("worker", i) for i in range(int(share["training"]))]
        others = [TaskId("ps", i) for i in range(int(share["others"]))]
        me = (training if share["slot"] == "training" else others)[int(share["index"])]
        threads = int(share["threads"]) if share.get("threads") else None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"bad {env.NODE_CPUS} {text!r}: {exc}") from exc
    return assign_cores(cores, training, others, threads=threads), me


def node_share_cores(text: str, cores: Sequence[int]) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """:func:`node_share_plan` for one task: (its cores, () when it floats; its intra-op threads;
    the cores kept for the others, ()).

    Raises:
        ValueError: text that is not such a share.
    """
    plan, me = node_share_plan(text, cores)
    return tuple(plan.tasks.get(me, ())), plan.threads[me], tuple(plan.service)
