"""The one exception hierarchy of the orchestrator.

Every message says what was wrong, quotes the bad value and says what to do next.
The CLI turns :class:`SpecError` into one line on stderr and exit code 2.
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """Base class of every error the orchestrator raises on purpose."""


class SpecError(OrchestratorError, ValueError):
    """A cluster spec, flag or TF_CONFIG is invalid. Nothing has been started.

    Attributes:
        field: dotted name of the offending field, e.g. ``workers`` or ``training.epochs``.
        value: the bad value as given.
        fix: what the user should do instead.
    """

    def __init__(self, field: str, value: object, problem: str, fix: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}={value!r}: {problem}; {fix}")


class LaunchError(OrchestratorError):
    """The backend could not start a task (bad executable, no free port, ...)."""
