"""Supervision: decisions (pure), the loop that acts on them, task states, failures, snapshots.

:class:`Supervisor` (:mod:`.loop`) is imported at its first use, not with the package: the records
(:mod:`.records`) and the start order's rule come without the loop and its parts, so that a launch
starts its first tasks before it imports what only supervising needs (docs/architecture.md, "What a
launch spends").
"""

from typing import TYPE_CHECKING, Any

from orchestrator.supervisor.records.states import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PREEMPTED,
    EXIT_SUCCEEDED,
    Failure,
    JobState,
    TaskRuntime,
    TaskState,
    describe_exit,
)

if TYPE_CHECKING:
    from orchestrator.supervisor.loop import Supervisor


def __getattr__(name: str) -> Any:
    if name == "Supervisor":
        from orchestrator.supervisor.loop import Supervisor

        return Supervisor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_PREEMPTED",
    "EXIT_SUCCEEDED",
    "Failure",
    "JobState",
    "Supervisor",
    "TaskRuntime",
    "TaskState",
    "describe_exit",
]
