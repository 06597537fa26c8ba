"""The orchestrator's gRPC endpoint: our ``Supervisor`` service plus ``grpc.health.v1.Health``.

It runs a ``grpc.aio`` server on its own thread and event loop, so one thread absorbs
the heartbeat streams of every task. Heartbeats land in a
:class:`~orchestrator.health.store.HeartbeatStore` with the orchestrator's monotonic receive
time; the supervisor reads the store, never the task's clock. A launch reserves the server's
port before its tasks start and brings the server up after
(:class:`~orchestrator.health.endpoint.HealthEndpoint`).

Security: the server binds loopback by default; with the run's certificates (``tls``, a launch's
default: :mod:`orchestrator.tls`) every call, ``grpc.health.v1`` included, must present a client
certificate of the run (mutual TLS), and every ``Supervisor`` call must also carry the job token
(``x-job-token`` metadata); others get ``UNAUTHENTICATED``. The certificate's name then decides
what the call may do (:class:`Identities`): a task's reports for that task only, the user's
queries, stops and resizes the job only; others get ``PERMISSION_DENIED``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
from pathlib import Path
from typing import Callable

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator import env
from orchestrator.backends.base import Registration
from orchestrator.health.faultbox import EARLY, TAKEN, FaultBox
from orchestrator.health.loop import LoopThread
from orchestrator.health.store import PULSE_S, HeartbeatStore
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
from orchestrator.spec.model import TaskId
from orchestrator.tls import RunPki, control_refusal, peer_identity, report_refusal, server_credentials

log = logging.getLogger(__name__)

SERVICE_NAME = "tfcluster.v1.Supervisor"
REGISTER_MAX_WAIT_S = 10.0
"""Longest one ``RegisterAddress`` call waits for the rest of the cluster, seconds."""
_HEALTH_PREFIX = "/grpc.health.v1.Health/"


class _TokenInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls to our service that lack the job token (UNAUTHENTICATED)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(_HEALTH_PREFIX):
            return handler
        given = dict(handler_call_details.invocation_metadata or ()).get(env.TOKEN_METADATA_KEY, "")
        if hmac.compare_digest(str(given).encode(), self._token):
            return handler
        return _deny_handler(handler)


def _deny_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    async def deny(_request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"missing or wrong job token ({env.TOKEN_METADATA_KEY})")

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


RegisterFn = Callable[[TaskId, int, str, int, float], Registration]
"""``(task, attempt, host, port, wait_s) -> Registration``: a backend's :meth:`register_address`."""


def _refuse(task: TaskId, attempt: int, host: str, port: int, wait_s: float) -> Registration:
    return Registration(False, error="this orchestrator assigns every address itself")


StatusSource = Callable[[bool, int], pb.StatusReply]
"""``(history, history_since) -> the typed reply`` of the job's status (injected by ``api``: built by
:mod:`orchestrator.report.status_reply`; this layer knows nothing of snapshots)."""

StopHandler = Callable[[str], tuple[bool, str]]
"""``reason -> (accepted, job state)``: asks the job to stop (injected by ``api``)."""

ResizeHandler = Callable[[int, str], tuple[bool, str, str]]
"""``(workers, reason) -> (accepted, job state, refusal)``: asks an elastic job to change size
(injected by ``api``; docs/elastic.md)."""


class Identities:
    """Who a TLS peer is and what it may do (:func:`orchestrator.tls.report_refusal`,
    :func:`~orchestrator.tls.control_refusal`); each refusal is logged once (per certificate and
    what it asked), then only answered.

    Args:
        tls: the run's certificates; None (plaintext): nobody has a name, the token decides.
    """

    def __init__(self, tls: RunPki | None) -> None:
        self._tls = tls
        self._own: dict[str, bool] = {}
        self._logged: set[tuple[str, str]] = set()

    def of(self, context: grpc.aio.ServicerContext) -> str | None:
        """The peer's certificate name; None on a plaintext endpoint."""
        return None if self._tls is None else peer_identity(context.auth_context())

    def _has_own(self, task: str) -> bool:
        own = self._own.get(task)
        if own is None:
            own = self._own[task] = self._tls is not None and self._tls.has_own(task)
        return own

    async def check_report(self, context: grpc.aio.ServicerContext, identity: str | None, task: TaskId) -> None:
        """Abort the call with ``PERMISSION_DENIED`` unless ``identity`` may report as ``task``."""
        if identity is not None:
            await self._deny(context, identity, report_refusal(identity, task.name, self._has_own(task.name)))

    async def check_control(self, context: grpc.aio.ServicerContext, method: str) -> None:
        """Abort the call with ``PERMISSION_DENIED`` unless the peer may call ``method``."""
        identity = self.of(context)
        if identity is not None:
            await self._deny(context, identity, control_refusal(identity, method))

    async def _deny(self, context: grpc.aio.ServicerContext, identity: str, refusal: str | None) -> None:
        if refusal is None:
            return
        if (identity, refusal) not in self._logged:
            self._logged.add((identity, refusal))
            log.warning("refused a call: %s", refusal)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)


