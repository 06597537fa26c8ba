"""The start order of a job with a tf.data service: the dispatcher, then the data workers, then
the trainers, each wave once the one before reports ``serving`` (a data worker does once it is
registered with the dispatcher). The rule is :func:`~orchestrator.supervisor.service_rules.startable`;
this part of the :class:`~orchestrator.supervisor.job.Supervisor` (a mixin, like
:mod:`~orchestrator.supervisor.failures`) holds the tasks still waiting and starts them. A job
without the service starts every task at once, in plan order, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.supervisor.service_rules import startable
from orchestrator.supervisor.snapshot import phase_name
from orchestrator.supervisor.states import JobState, TaskRuntime


class StartWaves:
    """Start the tasks wave by wave (see the module docstring)."""

    _waiting: list[TaskRuntime]
    """Tasks whose earlier waves do not serve yet, in plan order."""

    if TYPE_CHECKING:  # the loop's records and actions this part uses
        tasks: list[TaskRuntime]
        state: JobState
        _interrupt: str | None

        def _start(self, rt: TaskRuntime) -> None: ...
        def _event(self, *texts: str) -> None: ...

    def _planned(self) -> list[tuple[str, str]]:
        return [(rt.task.name, rt.task.task_type) for rt in self.tasks]

    def _start_first_wave(self) -> None:
        """Start every task that waits for no other (all of them without a tf.data service)."""
        planned, self._waiting = self._planned(), []
        for rt in self.tasks:
            if self._interrupt:
                break
            if startable(rt.task.task_type, planned, ()):
                self._start(rt)
            else:
                self._waiting.append(rt)
        if self._waiting:
            self._event(f"{len(self._waiting)} task(s) wait for the tf.data service to serve "
                        "(dispatcher, then data workers registered)")

    def _start_next_waves(self) -> None:
        """Start the waiting tasks whose earlier waves all report ``serving`` now."""
        if not getattr(self, "_waiting", None) or self.state.terminal or self._interrupt:
            return
        serving = {rt.task.name for rt in self.tasks if rt.live and rt.current.heartbeat is not None
                   and phase_name(rt.current.heartbeat.heartbeat.phase) == "serving"}
        planned = self._planned()
        ready = [rt for rt in self._waiting if startable(rt.task.task_type, planned, serving)]
        for rt in ready:
            self._waiting.remove(rt)
            self._start(rt)
