"""Backend options, declared once: a frozen dataclass per backend whose fields are its options.

The shape is TorchX's ``runopts`` (name, type, default, help per option) and Ray's config
dataclasses: a backend names its options class in
:attr:`orchestrator.backends.base.Backend.options_type`, each field carries its help in its
metadata (:func:`option`), and everything else reads the declaration: the CLI builds its
flags from it (:mod:`orchestrator.cli.backend`), the Python API turns a mapping into it
(:func:`options_from_mapping`), and the docs list it
(:func:`orchestrator.backends.capability_table`). Adding an option is one field.

Each backend's :class:`Declaration` (its name, summary and options: :data:`DECLARED`) lives here
too, beside its options and apart from its class: the CLI builds ``--backend`` and every
backend's flags from them, and a backend's module is imported only when that backend is used
(:class:`orchestrator.backends.Registry`): a local launch never imports the docker or slurm
backend before its tasks start (docs/architecture.md, "What a launch spends").
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from orchestrator.errors import SpecError
from orchestrator.spec.containers import ContainerSpec
from orchestrator.spec.sizes import DEFAULT_SHM_SIZE_BYTES, parse_size

FLAG = "orchestrator.flag"
"""Metadata key of a field: the option's help when it is a command-line flag, None when it is
not (a callback, an environment for tests: the Python API only)."""
METAVAR = "orchestrator.metavar"
ORPHAN_TIMEOUT_S = 30.0
"""A task of the docker or slurm backend that cannot reach its orchestrator this long after it
could kills itself (the default of their ``orphan_timeout_s``)."""


def option(help: str | None, *, metavar: str | None = None) -> dict[str, Any]:
    """Field metadata declaring an option: ``field(default=None, metadata=option("..."))``.

    Args:
        help: the flag's help (without the backend's name: the CLI prefixes it); None for an
            option of the Python API only, with no flag.
        metavar: the flag's metavar (default: argparse's).
    """
    return {FLAG: help, METAVAR: metavar}


def check_orphan_timeout(value: Any) -> None:
    """The ``orphan_timeout_s`` option of the backends whose tasks run where no parent-death
    signal reaches them (containers, other nodes): a number of seconds > 0.

    Raises:
        SpecError: naming the option and the fix.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SpecError("orphan_timeout_s", value, "must be a number of seconds > 0", "e.g. --orphan-timeout-s 30")


@dataclass(frozen=True)
class NoOptions:
    """The options of a backend that takes none."""


@dataclass(frozen=True)
class LocalOptions:
    """The local backend's options."""

    isolate_network: bool = field(default=False, metadata=option(
        "every task of the run in one network namespace of its own with only loopback: TensorFlow's ports "
        "unreachable from outside the run (docs/security.md)"))


