"""The backend contract: what every backend must do, and what it may do.

A backend runs the planned tasks somewhere (this machine, containers, later a Slurm
allocation); the supervisor decides everything else. The shape follows the models of the
field: TorchX's ``Scheduler`` (a small interface with a side-effect-free dry run) and
torch.distributed.elastic's ``PContext`` (start, poll, two-phase close), with Ray Train's
``Backend`` habit of optional hooks that do nothing by default.

Must (abstract): :meth:`Backend.allocate`, :meth:`Backend.start`, :meth:`Backend.poll`,
:meth:`Backend.wait`, :meth:`Backend.signal`, :meth:`Backend.stop`.

May (defaults do nothing), in capabilities (:class:`Capability`, one mixin each, checked
against the backend's declaration when its class is created):

* lifecycle (:class:`LifecycleHooks`): ``open``, ``close``;
* ports (:class:`PortHooks`): ``release_port``, ``reserve_again``;
* diagnostics (:class:`DiagnosticHooks`): ``sample``, ``dump_stacks``, ``oom_killed``,
  ``memory_total_bytes``, ``job_preempted``;
* spares (:class:`SpareHooks`): ``keep_spares``, ``spares``;
* placement on other machines (:class:`PlacementHooks`): ``register_address``, ``prepare_restart``;
* exit events (:class:`ExitHooks`): ``exit_fd``;

and facts without hooks (the last six members of :class:`Capability`: ``HOST_PROCESSES`` .. ``NAMED_ADDRESSES``).
Each backend also declares its options (:attr:`Backend.options_type`, a frozen dataclass the CLI builds its flags
from: :mod:`orchestrator.backends.options`), and the class attributes :attr:`Backend.python`,
:attr:`Backend.parent_death_signal`, :attr:`Backend.health_host`.
:func:`orchestrator.backends.capability_table` lists it all, for the docs.

Exit codes everywhere follow ``subprocess.Popen.returncode``: ``>= 0`` an exit code,
``< 0`` death by that signal.
"""

from __future__ import annotations

import abc
import enum
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Iterable, Mapping, Sequence, TypeVar

from orchestrator.backends.growth import GrowsBack
from orchestrator.backends.options import NoOptions
from orchestrator.plan import Plan, TaskPlan, attempt_env
from orchestrator.resources.gpus import GpuUsage
from orchestrator.rundir import RunDir
from orchestrator.spec.model import JobSpec, TaskId


@dataclass(frozen=True)
class LaunchRequest:
    """One task attempt to start.

    Attributes:
        task: type and index of the task.
        attempt: 0 for the first attempt, +1 for each restart.
        argv: the command.
        env: every variable the orchestrator sets for this attempt (TF_CONFIG included);
            a local backend adds them to its own environment, a container backend passes
            only these.
        log_dir: ``runs/<run-id>/attempt-<n>/<task>``: where ``stdout.log`` and
            ``stderr.log`` go (the backend creates it).
        runtime: the command is a built-in task program, which runs the orchestrator's task
            runtime (``faulthandler`` on SIGUSR1); False for a user's program, which SIGUSR1
            would kill.
    """

    task: TaskId
    attempt: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log_dir: Path
    runtime: bool = True


@dataclass(eq=False)
class TaskHandle:
    """A started task attempt, as the backend knows it.

    Attributes:
        task: type and index.
        attempt: the attempt number.
        pid: pid of the task's first process as this machine sees it (0 when unknown).
        stdout_path, stderr_path: its log files.
        runtime: it runs the orchestrator's task runtime (see :class:`LaunchRequest`).
    """

    task: TaskId
    attempt: int
    pid: int
    stdout_path: Path
    stderr_path: Path
    runtime: bool = True


@dataclass(frozen=True)
class SpareRequest:
    """Warm spares to keep ready (:mod:`orchestrator.task.spare`).

    Attributes:
        count: how many to keep ready.
        argv: the task command a spare can stand in for (``python -m worker``); a start with
            exactly this argv takes a ready spare instead of a new process.
        env: the job's common task environment (no TF_CONFIG, no attempt).
        preload: modules a spare imports before it is assigned (``tensorflow``, ...; ``name?``:
            when installed).
        log_dir: where spares write their output until assigned.
        command: the spare's own command; empty for a built-in program ``python -m MODULE``
            (then ``python -m orchestrator.task.spare`` with ``ORCH_SPARE_MODULE=MODULE``). A
            user's program: ``python -m orchestrator.task.execwrap --spare -- PROGRAM``
            (:func:`orchestrator.plan.user_spare`).
    """

    count: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    preload: tuple[str, ...]
    log_dir: Path
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpareInfo:
    """One warm spare, for the live view and summary.json.

    Attributes:
        pid: its process id.
        state: ``ready`` (waiting), ``used`` (became a task), ``died`` (ended unassigned),
            ``stopped`` (not needed: removed at the end).
        task: the task it became, when used.
    """

    pid: int
    state: str
    task: str = ""


