"""A prepared job (:class:`Job`, what :func:`orchestrator.api.prepare` returns), a job running in
the background of this Python process (:class:`JobHandle`, what :func:`orchestrator.api.launch`
returns) and how it ended (:class:`Outcome`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import tls
from orchestrator.backends.base import Backend, Capability, TaskHandle, start_attempt
from orchestrator.env import bench_mark
from orchestrator.health.endpoint import HealthEndpoint
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import Plan
from orchestrator.report.history import Recorder
from orchestrator.resources import leases, runlock
from orchestrator.resources.cores import allowed_cores
from orchestrator.resources.gpus import Inventory
from orchestrator.resources.growroom import RoomProbe
from orchestrator.spec.model import JobSpec
from orchestrator.supervisor.rules.service import startable

if TYPE_CHECKING:  # the supervisor's modules come after a launch's first tasks have started (first_wave)
    from orchestrator.supervisor.loop import Supervisor
    from orchestrator.supervisor.records.snapshot import JobSnapshot
    from orchestrator.web.server import WebServer


def first_wave(plan: Plan, backend: Backend[Any], attempts: Mapping[str, int], early: bool,
               supervisor: Callable[[dict[str, TaskHandle]], Supervisor],
               started_event: threading.Event | None = None) -> Supervisor:
    """The job's supervisor (``supervisor(started)`` makes it), with ``early``: made once the first attempt of this
    life (``attempts``: task name -> its number, default 0) of every task that waits for no other has started (all
    of them without a tf.data service: :func:`~orchestrator.supervisor.rules.service.startable`, its first wave),
    so that the tasks' interpreters and TensorFlow's import run while the supervisor's modules are imported; the
    supervisor takes them over (``started``: task name -> handle). What was started is killed again when a task
    cannot be started or the supervisor cannot be made. ``started_event`` is set just before the first task starts.

    Raises:
        LaunchError: a task could not be started; what ``supervisor`` raises.
    """
    planned = [(tp.task.name, tp.task.task_type) for tp in plan.tasks]
    started: dict[str, TaskHandle] = {}
    try:
        if early and started_event is not None:
            started_event.set()  # from the first start on: a task may be running
        for tp in plan.tasks if early else ():
            if startable(tp.task.task_type, planned, ()) and tp.task.name not in plan.held:  # held: a grow starts it
                started[tp.task.name] = start_attempt(backend, plan, tp, attempts.get(tp.task.name, 0))
        if started:
            bench_mark("first-wave", sys.stderr)  # bench/timeline.py: started before the supervisor's imports
        return supervisor(started)
    except BaseException:
        backend.stop(list(started.values()), timeout_s=0.0)  # just started: nothing of theirs to save
        raise


def let_go(server: HealthEndpoint | None, web_server: Any, engine: Backend[Any], lock: Any, lease: Any,
           resume: bool) -> None:
    """Let go of what :func:`orchestrator.api.prepare` holds when it cannot finish: its servers, the backend, the
    run's lock (and the directory it made), its lease."""
    if server is not None:
        server.stop()
    if web_server is not None:
        web_server.stop()
    engine.close()
    runlock.let_go(lock, created=not resume)
    if lease is not None:
        lease.release()


def next_size(job: Job, result: JobSnapshot) -> int | None:
    """The size the run continues at in a next life in this process: a size change of the running
    job ended this one (:mod:`orchestrator.supervisor.resizing`); None: the run has ended."""
    resizing = job.supervisor.resizing
    if job.again is None or resizing.next is None or not resizing.continues(result.state):
        return None
    return resizing.next.workers


def end_life(job: Job) -> None:
    """What a life holds, let go: the health server, ``endpoint.json``, the run's keys, the lease, the lock."""
    job.server.stop()
    if job.endpoint_path is not None:
        job.endpoint_path.unlink(missing_ok=True)
    tls.remove(job.plan.run_dir)  # the run's keys (none with --insecure)
    if job.lease is not None:
        job.lease.release()  # the cores and GPUs: a waiting run may start
    if job.lock is not None:
        job.lock.release()  # the next life may start