@dataclass(frozen=True)
class DockerOptions:
    """Options of the docker backend (each a ``launch`` flag unless said otherwise).

    Attributes:
        image: image to run as it is; default: the project image, built when missing
            (:func:`orchestrator.backends.image.ensure_image`).
        base_image: base of that image (default ``$ORCH_DOCKER_BASE_IMAGE`` or python:3.11-slim).
        ca_bundle: CA bundle pip trusts while building the image (Python API only).
        progress: called with build output lines (Python API only; the CLI prints them).
        orphan_timeout_s: seconds a task keeps running once it cannot reach its orchestrator
            (no parent-death signal crosses into a container: its heartbeat watchdog), then it
            kills itself; > 0. Short: a lost orchestrator frees the GPUs sooner; long: a task
            outlives a longer network partition.
        shm_size: the size of each container's ``/dev/shm`` (``1G``, ``512M``); None (default): the
            spec's ``containers.shm_size`` (:func:`with_container_sizes`), 1G unless set
            (:data:`orchestrator.spec.sizes.DEFAULT_SHM_SIZE_BYTES`; Docker's own default, 64 MB,
            is outgrown by multi-process data loading and NCCL, with a ``Bus error``).
        memory: each container's memory limit (``8G``); None (default): the spec's
            ``containers.memory``, none unless set. A task past it is killed by the kernel's OOM
            killer, which the failure report names.
        isolate_network: the job's network is ``--internal`` (no route out of it; TF's ports
            are never published either way) and tasks reach the orchestrator through
            ``runs/<run-id>/health.sock`` in the bind-mounted run directory.

    Raises:
        SpecError: ``orphan_timeout_s`` is not > 0, ``shm_size`` or ``memory`` is not a size.
    """

    image: str | None = field(default=None, metadata=option(
        "image to run as it is (default: the project image, built from docker/Dockerfile when missing, tagged by "
        "the hash of its files)"))
    base_image: str | None = field(default=None, metadata=option(
        "base of the project image (default $ORCH_DOCKER_BASE_IMAGE or python:3.11-slim)"))
    ca_bundle: str | None = field(default=None, metadata=option(None))
    progress: Callable[[str], None] | None = field(default=None, metadata=option(None))
    orphan_timeout_s: float = field(default=ORPHAN_TIMEOUT_S, metadata=option(
        f"seconds a task keeps running once its orchestrator is unreachable, then it stops itself (default "
        f"{ORPHAN_TIMEOUT_S:g})", metavar="SECONDS"))
    shm_size: str | None = field(default=None, metadata=option(
        "size of each container's /dev/shm (default: the spec file's containers.shm_size, else 1G; Docker's own "
        "64M is outgrown by multi-process data loading and NCCL: a Bus error)", metavar="SIZE"))
    memory: str | None = field(default=None, metadata=option(
        "memory limit of each task's container (e.g. 8G; default: the spec file's containers.memory, else none): "
        "a task past it is OOM-killed, and the failure report says so", metavar="SIZE"))
    isolate_network: bool = field(default=False, metadata=option(
        "every task of the run in one network namespace of its own with only loopback: TensorFlow's ports "
        "unreachable from outside the run (docs/security.md)"))

    def __post_init__(self) -> None:
        check_orphan_timeout(self.orphan_timeout_s)
        self.shm_size_bytes  # noqa: B018 - validated here, at the flag, before anything starts
        self.memory_bytes  # noqa: B018

    @property
    def shm_size_bytes(self) -> int:
        """``shm_size`` in bytes (at least 1 MiB; 1 GiB when not given).

        Raises:
            SpecError: not a size, or below 1M.
        """
        if self.shm_size is None:
            return DEFAULT_SHM_SIZE_BYTES
        size = parse_size("shm-size", self.shm_size, "e.g. --shm-size 1G")
        if size < 1 << 20:
            raise SpecError("shm-size", self.shm_size, "must be at least 1M", "e.g. --shm-size 1G")
        return size

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes, None for no limit (at least 64 MiB).

        Raises:
            SpecError: not a size, or below 64M.
        """
        if self.memory is None:
            return None
        size = parse_size("memory", self.memory, "e.g. --memory 8G")
        if size < 64 << 20:
            raise SpecError("memory", self.memory, "must be at least 64M", "e.g. --memory 8G")
        return size


def with_container_sizes(options: Any, containers: ContainerSpec) -> Any:
    """``options`` with the sizes it was not given (``shm_size``, ``memory`` left at None) taken from
    the spec's ``containers`` section, for a backend whose options declare them (docker); other
    options are returned as they are. Given options win (the CLI's flag is in both already).

    Raises:
        SpecError: as the options' own validation.
    """
    names = {f.name for f in dataclasses.fields(options)}
    wanted = {"shm_size": containers.shm_size, "memory": containers.memory}
    missing = {name: str(size) for name, size in wanted.items()
               if name in names and size is not None and getattr(options, name) is None}
    return dataclasses.replace(options, **missing) if missing else options


@dataclass(frozen=True)
class SlurmOptions:
    """Options of the slurm backend (each a ``launch`` flag unless said otherwise).

    Attributes:
        tasks_per_node: most tasks on one node (default: as few as the tasks need).
        health_host: address of this machine the nodes reach the health endpoint at (default:
            the source address of the route to the first node).
        environ: the environment to read ``SLURM_*`` from (default ``os.environ``; Python API only).
        orphan_timeout_s: seconds a task keeps running once it cannot reach its orchestrator
            (its heartbeat watchdog: a step on another node gets no parent-death signal), then it
            kills itself; > 0.

    Raises:
        SpecError: ``orphan_timeout_s`` is not > 0.
    """

    tasks_per_node: int | None = field(default=None, metadata=option(
        "most tasks on one node (default: one per node when there are enough nodes, else as few as fit)",
        metavar="N"))
    health_host: str | None = field(default=None, metadata=option(
        "this machine's address the nodes reach the health endpoint at (default: the source address of the route "
        "to the first node; never a wildcard)", metavar="ADDRESS"))
    environ: Mapping[str, str] | None = field(default=None, metadata=option(None))
    orphan_timeout_s: float = field(default=ORPHAN_TIMEOUT_S, metadata=option(
        f"seconds a task keeps running once its orchestrator is unreachable, then it stops itself (default "
        f"{ORPHAN_TIMEOUT_S:g})", metavar="SECONDS"))

    def __post_init__(self) -> None:
        check_orphan_timeout(self.orphan_timeout_s)


@dataclass(frozen=True)
class Declaration:
    """One backend as the CLI and the docs see it without importing its module.

    Attributes:
        name: the ``--backend`` value.
        summary: one line on where its tasks run (``--backend`` help, the docs).
        options_type: its options, a frozen dataclass of this module.
        where: ``module:Class`` of the backend class, imported at its first use.
    """

    name: str
    summary: str
    options_type: type[Any]
    where: str


LOCAL = Declaration("local", "one process per task on this machine (default)", LocalOptions,
                    "orchestrator.backends.local:LocalBackend")
DOCKER = Declaration("docker", "one container per task on a private network (needs a Docker engine and "
                     "pip install -e '.[docker]')", DockerOptions, "orchestrator.backends.docker:DockerBackend")
SLURM = Declaration("slurm", "one job step per task inside a Slurm allocation (run under salloc or sbatch)",
                    SlurmOptions, "orchestrator.backends.slurm:SlurmBackend")
DECLARED = (LOCAL, DOCKER, SLURM)
"""Every backend, in ``--backend`` help and docs order."""


@dataclass(frozen=True)
class OptionInfo:
    """One declared option, as the CLI and the docs see it.

    Attributes:
        name: the field name (``base_image``).
        type: the value's type without ``None`` (``str``, ``int``, ...).
        default: its default.
        help: the flag's help; None for an option without a flag.
        metavar: the flag's metavar, or None.
    """

    name: str
    type: type
    default: Any
    help: str | None
    metavar: str | None = None

    @property
    def flag(self) -> str | None:
        """``--base-image``, or None for an option without a flag."""
        return None if self.help is None else "--" + self.name.replace("_", "-")


def _value_type(hint: Any) -> type:
    """``str | None`` -> ``str``; any other hint is taken as it is (``object`` when not a class)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return origin if isinstance(origin, type) else object


def describe(options_type: type[Any]) -> tuple[OptionInfo, ...]:
    """Every option an options dataclass declares, in field order.

    Raises:
        TypeError: ``options_type`` is not a frozen dataclass.
    """
    if not dataclasses.is_dataclass(options_type) or not options_type.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{options_type.__qualname__}: backend options must be a frozen dataclass")
    hints = typing.get_type_hints(options_type)
    found = []
    for f in dataclasses.fields(options_type):
        default = f.default if f.default is not dataclasses.MISSING else None
        found.append(OptionInfo(f.name, _value_type(hints[f.name]), default, f.metadata.get(FLAG),
                                f.metadata.get(METAVAR)))
    return tuple(found)


def options_from_mapping(backend: str, options_type: type[Any], values: Mapping[str, Any]) -> Any:
    """An options object of ``options_type`` from a mapping of its field names (the Python
    API's ``backend_options={"image": ...}``).

    Raises:
        SpecError: naming the key that is not an option of ``backend``, and the ones that are.
    """
    names = [info.name for info in describe(options_type)]
    for key in values:
        if key not in names:
            raise SpecError("backend_options", key, f"is not an option of the {backend} backend",
                            "use one of: " + ", ".join(names) if names else f"the {backend} backend takes no options")
    return options_type(**values)
