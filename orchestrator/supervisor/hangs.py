"""When to look at each task for a hang: a heap of check deadlines, O(changes) per tick.

Each heartbeat or start reschedules the task's next check
(:func:`~orchestrator.supervisor.decisions.next_check_at`); an older entry of the same task in
the heap becomes stale (its version no longer matches) and is skipped, so the loop never
scans every task per tick (the scale bench supervises thousands).
"""

from __future__ import annotations

import heapq

from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import decisions
from orchestrator.supervisor.decisions import TaskWatch
from orchestrator.supervisor.snapshot import phase_name
from orchestrator.supervisor.states import TaskRuntime


def watch(rt: TaskRuntime) -> TaskWatch:
    """What the hang decision (:func:`~orchestrator.supervisor.decisions.hang_reason`) needs
    to know of ``rt``'s current (started) attempt."""
    a = rt.current
    assert a.started_at is not None
    phase = phase_name(a.heartbeat.heartbeat.phase) if a.heartbeat else None
    return TaskWatch(
        reports=rt.plan.reports_heartbeats, started_at=a.started_at,
        heartbeat_at=a.heartbeat.received_at if a.heartbeat else None,
        phase=phase, progress_at=a.progress_at, step=a.last_step, trains=rt.task.task_type != "evaluator",
        exiting=bool(a.heartbeat and a.heartbeat.heartbeat.exiting),
        in_first_step=phase == "training" and a.last_step == a.first_step, training_at=a.training_at,
    )


class HangChecks:
    """Check deadlines per task name (orchestrator monotonic seconds)."""

    def __init__(self, tasks: int) -> None:
        self._heap: list[tuple[float, int, str]] = []  # (when, version, task name)
        self._version: dict[str, int] = {}
        self._limit = 4 * tasks + 64

    def reschedule(self, rt: TaskRuntime, policy: SupervisionSpec, known: TaskWatch | None = None,
                   credit_s: float = 0.0) -> None:
        """Check ``rt`` next when :func:`~orchestrator.supervisor.decisions.next_check_at` says,
        ``credit_s`` seconds later (the health server's deaf time since its latest heartbeat)
        (``known``: :func:`watch` of ``rt`` as it is now, when the caller has it)."""
        if rt.current.started_at is None:
            when = None
        else:
            when = decisions.next_check_at(known if known is not None else watch(rt), policy)
            if when is not None:
                when += credit_s
        if rt.current.finished_at is not None:  # and its exit grace (exitrules.exit_overdue)
            due = rt.current.finished_at + policy.exit_grace_s
            when = due if when is None else min(when, due)
        self.schedule(rt.task.name, when)

    def schedule(self, name: str, when: float | None) -> None:
        """Check ``name`` at ``when`` (None: never, until rescheduled); replaces its earlier check."""
        version = self._version.get(name, 0) + 1
        self._version[name] = version
        if when is not None:
            heapq.heappush(self._heap, (when, version, name))
        if len(self._heap) > self._limit:  # drop stale entries now and then
            self._heap = [c for c in self._heap if self._version.get(c[2]) == c[1]]
            heapq.heapify(self._heap)

    def due(self, now: float) -> list[str]:
        """Names whose current check deadline has passed (strictly before ``now``), each once."""
        out = []
        while self._heap and self._heap[0][0] < now:
            _, version, name = heapq.heappop(self._heap)
            if self._version.get(name) == version:
                out.append(name)
        return out
