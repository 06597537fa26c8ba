"""Task-side heartbeat client: a background thread streaming heartbeats to the orchestrator.

Every task (ps included) runs one :class:`HeartbeatReporter`. It sends a heartbeat every
``interval_s`` seconds and at once when the task's phase changes, carrying task type and
index, attempt, pid, phase, step, epoch, loss, examples/s, CPU % and RSS (psutil), and the
utilisation and memory of the GPUs in its ``CUDA_VISIBLE_DEVICES`` (NVML, :mod:`orchestrator.resources.gpus`:
sampled here, on the task's own node, so the figures exist wherever the task runs: a Slurm node,
a container, a pod).
Training code feeds it through :meth:`HeartbeatReporter.update`.

When the stream breaks, the reporter reconnects with a growing backoff (0.2 s to 5 s);
an endpoint that never answers (a Compose cluster run without an orchestrator) is fine.
When the orchestrator process is gone (local backend), the task kills its own process
group: no task outlives its orchestrator. In a container there is no parent to watch:
with ``orphan_timeout_s`` > 0 a task whose orchestrator has been unreachable that long,
after it was reached once, kills itself instead.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Iterator, Mapping

import grpc
import psutil

from orchestrator import env, tls
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
from orchestrator.resources.gpus import sample_visible
from orchestrator.resources.pinning import pin_self
from orchestrator.task.context import TaskContext
from orchestrator.task.formed import FORMED_FIELDS

log = logging.getLogger(__name__)

STREAM_DEADLINE_S = 3600.0
"""A heartbeat stream is reopened after this long, so even it has a deadline."""
RPC_DEADLINE_S = 5.0
"""Deadline of every unary call."""
_INTEGER_FIELDS = ("step", "epoch", "resumed_from_step", "evaluated_step", "non_finite_step")
"""What :meth:`HeartbeatReporter.update` sets as the heartbeat's own integer fields: progress, and the
control facts the supervisor reads (never among the program's metrics)."""

CHANNEL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 5000))
"""The task's channel to the orchestrator: after a refused connection it tries again in 0.1 s
(gRPC's default: 1 s, growing to 120 s), at most every 5 s (the reporter's own backoff). A
launch starts its tasks before their health server listens
(:class:`~orchestrator.health.endpoint.HealthEndpoint`); a task that comes first is refused
and must not wait a second for its first heartbeat."""


