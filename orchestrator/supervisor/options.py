"""The supervisor's timing knobs (seconds), as one frozen record: :class:`LoopOptions`."""

from __future__ import annotations

from dataclasses import dataclass

VIEW_TASKS_PER_S = 4000
"""Most task pictures the loop builds per second (``tick_s`` of them a tick) for the view
(``status``, the page; :mod:`~orchestrator.supervisor.pictures`): a job of more than
``VIEW_TASKS_PER_S * view_interval_s`` tasks gets its snapshots less often, and no tick stalls."""

KILL_WAIT_S = 10.0  # seconds to wait for a task the loop SIGKILLed (hung, stuck in its exit, past its grace)


@dataclass(frozen=True)
class LoopOptions:
    """How the supervision loop paces itself and how long it waits for tasks, seconds.

    Attributes:
        stop_timeout_s: between SIGTERM and SIGKILL when stopping tasks (torch elastic's
            ``PContext.close`` two phases).
        success_grace_s: how long other workers may take to exit after the coordinator succeeded.
        tick_s: longest sleep of the loop between two looks at heartbeats and hang checks; it
            also bounds exit detection for a task whose backend gives no exit event (exits with
            one wake the loop at once: :mod:`~orchestrator.supervisor.exits`).
        stack_dump_timeout_s: how long to wait for a hung task's stack dump before the kill.
        view_interval_s: least time between two snapshots handed to the view.
        preemption_grace_s: how long the training tasks get to save and exit after a preemption
            notice (Slurm's ``GraceTime`` and Kubernetes' ``terminationGracePeriodSeconds``
            default to 30 s; leave the stop timeout inside them).
    """

    stop_timeout_s: float = 10.0
    success_grace_s: float = 30.0
    tick_s: float = 0.1
    stack_dump_timeout_s: float = 2.0
    view_interval_s: float = 0.25
    preemption_grace_s: float = 30.0
