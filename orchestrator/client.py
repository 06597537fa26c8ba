"""Progress reporting for your own training program: ``report()`` and a Keras callback.

A program launched with ``python -m orchestrator launch ... -- python train.py`` runs in
every task with ``TF_CONFIG`` set; the orchestrator watches its process (alive, CPU, RSS)
without any change to it. To show steps, loss and metrics in the live view and in
``summary.json`` (and to get stall detection), opt in::

    from orchestrator.client import report, keras_callback

    model.fit(..., callbacks=[keras_callback()])          # tf-keras
    report(step=step, loss=float(loss), accuracy=acc)     # or from any loop

Outside an orchestrated task (no ``ORCH_HEALTH_ADDRESS``) both are no-ops, so the same
script still runs by hand. This module does not import TensorFlow until
:func:`keras_callback` is called. It is the public face of the task side
(:mod:`orchestrator.task.reporting`, :mod:`orchestrator.task.keras_callback`).
"""

from __future__ import annotations

from orchestrator.task.reporting import done, report

__all__ = ["done", "keras_callback", "report"]


def keras_callback(interval_s: float = 1.0):
    """A tf-keras callback reporting step, epoch, loss and examples/s.

    It lives in :mod:`orchestrator.task.keras_callback` (which imports tf_keras), so this
    module stays free of TensorFlow until it is called.

    Args:
        interval_s: least seconds between two loss fetches.
    """
    from orchestrator.task.keras_callback import ReportCallback  # imports tf_keras

    return ReportCallback(interval_s)
