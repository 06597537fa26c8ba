"""The view's snapshots of a large job, built a slice per tick so that the loop never stalls.

A snapshot is O(tasks): 10,000 task pictures take ~0.2 s of the loop's thread, long enough to
see a SIGKILL late. So the loop builds at most ``per_tick`` task pictures per tick, round after
round in plan order, and hands the view a :class:`~orchestrator.supervisor.records.snapshot.JobSnapshot`
each time a round is complete (the job-level fields as of that tick). A job of at most
``per_tick`` tasks is pictured whole in one tick, as before; ``status`` and the page of a job of
N tasks are at most about ``N / per_tick`` ticks old. The final snapshot is always whole
(:meth:`~orchestrator.supervisor.loop.Supervisor.snapshot`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.supervisor.records.snapshot import JobSnapshot, TaskSnapshot
from orchestrator.supervisor.records.states import TaskRuntime


class Pictures:
    """Rounds of task pictures, ``per_tick`` at a time.

    Args:
        tasks: every task, in plan order.
        per_tick: most pictures one :meth:`advance` builds (at least 1).
        picture: ``(task, now) -> TaskSnapshot``
            (:func:`~orchestrator.supervisor.records.snapshot.task_snapshot`).
    """

    def __init__(self, tasks: Sequence[TaskRuntime], per_tick: int,
                 picture: Callable[[TaskRuntime, float], TaskSnapshot]) -> None:
        self._tasks = tasks
        self._per_tick = max(1, per_tick)
        self._picture = picture
        self._round: list[TaskSnapshot] = []
        self._next_at = 0.0

    def look(self, now: float, every_s: float | None) -> tuple[TaskSnapshot, ...] | None:
        """The loop's look at ``now``: a round begins every ``every_s`` seconds (None: never) and
        goes on at each look until complete (:meth:`advance`); returns the round once complete."""
        if every_s is None or not (self.in_round or now >= self._next_at):
            return None
        if not self.in_round:
            self._next_at = now + every_s
        return self.advance(now)

    @property
    def in_round(self) -> bool:
        """A round is begun and not complete (the loop goes on with it at its next tick)."""
        return bool(self._round)

    def advance(self, now: float) -> tuple[TaskSnapshot, ...] | None:
        """Picture the next ``per_tick`` tasks at ``now``; returns the whole round once its
        last task is pictured (then the next call begins a new round), else None."""
        start = len(self._round)
        end = min(len(self._tasks), start + self._per_tick)
        picture = self._picture
        self._round.extend(picture(rt, now) for rt in self._tasks[start:end])
        if end < len(self._tasks):
            return None
        done, self._round = tuple(self._round), []
        return done


def job_snapshot(sup: Any, tasks: tuple[TaskSnapshot, ...], now: float, *, exit_code: int,
                 spares: tuple[Any, ...], faults: tuple[Any, ...]) -> JobSnapshot:
    """The job's picture at ``now`` (orchestrator monotonic seconds) with ``tasks`` (their pictures, plan order):
    the job-level fields read off ``sup`` (the :class:`~orchestrator.supervisor.loop.Supervisor`; not imported
    here: the loop imports this module); ``exit_code`` counts once the job has ended; ``spares``: the backend's
    warm spares; ``faults``: the rehearsal's records."""
    end = sup.ended_at if sup.ended_at is not None else now
    return JobSnapshot(
        plan=sup.plan, state=sup.state, reason=sup.reason, tasks=tasks,
        exit_code=exit_code if sup.ended_at is not None else None,
        elapsed_s=end - sup.started_at, started_wall=sup.started_wall, ended=sup.ended_at is not None,
        restarts_used=sup.restarts_used, spares=spares, lives=sup.lives.lives(),
        failures=tuple(sup.log.failures), recoveries=sup.book.records(sup.started_at), fatal=sup.fatal,
        earlier_failures=sup.carried.failures, warnings=tuple(sup.warnings), faults=faults,
    )
