"""Growing an elastic MWMS job on Slurm back from one-node *extension allocations* (issue 34 item 5,
docs/elastic.md "Slurm: growing back").

A job that lost a node runs below MAX on the nodes left. Once its grow-back cooldown has passed
(:class:`~orchestrator.supervisor.growback.GrowBack` only asks then),
:class:`~orchestrator.backends.slurm_room.SlurmRoom` says how many workers the nodes it may use
hold (:func:`~orchestrator.resources.extension.nodes_room`, at the job's
tasks per node when it started) and tells :class:`Extensions` how many nodes MAX is short of. The
extension watch (a thread, so the supervisor's loop never waits on Slurm) then:

* asks Slurm for one node at a time, at most one pending:
  ``sbatch --parsable -N1 -n1 --exclude=<the run's nodes, lost ones too> --job-name RUN:extend
  --partition=<the run's> --time=<the run's time left> [--account, --qos, --cpus-per-task, --gres
  as the run's] --wrap '<wait while the run's job is in squeue>'``, and polls ``squeue -j EXT``;
* probes the allocation's lost nodes meanwhile (slurmd, TCP, then a step ``srun --jobid=JOB -w NODE``):
  a lost node that answers again and runs a step is room, and the pending extension is cancelled;
* once it runs, starts one step on it from here (``srun --jobid=EXT --overlap -N1 -n1 -w NODE``,
  reading a file written into the runs directory: the node shares it) and only then counts it as
  room (``extension allocation 7 on osl2 granted``); the grow itself is the planned resize of a
  ``resize`` (the coordinated save, 0 steps lost), and the next life's
  :meth:`~orchestrator.backends.slurm.SlurmBackend.allocate` places tasks on the node, each started
  as a step of the extension (``srun --jobid=EXT``);
* cancels (``scancel``) a pending extension Slurm does not start within :data:`GRANT_TIMEOUT_S`
  and asks again :data:`RETRY_AFTER_S` later (said in the events the first time, logged after),
  one the grow no longer needs (a node back, the grow no longer due), and every extension when the
  run ends, however it ends (:meth:`Extensions.close`, from the backend's ``close``); a later life
  that places no task on an extension's node (its node lost, a smaller size) gives it up at once.

Every Slurm command is bounded (:data:`~orchestrator.backends.slurm_step.COMMAND_TIMEOUT_S`). Should
the orchestrator be killed before it cancels them, each extension ends by itself once the run's own
job leaves ``squeue`` (its batch script watches it), and at the latest at its time limit.
"""

from __future__ import annotations

import logging
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.backends.slurm_commands import command, node_answers
from orchestrator.errors import LaunchError
from orchestrator.resources.extension import (
    CANCEL_LATE,
    CANCEL_UNNEEDED,
    GONE,
    GRANTED,
    SUBMIT,
    extension_next,
)

log = logging.getLogger("orchestrator.backends.slurm")

GRANT_TIMEOUT_S = 120.0
"""Most seconds an extension may stay pending before it is cancelled (and asked for again later)."""
RETRY_AFTER_S = 60.0
"""Seconds after a cancelled or failed extension before another is asked for."""
POLL_S = 0.25
"""How often the watch looks at a pending extension (``squeue -j``), seconds."""
LOST_PROBE_EVERY_S = 5.0
"""How often the watch probes the allocation's lost nodes while a grow is due, seconds."""
WANTED_FOR_S = 5.0
"""A grow no longer asked about for this long is no longer due (the grow-back watch asks every
:attr:`SlurmRoom.every_s` while it is due)."""
STEP_TIMEOUT_S = 30.0
"""Bound on the step that checks a node before it counts as room, seconds."""
GONE_WAIT_S = 10.0
"""Most seconds :meth:`Extensions.close` waits until ``squeue`` lists none of the extensions."""
NAME_SUFFIX = ":extend"
"""An extension's job name: the run id and this."""
_INPUT_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES",
               "SLURM_NNODES", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_JOB_CPUS_PER_NODE")