@dataclass(frozen=True)
class ProcessSample:
    """CPU and memory of a task's processes, sampled by the backend.

    Attributes:
        cpu_percent: percent of one core, summed over the task's processes.
        rss_bytes: resident memory, bytes, summed over the task's processes.
        gpus: the task's GPUs (its ``CUDA_VISIBLE_DEVICES``), sampled on this machine.
    """

    cpu_percent: float
    rss_bytes: int
    gpus: tuple[GpuUsage, ...] = ()


@dataclass(frozen=True)
class Registration:
    """The answer to a task's ``RegisterAddress`` (backends with :attr:`Capability.REMOTE`).

    Attributes:
        ready: every task this one needs has registered (the training cluster; with a tf.data
            service, the dispatcher: :mod:`orchestrator.backends.addresses`).
        address: ``host:port`` the task must serve at ("" when refused).
        tf_config: the task's TF_CONFIG as JSON when ready, else "".
        error: why the registration was refused ("" when it was not).
        env: variables the task sets before it runs, when ready (the tf.data service's
            registered addresses); empty without a service.
    """

    ready: bool
    address: str = ""
    tf_config: str = ""
    error: str = ""
    env: Mapping[str, str] = field(default_factory=dict)


H = TypeVar("H", bound=TaskHandle)


class Capability(enum.Enum):
    """What a backend can do beyond the required methods; each backend declares its set in
    :attr:`Backend.capabilities`, and callers ask :meth:`Backend.supports` instead of testing
    the backend's name.

    The first six group optional hooks (:data:`HOOKS`): a backend declares such a capability
    exactly when it overrides at least one of its hooks (checked when the class is created).
    The last six are facts about where the tasks run, with no hooks.
    """

    LIFECYCLE = "lifecycle"
    """Gets ready for a job and cleans up after it: :meth:`~LifecycleHooks.open`, :meth:`~LifecycleHooks.close`."""
    PORTS = "ports"
    """Holds each task's address between its attempts: :meth:`~PortHooks.release_port` right before the task
    binds it, :meth:`~PortHooks.reserve_again` before a restart."""
    DIAGNOSTICS = "diagnostics"
    """Sees into a task: :meth:`~DiagnosticHooks.sample` (CPU, RSS), :meth:`~DiagnosticHooks.dump_stacks`,
    :meth:`~DiagnosticHooks.oom_killed`, :meth:`~DiagnosticHooks.memory_total_bytes`, and into the job:
    :meth:`~DiagnosticHooks.job_preempted`."""
    SPARES = "spares"
    """Keeps warm spare processes: :meth:`~SpareHooks.keep_spares`, :meth:`~SpareHooks.spares`."""
    REMOTE = "remote"
    """Places tasks on other machines: the orchestrator cannot hold their ports, so each task binds one on
    its node and registers it (:meth:`~PlacementHooks.register_address`; the plan's addresses carry the
    node and port 0), and a lost machine's tasks move before a restart (:meth:`~PlacementHooks.prepare_restart`)."""
    EXIT_EVENTS = "exit-events"
    """Says when a task ends, without being polled: :meth:`~ExitHooks.exit_fd`, a file descriptor that becomes
    readable when the attempt's process exits (a pidfd of the local process: the task's own, or its ``srun``).
    Without it the supervisor polls every live task each tick."""
    HOST_PROCESSES = "host-processes"
    """Tasks are processes of this machine: its memory, its interpreters (checked before a launch)."""
    HOST_FILES = "host-files"
    """Tasks see this machine's files at the same paths (a program after ``--`` is checked here)."""
    HOST_GPUS = "host-gpus"
    """Tasks run on this machine's GPUs: the orchestrator places each on its own devices by UUID
    (:func:`orchestrator.resources.placement.place` over :func:`orchestrator.resources.gpus.discover`). Without it the
    backend's scheduler assigns the devices from the counts asked (Slurm: ``srun --gpus-per-task``)."""
    HOST_CPUS = "host-cpus"
    """Tasks run on this machine's cores: the orchestrator pins each training task to its own
    (:func:`orchestrator.resources.cpus.assign_cores` over this process's affinity; ``--no-pin`` turns it off)."""
    HOST_PORTS = "host-ports"
    """Tasks bind this machine's ports: a launch leases a block of them for its run, disjoint from every other
    live run's (:mod:`orchestrator.resources.portblocks`), and :meth:`Backend.allocate` draws the tasks' ports
    inside it. Without it the tasks' ports are not this machine's (containers on their own network, other nodes)."""
    NAMED_ADDRESSES = "named-addresses"
    """A task's address is a name on the job's network, known before the task starts, nothing to reserve (docker:
    ``worker-1:2222``): a plan may name a task not started yet (:func:`orchestrator.backends.held_slots`)."""


