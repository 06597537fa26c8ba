"""``report()`` and ``done()`` for a user's own training program, behind :mod:`orchestrator.client`.

The heartbeat reporter starts lazily, on the first call, and only inside an orchestrated
task (``ORCH_HEALTH_ADDRESS`` and ``TF_CONFIG`` set); elsewhere both calls are no-ops.
"""

from __future__ import annotations

import atexit
import os
import threading

from orchestrator import env
from orchestrator.task.runtime import TaskContext

_lock = threading.Lock()
_reporter = None
_started = False


def _get():
    global _reporter, _started
    with _lock:
        if not _started:
            _started = True
            if os.environ.get(env.HEALTH_ADDRESS) and os.environ.get("TF_CONFIG"):
                # grpc and psutil (~20 MB) load only inside an orchestrated task, not in a script run by hand
                from orchestrator.task.reporter import HeartbeatReporter

                context = TaskContext.from_env()
                _reporter = HeartbeatReporter.from_context(context)
                if os.getppid() != context.orchestrator_pid:  # a child of the task: no watchdog
                    _reporter._orchestrator_pid = 0
                _reporter.start()
                atexit.register(_reporter.close)
        return _reporter


def report(step: int | None = None, loss: float | None = None, *, epoch: int | None = None,
           examples_per_second: float | None = None, **metrics: float) -> None:
    """Report training progress of this task (thread-safe, cheap: sent with the next heartbeat).

    Args:
        step: global training steps completed.
        loss: latest training loss.
        epoch: epochs completed.
        examples_per_second: throughput of this task.
        **metrics: any other numbers (e.g. ``accuracy=0.93``); they land in summary.json.
    """
    reporter = _get()
    if reporter is None:
        return
    from orchestrator.proto import supervisor_pb2 as pb  # protobuf: only once there is a reporter

    reporter.update(phase=pb.PHASE_TRAINING, step=step, loss=loss, epoch=epoch,
                    examples_per_second=examples_per_second, **metrics)


def done(**metrics: float) -> None:
    """Say the task finished its work (optional: exit 0 says it too), with final metrics."""
    reporter = _get()
    if reporter is not None:
        from orchestrator.proto import supervisor_pb2 as pb  # protobuf: only once there is a reporter

        reporter.update(phase=pb.PHASE_DONE, **metrics)