@dataclass(frozen=True)
class BaseJob:
    """What an extension copies from the run's own allocation (``squeue``, ``scontrol show job``).

    Attributes:
        job_id: the run's job (``SLURM_JOB_ID``).
        partition: its partition ("" when unknown: Slurm's default).
        time_left: its time left as ``squeue %L`` says it (``1-02:03:04``, ``9:58``; "" when unlimited).
        account, qos: its account and QoS ("" for none).
        cpus_per_node: the CPUs it holds on its first node (``SLURM_JOB_CPUS_PER_NODE``; 0 when unknown).
        gres: its generic resources per node (``TresPerNode``, e.g. ``gres:gpu:2``; "" for none).
    """

    job_id: str
    partition: str = ""
    time_left: str = ""
    account: str = ""
    qos: str = ""
    cpus_per_node: int = 0
    gres: str = ""


def _given(value: str) -> str:
    value = value.strip()
    return "" if value in ("(null)", "N/A", "UNLIMITED", "NOT_SET", "INVALID", "None") else value


def read_base(environ: Mapping[str, str], job_id: str) -> BaseJob:
    """The run's own job as an extension copies it (one ``squeue``, one ``scontrol show job``);
    what cannot be read is left to Slurm's defaults."""
    cpus = environ.get("SLURM_JOB_CPUS_PER_NODE", "").split("(", 1)[0].split(",", 1)[0]
    fields: dict[str, str] = {}
    part = left = account = qos = ""
    try:
        queued = command(dict(environ), "squeue", "-h", "-j", job_id, "-o", "%P|%L|%a|%q")
        if queued.returncode == 0 and queued.stdout.strip():
            part, left, account, qos = (queued.stdout.strip().splitlines()[0].split("|") + ["", "", "", ""])[:4]
        shown = command(dict(environ), "scontrol", "show", "job", "-o", job_id)
        for item in shown.stdout.split():
            key, sep, value = item.partition("=")
            if sep and key not in fields:
                fields[key] = value
    except LaunchError as exc:
        log.warning("%s", exc)
    gres = fields.get("TresPerNode", "")
    return BaseJob(job_id, partition=_given(part), time_left=_given(left), account=_given(account),
                   qos=_given(qos), cpus_per_node=int(cpus) if cpus.isdigit() else 0,
                   gres=",".join(g.removeprefix("gres:").removeprefix("gres/") for g in _given(gres).split(",") if g))


def watch_script(job_id: str) -> str:
    """The extension's batch script: wait while the run's job ``job_id`` is in ``squeue`` (three
    misses in a row end it, so one slow answer does not), or for ever where the node has no ``squeue``
    (the time limit ends it)."""
    j = shlex.quote(job_id)
    return ("command -v squeue >/dev/null 2>&1 || exec sleep infinity; n=0; while [ $n -lt 3 ]; do "
            f"if squeue -h -j {j} -o %i 2>/dev/null | grep -q .; then n=0; else n=$((n+1)); fi; sleep 5; done")


def extension_argv(base: BaseJob, run_id: str, exclude: Sequence[str]) -> list[str]:
    """``sbatch`` of one extension: one node, none of ``exclude``, the run's partition, time left,
    account, QoS, CPUs and generic resources per node (pure)."""
    argv = ["sbatch", "--parsable", "--nodes=1", "--ntasks=1", f"--job-name={run_id}{NAME_SUFFIX}",
            "--output=/dev/null", "--error=/dev/null"]
    if exclude:
        argv.append(f"--exclude={','.join(sorted(set(exclude)))}")
    for flag, value in (("--partition", base.partition), ("--time", base.time_left), ("--account", base.account),
                        ("--qos", base.qos), ("--gres", base.gres)):
        if value:
            argv.append(f"{flag}={value}")
    if base.cpus_per_node > 1:
        argv.append(f"--cpus-per-task={base.cpus_per_node}")
    return [*argv, f"--wrap={watch_script(base.job_id)}"]


