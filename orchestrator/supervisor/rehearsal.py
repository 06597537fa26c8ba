"""The rehearsal part of the supervisor: each ``step=`` fault that cannot fire, said once, as soon
as it is known (the rules: :mod:`orchestrator.supervisor.rules.rehearsal`)."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.plan import Plan
from orchestrator.supervisor.records.states import TaskRuntime
from orchestrator.supervisor.rules.rehearsal import fault_name, fired, never_fires, planned_faults


class Rehearsal:
    """The plan's injected faults, watched: each ``step=`` fault that cannot fire said once.

    Args:
        plan: the job's plan.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._faults = planned_faults(plan)
        self._pending = [(task, f) for task, f in self._faults if f["trigger"] == "step"]

    def watch(self, tasks: Sequence[TaskRuntime], now: float) -> list[str]:
        """The warnings due now (each fault's at most once; O(pending step faults))."""
        if not self._pending:
            return []
        by_task = {rt.task: rt for rt in tasks}
        texts, left = [], []
        for task, fault in self._pending:
            rt = by_task.get(task)
            if rt is None:
                continue
            a = rt.current
            if a.number < fault["attempt"] or a.started_at is None:
                left.append((task, fault))  # its attempt is still to come
                continue
            if a.number > fault["attempt"] or a.last_step is not None:
                continue  # its attempt is over, or it sends steps: the fault fires from them
            text = never_fires(task.name, fault, attempt=a.number, saw_step=False, ended=a.state.terminal,
                               ran_s=now - a.started_at)
            if text is None:
                left.append((task, fault))
            elif not fired(self.plan, task, fault):  # it fired before its step reached us (exit, kill)
                texts.append(text)
        self._pending = left
        return texts

    def untested(self) -> list[str]:
        """The faults that never fired (read from the logs; call once the job is over)."""
        return [fault_name(task, f) for task, f in self._faults if not fired(self.plan, task, f)]
