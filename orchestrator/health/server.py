"""The orchestrator's gRPC endpoint: our ``Supervisor`` service plus ``grpc.health.v1.Health``.

It runs a ``grpc.aio`` server on its own thread and event loop, so one thread absorbs
the heartbeat streams of every task. Heartbeats land in a :class:`HeartbeatStore` with
the orchestrator's monotonic receive time; the supervisor reads the store, never the
task's clock.

Security: the server binds loopback by default, and every ``Supervisor`` call must carry
the job token (``x-job-token`` metadata); others get ``UNAUTHENTICATED``. The standard
Health service stays open so stock probes (``grpc_health_probe``, Docker healthchecks) work.
"""

from __future__ import annotations

import asyncio
import bisect
import hmac
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator import env
from orchestrator.backends.base import Registration
from orchestrator.health.loop import LoopThread
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
from orchestrator.spec.model import TaskId

log = logging.getLogger(__name__)

SERVICE_NAME = "tfcluster.v1.Supervisor"
REGISTER_MAX_WAIT_S = 10.0
"""Longest one ``RegisterAddress`` call waits for the rest of the cluster, seconds."""
PULSE_S = 0.1
"""Period of the server loop's pulse, seconds: how late it runs is how long the loop, and so
the heartbeat intake, was held up (:meth:`HeartbeatStore.deaf_s`)."""
DEAF_MIN_S = 0.25
"""A pulse later than this counts as deaf time, whole; less is a scheduling hiccup on a busy
machine, which the heartbeat timeout (seconds, against 1 s between beats) already absorbs."""
DEAF_HISTORY_S = 3600.0
"""How far back :meth:`HeartbeatStore.deaf_s` keeps the loop's late pulses, seconds."""
_HEALTH_PREFIX = "/grpc.health.v1.Health/"


@dataclass(slots=True)
class HeartbeatRecord:
    """The latest heartbeat of a task attempt and when it arrived.

    Attributes:
        heartbeat: the latest ``Heartbeat`` message.
        received_at: orchestrator ``time.monotonic()`` seconds at receipt.
        first_received_at: monotonic seconds of the first heartbeat of this attempt.
        count: heartbeats received from this attempt.
    """

    heartbeat: pb.Heartbeat
    received_at: float
    first_received_at: float
    count: int