class LifecycleHooks:
    """Capability :attr:`Capability.LIFECYCLE`; the defaults do nothing."""

    def open(self, run_id: str, run_dir: Path) -> None:
        """Get ready for one job (connect to an engine, build an image, create a network).

        Called once, before :meth:`Backend.allocate`. Default: nothing.

        Raises:
            LaunchError: when the backend cannot run the job.
        """

    def close(self) -> None:
        """Release everything the job held (ports, containers, networks). Must not raise:
        a failure to clean up is logged, it never costs the summary. Default: nothing."""


class PortHooks:
    """Capability :attr:`Capability.PORTS`; the defaults hold nothing."""

    def release_port(self, task: TaskId, attempt: int) -> int:
        """Release the port held for ``task`` right before it binds it; returns the port, 0
        when none was held. Called from the health server thread: keep it quick. Default: 0."""
        return 0

    def reserve_again(self, task: TaskId) -> None:
        """Hold ``task``'s address again until its next attempt binds (or registers) it. Default: nothing."""


class DiagnosticHooks(Generic[H]):
    """Capability :attr:`Capability.DIAGNOSTICS`; the defaults see nothing."""

    def sample(self, handle: H) -> ProcessSample | None:
        """CPU and RSS of a task that sends no heartbeats (a user's program), or None when
        the backend cannot see its processes. Default: None."""
        return None

    def dump_stacks(self, handle: H, timeout_s: float) -> str:
        """The Python stacks of every thread of a (hung) task, as text, without killing it;
        "" when they cannot be had within ``timeout_s`` seconds. Default: ""."""
        return ""

    def oom_killed(self, handle: H) -> bool | None:
        """Whether the ended attempt was killed for memory (the kernel's or the engine's OOM
        killer): True, False, or None when the backend cannot tell. Default: None."""
        return None

    def memory_total_bytes(self, handle: H) -> int | None:
        """Memory of the node or container the attempt ran in, bytes (its limit when it has
        one), None when unknown: an RSS near it means a SIGKILL was likely the OOM killer's.
        Default: None."""
        return None

    def job_preempted(self) -> bool | None:
        """Whether the engine is preempting the whole job now (Slurm: the job's state), None
        when the backend cannot tell. Default: None."""
        return None


class SpareHooks:
    """Capability :attr:`Capability.SPARES`; the defaults keep none."""

    def keep_spares(self, request: SpareRequest) -> None:
        """Keep ``request.count`` warm spares ready (start missing ones, forget dead ones); a
        later :meth:`Backend.start` with ``request.argv`` takes one. Called every look once the job
        trains. Default: nothing (the backend has no spares)."""

    def spares(self) -> list[SpareInfo]:
        """Every spare the backend started for this job. Default: none."""
        return []


class PlacementHooks:
    """Capability :attr:`Capability.REMOTE` (placement on other machines); the defaults place
    every task where the backend assigned it."""

    name: ClassVar[str] = ""

    def register_address(self, task: TaskId, attempt: int, host: str, port: int, wait_s: float) -> Registration:
        """A task bound ``host:port`` on its node and registers it; waits at most ``wait_s``
        seconds for the rest of the training cluster. Called from the health server's worker
        threads. Default: refused (the backend assigns addresses itself)."""
        return Registration(False, error=f"the {self.name or 'this'} backend assigns every address itself")

    def prepare_restart(self, tasks: Sequence[TaskId]) -> tuple[bool, str]:
        """Called by the supervisor when it is about to restart ``tasks`` (before their new
        attempts are planned): the backend may re-place them (a Slurm node was lost: move its
        tasks to the nodes left). Returns ``(True, note)`` when they can be started again, the
        note ("" for none) said as an event, or ``(False, why)`` when they cannot (not enough
        nodes left): the job then fails with that reason. Default: ``(True, "")``."""
        return True, ""


