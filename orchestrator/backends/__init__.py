"""Backends start the planned tasks: ``local`` (subprocesses on this machine), ``docker``
(one container per task through the Docker Engine, :mod:`orchestrator.backends.docker`) and
``slurm`` (one job step per task inside a Slurm allocation, :mod:`orchestrator.backends.slurm`).

Every backend implements the contract declared in :mod:`orchestrator.backends.base`
(:class:`~orchestrator.backends.base.Backend`); the supervisor decides, the backend acts.
"""

from __future__ import annotations

from typing import Any, Callable

from orchestrator.backends.base import Backend
from orchestrator.backends.local import LocalBackend
from orchestrator.errors import SpecError


def _docker_backend(**options: Any) -> Backend[Any]:
    from orchestrator.backends.docker import DockerBackend  # the Docker SDK is an optional extra

    return DockerBackend(**options)


def _slurm_backend(**options: Any) -> Backend[Any]:
    from orchestrator.backends.slurm import SlurmBackend

    return SlurmBackend(**options)


BACKENDS: dict[str, Callable[..., Backend[Any]]] = {"local": LocalBackend, "docker": _docker_backend,
                                                    "slurm": _slurm_backend}


def get_backend(name: str, **options: Any) -> Backend[Any]:
    """Instantiate the backend called ``name`` with its ``options`` (docker: image, base_image, ...).

    Raises:
        SpecError: for an unknown backend.
    """
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise SpecError("backend", name, "unknown backend", "use one of: " + ", ".join(sorted(BACKENDS))) from None
    return factory(**options)
