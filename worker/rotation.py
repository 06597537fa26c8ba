"""The coordinator's view of its workers under ParameterServerStrategy.

When a PSS worker dies, TF's ``ClusterCoordinator`` keeps training on the others; once the
worker's server is reachable again it updates the cluster and puts the worker back into
its rotation (``WorkerPreemptionHandler`` in ``tensorflow/python/distribute/coordinator/
cluster_coordinator.py``). Only then does the restarted worker run steps again: a worker
whose server is up is not yet a worker that trains. The coordinator says both things only
in its log (``Worker /job:worker/replica:0/task:N failed with ...`` at ERROR, ``... has been
recovered.`` at INFO), so :func:`watch` reads them there and reports them:

* a worker back in the rotation: the heartbeat's typed ``rejoined[worker-N]`` = how many times it came back
  in this coordinator's life, sent at once (the supervisor times the task's recovery by it);
* a message for the live view in both cases.

What TF prints stays as it was: INFO records reach this filter only, never a handler, unless
the logger already showed INFO.
"""

from __future__ import annotations

import logging
import re
import time

from orchestrator import env

_FAILED = re.compile(r"^Worker /job:worker/replica:\d+/task:(\d+) failed with")
_RECOVERED = re.compile(r"^Worker /job:worker/replica:\d+/task:(\d+) has been recovered")


class _RotationFilter(logging.Filter):
    """A filter on TF's logger: sees every record from INFO up, passes on only those at or
    above ``shown`` (the level the logger had before)."""

    def __init__(self, reporter, shown: int) -> None:
        super().__init__("orchestrator-rotation")
        self._reporter = reporter
        self._shown = shown
        self.rejoined: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.INFO and isinstance(record.msg, str) and record.msg.startswith("Worker "):
            try:
                self._look(record.getMessage())
            except Exception:  # noqa: BLE001, S110 - reporting must never break TF's logging
                pass
        return record.levelno >= self._shown

    def _look(self, message: str) -> None:
        if m := _RECOVERED.match(message):
            name = f"worker-{m[1]}"
            self.rejoined[name] = self.rejoined.get(name, 0) + 1
            if env.is_set(env.BENCH_TIMING):
                print(f"bench: {name} rejoined (unix {time.time():.3f})", flush=True)
            self._reporter.update(message=f"{name} is back in the coordinator's rotation", now=True,
                                  rejoined={name: self.rejoined[name]})
        elif m := _FAILED.match(message):
            self._reporter.update(message=f"worker-{m[1]} failed: the coordinator trains on without it")


def watch(tf, reporter) -> _RotationFilter:
    """Report the coordinator's worker failures and returns (see the module docstring).

    Args:
        tf: the ``tensorflow`` module (this process is the PSS coordinator).
        reporter: the task's ``HeartbeatReporter``.

    Returns:
        The installed filter (its ``rejoined`` counts per worker name).
    """
    logger = tf.get_logger()
    shown = logger.getEffectiveLevel()
    rotation = _RotationFilter(reporter, shown)
    if shown > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addFilter(rotation)
    return rotation