class SupervisorServicer(pb_grpc.SupervisorServicer):
    """The gRPC servicer of ``tfcluster.v1.Supervisor``: heartbeats into the store, port releases,
    address registrations, status queries, stop and resize requests and injected faults handed over
    (:mod:`orchestrator.health.faultbox`)."""

    def __init__(self, store: HeartbeatStore, release_port: Callable[[TaskId, int], int],
                 register: RegisterFn = _refuse, status: StatusSource | None = None,
                 stop: StopHandler | None = None, identities: Identities | None = None,
                 resize: ResizeHandler | None = None) -> None:
        self._identities = identities or Identities(None)
        self._resize = resize
        self._store = store
        self._release_port = release_port
        self._register = register
        self._status = status
        self._stop = stop
        self._faults = FaultBox()

    async def StreamHeartbeats(self, request_iterator, context):  # noqa: N802 - gRPC name
        # the hot path (one pass per heartbeat): context.read() directly, not the request
        # iterator (an async generator around the same read), and no attribute look-ups per message
        record, read, eof = self._store.record, context.read, grpc.aio.EOF
        identity, checked = self._identities.of(context), None
        received = 0
        while (heartbeat := await read()) is not eof:
            # the task a certificate speaks for, checked at the first heartbeat and when its key changes
            # (a message comparison: about a fifth of what store.record costs, measured under load)
            if identity is not None and heartbeat.task != checked:
                checked = heartbeat.task
                await self._identities.check_report(context, identity, TaskId(checked.task_type, checked.task_index))
            record(heartbeat)
            received += 1
        return pb.StreamSummary(received=received)

    async def ReleasePort(self, request, context):  # noqa: N802 - gRPC name
        task = TaskId(request.task.task_type, request.task.task_index)
        await self._identities.check_report(context, self._identities.of(context), task)
        return pb.PortReply(port=self._release_port(task, request.task.attempt))

    async def RegisterAddress(self, request, context):  # noqa: N802 - gRPC name
        task = TaskId(request.task.task_type, request.task.task_index)
        await self._identities.check_report(context, self._identities.of(context), task)
        # the wait for the rest of the cluster blocks: on a worker thread, never on the event loop
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(None, self._register, task, request.task.attempt, request.host,
                                           request.port, min(max(request.wait_s, 0.0), REGISTER_MAX_WAIT_S))
        return pb.ClusterReply(ready=reply.ready, address=reply.address, tf_config=reply.tf_config, error=reply.error,
                               env=dict(reply.env))

    async def GetStatus(self, request, context):  # noqa: N802 - gRPC name
        await self._identities.check_control(context, "GetStatus")
        if self._status is None:
            return pb.StatusReply()
        # on a worker thread: the status of 10,000 tasks takes a fraction of a second to build,
        # and the event loop must go on taking their heartbeats meanwhile
        return await asyncio.get_running_loop().run_in_executor(None, self._status, request.history,
                                                                request.history_since)

    async def StopJob(self, request, context):  # noqa: N802 - gRPC name
        await self._identities.check_control(context, "StopJob")
        if self._stop is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this endpoint cannot stop its job")
        accepted, state = self._stop(request.reason or "stopped by a StopJob call")
        return pb.StopReply(accepted=accepted, state=state)

    async def ResizeJob(self, request, context):  # noqa: N802 - gRPC name
        await self._identities.check_control(context, "ResizeJob")
        if self._resize is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this endpoint cannot resize its job")
        accepted, state, refusal = self._resize(request.workers, request.reason or "resize asked")
        return pb.ResizeReply(accepted=accepted, state=state, refusal=refusal)

    async def HandOverFault(self, request, context):  # noqa: N802 - gRPC name
        task = TaskId(request.task.task_type, request.task.task_index)
        outcome = await self._faults.hand_over(task, request.task.attempt, request.fault, request.job_step,
                                               request.wait_s)
        code = {TAKEN: pb.HANDOVER_TAKEN, EARLY: pb.HANDOVER_EARLY}.get(outcome, pb.HANDOVER_MISSED)
        return pb.HandoverReply(outcome=code)

    async def TakeFault(self, request, context):  # noqa: N802 - gRPC name
        task = TaskId(request.task.task_type, request.task.task_index)
        got = await self._faults.take(task, request.task.attempt, request.wait_s)
        fault, job_step = got if got is not None else ("", 0)
        return pb.FaultHandover(task=request.task, fault=fault, job_step=job_step)


