"""Backends start the planned tasks: ``local`` (subprocesses on this machine), ``docker``
(one container per task through the Docker Engine, :mod:`orchestrator.backends.docker`) and
``slurm`` (one job step per task inside a Slurm allocation, :mod:`orchestrator.backends.slurm`).

Every backend implements the contract declared in :mod:`orchestrator.backends.base`
(:class:`~orchestrator.backends.base.Backend`) and declares its options
(:mod:`orchestrator.backends.options`) and capabilities
(:class:`~orchestrator.backends.base.Capability`); the supervisor decides, the backend acts.

A backend's module is imported when that backend is first used (:class:`Registry`): a launch
imports its own backend only, and its flags come from the declarations of
:mod:`orchestrator.backends.options` (docs/architecture.md, "What a launch spends").
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.base import Backend, Capability, overridden_hooks
from orchestrator.backends.options import (
    DECLARED,
    Declaration,
    OptionInfo,
    describe,
    options_from_mapping,
    with_container_sizes,
)
from orchestrator.errors import SpecError
from orchestrator.plan import held_at_max
from orchestrator.spec.containers import ContainerSpec
from orchestrator.spec.model import JobSpec


class Registry(MutableMapping[str, type[Backend[Any]]]):
    """Every backend's class by its ``--backend`` name, each imported at its first lookup.

    Iterating names, :meth:`declaration` and ``in`` import nothing; ``registry[name]`` (and
    ``values()``, ``items()``) import the backend's module. A class set into it (a test's toy
    backend) is its own declaration.

    Args:
        declared: the backends, in ``--backend`` help and docs order.
    """

    def __init__(self, declared: Iterable[Declaration]) -> None:
        self._entries: dict[str, Declaration | type[Backend[Any]]] = {d.name: d for d in declared}

    def __getitem__(self, name: str) -> type[Backend[Any]]:
        entry = self._entries[name]
        if isinstance(entry, Declaration):
            module, _, attribute = entry.where.partition(":")
            entry = self._entries[name] = getattr(importlib.import_module(module), attribute)
        return entry

    def __setitem__(self, name: str, cls: type[Backend[Any]]) -> None:
        self._entries[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def declaration(self, name: str) -> Declaration:
        """The backend's name, summary and options, without importing its module.

        Raises:
            KeyError: no backend ``name``.
        """
        entry = self._entries[name]
        if isinstance(entry, Declaration):
            return entry
        return Declaration(entry.name, entry.summary, entry.options_type, f"{entry.__module__}:{entry.__qualname__}")


BACKENDS = Registry(DECLARED)
"""Every backend by its ``--backend`` name."""


def declaration(name: str) -> Declaration:
    """The declaration of the backend called ``name`` (its module not imported).

    Raises:
        SpecError: for an unknown backend.
    """
    try:
        return BACKENDS.declaration(name)
    except KeyError:
        raise SpecError("backend", name, "unknown backend", "use one of: " + ", ".join(sorted(BACKENDS))) from None


def backend_class(name: str) -> type[Backend[Any]]:
    """The backend class called ``name``: ask it what it supports before constructing one
    (``backend_class(name).supports(Capability.HOST_PROCESSES)``).

    Raises:
        SpecError: for an unknown backend.
    """
    declaration(name)  # an unknown name: SpecError
    return BACKENDS[name]


def get_backend(name: str, options: object | Mapping[str, Any] | None = None,
                containers: ContainerSpec | None = None) -> Backend[Any]:
    """Instantiate the backend called ``name`` with its options.

    Args:
        name: the ``--backend`` value.
        options: an instance of the backend's :attr:`~Backend.options_type` (docker:
            :class:`~orchestrator.backends.options.DockerOptions`), a mapping of its field names
            (``{"image": "tf:1"}``), or None for the defaults.
        containers: the spec's ``containers`` section: the sizes of a backend whose options
            take them and were not given (:func:`~orchestrator.backends.options.with_container_sizes`).

    Raises:
        SpecError: an unknown backend, an option it does not take, or options of another backend.
    """
    cls = backend_class(name)
    if options is None and containers is None:
        return cls(None)
    if options is None:
        options = cls.options_type()
    if isinstance(options, Mapping):
        options = options_from_mapping(name, cls.options_type, options)
    if not isinstance(options, cls.options_type):
        raise SpecError("backend_options", type(options).__name__, f"are not options of the {name} backend",
                        f"pass a {cls.options_type.__name__} (or a dict of its fields)")
    return cls(options if containers is None else with_container_sizes(options, containers))


@dataclass(frozen=True)
class BackendInfo:
    """What one backend declares: the rows of the docs' table.

    Attributes:
        name: the ``--backend`` value.
        summary: where its tasks run, one line.
        capabilities: every :class:`Capability` with the optional hooks that implement it
            (empty for a capability without hooks: host-processes, host-files); missing when
            the backend does not have it.
        options: its options, in declaration order.
    """

    name: str
    summary: str
    capabilities: Mapping[Capability, tuple[str, ...]]
    options: tuple[OptionInfo, ...]

    def supports(self, capability: Capability) -> bool:
        """Whether the backend has ``capability``."""
        return capability in self.capabilities


def capability_table() -> list[BackendInfo]:
    """Every backend × capability, and every backend's options, from the backends' own
    declarations (``capabilities``, ``options_type``, checked against their hooks when their
    classes are created).

    This is the single source of the docs' table "What each backend supports": the docs
    generate it from this function (as TorchX's ``.. compatibility::`` blocks do), so the table
    cannot drift from the code. Capabilities come in :class:`Capability` order (its values are
    the column names, its members' docstrings their meaning); backends in :data:`BACKENDS` order.

    Returns:
        One :class:`BackendInfo` per backend.
    """
    table = []
    for name, cls in BACKENDS.items():
        hooks = overridden_hooks(cls)
        have = {c: hooks.get(c, ()) for c in Capability if cls.supports(c)}
        table.append(BackendInfo(name, cls.summary, have, describe(cls.options_type)))
    return table


def held_slots(spec: JobSpec, backend: type[Backend[Any]] | Backend[Any]) -> JobSpec | None:
    """The spec to plan a job at on ``backend`` when it starts below MAX with its worker slots above the start
    held (:func:`orchestrator.plan.held_at_max`: ParameterServerStrategy, no GPUs per task), so that a grow into
    them restarts only the coordinator and the ps and the other workers keep running (docs/elastic.md). A held
    slot needs its address before its task starts: a port of this machine the launch leases
    (:attr:`Capability.HOST_PORTS`: local) or a name on the job's network (:attr:`Capability.NAMED_ADDRESSES`:
    docker), and no fixed ``addresses`` in the spec (none for the held ones). None otherwise: Slurm places its
    tasks itself (a held worker would claim a node slot its allocation may not have), so a grow there is a next
    life."""
    if spec.addresses or not (backend.supports(Capability.HOST_PORTS) or backend.supports(Capability.NAMED_ADDRESSES)):
        return None
    return held_at_max(spec)
