"""Training progress -> heartbeats: one helper for the Keras callback and the custom loops."""

from __future__ import annotations

import time

from orchestrator import env
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.task.faults import FaultInjector


def mark(label: str) -> None:
    """With ``BENCH_TIMING`` set, print ``bench: mark LABEL (unix T)``: where a start's time goes."""
    env.bench_mark(label)


class Progress:
    """Feeds step, epoch, loss and examples/s to a ``HeartbeatReporter``, and fires
    step-triggered injected faults.

    Args:
        reporter: the task's heartbeat reporter.
        global_batch_size: examples per step across the replicas in sync.
        interval_s: least seconds between two reports from :meth:`step`.
    """

    def __init__(self, reporter, global_batch_size: int, interval_s: float = 1.0) -> None:
        self._reporter = reporter
        self._global_batch_size = global_batch_size
        self._interval_s = interval_s
        self._faults = FaultInjector.from_env()
        self._last_time = time.monotonic()
        self._last_step = 0
        self.step_now = 0
        self.loss: float | None = None
        self.resumed_from_step: int | None = None

    def begin(self, resumed_from_step: int) -> None:
        """Training starts (again) after ``resumed_from_step`` steps already done."""
        self.resumed_from_step = self._last_step = self.step_now = resumed_from_step
        self._last_time = time.monotonic()
        # one update: the phase change goes out at once, and the supervisor reads where training
        # resumed from that very heartbeat
        resumed = {"resumed_from_step": resumed_from_step} if resumed_from_step else {}
        self._reporter.update(phase=pb.PHASE_TRAINING, message="training", step=resumed_from_step, **resumed)
        if env.is_set(env.BENCH_TIMING):  # bench/: the same marker with and without the orchestrator
            print(f"bench: first step {resumed_from_step + 1} done (unix {time.time():.3f})", flush=True)
        if resumed_from_step:
            print(f"resumed from step {resumed_from_step}", flush=True)

    def due(self) -> bool:
        """Whether a report is due (fetching a loss costs a round trip under PSS)."""
        return time.monotonic() - self._last_time >= self._interval_s

    def step(self, step: int, loss=None) -> None:
        """Step ``step`` is done; ``loss`` (a float or a callable giving one) is read only when due."""
        self.step_now = step
        self._faults.on_step(step, lambda: self.report(loss() if callable(loss) else loss, flush=True))
        if self.due():
            self.report(loss() if callable(loss) else loss)

    def report(self, loss: float | None = None, epoch: int | None = None, flush: bool = False) -> None:
        """Send what is known now; ``epoch`` = epochs completed; ``flush``: before this returns
        (bounded: :meth:`orchestrator.task.reporter.HeartbeatReporter.flush`)."""
        now = time.monotonic()
        if loss is not None:
            self.loss = float(loss)
        rate = None
        if self.step_now > self._last_step and now > self._last_time:
            rate = (self.step_now - self._last_step) * self._global_batch_size / (now - self._last_time)
            self._last_time, self._last_step = now, self.step_now
        self._reporter.update(step=self.step_now, epoch=epoch, loss=self.loss, examples_per_second=rate, now=flush)
        if flush:
            self._reporter.flush()
        if epoch is not None and env.is_set(env.BENCH_TIMING):
            print(f"bench: epoch {epoch} done at step {self.step_now} (unix {time.time():.3f})", flush=True)

    def finished(self) -> None:
        """Training ended: phase ``finishing`` with the last step and loss, sent before this
        returns (bounded: :meth:`orchestrator.task.reporter.HeartbeatReporter.flush`)."""
        self._reporter.update(phase=pb.PHASE_FINISHING, message="training finished", step=self.step_now or None,
                              loss=self.loss)
        self._reporter.flush()