class ExitHooks(Generic[H]):
    """Capability :attr:`Capability.EXIT_EVENTS`; the default gives no event (the task is polled)."""

    def exit_fd(self, handle: H) -> int | None:
        """A new file descriptor that becomes readable once ``handle``'s attempt may have ended (then
        :meth:`Backend.poll` says its code), or None when the backend cannot give one (the supervisor
        then polls the attempt every tick). The caller owns the descriptor and closes it. Called once
        per started attempt, from the supervisor's thread. Default: None."""
        return None


class LostNodes:
    """Which of a job's nodes are lost (gone, cut off: their tasks cannot be restarted there), a
    concern of its own (:attr:`Backend.lost_nodes`). This default knows of none: every task runs
    where the backend can always start it again (local, docker)."""

    def node_of(self, task: TaskId) -> str | None:
        """The node ``task`` was placed on when that node is lost, else None. Asked by the
        supervisor after a failure of an elastic job's worker (an elastic MWMS group then continues
        one smaller without it); bounded (a probe of the node waits a few seconds at most); never
        raises. A backend that answers a node places no task of a later :meth:`Backend.allocate` on
        it. Default: None."""
        return None


HOOKS: Mapping[Capability, tuple[type, tuple[str, ...]]] = {
    Capability.LIFECYCLE: (LifecycleHooks, ("open", "close")),
    Capability.PORTS: (PortHooks, ("release_port", "reserve_again")),
    Capability.DIAGNOSTICS: (DiagnosticHooks, ("sample", "dump_stacks", "oom_killed", "memory_total_bytes",
                                               "job_preempted")),
    Capability.SPARES: (SpareHooks, ("keep_spares", "spares")),
    Capability.REMOTE: (PlacementHooks, ("register_address", "prepare_restart")),
    Capability.EXIT_EVENTS: (ExitHooks, ("exit_fd",)),
}
"""Each capability with hooks: the mixin that declares them (with their do-nothing defaults) and their names."""


def overridden_hooks(cls: type) -> dict[Capability, tuple[str, ...]]:
    """The optional hooks ``cls`` implements (overrides, itself or a base below
    :class:`Backend`), by capability; capabilities with none are left out."""
    found: dict[Capability, tuple[str, ...]] = {}
    for capability, (mixin, names) in HOOKS.items():
        own = tuple(n for n in names if next(k for k in cls.__mro__ if n in vars(k)) is not mixin)
        if own:
            found[capability] = own
    return found