def close_web(job: Job, linger_s: float = 0.0) -> None:
    """Stop the job's web page once open pages have fetched the final state (at most
    ``linger_s`` seconds; at once when no page is open). Nothing to do without a page."""
    if job.web is None:
        return
    try:
        if linger_s > 0:
            job.web.wait_final_served(linger_s)
    finally:
        job.web.stop()


@dataclass
class Job:
    """A prepared job: plan written, ports held (the health server's too), nothing started yet (with
    ``prepare(start_early=True)``: the first tasks, which its supervisor takes over: :func:`first_wave`).
    :func:`run` starts the tasks, then the health server on its held port (the tasks' first
    heartbeats wait for it; a launch's tasks start before ``grpc`` is imported), then writes
    ``endpoint.json``.

    Attributes:
        server: the health endpoint (:class:`~orchestrator.health.endpoint.HealthEndpoint`):
            its ``address`` from now, its server from :func:`run`.
        recorder: the supervisor's view: keeps the latest snapshot, progress series and events
            for status queries and the page; set ``recorder.view`` to show the job in a terminal.
        web: the web page's server (``prepare(web=...)``), else None.
        endpoint_path: ``runs/<run-id>/endpoint.json``.
    """

    plan: Plan
    supervisor: Supervisor
    server: HealthEndpoint
    store: HeartbeatStore
    recorder: Recorder = field(default_factory=Recorder)
    web: WebServer | None = None
    endpoint_path: Path | None = None
    lock: runlock.RunLock | None = None
    lease: leases.Lease | None = None
    again: Callable[[int], "Job"] | None = None
    """Prepares the run's next life at another size (elastic workers: a size change of the
    running job, :mod:`orchestrator.supervisor.resizing`); None: no next life in this process."""
    stop_asked: str | None = None
    """The reason of the first :meth:`request_stop` (the run's, whichever life it reached)."""
    preemption_asked: str | None = None
    """The reason of the first :meth:`request_preemption`."""

    def request_stop(self, reason: str) -> None:
        """Stop the run now and end it Interrupted (safe from a signal handler): the current life's
        supervisor is asked, and :func:`orchestrator.api.run` hands the request on to a next life that
        starts after it (a size change of the running job), so a Ctrl-C between two lives is not lost."""
        self.stop_asked = self.stop_asked or reason
        self.supervisor.request_stop(reason)

    def request_preemption(self, reason: str) -> None:
        """Save and leave (safe from a signal handler), handed on to a next life as :meth:`request_stop`."""
        self.preemption_asked = self.preemption_asked or reason
        self.supervisor.request_preemption(reason)

    def hand_on(self) -> None:
        """A stop or preemption asked of the run, asked again of the supervisor now in place (a next
        life's: the request may have come after the last life ended, or while this one was prepared)."""
        if self.stop_asked is not None:
            self.supervisor.request_stop(self.stop_asked)
        elif self.preemption_asked is not None:
            self.supervisor.request_preemption(self.preemption_asked)

    @property
    def web_url(self) -> str | None:
        """The page's URL with its token, when the job serves one."""
        return self.web.url if self.web is not None else None


@dataclass(frozen=True)
class Outcome:
    """How a job launched from Python ended.

    Attributes:
        status: ``Succeeded``, ``Failed`` or ``Interrupted``.
        exit_code: what the CLI would exit with: 0, 1, 3 (succeeded, but an injected fault never
            fired: the rehearsal tested nothing), 75 or 130.
        summary: ``summary.json`` as a dict.
        result: the job's final snapshot (root cause, failures, recoveries, lives, wall time).
    """

    status: str
    exit_code: int
    summary: dict[str, Any]
    result: JobSnapshot

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0


