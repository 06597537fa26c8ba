"""Injected step faults of tasks that report no training step, handed over at the job's step.

A ps, a ParameterServerStrategy worker, the evaluator and the tf.data service's tasks report no
training step, so ``--inject-fault ps:0:kill@step=N`` cannot fire on a step of their own. The plan
gives such a fault to the job's *gate* too (:func:`orchestrator.spec.faults.gate_of`: the chief
under PSS, the first trainer under MWMS), whose step is the job's step:

* the gate, when its step reaches N, hands it over (``HandOverFault``, :func:`hand_over`) and
  waits until the task took it (at most :data:`HANDOVER_WAIT_S`): its next step waits too, so the
  fault lands within one step of N (the orchestrator's heartbeats come once a second, 20-60 steps
  of a small model: too late to trigger from);
* the task long-polls for it (``TakeFault``, :func:`take`) from a thread of its own, armed only
  when it has such a fault (:meth:`orchestrator.task.faults.FaultInjector.start`), and fires it
  at once, its line naming the job step it was handed over at.

Why the gate and not the supervisor: the supervisor knows the job's step from heartbeats, a
second late; the gate knows it at the step, and only a wait at the gate makes "within one step" hold.
"""

from __future__ import annotations

import logging
from typing import Any

from orchestrator import env
from orchestrator.spec.faults import Fault
from orchestrator.spec.model import TaskId

log = logging.getLogger(__name__)

HANDOVER_WAIT_S = 5.0
"""Longest a gate waits for a task to take a fault it hands over, seconds: the task's poll
answers in milliseconds; a task that does not take it within this is not running (restarting, or
gone), and the gate goes on training (the fault is then reported as never fired)."""
POLL_WAIT_S = 10.0
"""One long poll's wait for a fault, seconds (the server's cap)."""

_channel: Any = None


def _stub() -> tuple[Any, tuple[tuple[str, str], ...]]:
    """The Supervisor stub of this process (one channel, made at the first call) and the call's metadata."""
    global _channel
    from orchestrator import tls
    from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
    from orchestrator.task.reporter import CHANNEL_OPTIONS

    if _channel is None:
        name = env.read(env.TASK)  # worker-1: the task's own certificate
        _channel = tls.channel(env.read(env.HEALTH_ADDRESS), tls.files_for(env.read(env.TLS_DIR), name),
                               CHANNEL_OPTIONS)
    return pb_grpc.SupervisorStub(_channel), ((env.TOKEN_METADATA_KEY, env.read(env.JOB_TOKEN)),)


def _key(task: TaskId, attempt: int) -> Any:
    from orchestrator.proto import supervisor_pb2 as pb

    return pb.TaskKey(task_type=task.task_type, task_index=task.task_index, attempt=attempt)


def hand_over(fault: Fault, name: str, job_step: int) -> str:
    """Hand ``fault`` (named ``name``) over to its task at ``job_step``; blocks until the task took
    it, at most :data:`HANDOVER_WAIT_S`. Returns ``taken``, ``early`` (the task runs an earlier
    attempt: hand it over again at a later step) or ``missed`` (also when the orchestrator
    cannot be reached)."""
    import grpc

    from orchestrator.proto import supervisor_pb2 as pb

    stub, metadata = _stub()
    request = pb.FaultHandover(task=_key(fault.task, fault.attempt), fault=name, job_step=job_step,
                               wait_s=HANDOVER_WAIT_S)
    try:
        reply = stub.HandOverFault(request, metadata=metadata, timeout=HANDOVER_WAIT_S + 5.0)
    except grpc.RpcError as exc:
        log.warning("could not hand %s over: %s", name, exc)
        return "missed"
    return {pb.HANDOVER_TAKEN: "taken", pb.HANDOVER_EARLY: "early"}.get(reply.outcome, "missed")


def take(task: TaskId, attempt: int) -> tuple[str, int] | None:
    """The next fault handed over to this task (``attempt``) as ``(name, job step)``, after one long
    poll of at most :data:`POLL_WAIT_S`; None when none came (or the call failed: poll again)."""
    import grpc

    from orchestrator.proto import supervisor_pb2 as pb

    stub, metadata = _stub()
    try:
        reply = stub.TakeFault(pb.FaultPoll(task=_key(task, attempt), wait_s=POLL_WAIT_S), metadata=metadata,
                               timeout=POLL_WAIT_S + 5.0, wait_for_ready=True)
    except grpc.RpcError as exc:
        log.debug("fault poll failed: %s", exc)
        return None
    return (reply.fault, int(reply.job_step)) if reply.fault else None
