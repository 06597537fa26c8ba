"""Supervision: decisions (pure), the loop that acts on them, task states, failures, snapshots."""

from orchestrator.supervisor.loop import Supervisor
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
