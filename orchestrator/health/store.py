"""Where heartbeats land: the latest heartbeat of every task attempt, with the orchestrator's
monotonic receive time (the supervisor reads it, never the task's clock).

Kept apart from the gRPC server (:mod:`orchestrator.health.server`) so that the supervisor, and
a launch up to the start of its tasks, import neither ``grpc`` nor ``asyncio``: a launch's tasks
start before its CLI imports the server (issue 23, item 3).
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from orchestrator.spec.model import TaskId

if TYPE_CHECKING:
    from orchestrator.proto import supervisor_pb2 as pb

PULSE_S = 0.1
"""Period of the server loop's pulse, seconds: how late it runs is how long the loop, and so
the heartbeat intake, was held up (:meth:`HeartbeatStore.deaf_s`)."""
DEAF_MIN_S = 0.25
"""A pulse later than this counts as deaf time, whole; less is a scheduling hiccup on a busy
machine, which the heartbeat timeout (seconds, against 1 s between beats) already absorbs."""
DEAF_HISTORY_S = 3600.0
"""How far back :meth:`HeartbeatStore.deaf_s` keeps the loop's late pulses, seconds."""


@dataclass(slots=True)
class HeartbeatRecord:
    """The latest heartbeat of a task attempt and when it arrived.

    Attributes:
        heartbeat: the latest ``Heartbeat`` message.
        received_at: orchestrator ``time.monotonic()`` seconds at receipt.
        first_received_at: monotonic seconds of the first heartbeat of this attempt.
        count: heartbeats received from this attempt.
    """

    heartbeat: pb.Heartbeat
    received_at: float
    first_received_at: float
    count: int


class HeartbeatStore:
    """Thread-safe latest-heartbeat table keyed by (TaskId, attempt).

    :meth:`record` runs once per heartbeat on the server's event loop, so it does the least it
    can: records are found by the raw ``(task_type, task_index, attempt)`` of the message; the
    ``(TaskId, attempt)`` key readers see is built once per attempt.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # raw (task_type, task_index, attempt) -> ((TaskId, attempt), latest record)
        self._records: dict[tuple[str, int, int], tuple[tuple[TaskId, int], HeartbeatRecord]] = {}
        self._changed: dict[tuple[str, int, int], tuple[tuple[TaskId, int], HeartbeatRecord]] = {}
        self._task_ids: dict[tuple[str, int], TaskId] = {}
        self.total = 0
        # the intake's own deafness: (time a late pulse ran, lateness up to then in all), ascending
        self._pulse_at: float | None = None
        self._late: list[tuple[float, float]] = []
        self._late_total = 0.0
        self._late_dropped = 0.0  # the total at the last entry dropped from ``_late``

    def pulse(self) -> None:
        """The server loop's periodic call (every :data:`PULSE_S` seconds when it keeps up): its
        lateness, beyond the period, is time in which no heartbeat was taken in, whatever the
        tasks sent (another thread held the GIL: building the status of 10,000 tasks, ~7 MB
        of JSON, takes it for most of a second; or the loop fell behind its streams)."""
        now = self._clock()
        with self._lock:
            if self._pulse_at is not None:
                late = now - self._pulse_at - PULSE_S
                if late > DEAF_MIN_S:
                    self._late_total += late
                    self._late.append((now, self._late_total))
                    if self._late[0][0] < now - DEAF_HISTORY_S:
                        kept = [e for e in self._late if e[0] >= now - DEAF_HISTORY_S]
                        self._late_dropped = self._late[len(self._late) - len(kept) - 1][1]
                        self._late = kept
            self._pulse_at = now

    def deaf_s(self, since: float, now: float | None = None) -> float:
        """Seconds since ``since`` (monotonic) in which this store's server took in no heartbeat
        because its own loop was held up: the pulses late by more than :data:`DEAF_MIN_S` after
        ``since`` (a pulse late by L counts whole, even when part of L came before ``since``)
        plus the current pulse's delay; 0 for a store no server pulses. A task is not silent
        while the orchestrator is deaf: Cassandra's failure detector, likewise, marks no node
        down after a pause of its own (``FailureDetector``: "Not marking nodes down due to
        local pause", ``cassandra.max_local_pause_in_ms``)."""
        now = self._clock() if now is None else now
        with self._lock:
            if self._pulse_at is None:
                return 0.0
            i = bisect.bisect_right(self._late, since, key=lambda entry: entry[0])
            before = self._late[i - 1][1] if i else self._late_dropped
            overdue = now - self._pulse_at - PULSE_S
            overdue = overdue if overdue > DEAF_MIN_S else 0.0
            return (self._late_total - before) + min(overdue, max(0.0, now - since))

    def record(self, heartbeat: pb.Heartbeat) -> None:
        """Store ``heartbeat`` as the latest of its task attempt (a new record: one handed out
        by :meth:`drain` or :meth:`get` is never changed afterwards)."""
        t = heartbeat.task
        raw = (t.task_type, t.task_index, t.attempt)
        now = self._clock()
        with self._lock:
            self.total += 1
            entry = self._records.get(raw)
            if entry is None:
                entry = (self._key(raw), HeartbeatRecord(heartbeat, now, now, 1))
            else:
                rec = entry[1]
                entry = (entry[0], HeartbeatRecord(heartbeat, now, rec.first_received_at, rec.count + 1))
            self._records[raw] = self._changed[raw] = entry

    def _key(self, raw: tuple[str, int, int]) -> tuple[TaskId, int]:
        task = self._task_ids.get(raw[:2])
        if task is None:
            task = self._task_ids[raw[:2]] = TaskId(raw[0], raw[1])
        return task, raw[2]

    def drain(self) -> dict[tuple[TaskId, int], HeartbeatRecord]:
        """The latest record of every task attempt that sent a heartbeat since the last drain,
        keyed by (task, attempt): what changed, so a reader's work is O(changes). The records
        are the store's own, never changed after (no copy: 10,000 tasks send 10,000 a second)."""
        with self._lock:
            changed, self._changed = self._changed, {}
        return dict(changed.values())

    def get(self, task: TaskId, attempt: int) -> HeartbeatRecord | None:
        """The latest record of one attempt (never changed after), or None before its first heartbeat."""
        with self._lock:
            entry = self._records.get((task.task_type, task.task_index, attempt))
        return None if entry is None else entry[1]