class JobHandle:
    """A job running in the background of this Python process (see :func:`launch`).

    Args:
        job: the prepared job (:func:`orchestrator.api.prepare`).
        run: runs it to its end and returns how it ended (called once, on the handle's thread).

    The supervisor runs on a thread of its own, which starts every task process (the tasks'
    parent-death signal follows that thread, and it lives until the job has ended). Leaving a
    ``with`` block stops a job that is still running and waits for its end.
    """

    def __init__(self, job: Job, run: Callable[[], Outcome]) -> None:
        self.job = job
        self._run = run
        self._outcome: Outcome | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"job-{job.plan.run_id}", daemon=False)
        self._thread.start()

    def _main(self) -> None:
        try:
            self._outcome = self._run()
        except BaseException as exc:  # noqa: BLE001 - re-raised by wait()
            self._error = exc
        finally:
            self._done.set()

    @property
    def run_id(self) -> str:
        return self.job.plan.run_id

    @property
    def run_dir(self) -> Path:
        return self.job.plan.run_dir

    @property
    def web_url(self) -> str | None:
        """The page's URL with its token (``launch(web=...)``), else None."""
        return self.job.web_url

    @property
    def done(self) -> bool:
        """True once the job has ended and its summary is written."""
        return self._done.is_set()

    def snapshot(self) -> JobSnapshot | None:
        """The latest immutable snapshot of the job (at most a quarter second old)."""
        return self.job.recorder.snapshot()

    def status(self) -> dict[str, Any]:
        """The job now as a dict: what ``status --json`` prints (``summary.json``'s shape plus
        ``live``, ``elapsed_s`` and per task ``attempt`` and ``heartbeat_age_s``)."""
        return self.job.recorder.status()

    def stop(self, reason: str = "stopped from Python", timeout_s: float | None = None) -> Outcome:
        """Stop every task (SIGTERM, then SIGKILL after the stop timeout), as Ctrl-C does, and
        wait for the end. Returns the outcome (``Interrupted``, exit code 130, unless the job had
        already ended).

        Raises:
            TimeoutError: the job did not end within ``timeout_s`` seconds.
        """
        if not self.done:
            self.job.request_stop(reason)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float | None = None) -> Outcome:
        """Wait for the end of the job (at most ``timeout_s`` seconds; None: until it ends).

        Raises:
            TimeoutError: the job did not end within ``timeout_s`` seconds.
            OrchestratorError: what made supervision fail (the tasks are stopped first).
        """
        if not self._done.wait(timeout_s):
            raise TimeoutError(f"job {self.run_id} still running after {timeout_s:g} s")
        self._thread.join(5.0)
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def __enter__(self) -> "JobHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.done:
            self.stop("stopped: the with block of api.launch() was left")


def _places_here(engine: Backend[Any]) -> bool:
    """``engine`` leases this machine's cores, GPUs or ports (local, docker); else its scheduler places the
    tasks (Slurm), and its room is its own (:attr:`~orchestrator.backends.base.Backend.growth`)."""
    return any(engine.supports(c) for c in (Capability.HOST_CPUS, Capability.HOST_GPUS, Capability.HOST_PORTS))


def asked_room(spec: JobSpec, engine: Backend[Any]) -> Any:
    """The room a grow asked by ``resize`` waits for on a backend whose scheduler places the tasks
    (Slurm: :meth:`~orchestrator.backends.slurm_room.SlurmRoom.for_size`, extension allocations asked
    for the nodes short); None elsewhere (the local and docker backends place what they are asked) or
    for a fixed count."""
    if spec.elastic is None or _places_here(engine) or engine.growth is None:
        return None
    return engine.growth.grow_room(spec)


def room_probe(spec: JobSpec, run_id: str, engine: Backend[Any],
               inventory: Inventory | None) -> Callable[[], int | None] | None:
    """What the lease ledger has room for, for an elastic MWMS run that grows back by itself
    (``--grow-back``: :mod:`orchestrator.supervisor.growback`); None when it does not. A backend that
    leases nothing of this machine (Slurm: its scheduler places the tasks) says it itself
    (:attr:`~orchestrator.backends.base.Backend.growth`)."""
    if spec.elastic is None or spec.elastic.grow_back_s is None or spec.strategy.value != "multi_worker_mirrored":
        return None
    if not _places_here(engine):
        return engine.growth.grow_room(spec) if engine.growth is not None else None
    ports = engine.supports(Capability.HOST_PORTS) and not spec.addresses
    return RoomProbe(spec, run_id, allowed=allowed_cores(), host_cpus=engine.supports(Capability.HOST_CPUS),
                     inventory=inventory,
                     ports=lambda sized: len(sized.tasks()) if ports else 0)
