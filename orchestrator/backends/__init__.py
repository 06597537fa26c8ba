"""Backends run the planned tasks: ``local`` (subprocesses on this machine) and ``docker``
(one container per task through the Docker Engine, :mod:`orchestrator.backends.docker`).

A backend supplies addresses (``allocate``), starts one task (``start``), reports exits
(``poll``), signals (``signal``) and stops (``stop``); the supervisor decides. Optional
hooks, read by :func:`orchestrator.runner.prepare`: ``open(run_id, run_dir)`` before
``allocate``; ``health_host``, the address the health endpoint binds and tasks use;
``python``, the interpreter of the built-in task commands; ``parent_death_signal``
(False: tasks are not the orchestrator's children, so no ORCH_ORCHESTRATOR_PID).
"""

from __future__ import annotations

from orchestrator.backends.local import LocalBackend
from orchestrator.errors import SpecError

def _docker_backend(**options):
    from orchestrator.backends.docker import DockerBackend  # the Docker SDK is an optional extra

    return DockerBackend(**options)


BACKENDS = {"local": LocalBackend, "docker": _docker_backend}


def get_backend(name: str, **options):
    """Instantiate the backend called ``name`` with its ``options`` (docker: image, base_image, ...).

    Raises:
        SpecError: for an unknown backend.
    """
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise SpecError("backend", name, "unknown backend", "use one of: " + ", ".join(sorted(BACKENDS))) from None
    return factory(**options)
