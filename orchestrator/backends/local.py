"""Local backend: one OS process per task on this machine.

Each task runs in its own session (so a signal to the orchestrator's terminal does not
reach it, and the whole process group can be stopped at once), with stdout and stderr
in ``runs/<run-id>/attempt-<n>/<task>/{stdout,stderr}.log``. Tasks are started from the
orchestrator's main thread: they set ``PR_SET_PDEATHSIG`` and die with it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import psutil

from orchestrator import env
from orchestrator.backends.base import (
    Backend,
    Capability,
    LaunchRequest,
    ProcessSample,
    SpareInfo,
    SpareRequest,
    TaskHandle,
)
from orchestrator.backends.host import TASK_RSS_BYTES, cgroup_oom_kills, check_memory, pidfd, py_spy_dump  # noqa: F401
from orchestrator.backends.local_spares import MAX_SPARE_DEATHS, SparePool  # noqa: F401 - the spares
from orchestrator.backends.netns import NetworkNamespace, socket_path
from orchestrator.backends.options import LOCAL, LocalOptions
from orchestrator.backends.ports import PortReservations, port_holder, port_range
from orchestrator.backends.stacks import faulthandler_dump
from orchestrator.errors import LaunchError, SpecError
from orchestrator.net import can_listen
from orchestrator.resources.gpus import VISIBLE_ENV, uuids_in
from orchestrator.resources.gpus import sample as sample_gpus
from orchestrator.resources.portblocks import PortBlock
from orchestrator.spec.address import LOOPBACK_IPV4, Address, localhost_as_ipv4, parse_address
from orchestrator.spec.model import JobSpec, TaskId

log = logging.getLogger(__name__)

LOOPBACK = LOOPBACK_IPV4
"""Addresses are IPv4 literals: ``localhost`` may resolve to IPv6 where it is off (tensorflow#19900)."""


MAX_LOCAL_TASKS = 512
"""Most tasks the local backend runs on one machine (user programs included; the built-in
program is bounded far lower by memory, :func:`check_memory`)."""

@dataclass(eq=False)
class LocalProcess(TaskHandle):
    """A started task process (see :class:`TaskHandle`).

    Attributes:
        popen: the process.
        group_reaped: its process group was killed after it exited.
        sampled: psutil handles of the task's processes, kept between samples (CPU percent
            is measured between two calls).
        gpu_uuids: the devices of its ``CUDA_VISIBLE_DEVICES`` (sampled with its processes).
    """

    popen: subprocess.Popen[bytes] | None = None
    oom_kills_at_start: int | None = None
    group_reaped: bool = False
    sampled: dict[int, psutil.Process] = field(default_factory=dict)
    gpu_uuids: tuple[str, ...] = ()

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self.popen is not None
        return self.popen


def _field(task: TaskId) -> str:
    return f"addresses.{task.task_type}[{task.task_index}]"


class LocalBackend(Backend[LocalProcess]):
    """Runs tasks as local subprocesses; holds their ports until they bind.

    Args:
        options: :class:`~orchestrator.backends.options.LocalOptions` (``isolate_network``:
            :mod:`orchestrator.backends.netns`; :attr:`health_socket` is then the endpoint tasks reach).
    """

    name = LOCAL.name
    summary = LOCAL.summary
    capabilities = frozenset({Capability.LIFECYCLE, Capability.PORTS, Capability.DIAGNOSTICS, Capability.SPARES,
                              Capability.EXIT_EVENTS, Capability.HOST_PROCESSES, Capability.HOST_FILES,
                              Capability.HOST_GPUS, Capability.HOST_CPUS, Capability.HOST_PORTS})

    options_type = LocalOptions

    def __init__(self, options: LocalOptions | None = None) -> None:
        self.options = options or LocalOptions()
        self._netns: NetworkNamespace | None = None
        self.health_socket: Path | None = None
        self.ports = PortReservations()
        self._spares = SparePool(wrap=lambda argv: _in_netns(self._netns, argv))  # a spare lives where its task will

    def allocate(self, spec: JobSpec, ports: PortBlock | None = None) -> dict[TaskId, str]:
        """Reserve one port per task and return ``127.0.0.1:<port>`` addresses, drawn inside
        ``ports`` (``[low, high)``, the run's block of the lease ledger) when given.

        With fixed addresses (``spec.addresses``, from a spec file) exactly those ports are
        reserved; they must all be loopback (this backend runs every task on this machine),
        and ``localhost`` becomes ``127.0.0.1`` (it may resolve to IPv6: tensorflow#19900).

        Raises:
            SpecError: a fixed address is not loopback, its port needs root, or something
                else listens on it (naming the process: :func:`port_holder`); nothing is held.
            LaunchError: when no free port can be drawn for a task without a fixed address.
        """
        fixed = _check_addresses(spec)
        if not fixed:
            return {task: f"{LOOPBACK}:{self.ports.reserve(task, block=ports)}" for task in spec.tasks()}
        for task, address in fixed.items():
            try:
                self.ports.reserve(task, address.port)
            except LaunchError:
                if can_listen(address.port):
                    # connections of a run that just ended linger in TIME_WAIT for up to 60 s;
                    # they block the reservation (no SO_REUSEADDR) but not TensorFlow's server
                    log.info("port %d of %s is in TIME_WAIT: not held, TensorFlow binds it anyway", address.port, task)
                    continue
                self.ports.close()
                holder = port_holder(address.port)
                raise SpecError(_field(task), str(address), f"port {address.port} is in use by {holder}",
                                f"stop {'it' if holder.startswith('pid') else 'that process'}, or give {_field(task)} "
                                "a free port in the spec file") from None
        return {task: localhost_as_ipv4(address) for task, address in fixed.items()}

    def preview_addresses(self, spec: JobSpec) -> dict[TaskId, str]:
        """The dry run's addresses: every check of :meth:`allocate` that binds nothing, and
        nothing held. Fixed addresses read as given (``localhost`` as ``127.0.0.1``; whether
        something listens on them is checked at the launch); others read ``127.0.0.1:0``: their
        ports are drawn at the launch.

        Raises:
            SpecError: as :meth:`allocate`, but for a busy fixed port.
        """
        fixed = _check_addresses(spec)
        if not fixed:
            return {task: f"{LOOPBACK}:0" for task in spec.tasks()}
        return {task: localhost_as_ipv4(address) for task, address in fixed.items()}

    def open(self, run_id: str, run_dir: Path) -> None:
        """With ``isolate_network``: the run's network namespace, and the health socket's path.

        Raises:
            LaunchError: the namespace cannot be made here (the message says what to do).
        """
        if self.options.isolate_network:
            self._netns = NetworkNamespace()
            self.health_socket = socket_path(run_dir)

    def release_port(self, task: TaskId, attempt: int) -> int:
        """Called (from the health server thread) when a task is about to bind its port."""
        return self.ports.release(task)

    def start(self, request: LaunchRequest) -> LocalProcess:
        """Start one task process in its own session, its variables added to this process's
        environment, its output in ``request.log_dir/{stdout,stderr}.log``.

        Raises:
            LaunchError: when the command cannot be executed.
        """
        argv, env, log_dir = request.argv, request.env, request.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = log_dir / "stdout.log", log_dir / "stderr.log"
        spare = self._spares.take(request.argv)
        if spare is not None:  # a warm spare becomes this task: no new process, no imports
            stdout_path.touch()
            stderr_path.touch()
            assignment = {"env": dict(env), "stdout": str(stdout_path), "stderr": str(stderr_path)}
            try:
                assert spare.popen.stdin is not None
                spare.popen.stdin.write((json.dumps(assignment) + "\n").encode())
                spare.popen.stdin.close()
            except OSError:
                spare.state = "died"
            else:
                spare.state, spare.task = "used", request.task.name
                log.info("spare pid %d becomes %s (attempt %d)", spare.popen.pid, request.task.name, request.attempt)
                return LocalProcess(request.task, request.attempt, spare.popen.pid, stdout_path, stderr_path,
                                    request.runtime, spare.popen, oom_kills_at_start=cgroup_oom_kills(),
                                    gpu_uuids=uuids_in(env.get(VISIBLE_ENV)))
        full_env = {**os.environ, **env}
        with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
            try:
                popen = subprocess.Popen(
                    _in_netns(self._netns, argv),
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise LaunchError(f"cannot start {' '.join(argv)}: {exc}") from exc
        return LocalProcess(request.task, request.attempt, popen.pid, stdout_path, stderr_path, request.runtime, popen,
                            oom_kills_at_start=cgroup_oom_kills(), gpu_uuids=uuids_in(env.get(VISIBLE_ENV)))

    def poll(self, process: LocalProcess) -> int | None:
        """Exit code (negative: killed by that signal), or None while running.

        When the task's process exits, whatever it left in its process group (background
        children of a user's program) is killed: a task is its whole group; and so is any process
        of the task seen in a sample that still runs elsewhere (the wrapper of a user's program
        ends those itself, :mod:`orchestrator.task.leftovers`, unless it was SIGKILLed).
        """
        code = process.process.poll()
        if code is not None and not process.group_reaped:
            process.group_reaped = True
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _end_left_behind(process, [p for pid, p in process.sampled.items() if pid != process.pid])
        return code

    def exit_fd(self, process: LocalProcess) -> int | None:
        """A pidfd of the task's process (:func:`~orchestrator.backends.host.pidfd`): readable the
        moment it exits, so the supervisor sees a SIGKILL without polling; None where pidfds are missing."""
        return pidfd(process.process)

    def wait(self, process: LocalProcess, timeout_s: float) -> int | None:
        """Wait at most ``timeout_s`` seconds for the process to exit; its exit code or None."""
        try:
            return process.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def reserve_again(self, task: TaskId) -> None:
        """Hold the task's port again until its next attempt binds (best effort: a port in
        TIME_WAIT cannot be held, and TensorFlow binds it anyway with SO_REUSEADDR)."""
        port = self.ports.port(task)
        if port:
            try:
                self.ports.reserve(task, port)
            except LaunchError:
                pass

    def signal(self, process: LocalProcess, signum: int) -> None:
        """Send ``signum`` to the task's whole process group (no-op if it is gone)."""
        if process.process.returncode is not None:
            return
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, processes: Iterable[LocalProcess], timeout_s: float = 10.0,
             abort: threading.Event | None = None) -> None:
        """Stop processes in two phases on one monotonic deadline.

        SIGTERM to every process group, wait until ``timeout_s`` seconds have passed (or
        ``abort`` is set: a second Ctrl-C), then SIGKILL what is left and reap it (torch
        elastic ``PContext.close``). Each task's directory first gets the marker file
        ``stop-requested``: the wrapper of a user's program (:mod:`orchestrator.task.execwrap`)
        then SIGKILLs a program that ignores SIGTERM after a short grace.
        """
        processes = list(processes)
        pending = [p for p in processes if p.process.poll() is None]
        for p in pending:
            _mark_stop_requested(p)
            self.signal(p, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline and not (abort is not None and abort.is_set()):
            pending = [p for p in pending if p.process.poll() is None]
            if pending:
                time.sleep(0.05)
        trees = {p.pid: _descendants(p) for p in pending}  # before the SIGKILL: orphans then go to init
        for p in pending:
            if timeout_s > 0:  # 0: an immediate stop (a group restart), SIGKILL is the plan, not news
                log.warning("pid %d did not stop within %.1f s of SIGTERM; sending SIGKILL", p.pid, timeout_s)
            self.signal(p, signal.SIGKILL)
        for p in pending:
            try:
                p.process.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                raise LaunchError(f"pid {p.pid} survived SIGKILL for 10 s") from None
        for p in processes:
            # the group may hold children of the task; make sure none survives it
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _end_left_behind(p, trees.get(p.pid, ()))

    def sample(self, process: LocalProcess) -> ProcessSample | None:
        """CPU (percent of a core) and RSS (bytes) of the task's process and every process it
        started, summed, and its GPUs (NVML, :func:`orchestrator.resources.gpus.sample`); None once it is
        gone. CPU counts from the second sample of a process."""
        try:
            root = process.sampled.get(process.pid) or psutil.Process(process.pid)
            current = {p.pid: process.sampled.get(p.pid, p) for p in [root, *root.children(recursive=True)]}
        except psutil.Error:
            return None
        cpu, rss = 0.0, 0
        for pid, proc in current.items():
            try:
                value = proc.cpu_percent(None)
                cpu += value if pid in process.sampled else 0.0
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
        process.sampled = current
        return ProcessSample(cpu_percent=cpu, rss_bytes=rss, gpus=sample_gpus(process.gpu_uuids))

    def dump_stacks(self, process: LocalProcess, timeout_s: float) -> str:
        """The Python stacks of every thread of the task, without stopping it.

        A built-in task program: through its runtime's ``faulthandler`` on SIGUSR1
        (:func:`faulthandler_dump`). A user's program, which SIGUSR1 would kill: read from
        outside by py-spy (``py-spy dump --pid``, from PyPI; it reads the interpreter's
        memory, so the program needs no cooperation) for every Python process of the task
        (execwrap, the program and what it started); "" when py-spy is missing or fails.
        """
        if process.runtime:
            return faulthandler_dump(self, process, timeout_s)
        self.signal(process, signal.SIGCONT)  # py-spy cannot read a stopped process; it is killed next anyway
        return py_spy_dump(process.pid, timeout_s)

    def memory_total_bytes(self, process: LocalProcess) -> int | None:
        """This machine's physical memory, bytes (``sysconf``)."""
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return None

    def oom_killed(self, process: LocalProcess) -> bool | None:
        """True when the cgroup's OOM-kill count grew while the attempt ran (cgroup v2
        ``memory.events`` or v1 ``memory.oom_control``); None when it cannot be read."""
        now = cgroup_oom_kills()
        if now is None or process.oom_kills_at_start is None:
            return None
        return now > process.oom_kills_at_start

    # -- warm spares ------------------------------------------------------------------------
    def keep_spares(self, request: SpareRequest) -> None:
        """Keep ``request.count`` spares ready (:meth:`~orchestrator.backends.local_spares.SparePool.keep`)."""
        self._spares.keep(request)

    def spares(self) -> list[SpareInfo]:
        """Every spare started for this job and what became of it."""
        return self._spares.infos()

    def close(self) -> None:
        """Stop the spares that were not used (end of stdin first, then SIGKILL to their
        group) and release every port reservation still held."""
        self._spares.close()
        self.ports.close()
        if self._netns is not None:
            self._netns.close()


def _in_netns(netns: NetworkNamespace | None, argv: Iterable[str]) -> list[str]:
    """``argv`` run in ``netns`` (``--isolate-network``), or as it is when None."""
    return netns.wrap(list(argv)) if netns is not None else list(argv)


def _check_addresses(spec: JobSpec) -> dict[TaskId, Address]:
    """The spec's fixed addresses, checked (loopback, no port that needs root), or {} when it
    has none (then the tasks must fit on this machine).

    Raises:
        SpecError: too many tasks for this machine, a fixed address not loopback or whose
            port needs root.
    """
    if not spec.addresses:
        low, high = port_range()
        tasks = spec.tasks()
        if len(tasks) > MAX_LOCAL_TASKS or len(tasks) > (high - low) // 2:
            most = min(MAX_LOCAL_TASKS, (high - low) // 2)
            raise SpecError("workers", spec.workers, f"{len(tasks)} tasks on this one machine is more than it can "
                            f"run (at most {most}: ports and processes)",
                            "use fewer --workers, or run the job on Slurm or Kubernetes (docs/slurm.md)")
        return {}
    fixed = {task: parse_address(spec.addresses[task], _field(task)) for task in spec.tasks()}
    for task, address in fixed.items():  # check everything before holding anything
        if not address.is_loopback:
            raise SpecError(
                _field(task),
                str(address),
                "the local backend runs every task on this machine, so it needs loopback addresses",
                "use 127.0.0.1:<port>, or `python -m orchestrator render --spec FILE` for TF_CONFIGs on other "
                "hosts",
            )
        if address.port < 1024 and os.geteuid() != 0:
            raise SpecError(_field(task), str(address), "ports below 1024 need root",
                            "use a port from 1024 to 65535, e.g. 2222")
    return fixed


def _descendants(process: LocalProcess) -> list[psutil.Process]:
    """Every process of the task now (its tree, in whatever session) and any seen in a sample."""
    try:
        procs: list[psutil.Process] = list(psutil.Process(process.pid).children(recursive=True))
    except psutil.Error:
        procs = []
    known = {p.pid for p in procs}
    return procs + [p for pid, p in process.sampled.items() if pid != process.pid and pid not in known]


def _end_left_behind(process: LocalProcess, procs: Iterable[psutil.Process]) -> None:
    """SIGKILL those of ``procs`` still running after the task's group was killed (psutil checks
    each is still the process it saw: no pid reuse), and list them in the task's
    :data:`orchestrator.env.LEFT_BEHIND_FILE` (``by``: ``backend``)."""
    ended = []
    for proc in procs:
        try:
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.cmdline()) or proc.name()
            proc.kill()
        except psutil.Error:
            continue
        ended.append((proc, {"pid": proc.pid, "cmdline": cmdline, "by": "backend"}))
    if not ended:
        return
    psutil.wait_procs([proc for proc, _ in ended], timeout=5.0)
    log.warning("%s: killed %d process(es) it left behind: %s", process.task.name, len(ended),
                ", ".join(f"pid {e['pid']}" for _, e in ended))
    try:
        with open(process.stdout_path.parent / env.LEFT_BEHIND_FILE, "a", encoding="utf-8") as out:
            out.writelines(json.dumps(e) + "\n" for _, e in ended)
    except OSError as exc:
        log.debug("cannot write the left-behind list of pid %d: %s", process.pid, exc)


def _mark_stop_requested(process: LocalProcess) -> None:
    """Write ``<task log dir>/stop-requested`` (:data:`orchestrator.env.STOP_REQUESTED_FILE`):
    the SIGTERM that follows is the orchestrator's own stop, not a preemption (best effort)."""
    try:
        (process.stdout_path.parent / env.STOP_REQUESTED_FILE).touch()
    except OSError as exc:
        log.debug("cannot write the stop marker of pid %d: %s", process.pid, exc)
