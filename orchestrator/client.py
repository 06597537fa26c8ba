"""Progress reporting for your own training program: ``report()``, a Keras callback, and
``training_finished()``.

A program launched with ``python -m orchestrator launch ... -- python train.py`` runs in
every task with ``TF_CONFIG`` set; the orchestrator watches its process (alive, CPU, RSS)
without any change to it. To show steps, loss and metrics in the live view and in
``summary.json`` (and to get hang and stall detection), opt in::

    from orchestrator.client import report, keras_callback, training_finished

    model.fit(..., callbacks=[keras_callback(batch_size=global_batch)])   # tf-keras
    report(step=step, loss=float(loss), accuracy=acc)     # or from any loop ...
    training_finished(loss=float(loss))                   # ... and when it ends

* Importing this module in a task that trains (the chief, an MWMS worker, the PSS
  coordinator) announces the task to the orchestrator at once, in phase ``initializing``:
  from then on it must reach training (its first :func:`report`, or ``fit`` starting with
  :func:`keras_callback`) within ``--startup-timeout``, keep its step moving within
  ``--stall-timeout`` while training, and keep heartbeating.
* :func:`report` moves the task to phase ``training``; its first call is sent at once.
* :func:`training_finished` moves it to phase ``finishing`` (training ended; evaluation,
  export and the like are under way), which is never a training stall; the callback does it
  in ``on_train_end``. Exiting 0 says the task is done.
* A step passed to :func:`report` (and the callback's) fires the task's step-triggered
  injected faults (``--inject-fault worker:1:kill@step=50``); ``raise`` raises
  :class:`InjectedFault` from :func:`report`.

Outside an orchestrated task (no ``ORCH_HEALTH_ADDRESS``) everything is a no-op and neither
grpc nor TensorFlow is imported, so the same script still runs by hand. This module does not
import TensorFlow until :func:`keras_callback` is called. It is the public face of the task
side (:mod:`orchestrator.task.reporting`, :mod:`orchestrator.task.keras_callback`).
"""

from __future__ import annotations

from orchestrator.task.faults import InjectedFault
from orchestrator.task.reporting import announce, done, report, training_finished

__all__ = ["InjectedFault", "done", "keras_callback", "report", "training_finished"]

announce()


def keras_callback(interval_s: float = 1.0, batch_size: int | None = None):
    """A tf-keras callback reporting step, epoch, loss and throughput.

    It reports phase ``training`` at step 0 in ``on_train_begin`` (at once), the global step
    (counted per batch, right with ``steps_per_execution`` and without ``steps_per_epoch``)
    at most every ``interval_s`` and at each epoch's end, and phase ``finishing`` in
    ``on_train_end``. It lives in :mod:`orchestrator.task.keras_callback` (which imports
    tf_keras), so this module stays free of TensorFlow until it is called.

    Args:
        interval_s: least seconds between two loss fetches (each is a round trip under PSS).
        batch_size: the global batch size (examples per step across all replicas), for
            examples/s. Default: ``fit``'s own batch size when it knows one (NumPy input);
            when neither is known (a ``tf.data`` dataset), the callback reports a
            ``steps_per_second`` metric instead.
    """
    from orchestrator.task.keras_callback import ReportCallback  # imports tf_keras

    return ReportCallback(interval_s, batch_size)
