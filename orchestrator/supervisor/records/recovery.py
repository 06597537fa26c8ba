"""Recovery bookkeeping: when each restart decision was made, carried out, and done.

A group restart (MWMS, or PSS after a ps / coordinator failure) has recovered at its first
new training step; a task restart once the task trains or serves again, or, for a PSS worker
of the built-in coordinator, once the coordinator has it back in its rotation (the count
``rejoined[worker-N]`` of its heartbeat's typed ``rejoined``, from ``worker/rotation.py``). The
loop feeds heartbeats in; the book says what recovered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from orchestrator.proto import phases
from orchestrator.spec.model import TaskId
from orchestrator.supervisor.records.snapshot import RecoveryRecord
from orchestrator.supervisor.records.states import Failure, TaskRuntime
from orchestrator.supervisor.rules.decisions import RestartScope


@dataclass
class Recovery:
    """One restart decision (live record; reports read :class:`RecoveryRecord`).

    Attributes:
        cause: the failure that triggered it.
        scope: what it covers.
        tasks: names of the restarted tasks.
        detected_at: monotonic seconds when the failure was seen.
        restarted_at: monotonic seconds when the new attempts started.
        resumed_at: monotonic seconds of the first training step after the restart.
        resumed_from_step: the step training resumed from (BackupAndRestore), when reported.
        await_rotation: a PSS worker restarted while the built-in coordinator trained: its
            recovery ends when the coordinator has it back in its rotation, not when it serves.
        preempted: a preemption whose notice reached another task than ``cause``'s (a peer that
            saved and exited was seen first): the task that received it, named first in the record.
    """

    cause: Failure
    scope: RestartScope
    tasks: list[str]
    detected_at: float
    restarted_at: float | None = None
    resumed_at: float | None = None
    resumed_from_step: int | None = None
    await_rotation: bool = False
    preempted: str = ""

    def record(self, origin: float) -> RecoveryRecord:
        """The immutable record, times relative to ``origin`` (the job's start)."""
        def rel(t: float | None) -> float | None:
            return None if t is None else t - origin

        return RecoveryRecord(
            cause=(f"{self.preempted} received SIGTERM from outside (a preemption notice): "
                   if self.preempted and self.preempted != self.cause.task.name else "") + self.cause.headline(),
            scope=self.scope.value,
            tasks=tuple(self.tasks),
            detected_at_s=self.detected_at - origin,
            restarted_at_s=rel(self.restarted_at),
            resumed_at_s=rel(self.resumed_at),
            resumed_from_step=self.resumed_from_step,
        )


def rejoined_workers(previous: Mapping[str, int], current: Mapping[str, int]) -> list[str]:
    """Names of the workers whose rejoin count grew between two coordinator heartbeats' typed
    ``rejoined`` (worker name -> times back in the rotation; a second failure of the same worker
    needs a new count)."""
    return [name for name, count in current.items() if count > previous.get(name, 0)]


def awaits_rotation(tasks: Sequence[TaskId], coordinator: TaskRuntime | None) -> bool:
    """A PSS worker restarted alone while the built-in coordinator trains: the coordinator
    will notice the failure and say when the worker is back in its rotation (before it
    trains, the coordinator connects to the new worker like to any other)."""
    beat = coordinator.current.heartbeat if coordinator is not None else None
    return (len(tasks) == 1 and tasks[0].task_type == "worker" and beat is not None
            and beat.heartbeat.phase == phases.PHASE_TRAINING)


class RecoveryBook:
    """Every restart decision of the job, earliest first, and which of them are done."""

    def __init__(self) -> None:
        self.recoveries: list[Recovery] = []
        self._waiting = 0  # decisions not resumed yet
        self._waiting_for: dict[str, int] = {}  # task name -> decisions not resumed yet that restart it

    def open(self, recovery: Recovery) -> None:
        """A new restart decision."""
        self.recoveries.append(recovery)
        if recovery.resumed_at is None:
            self._waiting += 1
            for name in recovery.tasks:
                self._waiting_for[name] = self._waiting_for.get(name, 0) + 1

    @property
    def waiting(self) -> bool:
        """Some restart is waiting to be carried out or to recover (O(1): asked per heartbeat)."""
        return self._waiting > 0

    def waits_for(self, task: str) -> bool:
        """A restart of ``task`` is waiting to be carried out or to recover (O(1)): only then can
        its heartbeat complete one (:meth:`note`)."""
        return task in self._waiting_for

    @property
    def all_resumed(self) -> bool:
        """No restart is waiting to be carried out or to recover."""
        return not self.waiting

    def restarted(self, now: float) -> None:
        """The new attempts of every pending decision started at ``now``."""
        for recovery in self.recoveries:
            if recovery.restarted_at is None:
                recovery.restarted_at = now

    def resumed(self, task: str, at: float, scope: RestartScope, *, rejoined: bool = False,
                resumed_from_step: int | None = None) -> list[Recovery]:
        """``task`` is working again at ``at`` in the way ``scope`` asks (a step for a group
        restart; training or serving, or ``rejoined`` the coordinator's rotation, for a task
        restart). Returns the decisions this completed."""
        done = []
        for recovery in self.recoveries:
            if (recovery.scope is scope and recovery.resumed_at is None and recovery.restarted_at is not None
                    and task in recovery.tasks and recovery.await_rotation == rejoined):
                recovery.resumed_at = at
                recovery.resumed_from_step = resumed_from_step
                done.append(recovery)
        self._waiting -= len(done)
        for recovery in done:
            for name in recovery.tasks:
                left = self._waiting_for.pop(name, 0) - 1
                if left > 0:
                    self._waiting_for[name] = left
        return done

    def note(self, task: str, at: float, scope: RestartScope, *, doing: str, resumed_from_step: int | None,
             coordinator: str, rejoined: bool = False) -> list[str]:
        """:meth:`resumed`, as the events to show: ``worker-1 training again 2.1 s after the
        failure, resumed from step 40`` (``doing``: training or serving)."""
        texts = []
        if resumed_from_step is not None:  # said after the first step (the Keras callback: at its first batch)
            latest = next((r for r in reversed(self.recoveries) if task in r.tasks), None)
            if latest is not None and latest.resumed_at is not None and latest.resumed_from_step is None:
                latest.resumed_from_step = resumed_from_step
        for r in self.resumed(task, at, scope, rejoined=rejoined, resumed_from_step=resumed_from_step):
            if rejoined:
                text = f"{task} back in {coordinator}'s rotation {at - r.detected_at:.1f} s after the failure"
            else:
                text = f"{task} {doing} again {at - r.detected_at:.1f} s after the failure"
            if r.resumed_from_step is not None:
                text += f", resumed from step {r.resumed_from_step}"
            texts.append(text)
        return texts

    def records(self, origin: float) -> tuple[RecoveryRecord, ...]:
        return tuple(r.record(origin) for r in self.recoveries)
