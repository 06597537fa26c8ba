"""Backends run the planned tasks: ``local`` (subprocesses on this machine).

A backend supplies addresses (``allocate``), starts one task (``start``), reports exits
(``poll``), signals (``signal``) and stops (``stop``); the supervisor decides.
"""

from __future__ import annotations

from orchestrator.backends.local import LocalBackend
from orchestrator.errors import SpecError

BACKENDS = {"local": LocalBackend}


def get_backend(name: str):
    """Instantiate the backend called ``name``.

    Raises:
        SpecError: for an unknown backend.
    """
    try:
        return BACKENDS[name]()
    except KeyError:
        raise SpecError("backend", name, "unknown backend", "use one of: " + ", ".join(sorted(BACKENDS))) from None
