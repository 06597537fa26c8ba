"""When to look at each task for a hang: a heap of check deadlines, O(changes) per tick.

Each heartbeat or start reschedules the task's next check
(:func:`~orchestrator.supervisor.rules.decisions.next_check_at`); an older entry of the same task in
the heap becomes stale (its version no longer matches) and is skipped, so the loop never
scans every task per tick (the scale bench supervises thousands).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from orchestrator.spec.model import JobSpec, Strategy
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor.actions import Action, Event, Hung, Stuck
from orchestrator.supervisor.records.snapshot import phase_name
from orchestrator.supervisor.records.states import TaskRuntime
from orchestrator.supervisor.rules import decisions, exitrules, stack_rules
from orchestrator.supervisor.rules.decisions import TaskWatch
from orchestrator.supervisor.table import TaskTable

PEERS_DUMPED = 16
"""At most this many peers of a hung MWMS trainer inside a collective are dumped to find the one
it waits for (each dump may take the stack-dump timeout): those furthest behind, oldest progress
first."""


def watch(rt: TaskRuntime) -> TaskWatch:
    """What the hang decision (:func:`~orchestrator.supervisor.rules.decisions.hang_reason`) needs
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
        """Check ``rt`` next when :func:`~orchestrator.supervisor.rules.decisions.next_check_at` says,
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

    def look(self, rt: TaskRuntime, now: float, policy: SupervisionSpec,
             deaf_s: Callable[[float, float], float]) -> Hung | Stuck | None:
        """The hang check of ``rt`` (live, its check due): stuck in its exit, hung, or neither
        (then its next check is scheduled). Time in which the health server was deaf
        (``deaf_s(since, now)``: :meth:`~orchestrator.health.store.HeartbeatStore.deaf_s`)
        since its latest heartbeat does not count as its silence."""
        if stuck := exitrules.exit_overdue(rt.current.finished_at, now, policy):
            return Stuck(rt.task.name, stuck)
        seen = watch(rt)
        # time the health server took in no heartbeat (its own loop held up) is no task's silence
        deaf = deaf_s(seen.heartbeat_at if seen.heartbeat_at is not None else seen.started_at, now)
        why = decisions.hang_reason(seen, now - deaf, policy)
        if why:
            return Hung(rt.task.name, why)
        self.reschedule(rt, policy, seen, credit_s=deaf)
        return None


def peers_to_dump(spec: JobSpec, table: TaskTable, hung: Sequence[tuple[TaskRuntime, Hung]],
                  dumps: Sequence[str]) -> list[TaskRuntime]:
    """The live MWMS trainers whose stacks the loop takes when a hung one (``hung``, their stack
    ``dumps``) is inside a collective: one of them may be what it waits for
    (:func:`~orchestrator.supervisor.rules.stack_rules.waited_on`); at most :data:`PEERS_DUMPED`,
    the furthest behind first. Empty for another strategy."""
    if spec.strategy is not Strategy.MULTI_WORKER_MIRRORED or not any(stack_rules.in_collective(d) for d in dumps):
        return []
    names, trainers = {rt.task.name for rt, _ in hung}, set(spec.trainers())
    return sorted((rt for rt in table if rt.task in trainers and rt.live and rt.task.name not in names
                   and rt.current.process is not None and rt.current.finished_at is None),
                  key=lambda rt: (rt.current.last_step or 0, rt.current.progress_at or 0.0))[:PEERS_DUMPED]


def culprits_first(hung: Sequence[tuple[TaskRuntime, Hung]], dumps: Sequence[str],
                   peers: Sequence[TaskRuntime] = (), peer_dumps: Sequence[str] = ()) -> list[Action]:
    """The hung tasks (``hung``, their stack ``dumps``, "" for none), with the ``peers`` (their
    ``peer_dumps``: :func:`peers_to_dump`) a collective's waiter waits for, hung too though their
    own stall deadline has not come yet; the likeliest cause first: outside a collective, then
    without a dump, then waiting in one, each the one furthest behind first
    (:func:`~orchestrator.supervisor.rules.stack_rules.culprit_order`)."""
    waiter = hung[0][0].task.name if hung else ""
    found = stack_rules.waited_on(dumps, peer_dumps) if peers else []
    out: list[Action] = [Event(f"{peers[i].task.name} is what {waiter} waits for in a collective; killing it too")
                         for i in found]
    whole = [(rt, h.why, dump) for (rt, h), dump in zip(hung, dumps)] + [
        (peers[i], f"{waiter} waits in a collective for it (step {peers[i].current.last_step})", peer_dumps[i])
        for i in found]
    order = stack_rules.culprit_order([rt.current.last_step for rt, _, _ in whole], [d for _, _, d in whole])
    return out + [Hung(whole[i][0].task.name, whole[i][1], whole[i][2]) for i in order]
