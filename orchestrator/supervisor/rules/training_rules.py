"""Training-health rules (pure: plain data in, a line out): a non-finite loss or watched metric.

A loss that turns NaN or infinite trains on to the end without a word (Keras' ``fit`` goes on;
only ``TerminateOnNaN`` stops it), and every step after it is wasted. The supervisor reads each
heartbeat's ``loss`` and the metrics the user names (``supervision.nan_metrics``,
``--nan-metrics``) and, the first time one is not finite on a task's attempt, says so with the
task and the step (docs/failure-handling.md, "Non-finite loss"):

* ``on_nan: warn`` (default): a warning in the live view, ``status``, the web page and
  ``summary.json``'s ``warnings``; the job goes on (a loss spike that recovers, a metric that is
  NaN on an empty batch, are the user's to judge).
* ``on_nan: fail``: the job fails at once, as a permanent error: no restart is tried, since a
  restart resumes from a checkpoint of the same weights and data and meets the same NaN.

:class:`NanWatch` is the check as the loop runs it (state: what was said, per task attempt).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

ON_NAN = ("warn", "fail")
"""The values of ``supervision.on_nan`` (``--on-nan``)."""


def non_finite(loss: float | None, metrics: Mapping[str, float], watched: Iterable[str]) -> dict[str, float]:
    """The values that are not finite: ``loss`` (when given) and the ``watched`` metrics present
    in ``metrics``; name -> value, ``loss`` first. Empty when all are finite."""
    out: dict[str, float] = {}
    if loss is not None and not math.isfinite(loss):
        out["loss"] = loss
    for name in watched:
        value = metrics.get(name)
        if value is not None and not math.isfinite(value):
            out[name] = value
    return out


def nan_line(task: str, step: int | None, values: Mapping[str, float], on_nan: str) -> str:
    """The warning (or the failure's reason) for ``task``'s first non-finite ``values`` at ``step``.

    Returns:
        e.g. ``worker-0 reported a non-finite loss (nan) first at step 12: training goes
        on (--on-nan warn); lower the learning rate, clip gradients, or check the input for NaN``.
    """
    what = ", ".join(f"{name} ({value})" for name, value in values.items())
    where = f"first at step {step}" if step is not None else "before its first step"
    head = f"{task} reported a non-finite {what} {where}"
    if on_nan == "fail":
        return (f"{head}: failing the job without a restart (--on-nan fail; a restart resumes the same weights "
                "and data and meets it again); lower the learning rate, clip gradients, or check the input for NaN")
    return (f"{head}: training goes on (--on-nan warn; --on-nan fail stops the job); lower the "
            "learning rate, clip gradients, or check the input for NaN")


class NanWatch:
    """:func:`non_finite` of each heartbeat, said once per task attempt.

    Args:
        on_nan: ``warn`` or ``fail`` (:data:`ON_NAN`).
        watched: metric names checked besides the loss.
    """

    def __init__(self, on_nan: str = "warn", watched: Iterable[str] = ()) -> None:
        self.on_nan, self.watched = on_nan, tuple(watched)
        self._said: set[tuple[str, int]] = set()
        self.failure: str | None = None  # the reason that fails the job (on_nan fail), once seen

    def beat(self, task: str, attempt: int, step: int | None, loss: float | None,
             metrics: Mapping[str, float], first_step: int | None = None) -> list[str]:
        """One heartbeat of ``task``'s ``attempt``: the warning to show when a value is not finite
        for the first time on this attempt (else none); sets :attr:`failure` (the same line) under
        ``on_nan: fail``. ``first_step``: the step of its first non-finite value as its reporting
        client says (the heartbeat's typed ``non_finite_step``: heartbeats carry the latest state
        only, so the ``step`` the supervisor sees first may be a later one)."""
        if (loss is None or math.isfinite(loss)) and not self.watched:
            return []  # the hot path: one isfinite per heartbeat
        values = non_finite(loss, metrics, self.watched)
        if not values or (task, attempt) in self._said:
            return []
        self._said.add((task, attempt))
        line = nan_line(task, first_step if first_step is not None else step, values, self.on_nan)
        if self.on_nan == "fail" and self.failure is None:
            self.failure = line
        return [line]


UNEVEN_DATA_FIX = ("give every worker the same number of steps: steps_per_epoch in fit, dataset.repeat(), or "
                   "tf.data.experimental.AutoShardPolicy.DATA sharding")


def uneven_data(mwms: bool, failed: str, failed_step: int | None, failed_phase: str | None, stuck: bool,
                finished: Sequence[tuple[str, int | None]]) -> str | None:
    """Why a stuck MWMS trainer's failure is uneven data, not a hang to restart; None when it is not.

    Under MultiWorkerMirroredStrategy every trainer takes part in every step's all-reduce. A worker
    whose dataset ran out first ends ``fit`` and exits 0 while a peer still has steps: the peer
    waits in the collective for it forever, is killed as hung (or dies of a collective timeout),
    and a group restart replays the same data and the same wait. So when a trainer fails
    ``stuck`` (hung, or a peer's collective error) while still ``training``, and another trainer
    of the group already finished (exited 0), the finished one is the cause, and no restart is
    tried (docs/failure-handling.md, "Uneven data").

    Args:
        mwms: the job's strategy is MultiWorkerMirroredStrategy.
        failed: the stuck trainer's name (``worker-0``); ``failed_step`` its last step,
            ``failed_phase`` its last heartbeat's phase.
        stuck: it was killed as hung, or died of a peer's (collective) error.
        finished: the other trainers whose current attempt exited 0: ``(name, last step)``, in
            the order they ended.

    Returns:
        e.g. ``worker-1 finished at local step 40 while worker-0 was at step 44: uneven data across
        workers ...``, naming the first to finish and the fix.
    """
    if not mwms or not stuck or failed_phase != "training" or not finished:
        return None
    name, step = finished[0]
    at = f"local step {step}" if step is not None else "an unknown step"
    where = f"step {failed_step}" if failed_step is not None else "an unknown step"
    return (f"{name} finished at {at} while {failed} was at {where}: uneven data across workers ({failed} waited "
            f"in the all-reduce for a worker that had left; a restart replays it): {UNEVEN_DATA_FIX}")


SIGBUS_CODES = (-7, 135)
"""A death by SIGBUS: Popen's ``-7``, or ``128 + 7`` from a shell or a container's init."""


def shm_exhausted(exit_code: int | None) -> str | None:
    """Why a task that died of SIGBUS is not restarted, or None for another end.

    A process that writes past the memory of a full ``tmpfs`` gets SIGBUS, not an error: the
    classic one is ``/dev/shm``, which Docker sizes at 64 MB unless told otherwise, and which
    multi-process data loading and NCCL's shared-memory transport outgrow. A restart gets the
    same ``/dev/shm`` and dies the same way, so this is a permanent error, named with the option
    that sizes it (docs/containers.md, "Shared memory")."""
    if exit_code not in SIGBUS_CODES:
        return None
    return ("it died of SIGBUS, the signal of a full /dev/shm (shared memory: Docker's default is 64 MB; "
            "multi-process data loading and NCCL outgrow it), and a restart gets the same /dev/shm: give it more "
            "with --shm-size 2G (docker backend; Compose: compose --shm-size; Kubernetes: render --shm-size)")
