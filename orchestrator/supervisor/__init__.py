"""Supervision: the job state machine, task states, failures and root cause."""

from orchestrator.supervisor.job import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_SUCCEEDED, JobResult, Supervisor
from orchestrator.supervisor.states import Failure, JobState, TaskRuntime, TaskState, describe_exit

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_SUCCEEDED",
    "Failure",
    "JobResult",
    "JobState",
    "Supervisor",
    "TaskRuntime",
    "TaskState",
    "describe_exit",
]
