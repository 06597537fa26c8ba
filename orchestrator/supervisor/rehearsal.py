"""The rehearsal part of the supervisor: each ``step=`` fault that cannot fire, said once, as soon
as it is known, and whether each fault fired, recorded when the attempt it targets has ended (the
rules: :mod:`orchestrator.supervisor.rules.rehearsal`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.plan import Plan
from orchestrator.spec.faults import Fault
from orchestrator.spec.model import TaskId
from orchestrator.supervisor.records.states import TaskRuntime
from orchestrator.supervisor.rules.rehearsal import FaultRecord, fault_name, fired, never_fires, planned_faults


class Rehearsal:
    """The plan's injected faults, watched: each ``step=`` fault that cannot fire said once, and
    whether each fired recorded when the attempt it targets has ended (its logs read once then),
    so that a status query never reads a log.

    Args:
        plan: the job's plan.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._faults = planned_faults(plan)
        self._pending = [f for f in self._faults if f.trigger == "step"]
        self._fired: dict[int, bool] = {}  # index in _faults -> fired, once its attempt has ended
        self._open = list(range(len(self._faults)))  # indexes whose attempt has not ended yet

    def watch(self, tasks: Sequence[TaskRuntime], now: float) -> list[str]:
        """The warnings due now (each fault's at most once; O(faults not settled)), and the faults
        whose attempt has ended recorded as fired or not."""
        if not self._pending and not self._open:
            return []
        by_task = {rt.task: rt for rt in tasks}
        self._settle(by_task)
        texts: list[str] = []
        left: list[Fault] = []
        for fault in self._pending:
            # a relayed fault's task sends no step by design: its gate's steps hand it over
            rt = by_task.get(TaskId.parse(fault.relay, "inject-fault") if fault.relay else fault.task)
            if rt is None:
                continue
            a = rt.current
            if (a.number < fault.attempt and not fault.relay) or a.started_at is None:
                left.append(fault)  # its attempt is still to come
                continue
            if (a.number > fault.attempt and not fault.relay) or a.last_step is not None:
                continue  # its attempt is over, or it sends steps: the fault fires from them
            text = never_fires(rt.task.name, fault, attempt=a.number, saw_step=False, ended=a.state.terminal,
                               ran_s=now - a.started_at)
            if text is None:
                left.append(fault)
            elif not fired(self.plan, fault):  # it fired before its step reached us (exit, kill)
                texts.append(text)
        self._pending = left
        return texts

    def _settle(self, by_task: Mapping[TaskId, TaskRuntime]) -> None:
        left = []
        for i in self._open:
            fault = self._faults[i]
            rt = by_task.get(fault.task)
            a = rt.current if rt is not None else None
            if a is not None and (a.number > fault.attempt or (a.number == fault.attempt and a.state.terminal)):
                self._fired[i] = fired(self.plan, fault)
            else:
                left.append(i)
        self._open = left

    def untested(self) -> list[str]:
        """The faults that never fired (the logs of those not settled yet are read now: call once
        the job is over)."""
        for i in self._open:
            self._fired[i] = fired(self.plan, self._faults[i])
        self._open = []
        return [fault_name(f) for i, f in enumerate(self._faults) if not self._fired[i]]

    def records(self) -> tuple[FaultRecord, ...]:
        """Each injected fault and whether it fired, as recorded so far (no log is read)."""
        return tuple(FaultRecord(fault_name(f), self._fired.get(i, False)) for i, f in enumerate(self._faults))