class HeartbeatStore:
    """Thread-safe latest-heartbeat table keyed by (TaskId, attempt).

    :meth:`record` runs once per heartbeat on the server's event loop, so it does the least it
    can: records are found by the raw ``(task_type, task_index, attempt)`` of the message; the
    ``(TaskId, attempt)`` key readers see is built once per attempt.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # raw (task_type, task_index, attempt) -> ((TaskId, attempt), latest record)
        self._records: dict[tuple[str, int, int], tuple[tuple[TaskId, int], HeartbeatRecord]] = {}
        self._changed: dict[tuple[str, int, int], tuple[tuple[TaskId, int], HeartbeatRecord]] = {}
        self._task_ids: dict[tuple[str, int], TaskId] = {}
        self.total = 0
        # the intake's own deafness: (time a late pulse ran, lateness up to then in all), ascending
        self._pulse_at: float | None = None
        self._late: list[tuple[float, float]] = []
        self._late_total = 0.0
        self._late_dropped = 0.0  # the total at the last entry dropped from ``_late``

    def pulse(self) -> None:
        """The server loop's periodic call (every :data:`PULSE_S` seconds when it keeps up): its
        lateness, beyond the period, is time in which no heartbeat was taken in, whatever the
        tasks sent (another thread held the GIL: building the status of 10,000 tasks, ~7 MB
        of JSON, takes it for most of a second; or the loop fell behind its streams)."""
        now = self._clock()
        with self._lock:
            if self._pulse_at is not None:
                late = now - self._pulse_at - PULSE_S
                if late > DEAF_MIN_S:
                    self._late_total += late
                    self._late.append((now, self._late_total))
                    if self._late[0][0] < now - DEAF_HISTORY_S:
                        kept = [e for e in self._late if e[0] >= now - DEAF_HISTORY_S]
                        self._late_dropped = self._late[len(self._late) - len(kept) - 1][1]
                        self._late = kept
            self._pulse_at = now

    def deaf_s(self, since: float, now: float | None = None) -> float:
        """Seconds since ``since`` (monotonic) in which this store's server took in no heartbeat
        because its own loop was held up: the pulses late by more than :data:`DEAF_MIN_S` after
        ``since`` (a pulse late by L counts whole, even when part of L came before ``since``)
        plus the current pulse's delay; 0 for a store no server pulses. A task is not silent
        while the orchestrator is deaf: Cassandra's failure detector, likewise, marks no node
        down after a pause of its own (``FailureDetector``: "Not marking nodes down due to
        local pause", ``cassandra.max_local_pause_in_ms``)."""
        now = self._clock() if now is None else now
        with self._lock:
            if self._pulse_at is None:
                return 0.0
            i = bisect.bisect_right(self._late, since, key=lambda entry: entry[0])
            before = self._late[i - 1][1] if i else self._late_dropped
            overdue = now - self._pulse_at - PULSE_S
            overdue = overdue if overdue > DEAF_MIN_S else 0.0
            return (self._late_total - before) + min(overdue, max(0.0, now - since))

    def record(self, heartbeat: pb.Heartbeat) -> None:
        """Store ``heartbeat`` as the latest of its task attempt (a new record: one handed out
        by :meth:`drain` or :meth:`get` is never changed afterwards)."""
        t = heartbeat.task
        raw = (t.task_type, t.task_index, t.attempt)
        now = self._clock()
        with self._lock:
            self.total += 1
            entry = self._records.get(raw)
            if entry is None:
                entry = (self._key(raw), HeartbeatRecord(heartbeat, now, now, 1))
            else:
                rec = entry[1]
                entry = (entry[0], HeartbeatRecord(heartbeat, now, rec.first_received_at, rec.count + 1))
            self._records[raw] = self._changed[raw] = entry

    def _key(self, raw: tuple[str, int, int]) -> tuple[TaskId, int]:
        task = self._task_ids.get(raw[:2])
        if task is None:
            task = self._task_ids[raw[:2]] = TaskId(raw[0], raw[1])
        return task, raw[2]

    def drain(self) -> dict[tuple[TaskId, int], HeartbeatRecord]:
        """The latest record of every task attempt that sent a heartbeat since the last drain,
        keyed by (task, attempt): what changed, so a reader's work is O(changes). The records
        are the store's own, never changed after (no copy: 10,000 tasks send 10,000 a second)."""
        with self._lock:
            changed, self._changed = self._changed, {}
        return dict(changed.values())

    def get(self, task: TaskId, attempt: int) -> HeartbeatRecord | None:
        """The latest record of one attempt (never changed after), or None before its first heartbeat."""
        with self._lock:
            entry = self._records.get((task.task_type, task.task_index, attempt))
        return None if entry is None else entry[1]


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


StatusSource = Callable[[bool, int], str]
"""``(history, history_since) -> JSON text`` of the job's status (injected by ``api``; this
layer knows nothing of snapshots)."""

StopHandler = Callable[[str], tuple[bool, str]]
"""``reason -> (accepted, job state)``: asks the job to stop (injected by ``api``)."""


class SupervisorServicer(pb_grpc.SupervisorServicer):
    """The gRPC servicer of ``tfcluster.v1.Supervisor``: heartbeats into the store, port releases,
    address registrations, status queries and stop requests."""

    def __init__(self, store: HeartbeatStore, release_port: Callable[[TaskId, int], int],
                 register: RegisterFn = _refuse, status: StatusSource | None = None,
                 stop: StopHandler | None = None) -> None:
        self._store = store
        self._release_port = release_port
        self._register = register
        self._status = status
        self._stop = stop

    async def StreamHeartbeats(self, request_iterator, context):  # noqa: N802 - gRPC name
        # the hot path (one pass per heartbeat): context.read() directly, not the request
        # iterator (an async generator around the same read), and no attribute look-ups per message
        record, read, eof = self._store.record, context.read, grpc.aio.EOF
        received = 0
        while (heartbeat := await read()) is not eof:
            record(heartbeat)
            received += 1
        return pb.StreamSummary(received=received)

    async def ReleasePort(self, request, context):  # noqa: N802 - gRPC name
        task = TaskId(request.task.task_type, request.task.task_index)
        return pb.PortReply(port=self._release_port(task, request.task.attempt))

    async def RegisterAddress(self, request, context):  # noqa: N802 - gRPC name
        task = TaskId(request.task.task_type, request.task.task_index)
        # the wait for the rest of the cluster blocks: on a worker thread, never on the event loop
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(None, self._register, task, request.task.attempt, request.host,
                                           request.port, min(max(request.wait_s, 0.0), REGISTER_MAX_WAIT_S))
        return pb.ClusterReply(ready=reply.ready, address=reply.address, tf_config=reply.tf_config, error=reply.error)

    async def GetStatus(self, request, context):  # noqa: N802 - gRPC name
        if self._status is None:
            return pb.StatusReply(status_json="{}")
        # on a worker thread: the status of 10,000 tasks takes a fraction of a second to build,
        # and the event loop must go on taking their heartbeats meanwhile
        text = await asyncio.get_running_loop().run_in_executor(None, self._status, request.history,
                                                                request.history_since)
        return pb.StatusReply(status_json=text)

    async def StopJob(self, request, context):  # noqa: N802 - gRPC name
        if self._stop is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this endpoint cannot stop its job")
        accepted, state = self._stop(request.reason or "stopped by a StopJob call")
        return pb.StopReply(accepted=accepted, state=state)


class HealthServer:
    """The orchestrator's gRPC server, on its own thread.

    Args:
        token: the job token tasks must present.
        store: where heartbeats land.
        release_port: called with (task, attempt) by ``ReleasePort``; returns the port
            released, 0 when none was held. Runs on the server thread: keep it quick.
        host: interface to bind; loopback by default.
        port: 0 for any free port.
        register: called by ``RegisterAddress`` with (task, attempt, host, port, wait_s) on a
            worker thread; default: every registration refused.
        status: answers ``GetStatus`` (JSON text); runs on a worker thread (thread-safe).
        stop: answers ``StopJob``; must only request the stop (it runs on the server thread).
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
    ) -> None:
        self._register = register
        self._status = status
        self._stop = stop
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

    async def _shutdown(self, grace_s: float) -> None:
        if self._pulse is not None:
            self._pulse.cancel()
        assert self._server is not None
        await self._server.stop(grace_s)

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving, letting open calls finish for at most ``grace_s`` seconds."""
        if self._server is None:
            return
        try:
            self._loop.run(self._shutdown(grace_s), grace_s + 5.0)
        except Exception:  # noqa: BLE001 - best effort on shutdown
            log.debug("health server stop did not finish cleanly", exc_info=True)
        self._loop.stop(5.0)

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
            SupervisorServicer(self._store, self._release_port, self._register, self._status, self._stop), server)
        health = grpc_health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        self.port = server.add_insecure_port(f"{self._host}:{self._port}")
        if self.port == 0:
            raise RuntimeError(f"could not bind {self._host}:{self._port}")
        await server.start()
        self._pulse = asyncio.ensure_future(self._beat_pulse())
        await health.set("", health_pb2.HealthCheckResponse.SERVING)
        await health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
