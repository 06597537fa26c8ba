"""The Python API: one job from spec to summary; the CLI's ``launch`` is a thin layer over it.

``launch`` starts a job in the background from a spec file, a dict, a :class:`JobSpec` or
keyword arguments and returns a :class:`JobHandle` (status, stop, wait). Underneath it (and
under the CLI): ``dry_run`` builds the plan and starts nothing; ``prepare`` reserves addresses
(the health server's port too), starts the web page with ``web=``, writes ``plan.json`` (the CLI's
also starts the first tasks, then imports the supervisor); ``run`` starts the tasks, then the health
server and ``endpoint.json``, supervises to the end, stops the servers and writes ``summary.json``.
``check_job`` holds the checks both paths share.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from orchestrator import rundir, tls
from orchestrator.backends import get_backend, held_slots
from orchestrator.backends.base import Backend, Capability, TaskHandle
from orchestrator.checks import (  # noqa: F401 - part of the API: the checks of a job
    SPARE_PROBE,
    check_environment,
    check_job,
    check_run_id,
    check_runs_dir,
    check_spare_program,
)
from orchestrator.env import bench_mark
from orchestrator.errors import SpecError
from orchestrator.handle import (  # noqa: F401 - Job...: what launch() returns
    Job,
    JobHandle,
    Outcome,
    asked_room,
    close_web,
    end_life,
    first_wave,
    let_go,
    next_size,
    room_probe,
)
from orchestrator.health.endpoint import HealthEndpoint
from orchestrator.health.store import HeartbeatStore
from orchestrator.pkimaker import CertificateMaker, run_pki
from orchestrator.plan import Plan, make_plan, new_run_id
from orchestrator.report.history import Recorder
from orchestrator.resources import leases, runlock
from orchestrator.resources.cores import allowed_cores
from orchestrator.resources.cpus import node_cpus_plan, plan_cpus
from orchestrator.resources.elastic import SHRUNK
from orchestrator.resources.gpus import discover
from orchestrator.resources.placement import Placement, place_elastic
from orchestrator.resume import carried_over, check_resumable, resized_spec
from orchestrator.rundir import RunDir, read_json, write_json_atomic, write_private
from orchestrator.spec.faults import Fault
from orchestrator.spec.keywords import spec_from
from orchestrator.spec.model import JobSpec, TaskId
from orchestrator.supervisor.records.states import JobState
from orchestrator.web.bind import parse_bind

if TYPE_CHECKING:  # the supervisor's modules: after a launch's first tasks have started (prepare's start_early)
    from orchestrator.supervisor.loop import Supervisor
    from orchestrator.supervisor.records.snapshot import JobSnapshot, View
    from orchestrator.web.server import WebServer

ENDPOINT_FILE = rundir.ENDPOINT_FILE
"""``runs/<run-id>/endpoint.json``, mode 0600: where a running job answers (address, token,
web URL), for ``status``, ``stop`` and ``status --web``. Removed when the job has ended."""


def _assemble(spec: JobSpec, engine: Backend[Any], addresses: Mapping[TaskId, str], *, run_id: str, run_dir: Path,
              health_address: str, token: str, faults: Sequence[Fault], commands: Mapping[str, Sequence[str]] | None,
              dry_run: bool, placement: Placement, cores: Sequence[int] | None = None,
              tls_dir: str | None = None, started_workers: int | None = None) -> Plan:
    """The one path from spec, backend and addresses to a plan, for a launch and for a dry run.

    Raises:
        SpecError: a task's variable past the kernel's limit (:func:`orchestrator.checks.check_environment`).
    """
    plan = make_plan(
        spec,
        addresses,
        run_id=run_id,
        run_dir=run_dir,
        health_address=health_address,
        token=token,
        orchestrator_pid=os.getpid() if engine.parent_death_signal and not dry_run else 0,
        python=engine.python,
        faults=faults,
        commands=commands,
        placement=placement,
        tls_dir=tls_dir,
        cpus=(plan_cpus(spec, cores) if engine.supports(Capability.HOST_CPUS)
              else node_cpus_plan(spec, os.environ) if engine.supports(Capability.REMOTE) else None),
    )
    check_environment(plan)
    return plan if started_workers is None else dataclasses.replace(plan, started_workers=started_workers)


def place_gpus(spec: JobSpec, engine: Backend[Any]) -> tuple[JobSpec, Placement]:
    """Every task's GPUs on the backend's node (:func:`orchestrator.resources.placement.place`): checked
    before anything is opened or started; elastic workers that cannot all be placed start at the
    largest size down to MIN that can (:func:`~orchestrator.resources.placement.place_elastic`: the
    spec returned is at that size).

    Raises:
        SpecError: GPUs asked that the node does not have (``--gpus-per-task``).
    """
    return place_elastic(spec, discover() if engine.supports(Capability.HOST_GPUS) else None)


def leased(spec: JobSpec, placement: Placement, lease: leases.Lease, engine: Backend[Any]) -> tuple[JobSpec, Placement]:
    """The spec and placement a run starts with once it holds its lease: the lease's placement
    (its GPUs beside the other runs) over the node's, the node's warnings kept; for elastic workers
    granted below their size (:func:`orchestrator.resources.leases.decide_sized`) the spec at that
    size, its placement, and the warning naming both sizes."""
    sized = lease.spec or spec
    mine = lease.placement or (placement if lease.spec is None else place_gpus(sized, engine)[1])
    kept = tuple(w for w in placement.warnings if w not in mine.warnings  # the node's (at another size: its shrink)
                 and (lease.spec is None or w.startswith(SHRUNK)))
    notes = tuple(w for w in lease.warnings if w not in mine.warnings)  # the lease's without a device dealt
    if not kept and not notes:
        return sized, mine
    return sized, dataclasses.replace(mine, warnings=(*kept, *mine.warnings, *notes))


def dry_run(
    spec: JobSpec,
    *,
    runs_dir: str | Path = "runs",
    run_id: str | None = None,
    faults: Sequence[Fault] = (),
    commands: Mapping[str, Sequence[str]] | None = None,
    backend: str = "local",
    backend_options: object | Mapping[str, Any] | None = None,
) -> Plan:
    """The plan ``launch`` would run, with nothing started, bound, held or created
    (:meth:`Backend.preview_addresses`, as TorchX's ``_submit_dryrun``): the health address
    reads ``127.0.0.1:<port>``, the token is empty, and addresses the launch draws read port 0.

    Raises:
        SpecError: as :func:`check_job`, or an address the backend cannot use.
    """
    check_job(spec, backend=backend, faults=faults, commands=commands, run_id=run_id)
    engine = get_backend(backend, backend_options, spec.containers)
    run_id = run_id or new_run_id()
    spec, placement = place_gpus(spec, engine)
    started = spec.workers  # PSS below MAX: every slot planned, the ones above held (as a launch plans it)
    spec = held_slots(spec, engine) or spec  # local, docker: the slots above the start held
    addresses = engine.preview_addresses(spec)  # binds and holds nothing: no close() needed
    return _assemble(spec, engine, addresses, run_id=run_id, run_dir=Path(runs_dir).resolve() / run_id,
                     health_address="127.0.0.1:<port>", token="", faults=faults, commands=commands, dry_run=True,
                     placement=placement, started_workers=started if started < spec.workers else None)


def prepare(
    spec: JobSpec,
    *,
    runs_dir: str | Path = "runs",
    run_id: str | None = None,
    faults: Sequence[Fault] = (),
    commands: Mapping[str, Sequence[str]] | None = None,
    view: View | None = None,
    backend: str = "local",
    backend_options: object | Mapping[str, Any] | None = None,
    web: str | None = None,
    web_public: bool = False,
    resume: bool = False,
    wait_for_resources_s: float | None = None,
    insecure: bool = False,
    engine: Backend[Any] | None = None,
    recorder: Recorder | None = None,
    web_server: WebServer | None = None,
    start_early: bool = False,
    first_wave_started: threading.Event | None = None,
    certificates: CertificateMaker | None = None,
    **supervisor_options: Any,
) -> Job:
    """Plan a job and get everything ready to start it.

    Args:
        spec: validated job spec.
        runs_dir: parent of the run directory.
        run_id: run directory name (default: a new time-stamped id).
        faults: faults to inject.
        commands: argv per task type instead of the built-in programs.
        view: live output (see :mod:`orchestrator.report.live`).
        backend: backend name.
        backend_options: the backend's options: its declared options object (docker:
            :class:`~orchestrator.backends.options.DockerOptions`) or a dict of its fields
            (``{"image": ...}``); None for the defaults.
        web: ``[HOST:]PORT`` to serve the job's page and ``/metrics`` on (loopback unless
            ``web_public``; port 0 for any free port), None for no page.
        web_public: allow a non-loopback or wildcard ``web`` host.
        resume: continue the run ``run_id`` in its own directory (:mod:`orchestrator.resume`):
            the next life, attempts counting on, the restart budget and failures carried over.
            The caller passes the run's own spec (:func:`orchestrator.resume.resumed_spec`).
        wait_for_resources_s: most seconds to wait while other runs of this machine lease the
            cores, GPUs or ports it needs (:mod:`orchestrator.resources.leases`); None: until free; 0: not at all.
        insecure: plaintext on the health endpoint (the job token only); default: mutual TLS
            with the run's own certificates (:mod:`orchestrator.tls`).
        engine: the open backend of the run's previous life in this process (a size change of the
            running job: its warm spares become the next life's tasks); None: a new one.
        recorder: the previous life's (a size change of the running job): its history goes on; None: a new one.
        web_server: the previous life's page (one address for the whole run); None: from ``web``.
        start_early: start the first tasks here, before the supervisor's modules are imported, on a backend whose
            tasks end with this process (local); :func:`run`, called next on this thread, takes them over (the CLI).
        first_wave_started: set just before the first of those tasks starts (the CLI holds a signal back from then
            until its handlers take it).
        certificates: a certificate maker started with the CLI (:mod:`orchestrator.pkimaker`): it makes the run's
            certificates once the plan is written; None (or a maker that fails): this process makes them.
        **supervisor_options: passed to :class:`Supervisor` (``stop_timeout_s``, ...).

    Raises:
        SpecError: as :func:`check_job`, when the run directory exists (or, to ``resume``, is not
            resumable: :func:`orchestrator.resume.check_resumable`), or a ``web`` address
            that is malformed, not loopback (without ``web_public``) or cannot be bound.
        LaunchError: when ports cannot be reserved or the backend cannot open.
    """
    check_job(spec, backend=backend, faults=faults, commands=commands, run_id=run_id)
    web_bind = parse_bind(web, allow_public=web_public) if web is not None else None
    if resume and not run_id:
        raise SpecError("resume", "", "needs the run id to continue", "e.g. --resume 20261201-101500-ab12")
    run_id = run_id or new_run_id()
    rd = RunDir.of(runs_dir, run_id)
    run_dir = rd.path
    carried = None
    if resume:
        check_resumable(rd, runs_dir)
        carried = carried_over(rd)
    elif run_dir.exists():
        raise runlock.exists(rd)
    reused, engine = engine is not None, engine or get_backend(backend, backend_options, spec.containers)
    spec, placement = place_gpus(spec, engine)  # before the engine opens anything
    token = tls.token_urlsafe(24)
    store = HeartbeatStore()
    recorder = recorder or Recorder(view)
    reused_web = web_server is not None
    holder: list[Supervisor] = []  # the servers start before the supervisor exists

    def resize_job(workers: int, reason: str) -> tuple[bool, str, str]:  # the ResizeJob call (server thread)
        snapshot = recorder.snapshot()
        state = snapshot.state if snapshot is not None else JobState.PENDING
        try:
            resized_spec(read_json(rd.plan) or {"spec": {}}, workers)  # as `resize` checks it: range, batch policy
        except SpecError as exc:
            return False, state.value, str(exc)
        if not holder:
            return False, state.value, "the job has not started yet"
        accepted, refusal = holder[0].resizing.request(workers, reason, state)
        return accepted, state.value, refusal

    def stop_job(reason: str) -> tuple[bool, str]:
        snapshot = recorder.snapshot()
        state = snapshot.state.value if snapshot is not None else "Pending"
        if not holder or (snapshot is not None and snapshot.state.terminal):
            return False, state
        holder[0].request_stop(reason)
        return True, state

    server = lock = lease = None
    try:
        lock = runlock.hold(rd) if resume else None  # one life of a run at a time: a second one exits 2
        host_ports = engine.supports(Capability.HOST_PORTS) and not spec.addresses
        ports = len((held_slots(spec, engine) or spec).tasks()) if host_ports else 0  # PSS below MAX: every slot's
        inventory = discover() if engine.supports(Capability.HOST_GPUS) else None
        lease = leases.acquire(spec, run_id, inventory,
                               allowed=allowed_cores(), host_cpus=engine.supports(Capability.HOST_CPUS),
                               wait_s=wait_for_resources_s, runs_dir=str(rd.path.parent),
                               ports=ports)  # waits while others hold it
        spec, placement = leased(spec, placement, lease, engine)
        started, spec = spec.workers, held_slots(spec, engine) or spec  # the slots above held (local, docker)
        if not reused:
            engine.open(run_id, run_dir)  # docker: engine, image, the job's network
        addresses = engine.allocate(spec, lease.ports) if lease.ports else engine.allocate(spec)  # inside its block
        bench_mark("ports-held", sys.stderr)
        check_runs_dir(runs_dir)  # the last check: it creates the runs directory
        lock = lock or runlock.create_and_hold(rd)  # a new run: its directory, made and locked at once
        if web_bind is not None and web_server is None:
            from orchestrator.web.server import WebServer

            web_server = WebServer(recorder.page_status, tls.token_urlsafe(18), *web_bind).start()
        server = HealthEndpoint(engine.health_host, token=token, store=store, release_port=engine.release_port,
                                register=engine.register_address, status=recorder.status_reply, stop=stop_job,
                                resize=resize_job)
        socket = getattr(engine, "health_socket", None)  # --isolate-network: tasks reach it through a file
        server.unix_path = str(socket) if socket else None
        plan = _assemble(spec, engine, addresses, run_id=run_id, run_dir=run_dir,
                         health_address=f"unix:{socket}" if socket else server.address,
                         token=token, faults=faults, commands=commands, dry_run=False, placement=placement,
                         cores=lease.cores, tls_dir=None if insecure else str(tls.tls_dir(run_dir)),
                         started_workers=started if started < spec.workers else None)
        clients = [t.task.name for t in plan.tasks]  # a certificate each (tls.make_run_pki)
        if not insecure:  # a task waits for the CA file, written last (make_run_pki): not a previous life's
            tls.expect_pki(run_dir)
            if certificates is not None and not certificates.ask(run_dir, run_id, engine.health_host, clients):
                certificates = None
    except BaseException:
        let_go(server, None if reused_web else web_server, engine, lock, lease, resume)
        raise
    write_json_atomic(rd.plan, plan.to_dict())
    if resume:
        rd.endpoint.unlink(missing_ok=True)  # left by a life whose orchestrator was killed (checked: not alive)
    endpoint = rd.endpoint
    health, web_url = server, web_server.url if web_server is not None else None

    def serve() -> None:  # the supervisor's first call once every task has started
        health.start()
        bench_mark("health-up", sys.stderr)
        write_private(endpoint, json.dumps({
            "run_id": run_id, "pid": os.getpid(), "address": health.address, "token": token, "web_url": web_url,
            "tls_dir": str(health.tls.folder) if health.tls is not None else None,
        }, indent=2) + "\n")

    def persist(sup: Supervisor) -> None:
        from orchestrator.supervisor.record import run_record
        write_json_atomic(rd.record, run_record(sup))

    def make(started: dict[str, TaskHandle]) -> Supervisor:
        if not insecure:  # with start_early: while the first tasks import; each waits for the CA file (tls.files_for)
            server.tls = run_pki(certificates, run_dir, run_id, engine.health_host, clients)
        from orchestrator.supervisor.loop import Supervisor  # with start_early: once the first tasks have started
        return Supervisor(plan, engine, store, recorder, carried=carried, on_started=serve, persist=persist,
                          room=room_probe(spec, run_id, engine, inventory), asked_room=asked_room(spec, engine),
                          started=started, **supervisor_options)

    bench_mark("prepared", sys.stderr)  # the plan written, the first tasks not started yet
    try:
        supervisor = first_wave(plan, engine, carried.next_attempt if carried else {},
                                start_early and engine.parent_death_signal, make, first_wave_started)
    except BaseException:
        if certificates is not None:
            certificates.close()  # before the run's directory goes: it may be writing there
        let_go(server, None if reused_web else web_server, engine, lock, lease, resume)
        raise
    holder.append(supervisor)
    recorder.prime(supervisor.snapshot())

    def again(workers: int) -> Job:  # the next life at another size (a size change of the running job)
        spec_now = resized_spec(read_json(rd.plan) or {"spec": {}}, workers)
        return prepare(spec_now, runs_dir=runs_dir, run_id=run_id, faults=[f for f in faults if f.task in
                       spec_now.tasks()], commands=commands, view=recorder.view, backend=backend,
                       backend_options=backend_options, web=web, web_public=web_public, resume=True,
                       wait_for_resources_s=wait_for_resources_s, insecure=insecure, engine=engine,
                       recorder=recorder, web_server=web_server, **supervisor_options)

    return Job(plan, supervisor, server, store, recorder, web_server, endpoint, lock, lease, again)


def exit_code(result: JobSnapshot) -> int:
    """The CLI's exit code of a job's final snapshot (0, 1, 3, 75, 130).

    Raises:
        RuntimeError: ``result`` is not final (a running job has no exit code yet).
    """
    if result.exit_code is None:
        raise RuntimeError(f"run {result.plan.run_id} has not ended: it has no exit code yet")
    return result.exit_code


def run(job: Job, web_linger_s: float = 0.0, keep_web: bool = False) -> tuple[JobSnapshot, dict[str, Any]]:
    """Supervise the job to its end; returns the final snapshot and the summary (also written, with
    ``history.json``: the progress series and events the page charts).

    A size change of a running elastic job (``resize``, a lost slot: :mod:`orchestrator.supervisor.resizing`)
    ends a life of the run; the next one, at the new size, is prepared and run here at once, on the
    same open backend (its warm spares), with the same web page at its address and the same history
    (its charts go on), and ``job``'s fields become the next life's (a caller's signal handler
    reaches the new supervisor). The summary is the last life's.

    Raises:
        SpecError, LaunchError: the next life could not be prepared (the summary of the life
            that ended is written first: Preempted, ``launch --resume`` continues it).

    Args:
        job: from :func:`prepare`.
        web_linger_s: with a web page: after the end, keep serving until every open page has
            fetched the final state, at most this many seconds (it returns at once when no page
            is open).
        keep_web: leave the web page up; the caller ends it with :func:`close_web` (the CLI
            prints the final report first).
    """
    while True:
        try:
            result = job.supervisor.run()
            workers = next_size(job, result)
            bench_mark("life-ended", sys.stderr)  # bench/resize.py: where a resize's pause goes
            if workers is None:
                from orchestrator.report.summary import build_summary, write_summary  # not before the tasks start

                summary = build_summary(result)
                write_summary(job.plan.run_dir, summary)  # before the endpoint goes: a status query always finds one
            try:
                job.recorder.write(job.plan.run_dir)
            except OSError:
                pass
        finally:
            end_life(job)
        if workers is None:
            break
        assert job.again is not None  # next_size checked it
        job.recorder.next_life()  # the same page and history go on: its status still reads live
        try:
            nxt = job.again(workers)
        except BaseException:
            job.recorder.no_next_life()
            close_web(job)
            job.supervisor.backend.close()  # kept open for the next life, which did not start
            from orchestrator.report.summary import build_summary, write_summary

            write_summary(job.plan.run_dir, build_summary(result))  # Preempted: launch --resume continues it
            raise
        for name in ("plan", "supervisor", "server", "store", "recorder", "web", "endpoint_path", "lock", "lease",
                     "again"):  # in place: a caller's signal handler reaches the next life's supervisor
            setattr(job, name, getattr(nxt, name))
        job.hand_on()  # a Ctrl-C, a SIGTERM that came between the lives
        life = len(job.supervisor.carried.lives) + 1
        job.recorder.event(0.0, f"run {job.plan.run_id}, life {life}: continues at {workers} worker(s) from its "
                           f"last checkpoint ({job.supervisor.carried.lives[-1].cause})")
    if not keep_web:
        close_web(job, web_linger_s)
    return result, summary


def launch(
    spec: str | Path | Mapping[str, Any] | JobSpec | None = None,
    *,
    runs_dir: str | Path = "runs",
    run_id: str | None = None,
    program: Sequence[str] | None = None,
    faults: Sequence[str | Fault] = (),
    web: str | None = None,
    web_public: bool = False,
    web_linger_s: float = 0.0,
    backend: str = "local",
    backend_options: object | Mapping[str, Any] | None = None,
    view: View | None = None,
    stop_timeout_s: float = 10.0,
    wait_for_resources_s: float | None = None,
    insecure: bool = False,
    **fields: Any,
) -> JobHandle:
    """Launch a job from Python and return at once with a handle to it.

    Args:
        spec: a spec file path (YAML or JSON), a dict of spec-file fields, a :class:`JobSpec`,
            or None for the defaults.
        runs_dir: where the run directory goes.
        run_id: the run directory's name; None for a new one (``20261130-031225-bd44``).
        program: your own program's argv for every task (as after ``--`` on the command line);
            None for the built-in one.
        faults: faults to inject, as ``--inject-fault`` text (``"worker:1:kill@step=20"``).
        web: ``[HOST:]PORT`` for the job's page and ``/metrics`` (``handle.web_url``).
        web_public: allow a non-loopback ``web`` host.
        web_linger_s: after the end, serve open pages until they have the final state, at most this long.
        backend: ``local``, ``docker`` or ``slurm``.
        backend_options: the backend's options (as for :func:`prepare`).
        view: live output in this process (a :mod:`orchestrator.report.live` view); default none.
        stop_timeout_s: seconds between SIGTERM and SIGKILL when stopping tasks.
        wait_for_resources_s: most seconds to wait for cores and GPUs other runs lease (None: until free).
        insecure: plaintext on the health endpoint (see :func:`prepare`).
        **fields: spec fields on top of ``spec`` (see :func:`spec_from`): ``workers=2, epochs=3``.

    Returns:
        A :class:`JobHandle`: ``status()``, ``snapshot()``, ``stop()``, ``wait()``.

    Raises:
        SpecError: bad input (nothing was started), naming the field.
        LaunchError: ports could not be reserved or the backend could not open.
    """
    job_spec = spec_from(spec, **fields)
    parsed = [f if isinstance(f, Fault) else Fault.parse(f) for f in faults]
    commands = {t: list(program) for t in ("chief", "worker", "ps", "evaluator")} if program else None
    job = prepare(job_spec, runs_dir=runs_dir, run_id=run_id, faults=parsed, commands=commands, view=view,
                  backend=backend, backend_options=backend_options, web=web, web_public=web_public,
                  stop_timeout_s=stop_timeout_s, wait_for_resources_s=wait_for_resources_s,
                  insecure=insecure)

    def run_to_end() -> Outcome:
        result, summary = run(job, web_linger_s=web_linger_s)
        return Outcome(summary["status"], exit_code(result), summary, result)

    return JobHandle(job, run_to_end)
