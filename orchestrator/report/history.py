"""What status queries and the web page read while a job runs: the latest snapshot, each task's
progress over time (the page's charts) and the job's events (its timeline).

One recorder serves every life of a run in one process (a size change of a running elastic job:
:func:`orchestrator.api.run`), so the page's history goes on across lives: sequence numbers keep
counting and a sample's or event's ``t`` is seconds since the first life started (each life's
supervisor counts its own ``elapsed_s`` from 0; :meth:`Recorder.next_life` adds the offset).

:class:`Recorder` is a view (:class:`~orchestrator.supervisor.records.snapshot.View`): the supervisor hands
it every snapshot and event from its loop thread, it keeps them, and passes them on to the
terminal's view. Other threads (the gRPC server, the web server) read it under a lock; none of
them ever touches the supervisor's live records.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import jsontext
from orchestrator.rundir import RunDir

if TYPE_CHECKING:  # the supervisor's records: after a launch's first tasks have started
    from orchestrator.proto import supervisor_pb2 as pb
    from orchestrator.supervisor.records.snapshot import JobSnapshot, View


def event_kind(text: str) -> str:
    """The timeline lane of an event: ``restart``, ``failure``, ``recovered``, ``job``, ``life`` (the
    run continues in a next life: :func:`orchestrator.api.run`) or ``task``."""
    if text.startswith("run ") and ", life " in text:
        return "life"
    if text.startswith("restart "):
        return "restart"
    if text.startswith("job "):
        return "job"
    if " again " in text:
        return "recovered"
    if "failed" in text or " is hung" in text:
        return "failure"
    return "task"


class Recorder:
    """Keeps the latest snapshot, a bounded progress series per task and every event.

    Args:
        view: the view everything is passed on to (the terminal's); None for none. It may be
            replaced later (``recorder.view = TableView()``).
        sample_interval_s: least seconds of job time between two samples of one task.
        max_samples: samples kept (oldest dropped first); at two per second per task,
            30,000 are 50 minutes of a 5-task job (about 3 MB of JSON for a page opened late).
        max_events: events kept (oldest dropped first).
    """

    interval_s: float | None = 0.0
    """Every snapshot the supervisor takes (its ``view_interval_s``): the page and ``status`` read them."""

    def __init__(self, view: View | None = None, sample_interval_s: float = 0.5, max_samples: int = 30_000,
                 max_events: int = 2_000) -> None:
        self.view = view
        self._interval_s = sample_interval_s
        self._lock = threading.Lock()
        self._snapshot: JobSnapshot | None = None
        self._status: tuple[JobSnapshot, dict[str, Any]] | None = None
        self._status_reply: tuple[JobSnapshot | None, pb.StatusReply] | None = None
        self._seq = 0
        self._samples: deque[dict[str, Any]] = deque(maxlen=max_samples)
        self._events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self._last_sample: dict[str, tuple[float, int | None, int]] = {}
        self._t0: float | None = None  # time.monotonic() at the first life's elapsed 0
        self._offset_s = 0.0  # the current life's elapsed 0 on the run's time axis
        self._offset_due = False  # set it at the next life's first snapshot or event
        self._last_t = 0.0  # the latest t recorded
        self._between = False  # a life ended and the next one has not started yet

    def _t(self, elapsed_s: float) -> float:
        """``elapsed_s`` of the current life on the run's time axis (under the lock)."""
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now - elapsed_s
        if self._offset_due:  # the next life's first: after the last one recorded, at its time since t0
            self._offset_due = False
            self._offset_s = max(self._offset_s, self._last_t - elapsed_s, now - self._t0 - elapsed_s)
        self._last_t = max(self._last_t, self._offset_s + elapsed_s)
        return self._offset_s + elapsed_s

    def next_life(self) -> None:
        """The run continues in a next life in this process (the same page, the same history): until
        its first snapshot (:meth:`prime`) the status still reads ``live`` (the run goes on), and its
        samples and events are placed after this life's on the time axis."""
        with self._lock:
            self._between = True
            self._offset_due = True

    def no_next_life(self) -> None:
        """The next life announced by :meth:`next_life` did not start: the run has ended."""
        with self._lock:
            self._between = False

    # -- the View protocol (the supervisor's thread) ------------------------------------
    def prime(self, snapshot: JobSnapshot) -> None:
        """Keep ``snapshot`` as the latest without passing it on (before the job starts)."""
        with self._lock:
            self._snapshot = snapshot
            self._between = False

    def update(self, snapshot: JobSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot
            self._between = False
            at = round(self._t(snapshot.elapsed_s), 2)
            for t in snapshot.tasks:
                hb = t.heartbeat
                if hb is None or t.state.terminal:
                    continue
                last = self._last_sample.get(t.name)
                if last is not None and last[2] == t.attempt and at - last[0] < self._interval_s:
                    continue
                self._last_sample[t.name] = (at, hb.step, t.attempt)
                self._seq += 1
                self._samples.append({
                    "seq": self._seq, "t": at, "task": t.name, "attempt": t.attempt,
                    "step": hb.step, "loss": hb.loss, "examples_per_second": hb.examples_per_second,
                    "cpu_percent": round(hb.cpu_percent, 1), "rss_bytes": hb.rss_bytes,
                })
        if self.view is not None:
            self.view.update(snapshot)

    def event(self, elapsed_s: float, text: str) -> None:
        with self._lock:
            self._seq += 1
            self._events.append({"seq": self._seq, "t": round(self._t(elapsed_s), 2), "text": text,
                                 "kind": event_kind(text)})
        if self.view is not None:
            self.view.event(elapsed_s, text)

    def close(self) -> None:
        if self.view is not None:
            self.view.close()

    # -- readers (any thread) ------------------------------------------------------------
    def snapshot(self) -> JobSnapshot | None:
        """The latest snapshot (at most the supervisor's view interval old), None before any."""
        with self._lock:
            return self._snapshot

    def history(self, since: int = 0) -> dict[str, Any]:
        """Samples and events with a sequence number above ``since``, and the last number
        (``seq``) to ask from next time."""
        with self._lock:
            return {
                "seq": self._seq,
                "samples": [s for s in self._samples if s["seq"] > since],
                "events": [e for e in self._events if e["seq"] > since],
            }

    def status(self, history: bool = False, since: int = 0) -> dict[str, Any]:
        """:func:`~orchestrator.report.status.status_dict` of the latest snapshot (built once per
        snapshot), with ``history`` (:meth:`history`) when asked; ``{}`` before any snapshot."""
        with self._lock:
            snapshot, cached = self._snapshot, self._status
        if snapshot is None:
            return {}
        if cached is None or cached[0] is not snapshot:
            from orchestrator.report.status import status_dict  # at the first query: not before the tasks start

            cached = (snapshot, status_dict(snapshot))
            with self._lock:
                self._status = cached
        out = dict(cached[1])
        if history:
            out["history"] = self.history(since)
        return out

    def page_status(self, history: bool = False, since: int = 0) -> dict[str, Any]:
        """:meth:`status` for the web page and ``/metrics``, which outlive a life: also
        ``life_started_s``, where this life's ``elapsed_s`` 0 lies on the history's time axis
        (seconds; 0 in the first life); between two lives ``live`` stays true (the run goes on)."""
        out = self.status(history, since)
        with self._lock:
            offset, between = self._offset_s, self._between
        if out:
            out["life_started_s"] = round(offset, 2)
            if between:
                out["live"] = True
        return out

    def status_reply(self, history: bool = False, since: int = 0) -> pb.StatusReply:
        """The typed ``GetStatus`` reply of the latest snapshot
        (:func:`~orchestrator.report.status_reply.status_reply`: the fields of :meth:`status`),
        built once per snapshot; with ``history`` (:meth:`history`) when asked; no ``job``
        before any snapshot."""
        # at the first query: protobuf is not on the path to the first task start
        from orchestrator.proto import supervisor_pb2 as pb
        from orchestrator.report.status_reply import history_message, status_reply

        with self._lock:
            snapshot, cached = self._snapshot, self._status_reply
        if cached is None or cached[0] is not snapshot:
            cached = (snapshot, status_reply(snapshot))
            with self._lock:
                self._status_reply = cached
        if not history:
            return cached[1]
        reply = pb.StatusReply()
        reply.CopyFrom(cached[1])
        reply.history.CopyFrom(history_message(self.history(since)))
        return reply

    def write(self, run_dir: Path) -> Path:
        """Write the whole history to ``run_dir/history.json`` (atomically); returns its path.
        ``status --web`` of a finished run charts it."""
        path = RunDir(run_dir).history
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(jsontext.dumps(self.history(0)) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path