class HealthServer:
    """The orchestrator's gRPC server, on its own thread.

    Args:
        token: the job token tasks must present.
        store: where heartbeats land.
        release_port: called with (task, attempt) by ``ReleasePort``; returns the port
            released, 0 when none was held. Runs on the server thread: keep it quick.
        host: interface to bind; loopback by default.
        port: 0 for any free port.
        held: a socket bound to ``host:port`` (not listening) that keeps the port this server
            will serve on (:class:`~orchestrator.health.endpoint.HealthEndpoint`); closed right
            before the server binds. None: nothing held.
        register: called by ``RegisterAddress`` with (task, attempt, host, port, wait_s) on a
            worker thread; default: every registration refused.
        status: answers ``GetStatus`` (the typed reply); runs on a worker thread (thread-safe).
        stop: answers ``StopJob``; must only request the stop (it runs on the server thread).
        resize: answers ``ResizeJob``; must only request the resize (it runs on the server thread).
        tls: the run's certificates: mutual TLS, a client certificate of the run required on
            every call; None: plaintext (``--insecure``, tests, benchmarks).
        unix_path: also serve on this Unix socket (``--isolate-network``: the tasks' way out of
            their network namespace); None: TCP only.
    """

    def __init__(
        self,
        token: str,
        store: HeartbeatStore,
        release_port: Callable[[TaskId, int], int] = lambda task, attempt: 0,
        host: str = "127.0.0.1",
        port: int = 0,
        register: RegisterFn = _refuse,
        status: StatusSource | None = None,
        stop: StopHandler | None = None,
        held: socket.socket | None = None,
        resize: ResizeHandler | None = None,
        tls: RunPki | None = None,
        unix_path: str | None = None,
    ) -> None:
        self._unix_path = unix_path
        self._held = held
        self._tls = tls
        self._register = register
        self._status = status
        self._stop = stop
        self._resize = resize
        self._token = token
        self._store = store
        self._release_port = release_port
        self._host = host
        self._port = port
        self._loop = LoopThread("health-server", quiet=True)
        self._server: grpc.aio.Server | None = None
        self._pulse: asyncio.Future | None = None
        self.port = 0

    @property
    def address(self) -> str:
        """``host:port`` that tasks connect to."""
        return f"{self._host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> "HealthServer":
        """Start serving; returns once the port is bound.

        Raises:
            RuntimeError: when the server cannot bind within ``timeout_s`` seconds.
        """
        if not self._loop.start(self._serve, timeout_s) or self._loop.error is not None:
            raise RuntimeError(f"health server did not start on {self._host}:{self._port}: {self._loop.error}")
        return self

    async def _beat_pulse(self) -> None:
        """Tell the store every :data:`PULSE_S` seconds that this loop runs (:meth:`HeartbeatStore.pulse`)."""
        while True:
            self._store.pulse()
            await asyncio.sleep(PULSE_S)

    async def _shutdown(self, server: grpc.aio.Server, grace_s: float) -> None:
        if self._pulse is not None:
            self._pulse.cancel()
        await server.stop(grace_s)

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving, letting open calls finish for at most ``grace_s`` seconds. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        try:
            self._loop.run(self._shutdown(server, grace_s), grace_s + 5.0)
        except Exception:  # noqa: BLE001 - best effort on shutdown
            log.debug("health server stop did not finish cleanly", exc_info=True)
        self._loop.stop(5.0)
        if self._unix_path is not None:
            Path(self._unix_path).unlink(missing_ok=True)

    async def _serve(self) -> None:
        server = grpc.aio.server(
            interceptors=[_TokenInterceptor(self._token)],
            options=[
                ("grpc.so_reuseport", 0),
                # no BDP probing: it sizes receive windows for bulk transfers, while heartbeats are
                # ~100-byte messages; on a stream of them it pings the peer again and again (the
                # server's and the task's CPU), about a fifth of the server's cost per heartbeat
                ("grpc.http2.bdp_probe", 0),
            ],
        )
        pb_grpc.add_SupervisorServicer_to_server(
            SupervisorServicer(self._store, self._release_port, self._register, self._status, self._stop,
                               Identities(self._tls), self._resize), server)
        health = grpc_health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        if self._held is not None:  # the port is ours to bind now: no other socket may share it (so_reuseport 0)
            self._held.close()
        bind = f"{self._host}:{self._port}"
        self.port = (server.add_insecure_port(bind) if self._tls is None
                     else server.add_secure_port(bind, server_credentials(self._tls)))
        if self.port == 0:
            raise RuntimeError(f"could not bind {self._host}:{self._port}")
        if self._unix_path is not None:
            unix = f"unix:{self._unix_path}"
            if not (server.add_insecure_port(unix) if self._tls is None
                    else server.add_secure_port(unix, server_credentials(self._tls))):
                raise RuntimeError(f"could not bind {unix}")
        await server.start()
        self._pulse = asyncio.ensure_future(self._beat_pulse())
        await health.set("", health_pb2.HealthCheckResponse.SERVING)
        await health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
