"""The start order of a job with a tf.data service: the dispatcher, then the data workers, then
the trainers, each wave once the one before reports ``serving`` (a data worker does once it is
registered with the dispatcher). The rule is :func:`~orchestrator.supervisor.rules.service.startable`;
this part holds the tasks still waiting and returns which to start
(:class:`~orchestrator.supervisor.actions.Start`), which the loop carries out. A job without the
service starts every task at once, in plan order, as before.
"""

from __future__ import annotations

from orchestrator.supervisor.actions import Action, Event, Start
from orchestrator.supervisor.records.snapshot import phase_name
from orchestrator.supervisor.rules.service import startable
from orchestrator.supervisor.table import TaskTable


class StartWaves:
    """Start the tasks wave by wave (see the module docstring).

    Args:
        table: the job's tasks (plan order).
        held: tasks planned and not started (:attr:`orchestrator.plan.Plan.held`: a resize starts them).
    """

    def __init__(self, table: TaskTable, held: tuple[str, ...] = ()) -> None:
        self._table = table
        self._planned = [(rt.task.name, rt.task.task_type) for rt in table if rt.task.name not in held]
        self._waiting: list[str] = []
        """Names of the tasks whose earlier waves do not serve yet, in plan order."""

    def first(self) -> list[Action]:
        """The first wave: every task that waits for no other (all of them without a tf.data service)."""
        now = [name for name, kind in self._planned if startable(kind, self._planned, ())]
        first = set(now)
        self._waiting = [name for name, _ in self._planned if name not in first]
        out: list[Action] = [Start(tuple(now))]
        if self._waiting:
            out.append(Event(f"{len(self._waiting)} task(s) wait for the tf.data service to serve "
                             "(dispatcher, then data workers registered)"))
        return out

    def next(self, ended: bool) -> list[Action]:
        """The waiting tasks whose earlier waves all report ``serving`` now; nothing once the job
        ``ended`` (its state is terminal or a stop was requested)."""
        if not self._waiting or ended:
            return []
        serving = {rt.task.name for rt in self._table if rt.live and rt.current.heartbeat is not None
                   and phase_name(rt.current.heartbeat.heartbeat.phase) == "serving"}
        kinds = dict(self._planned)
        ready = tuple(name for name in self._waiting if startable(kinds[name], self._planned, serving))
        if not ready:
            return []
        self._waiting = [name for name in self._waiting if name not in ready]
        return [Start(ready)]
