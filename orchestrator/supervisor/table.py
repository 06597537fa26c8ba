"""The job's tasks, looked up by name or task id, in plan order: one read-only table every part shares.

It replaces the index dictionaries each part kept; it never changes after the supervisor is
built (the records it holds, :class:`~orchestrator.supervisor.records.states.TaskRuntime`, do).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from orchestrator.spec.model import TaskId
from orchestrator.supervisor.records.states import TaskRuntime


class TaskTable:
    """Every task of the plan (``tasks``, in plan order) and the coordinator's (``coordinator``, or None)."""

    def __init__(self, tasks: Sequence[TaskRuntime], coordinator: TaskId) -> None:
        self.tasks: tuple[TaskRuntime, ...] = tuple(tasks)
        self._by_name = {rt.task.name: rt for rt in self.tasks}
        self._by_task = {rt.task: rt for rt in self.tasks}
        self._order = {rt.task.name: i for i, rt in enumerate(self.tasks)}
        self.silent: tuple[TaskRuntime, ...] = tuple(rt for rt in self.tasks if not rt.plan.reports_heartbeats)
        """The tasks that send no heartbeats (sampled by the backend)."""
        self.coordinator: TaskRuntime | None = self._by_task.get(coordinator)

    def __iter__(self) -> Iterator[TaskRuntime]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def named(self, name: str) -> TaskRuntime:
        """The task named ``name`` (``worker-0``). Raises KeyError for none."""
        return self._by_name[name]

    def has(self, name: str) -> bool:
        return name in self._by_name

    def of(self, task: TaskId) -> TaskRuntime:
        """The task ``task``. Raises KeyError for none."""
        return self._by_task[task]

    def find(self, task: TaskId) -> TaskRuntime | None:
        return self._by_task.get(task)

    def order(self, name: str) -> int:
        """The task's place in the plan (0 first)."""
        return self._order[name]

    def live(self) -> list[TaskRuntime]:
        """The tasks whose current attempt runs (O(tasks))."""
        return [rt for rt in self.tasks if rt.live]
