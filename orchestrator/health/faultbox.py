"""The health server's fault box: where the job's gate hands an injected step fault over to a task
that reports no training step, and where that task takes it (``HandOverFault`` / ``TakeFault``;
the task side: :mod:`orchestrator.task.relay`).

A rendezvous on the server's event loop, keyed by the task and attempt the fault hits: the gate's
call waits (bounded) until the task's long poll took the fault, so the gate's next step waits
for the delivery and the fault lands within one step of the job's step. What a hand-over answers
is :func:`handover_outcome`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from orchestrator.spec.model import TaskId

MAX_WAIT_S = 10.0
"""Longest one ``HandOverFault`` or ``TakeFault`` call waits, seconds."""

TAKEN, EARLY, MISSED, WAIT = "taken", "early", "missed", "wait"


def handover_outcome(taken: bool, polled_attempt: int | None, attempt: int) -> str:
    """What a hand-over of a fault for ``attempt`` of a task answers, or :data:`WAIT`.

    Args:
        taken: the fault was taken already (a gate that passes its step again after a restart).
        polled_attempt: the latest attempt of the task that polled for faults; None: none yet
            (it is starting: wait for it).
        attempt: the attempt the fault hits.

    Returns:
        :data:`TAKEN` (already taken), :data:`EARLY` (the task polls from an earlier attempt:
        hand it over again at a later step), :data:`MISSED` (the task polls from a later
        attempt: the fault's attempt is over), else :data:`WAIT` (for that attempt to take it,
        bounded by the caller's wait: :data:`MISSED` when it did not).
    """
    if taken:
        return TAKEN
    if polled_attempt is None or polled_attempt == attempt:
        return WAIT
    return EARLY if polled_attempt < attempt else MISSED


@dataclass
class _Due:
    fault: str
    job_step: int
    taken: asyncio.Event = field(default_factory=asyncio.Event)


class FaultBox:
    """Faults handed over and not yet taken, per (task, attempt). Every method runs on the
    health server's event loop (no lock)."""

    def __init__(self) -> None:
        self._due: dict[tuple[TaskId, int], list[_Due]] = {}
        self._arrived: dict[tuple[TaskId, int], asyncio.Event] = {}
        self._polled: dict[TaskId, int] = {}
        self._taken: set[tuple[TaskId, int, str]] = set()

    def _event(self, key: tuple[TaskId, int]) -> asyncio.Event:
        return self._arrived.setdefault(key, asyncio.Event())

    async def hand_over(self, task: TaskId, attempt: int, fault: str, job_step: int, wait_s: float) -> str:
        """Hand ``fault`` over to ``attempt`` of ``task`` at the gate's ``job_step``; returns
        :data:`TAKEN`, :data:`EARLY` or :data:`MISSED` (:func:`handover_outcome`), waiting at most
        ``wait_s`` (capped at :data:`MAX_WAIT_S`) for the task to take it."""
        outcome = handover_outcome((task, attempt, fault) in self._taken, self._polled.get(task), attempt)
        if outcome != WAIT:
            return outcome
        due = _Due(fault, job_step)
        key = (task, attempt)
        self._due.setdefault(key, []).append(due)
        self._event(key).set()
        try:
            await asyncio.wait_for(due.taken.wait(), min(max(wait_s, 0.0), MAX_WAIT_S))
            return TAKEN
        except asyncio.TimeoutError:
            if due in self._due.get(key, []):
                self._due[key].remove(due)
            return MISSED

    async def take(self, task: TaskId, attempt: int, wait_s: float) -> tuple[str, int] | None:
        """The next fault handed over to ``attempt`` of ``task`` as ``(name, job step)``, waiting
        at most ``wait_s`` (capped at :data:`MAX_WAIT_S`) for one; None when none came."""
        self._polled[task] = max(self._polled.get(task, attempt), attempt)
        key = (task, attempt)
        arrived = self._event(key)
        if not self._due.get(key):
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), min(max(wait_s, 0.0), MAX_WAIT_S))
            except asyncio.TimeoutError:
                return None
        queue = self._due.get(key)
        if not queue:
            return None
        due = queue.pop(0)
        self._taken.add((task, attempt, due.fault))
        due.taken.set()
        return due.fault, due.job_step