def step_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the run's own allocation's variables that Slurm's commands read as
    input (``sbatch`` and ``srun --jobid`` of another job must not take them)."""
    return {k: v for k, v in environ.items() if k not in _INPUT_VARS}


@dataclass
class Pending:
    """The extension asked for and not yet running."""

    job_id: str
    asked_at: float
    argv: list[str] = field(default_factory=list)


class Extensions:
    """The extension allocations of one run (one per :class:`~orchestrator.backends.slurm.SlurmBackend`,
    kept across the run's lives); see the module docstring. Thread-safe.

    Args:
        environ: the environment of the Slurm commands.
        job_id: the run's own job.
        run_id: the run (the extensions' job name).
        runs_dir: the runs directory (a granted node must read it).
        taken: the nodes the run has or had (its allocation, lost ones, extensions): excluded.
        lost: the allocation's lost nodes now (probed while a grow is due).
        node_address: a node's address (its slurmd's), and ``slurmd_port``.
        clock: monotonic seconds.
    """

    def __init__(self, environ: Mapping[str, str], job_id: str, run_id: str, runs_dir: Path | None,
                 taken: Callable[[], Sequence[str]], lost: Callable[[], Sequence[str]],
                 node_address: Callable[[str], str], slurmd_port: Callable[[], int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.environ = step_environ(environ)
        self._allocation_environ = dict(environ)
        self.job_id, self.run_id, self.runs_dir = job_id, run_id, runs_dir
        self._taken, self._lost, self._address, self._port = taken, lost, node_address, slurmd_port
        self._clock = clock
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._granted: dict[str, str] = {}  # node -> its extension's job id
        self._addresses: dict[str, str] = {}  # a granted node's address (scontrol show node)
        self._back: set[str] = set()  # lost nodes of the allocation that answer again and run a step
        self._pending: Pending | None = None
        self._short = 0
        self._wanted_at: float | None = None
        self._retry_at = 0.0
        self._probed_lost_at: float | None = None
        self._said_late = False
        self._news: list[str] = []
        self._base: BaseJob | None = None
        self.ever: list[str] = []  # every extension job id asked for (close cancels them all)

    # -- what the backend and the room read ----------------------------------------------------
    def granted(self) -> dict[str, str]:
        """Node -> extension job id, of the extensions granted and not given up."""
        with self._lock:
            return dict(self._granted)

    def job_of(self, node: str) -> str:
        """The extension job ``node`` belongs to; "" for a node of the run's own allocation."""
        with self._lock:
            return self._granted.get(node, "")

    def address(self, node: str) -> str:
        """A granted node's address ("" when not known)."""
        with self._lock:
            return self._addresses.get(node, "")

    def back(self) -> set[str]:
        """The allocation's lost nodes found answering again (and running a step)."""
        with self._lock:
            return set(self._back)

    def take_back(self) -> set[str]:
        """The lost nodes found answering again, now the run's again (a placement uses them): forgotten
        here, so that a later loss of one counts."""
        with self._lock:
            back, self._back = self._back, set()
        return back

    def news(self) -> list[str]:
        """What happened since the last call, one line each, for the job's events."""
        with self._lock:
            news, self._news = self._news, []
        return news

    def _say(self, text: str, event: bool = True) -> None:
        log.info("%s", text)
        if event:
            with self._lock:
                self._news.append(text)

    # -- asked by the room probe (the supervisor's loop) ----------------------------------------
    def want(self, short: int) -> None:
        """The grow is due and MAX is ``short`` nodes short (0: enough): the watch asks for an
        extension, probes lost nodes, or cancels a pending one no longer needed. Never waits."""
        if self._closing.is_set() or not self.job_id:
            return
        with self._lock:
            self._short, self._wanted_at = short, self._clock()
            if self._thread is not None and self._thread.is_alive():
                return
            if short <= 0 and self._pending is None:
                return
            self._thread = threading.Thread(target=self._watch, name="slurm-extend", daemon=True)
            self._thread.start()

    def keep(self, used: set[str], lost: set[str]) -> None:
        """A life placed its tasks on ``used``: give up (``scancel``) every granted extension whose
        node has no task, or is lost."""
        with self._lock:
            drop = {node: job for node, job in self._granted.items() if node not in used or node in lost}
            for node in drop:
                del self._granted[node]
            self._back -= lost
        for node, job in drop.items():
            why = "its node is lost" if node in lost else "no task of the run is placed on it"
            log.warning("extension allocation %s on %s given up (%s)", job, node, why)
            self._cancel([job])

    # -- the watch (its own thread) --------------------------------------------------------------
    def _watch(self) -> None:
        try:
            while not self._closing.is_set():
                now = self._clock()
                with self._lock:
                    due = self._wanted_at is not None and now - self._wanted_at < WANTED_FOR_S
                    short, pending = (self._short if due else 0), self._pending
                state = None if pending is None else self._state(pending.job_id)
                action = extension_next(short, state, 0.0 if pending is None else now - pending.asked_at,
                                        self._retry_at - now, grant_timeout_s=GRANT_TIMEOUT_S)
                self._act(action, pending, state)  # first: Slurm may take seconds to start it
                if short > 0:  # a node back makes the pending extension unneeded (cancelled at the next look)
                    self._probe_lost(now)
                with self._lock:
                    if self._pending is None and not due:
                        self._thread = None
                        return
                self._closing.wait(POLL_S)
        except Exception:  # noqa: BLE001 - a watch that fails costs the grow, never the run
            log.warning("the Slurm extension watch failed", exc_info=True)
            with self._lock:
                self._thread = None

    def _act(self, action: str, pending: Pending | None, state: str | None) -> None:
        if action == SUBMIT:
            self._submit()
        elif pending is None:
            return
        elif action == GRANTED:
            self._take(pending)
        elif action == CANCEL_LATE:
            reason = self._reason(pending.job_id)
            self._cancel([pending.job_id])
            self._forget(f"extension allocation {pending.job_id} not started by Slurm within {GRANT_TIMEOUT_S:g} s"
                         f"{f' ({reason})' if reason else ''}: cancelled; asking again in {RETRY_AFTER_S:g} s",
                         event=not self._said_late)
            self._said_late = True
        elif action == CANCEL_UNNEEDED:
            self._cancel([pending.job_id])
            self._forget(f"extension allocation {pending.job_id} cancelled: the job needs no more nodes now",
                         retry=False)
        elif action == GONE:
            self._forget(f"extension allocation {pending.job_id} ended before it ran ({state or 'gone'}); asking "
                         f"again in {RETRY_AFTER_S:g} s")

    def _forget(self, text: str, *, retry: bool = True, event: bool = True) -> None:
        with self._lock:
            self._pending = None
            if retry:
                self._retry_at = self._clock() + RETRY_AFTER_S
        self._say(text, event)

    def _submit(self) -> None:
        if self._base is None:
            self._base = read_base(self._allocation_environ, self.job_id)
        exclude = sorted(set(self._taken()) | set(self.granted()))
        argv = extension_argv(self._base, self.run_id, exclude)
        asked = self._clock()
        job = ""
        try:
            result = command(self.environ, *argv)
            why = (result.stderr or result.stdout).strip()[-300:]
            job = result.stdout.strip().split(";", 1)[0] if result.returncode == 0 else ""
        except LaunchError as exc:
            why = str(exc)
        if not job.isdigit():
            with self._lock:
                self._retry_at = self._clock() + RETRY_AFTER_S
            self._say(f"could not ask Slurm for an extension allocation ({shlex.join(argv[:-1])}): {why}; asking "
                      f"again in {RETRY_AFTER_S:g} s", event=not self._said_late)
            self._said_late = True
            return
        self.ever.append(job)
        if self._closing.is_set():  # the run ended meanwhile
            self._cancel([job])
            return
        with self._lock:
            self._pending = Pending(job, asked, argv)
        base = self._base
        self._say(f"growing back needs another node: asked Slurm for extension allocation {job} (one node, "
                  f"partition {base.partition or 'default'}, time limit {base.time_left or 'the partition default'})",
                  event=len(self.ever) == 1)

    def _take(self, pending: Pending) -> None:
        """The pending extension runs: check a step starts on its node and reads the runs directory."""
        waited = self._clock() - pending.asked_at
        node = ""
        try:
            node = command(self.environ, "squeue", "-h", "-j", pending.job_id, "-o", "%N").stdout.strip()
            address = self._node_address(node) if node else ""
            problem = self._step_problem(pending.job_id, node) if node else "Slurm names no node"
        except LaunchError as exc:
            problem, address = str(exc), ""
        if problem:
            self._cancel([pending.job_id])
            self._forget(f"extension allocation {pending.job_id}{f' on {node}' if node else ''} cannot be used: "
                         f"{problem}; cancelled, asking again in {RETRY_AFTER_S:g} s")
            return
        with self._lock:
            self._pending = None
            self._granted[node] = pending.job_id
            self._addresses[node] = address or node
        self._say(f"extension allocation {pending.job_id} on {node} granted (Slurm started it {waited:.1f} s after "
                  "it was asked)")

    def _probe_lost(self, now: float) -> bool:
        """Probe the allocation's lost nodes (at most every :data:`LOST_PROBE_EVERY_S`); True when one
        answers again and runs a step (it is room)."""
        if self._probed_lost_at is not None and now - self._probed_lost_at < LOST_PROBE_EVERY_S:
            return False
        self._probed_lost_at = now
        found = False
        for node in [n for n in self._lost() if n not in self.back()]:
            if not node_answers(self._address(node), self._port()):
                continue
            try:
                problem = self._step_problem(self.job_id, node)
            except LaunchError as exc:
                problem = str(exc)
            if problem:
                log.info("lost node %s answers again but cannot run a step of job %s: %s", node, self.job_id, problem)
                continue
            with self._lock:
                self._back.add(node)
            self._say(f"node {node}, lost, answers again and runs a step: it is room again")
            found = True
        return found

    # -- Slurm commands ---------------------------------------------------------------------------
    def _state(self, job: str) -> str | None:
        """``squeue``'s state of ``job`` ("" when not listed); None when ``squeue`` cannot say (look again)."""
        try:
            result = command(self.environ, "squeue", "-h", "-j", job, "-o", "%T")
        except LaunchError as exc:
            log.warning("%s", exc)
            return None if self._pending is None else "PENDING"
        if result.returncode != 0:  # "Invalid job id specified": purged
            return ""
        return result.stdout.strip().splitlines()[0] if result.stdout.strip() else ""

    def _reason(self, job: str) -> str:
        try:
            result = command(self.environ, "squeue", "-h", "-j", job, "-o", "%r")
        except LaunchError:
            return ""
        return f"Reason={result.stdout.strip()}" if result.returncode == 0 and result.stdout.strip() else ""

    def _node_address(self, node: str) -> str:
        shown = command(self.environ, "scontrol", "show", "node", "-o", node)
        for item in shown.stdout.split():
            key, _, value = item.partition("=")
            if key == "NodeAddr":
                return value
        return node

    def _step_problem(self, job: str, node: str) -> str:
        """Start one step of ``job`` on ``node`` from here that reads a file written into the runs
        directory; "" when it did, else what went wrong.

        Raises:
            LaunchError: ``srun`` is missing or did not end within :data:`STEP_TIMEOUT_S`.
        """
        token = secrets.token_hex(8)
        probe = self.runs_dir / f".extend-check-{self.run_id}-{token}" if self.runs_dir is not None else None
        if probe is not None:
            probe.write_text(token, encoding="utf-8")
        try:
            script = f'cat "{probe}" 2>/dev/null || echo missing' if probe is not None else f"echo {token}"
            result = command(self.environ, "srun", f"--jobid={job}", "--overlap", "--nodes=1", "--ntasks=1",
                             f"--nodelist={node}", f"--job-name={self.run_id}:extend-check", "--quiet", "sh", "-c",
                             script, timeout_s=STEP_TIMEOUT_S)
        finally:
            if probe is not None:
                probe.unlink(missing_ok=True)
        if result.returncode != 0:
            return f"srun --jobid={job} -w {node} failed: {(result.stderr or result.stdout).strip()[-300:]}"
        if result.stdout.strip() != token:
            return f"{node} cannot read the runs directory {self.runs_dir} (not shared with it)"
        return ""

    def _cancel(self, jobs: Sequence[str]) -> None:
        if not jobs:
            return
        try:
            result = command(self.environ, "scancel", *jobs)
            if result.returncode != 0:
                log.warning("scancel %s: %s", " ".join(jobs), result.stderr.strip())
        except LaunchError as exc:
            log.warning("%s", exc)

    # -- the end ------------------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Cancel every extension of the run (pending, granted, given up) and wait, at most
        :data:`GONE_WAIT_S`, until ``squeue`` lists none; returns those still listed. Never raises."""
        self._closing.set()
        thread = self._thread
        if thread is not None:
            thread.join(STEP_TIMEOUT_S + 5.0)
        jobs = list(dict.fromkeys(self.ever))
        if not jobs:
            return []
        left = jobs
        try:
            self._cancel(jobs)
            deadline = self._clock() + GONE_WAIT_S
            while True:
                listed = command(self.environ, "squeue", "-h", "-j", ",".join(jobs), "-o", "%i").stdout.split()
                left = [j for j in jobs if j in listed]
                if not left or self._clock() > deadline:
                    break
                time.sleep(0.2)
        except LaunchError as exc:
            log.warning("%s", exc)
        if left:
            log.warning("extension allocation(s) %s still listed by Slurm after scancel", ", ".join(left))
        else:
            log.info("extension allocation(s) %s cancelled", ", ".join(jobs))
        return left