class HeartbeatReporter:
    """Streams heartbeats of one task attempt to the orchestrator.

    Args:
        address: ``host:port`` of the orchestrator's health endpoint.
        token: the job token sent as ``x-job-token`` metadata.
        task_type: TF task type.
        task_index: TF task index.
        attempt: attempt number (0 first).
        interval_s: seconds between heartbeats.
        orchestrator_pid: when > 0, the task kills its process group once this pid is gone.
        orphan_timeout_s: when > 0, the task kills its process group once the endpoint,
            reached before, has been unreachable this many seconds.
        tls_dir: the run's certificates (``ORCH_TLS_DIR``): the stream is mutual TLS with this
            task's own; empty: plaintext (``--insecure``).
    """

    def __init__(
        self,
        address: str,
        token: str,
        task_type: str,
        task_index: int,
        attempt: int = 0,
        interval_s: float = 1.0,
        orchestrator_pid: int = 0,
        orphan_timeout_s: float = 0.0,
        tls_dir: str = "",
    ) -> None:
        self._address = address
        self._tls_dir = tls_dir
        self._metadata = ((env.TOKEN_METADATA_KEY, token),)
        self._key = pb.TaskKey(task_type=task_type, task_index=task_index, attempt=attempt)
        self._interval_s = interval_s
        self._orchestrator_pid = orchestrator_pid
        self._orphan_timeout_s = orphan_timeout_s
        self._reached = False
        self._lost_at: float | None = None
        self._cond = threading.Condition()
        self._fields: dict = {"phase": pb.PHASE_INITIALIZING}
        self._metrics: dict[str, float] = {}
        self._formed: dict[str, int] = {}
        self._rejoined: dict[str, int] = {}
        self._dirty = True
        self._closing = False
        self._refused = False  # the orchestrator said PERMISSION_DENIED (said once on stderr)
        self._exiting = False
        self._sequence = 0
        self._handed = -1  # sequence of the last heartbeat gRPC took (it asks for the next once that one went out)
        self._process = psutil.Process()
        self._process.cpu_percent(None)
        self._thread: threading.Thread | None = None
        self._channel: grpc.Channel | None = None
        self._sent_final = threading.Event()
        self._held = None
        self._held_set = False

    @classmethod
    def from_context(cls, context: TaskContext) -> "HeartbeatReporter":
        """Build from a :class:`orchestrator.task.context.TaskContext`."""
        return cls(
            context.health_address,
            context.token,
            context.task_type,
            context.task_index,
            context.attempt,
            context.heartbeat_interval_s,
            context.orchestrator_pid,
            context.orphan_timeout_s,
            context.tls_dir,
        )

    # -- feeding -------------------------------------------------------------------------
    def update(self, phase: int | None = None, message: str | None = None, *, now: bool = False,
               rejoined: Mapping[str, int] | None = None, **values: float) -> None:
        """Record the latest progress; a phase change is sent at once.

        Args:
            phase: a ``supervisor_pb2.Phase`` value.
            message: free text for the live view.
            now: send this update at once instead of with the next heartbeat (an event the
                supervisor times, e.g. a worker back in the coordinator's rotation).
            rejoined: the PSS coordinator's worker name (``worker-1``) -> times it came back into
                its rotation (the heartbeat's typed ``rejoined``; counts only grow).
            **values: ``step``, ``epoch``, ``loss``, ``examples_per_second`` go to their
                own fields, as do the control facts ``resumed_from_step`` and ``evaluated_step``;
                ``replicas_in_sync`` and ``cluster_workers`` (what the strategy formed:
                :func:`orchestrator.task.formed.strategy_facts`) to ``formed``; anything else is
                a metric of the program (e.g. ``test_accuracy``).
        """
        with self._cond:
            if (phase is not None and phase != self._fields.get("phase")) or now:
                if phase is not None:
                    self._fields["phase"] = phase
                self._dirty = True
                self._cond.notify_all()
            if message is not None:
                self._fields["message"] = message
            for name, value in values.items():
                if value is None:
                    continue
                if name in _INTEGER_FIELDS:
                    self._fields[name] = int(value)
                elif name in ("loss", "examples_per_second"):
                    self._fields[name] = float(value)
                elif name in FORMED_FIELDS:
                    self._formed[name] = int(value)
                else:
                    self._metrics[name] = float(value)
            if rejoined:
                self._rejoined.update((name, int(count)) for name, count in rejoined.items())

    def fields(self) -> dict:
        """A copy of what the next heartbeat says (phase, message, step, epoch, loss, examples/s):
        what a keeper process goes on sending for a task an injected ``hang`` froze
        (:mod:`orchestrator.task.keeper`)."""
        with self._cond:
            return dict(self._fields)

    def flush(self, timeout_s: float = 1.0) -> bool:
        """Block (at most ``timeout_s`` seconds, the GIL released) until what was recorded so far
        went out in a heartbeat. Called where the caller is about to enter work that may hold the
        GIL for seconds (the end of ``fit``: TF's teardown of its traced functions, an export), so
        the supervisor knows the phase before the heartbeats pause.

        Returns:
            True when it went out; False on timeout or without a stream.
        """
        if self._thread is None:
            return False
        deadline = time.monotonic() + timeout_s
        with self._cond:
            target = self._sequence if self._dirty else self._sequence - 1
            while self._handed < target:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
        return True

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> "HeartbeatReporter":
        """Start the background thread (daemon). Returns self."""
        if not self._address:
            return self
        name = f"{self._key.task_type}-{self._key.task_index}"
        self._channel = tls.channel(self._address, tls.files_for(self._tls_dir, name), CHANNEL_OPTIONS)
        if self._orphan_timeout_s > 0:
            self._channel.subscribe(self._on_connectivity, try_to_connect=True)
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
        self._thread.start()
        return self

    def close(self, phase: int | None = None, timeout_s: float = 5.0, exiting: bool = False) -> None:
        """Send a last heartbeat (with ``phase``, e.g. DONE) and end the stream.

        Waits at most ``timeout_s`` seconds for the orchestrator to receive it. ``exiting``:
        the interpreter is exiting (``atexit``); the heartbeat says so, and the supervisor then
        watches only the exit (the rest of an interpreter's teardown can take seconds).
        """
        if phase is not None:
            self.update(phase=phase)
        with self._cond:
            self._exiting = self._exiting or exiting
            self._closing = True
            self._dirty = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._channel is not None:
            self._channel.close()

    def main_returned(self) -> None:
        """The main thread is done and the interpreter's exit began (``threading``'s exit hook,
        before it joins non-daemon threads and before ``atexit``): say so at once, naming the
        non-daemon threads the exit waits for. The heartbeats go on (this thread is a daemon);
        the supervisor then watches only the exit, bounded by its exit grace once training ended."""
        others = [t.name for t in threading.enumerate()
                  if not t.daemon and t is not threading.main_thread() and t.is_alive()]
        with self._cond:
            self._exiting = True
            if others:
                self._fields["message"] = "exiting; waiting for non-daemon thread(s): " + ", ".join(others)
            self._dirty = True
            self._cond.notify_all()

    def hold(self, sock) -> None:
        """Keep ``sock`` (the port this task registered) bound until :meth:`release_port`,
        which then closes it instead of asking the orchestrator. None: nothing is held."""
        self._held, self._held_set = sock, True

    def release_port(self) -> int:
        """Ask the orchestrator to release the port it reserved for this task.

        Call it right before the tf.distribute server binds. Returns the port (0 when
        the orchestrator held none, or when there is no orchestrator).
        """
        if self._held_set:  # the task holds its own port (registered address): close it here
            sock, self._held, self._held_set = self._held, None, False
            if sock is None:
                return 0
            port = int(sock.getsockname()[1])
            sock.close()
            return port
        if self._channel is None:
            return 0
        stub = pb_grpc.SupervisorStub(self._channel)
        try:
            # a task of this machine (its orchestrator is its parent, which holds the port) may ask
            # before the launch's health server listens (HealthEndpoint): the call waits for the
            # connection, within its deadline; elsewhere an endpoint that never answers fails fast
            reply = stub.ReleasePort(pb.PortRequest(task=self._key), metadata=self._metadata, timeout=RPC_DEADLINE_S,
                                     wait_for_ready=self._orchestrator_pid > 0)
        except grpc.RpcError as exc:
            log.warning("could not release the reserved port: %s", exc)
            return 0
        return reply.port

    # -- the thread ----------------------------------------------------------------------
    def _snapshot(self) -> pb.Heartbeat:
        with self._process.oneshot():
            cpu = self._process.cpu_percent(None)
            rss = self._process.memory_info().rss
        hb = pb.Heartbeat(task=self._key, sequence=self._sequence, pid=os.getpid(), cpu_percent=cpu, rss_bytes=rss,
                          exiting=self._exiting)
        for usage in sample_visible():  # the task's own devices; none without NVML
            hb.gpus.add(uuid=usage.uuid, index=usage.index, utilization_percent=usage.utilization_percent,
                        memory_used_bytes=usage.memory_used_bytes, memory_total_bytes=usage.memory_total_bytes)
        for name, value in self._fields.items():
            setattr(hb, name, value)
        for name, value in self._metrics.items():
            hb.metrics[name] = value
        for name, count in self._formed.items():
            setattr(hb.formed, name, count)
        for name, count in self._rejoined.items():
            hb.rejoined[name] = count
        self._sequence += 1
        return hb

    def _heartbeats(self) -> Iterator[pb.Heartbeat]:
        opened = time.monotonic()
        while True:
            with self._cond:
                if not self._dirty and not self._closing:
                    self._cond.wait(self._interval_s)
                closing = self._closing
                self._dirty = False
                hb = self._snapshot()
            yield hb
            # gRPC asks for the next message once the last one went out on an open stream: the
            # orchestrator is reachable. (The connectivity poller alone can miss a short READY
            # under load, and a task that never saw READY would never notice it was orphaned.)
            with self._cond:
                self._handed = hb.sequence
                self._cond.notify_all()
            if hb.sequence == 0:
                env.bench_mark("first-heartbeat")  # bench/timeline.py: it went out on an open stream
            self._reached, self._lost_at = True, None
            if closing:
                self._sent_final.set()
                return
            self._check_orchestrator()
            if time.monotonic() - opened > STREAM_DEADLINE_S - 2 * self._interval_s:
                return

    def _on_connectivity(self, state: grpc.ChannelConnectivity) -> None:
        if state is grpc.ChannelConnectivity.READY:
            self._reached, self._lost_at = True, None
        elif self._reached and self._lost_at is None:
            self._lost_at = time.monotonic()

    def _check_orchestrator(self) -> None:
        pid = self._orchestrator_pid
        if pid > 0 and os.getppid() != pid:
            log.error("orchestrator (pid %d) is gone; stopping this task", pid)
            os.killpg(os.getpgid(0), signal.SIGKILL)
        lost_at = self._lost_at
        if self._orphan_timeout_s > 0 and lost_at is not None and time.monotonic() - lost_at > self._orphan_timeout_s:
            log.error("orchestrator at %s unreachable for %.0f s; stopping this task", self._address,
                      time.monotonic() - lost_at)
            os.killpg(os.getpgid(0), signal.SIGKILL)

    def _run(self) -> None:
        pin_self(variable=env.SERVICE_CPUS)  # this thread only: off the training cores where some are kept
        assert self._channel is not None
        stub = pb_grpc.SupervisorStub(self._channel)
        backoff_s = 0.2
        while True:
            try:
                stub.StreamHeartbeats(self._heartbeats(), metadata=self._metadata, timeout=STREAM_DEADLINE_S)
                backoff_s = 0.2
            except (grpc.RpcError, ValueError) as exc:  # ValueError: channel closed by close()
                # closing before the orchestrator was ever reached: a parent's server that does not serve yet (it
                # holds the port, serves once its tasks have started) is tried again until close's timeout
                if self._sent_final.is_set() or isinstance(exc, ValueError) or (self._closing and (
                        self._reached or self._orchestrator_pid <= 0 or exc.code() != grpc.StatusCode.UNAVAILABLE)):
                    return
                log.debug("heartbeat stream broke (%s); reconnecting in %.1f s", exc, backoff_s)
                if (not self._refused and isinstance(exc, grpc.RpcError)
                        and exc.code() == grpc.StatusCode.PERMISSION_DENIED):
                    self._refused = True
                    log.error("the orchestrator refuses this task's heartbeats: %s", exc.details())
                if self._reached and self._lost_at is None:
                    self._lost_at = time.monotonic()
                self._check_orchestrator()
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
            if self._sent_final.is_set():
                return