class Backend(LifecycleHooks, PortHooks, DiagnosticHooks[H], SpareHooks, PlacementHooks, ExitHooks[H], abc.ABC):
    """Runs task attempts; the supervisor decides when.

    The optional hooks come in capabilities (:class:`Capability`), one mixin each, whose
    defaults do nothing, so the supervisor calls them unconditionally; a backend declares
    what it does in :attr:`capabilities` and callers ask :meth:`supports`.

    Class attributes (override where they differ):
        name: the ``--backend`` value.
        summary: one line on where the tasks run (``--backend`` help, the docs).
        options_type: the backend's options, a frozen dataclass whose fields declare the
            command-line flags (:func:`orchestrator.backends.options.option`); the constructor
            takes an instance of it (None: the defaults).
        capabilities: what it can do. Left undeclared (None), it is derived from the hooks the
            class overrides (a test's fake backend); declared, it is checked against them
            when the class is created.
        python: interpreter of the built-in task commands (``python -m worker``).
        parent_death_signal: True when tasks are this process's children and may set
            ``PR_SET_PDEATHSIG`` (the plan then carries ``ORCH_ORCHESTRATOR_PID``).
        health_host: the address the health endpoint binds, reachable by the tasks.
        lost_nodes: which nodes are lost (:class:`LostNodes`; the default knows of none).

    Raises:
        TypeError: (at class creation) declared capabilities that do not match the hooks
            the class overrides.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    options_type: ClassVar[type[Any]] = NoOptions
    capabilities: ClassVar[frozenset[Capability] | None] = None
    python: str = sys.executable
    parent_death_signal: bool = True
    health_host: str = "127.0.0.1"
    lost_nodes: LostNodes = LostNodes()
    growth: GrowsBack | None = None

    def __init__(self, options: Any = None) -> None:
        """``options``: an instance of :attr:`options_type`, or None for its defaults."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hooks = overridden_hooks(cls)
        declared = cls.__dict__.get("capabilities")
        if declared is None:
            if cls.capabilities is None:
                return
            declared = cls.capabilities
        wrong = [f"overrides {', '.join(names)} but does not declare Capability.{c.name}"
                 for c, names in hooks.items() if c not in declared]
        wrong += [f"declares Capability.{c.name} but overrides none of {', '.join(HOOKS[c][1])}"
                  for c in declared if c in HOOKS and c not in hooks]
        if wrong:
            raise TypeError(f"{cls.__qualname__} " + "; ".join(wrong) + ": make its capabilities match its hooks")

    @classmethod
    def declared_capabilities(cls) -> frozenset[Capability]:
        """:attr:`capabilities`, or the ones its overridden hooks imply when undeclared."""
        if cls.capabilities is not None:
            return cls.capabilities
        return frozenset(overridden_hooks(cls))

    @classmethod
    def supports(cls, capability: Capability) -> bool:
        """Whether the backend has ``capability`` (the one query to use instead of its name)."""
        return capability in cls.declared_capabilities()

    # -- required ----------------------------------------------------------------------------
    @abc.abstractmethod
    def allocate(self, spec: JobSpec, ports: tuple[int, int] | None = None) -> dict[TaskId, str]:
        """``host:port`` of every task of ``spec`` (side-effect free apart from holding ports).

        ``ports``: ``[low, high)``, the run's block of this machine's ports from the lease ledger
        (given only to a backend with :attr:`Capability.HOST_PORTS`, for a spec without fixed
        addresses): draw the tasks' ports inside it. Others ignore it.

        Raises:
            SpecError: a fixed address the backend cannot use.
            LaunchError: when addresses cannot be had.
        """

    def preview_addresses(self, spec: JobSpec) -> dict[TaskId, str]:
        """The addresses the dry run shows, with no effect at all: nothing bound, held or
        created (TorchX's ``_submit_dryrun``); every check of :meth:`allocate` that needs none.
        Default: :meth:`allocate`, for backends whose ``allocate`` holds nothing (docker: service
        names; slurm: nodes with port 0); a backend that holds ports overrides it (local).

        Raises:
            SpecError: a fixed address the backend cannot use.
        """
        return self.allocate(spec)

    @abc.abstractmethod
    def start(self, request: LaunchRequest) -> H:
        """Start one task attempt; returns its handle at once (do not wait for the task).

        Raises:
            LaunchError: when it cannot be started.
        """

    @abc.abstractmethod
    def poll(self, handle: H) -> int | None:
        """The attempt's exit code (negative: signal), or None while it runs. Cheap: called
        when the attempt's :meth:`~ExitHooks.exit_fd` is readable, or every tick for an attempt
        without one."""

    @abc.abstractmethod
    def wait(self, handle: H, timeout_s: float) -> int | None:
        """Wait at most ``timeout_s`` seconds for the attempt to end; its exit code or None."""

    @abc.abstractmethod
    def signal(self, handle: H, signum: int) -> None:
        """Send ``signum`` to the task (its whole process group); no-op once it ended."""

    @abc.abstractmethod
    def stop(self, handles: Iterable[H], timeout_s: float, abort: threading.Event | None = None) -> None:
        """Stop tasks in two phases on one monotonic deadline: SIGTERM, then SIGKILL what is
        left after ``timeout_s`` seconds, or at once when ``abort`` is set (a second Ctrl-C).
        Returns once every one of them has ended.

        Raises:
            LaunchError: when a task survives SIGKILL.
        """


def start_attempt(backend: Backend[H], plan: Plan, task: TaskPlan, attempt: int, workers: int | None = None) -> H:
    """Start attempt ``attempt`` of ``task`` with its environment and log directory (the loop's starts, a launch's
    first wave); a user's program binds its port without asking: its held port is released first. ``workers``: the
    workers its ``TF_CONFIG`` names (:func:`~orchestrator.plan.attempt_env`). Raises LaunchError."""
    if not task.reports_heartbeats:
        backend.release_port(task.task, attempt)
    return backend.start(LaunchRequest(task.task, attempt, task.argv, attempt_env(plan, task.task, attempt, workers),
                                       RunDir(plan.run_dir).task(attempt, task.task), runtime=task.reports_heartbeats))
