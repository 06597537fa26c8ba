"""Growing an elastic MWMS job on Slurm back from one-node *extension allocations* (issue 34 item 5,
docs/elastic.md "Slurm: growing back").

A job that lost a node runs below MAX on the nodes left. Once its grow-back cooldown has passed
(:class:`~orchestrator.supervisor.growback.GrowBack` only asks then),
:class:`~orchestrator.backends.slurm_room.SlurmRoom` says how many workers the nodes it may use
hold (:func:`~orchestrator.resources.extension.nodes_room`, at the job's
tasks per node when it started) and tells :class:`Extensions` how many nodes MAX is short of. The
extension watch (a thread, so the supervisor's loop never waits on Slurm) then:

* asks Slurm for the nodes short, each an extension of one node, all at once (a grow short of two
  nodes asks for two, not one after the other; :func:`~orchestrator.resources.extension.extensions_to_ask`;
  one Slurm starts on a node the run has already, two packed on a node that holds more than one, is
  cancelled and asked again at once without that node):
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
from orchestrator.backends.slurm_extend_job import (  # noqa: F401 - BaseJob, ...: this module's too
    NAME_SUFFIX,
    BaseJob,
    extension_argv,
    read_base,
    step_environ,
    watch_script,
)
from orchestrator.errors import LaunchError
from orchestrator.resources.extension import (
    CANCEL_LATE,
    CANCEL_UNNEEDED,
    GONE,
    GRANTED,
    extension_next,
    extensions_to_ask,
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
        self._pending: list[Pending] = []  # asked for, not yet running, oldest first
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
        """The grow is due and the size it grows to is ``short`` nodes short (0: enough): the watch
        asks for that many extensions at once, probes lost nodes, or cancels pending ones no longer
        needed. Never waits."""
        if self._closing.is_set() or not self.job_id:
            return
        with self._lock:
            self._short, self._wanted_at = short, self._clock()
            if self._thread is not None and self._thread.is_alive():
                return
            if short <= 0 and not self._pending:
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
                    short, pending = (self._short if due else 0), list(self._pending)
                for each in pending:  # the oldest first: those past the nodes short are not needed
                    state = self._state(each.job_id)
                    with self._lock:  # a grant meanwhile made one less short, and one less pending before it
                        short_now = self._short if due else 0
                        rank = next(i for i, p in enumerate(self._pending) if p is each)
                    action = extension_next(short_now - rank, state, now - each.asked_at, self._retry_at - now,
                                            grant_timeout_s=GRANT_TIMEOUT_S)
                    self._act(action, each, state)  # first: Slurm may take seconds to start them
                with self._lock:
                    ask = extensions_to_ask(self._short if due else 0, len(self._pending), self._retry_at - now)
                said = not self.ever  # the run's first asks are said in the events (all asked together), later logged
                for _ in range(ask):  # all at once: a grow short of two nodes asks for two together
                    if not self._submit(said):
                        break
                if short > 0:  # a node back makes a pending extension unneeded (cancelled at the next look)
                    self._probe_lost(now)
                with self._lock:
                    if not self._pending and not due:
                        self._thread = None
                        return
                self._closing.wait(POLL_S)
        except Exception:  # noqa: BLE001 - a watch that fails costs the grow, never the run
            log.warning("the Slurm extension watch failed", exc_info=True)
            with self._lock:
                self._thread = None

    def _act(self, action: str, pending: Pending, state: str | None) -> None:
        if action == GRANTED:
            self._take(pending)
        elif action == CANCEL_LATE:
            reason = self._reason(pending.job_id)
            self._cancel([pending.job_id])
            self._forget(pending, f"extension allocation {pending.job_id} not started by Slurm within "
                         f"{GRANT_TIMEOUT_S:g} s{f' ({reason})' if reason else ''}: cancelled; asking again in "
                         f"{RETRY_AFTER_S:g} s", event=not self._said_late)
            self._said_late = True
        elif action == CANCEL_UNNEEDED:
            self._cancel([pending.job_id])
            self._forget(pending, f"extension allocation {pending.job_id} cancelled: the job needs no more nodes now",
                         retry=False)
        elif action == GONE:
            self._forget(pending, f"extension allocation {pending.job_id} ended before it ran ({state or 'gone'}); "
                         f"asking again in {RETRY_AFTER_S:g} s")

    def _forget(self, pending: Pending, text: str, *, retry: bool = True, event: bool = True) -> None:
        with self._lock:
            self._pending = [p for p in self._pending if p is not pending]
            if retry:
                self._retry_at = self._clock() + RETRY_AFTER_S
        self._say(text, event)

    def _submit(self, said: bool) -> bool:
        """Ask Slurm for one extension (``said``: in the events too, else logged); False when it could
        not be asked (asked again later)."""
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
            return False
        self.ever.append(job)
        if self._closing.is_set():  # the run ended meanwhile
            self._cancel([job])
            return False
        with self._lock:
            self._pending.append(Pending(job, asked, argv))
        base = self._base
        self._say(f"growing back needs another node: asked Slurm for extension allocation {job} (one node, "
                  f"partition {base.partition or 'default'}, time limit {base.time_left or 'the partition default'})",
                  event=said)
        return True

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
        with self._lock:
            twice = node in self._granted or node in self._taken()
        if twice and not problem:  # asked together, Slurm started two on one node (it holds more than one)
            self._cancel([pending.job_id])
            self._forget(pending, f"extension allocation {pending.job_id} on {node} cancelled: the run has that node "
                         "already (Slurm started two extensions on it); asking again without it", retry=False,
                         event=False)
            return
        if problem:
            self._cancel([pending.job_id])
            self._forget(pending, f"extension allocation {pending.job_id}{f' on {node}' if node else ''} cannot be "
                         f"used: {problem}; cancelled, asking again in {RETRY_AFTER_S:g} s")
            return
        with self._lock:
            self._pending = [p for p in self._pending if p is not pending]
            self._granted[node] = pending.job_id
            self._addresses[node] = address or node
            self._short = max(0, self._short - 1)  # one less short until the room says it again
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
            return "PENDING"
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
