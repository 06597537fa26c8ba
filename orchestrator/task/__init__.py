"""The task side: what runs inside a task process, never in the orchestrator.

* :mod:`orchestrator.task.runtime`: the frame of every task entrypoint (``run_task``), made of
  :mod:`~orchestrator.task.context` (what the task knows, from the environment),
  :mod:`~orchestrator.task.lifetime` (parent-death signal, stack dumps),
  :mod:`~orchestrator.task.sigterm` (the orchestrator's stop or a preemption) and
  :mod:`~orchestrator.task.errorfile` (JSON error files);
* :mod:`orchestrator.task.reporter`: the heartbeat stream to the orchestrator;
* :mod:`orchestrator.task.reporting`: ``report()`` / ``done()`` for users' own programs,
  re-exported by the public :mod:`orchestrator.client`;
* :mod:`orchestrator.task.keras_callback`: the tf-keras callback behind
  ``orchestrator.client.keras_callback`` (imports tf_keras);
* :mod:`orchestrator.task.faults`: fires injected faults;
* :mod:`orchestrator.task.probe`: the task's ``grpc.health.v1`` server and the container
  healthcheck ``python -m orchestrator.task.probe``;
* :mod:`orchestrator.task.execwrap`: ``python -m orchestrator.task.execwrap -- PROGRAM``.

The task side and the control plane share only :mod:`orchestrator.spec`,
:mod:`orchestrator.env`, :mod:`orchestrator.proto` and :mod:`orchestrator.errors`
(``tests/unit/test_architecture.py`` checks it).
"""
