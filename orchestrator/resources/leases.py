"""Several runs on one machine: leases of cores, GPUs and ports in a machine-wide ledger (issue 36).

Each ``launch`` on this machine (local and docker backends) leases what its tasks are pinned
to before it starts them, and returns the lease when its life ends:

* **The ledger** is ``leases.json`` in :func:`ledger_dir` (``ORCH_LEASES_DIR``, default
  ``<tmp>/tf-orchestrator-leases``), read and rewritten only under an exclusive ``flock`` of
  ``leases.lock`` beside it. Each entry is keyed by the orchestrator's pid **and** its process
  start time (``psutil.Process.create_time``), so a run whose orchestrator died (SIGKILL, a
  reused pid) holds nothing: its entry is dropped by the next transaction (:func:`live`).
* **Cores**: a run pinned on this machine (not ``--no-pin``, at least one core per training
  task) leases the cores its plan pins (training blocks and the cores kept for the others),
  disjoint from every other run's. With ``--threads-per-task N`` it takes N cores per training
  task (and one kept for the others); without, every free core (at least one per training
  task). Too few free: it waits.
* **GPUs**: the devices its placement deals (:func:`orchestrator.resources.placement.place`
  over the devices no other run leases): ps, evaluator and a PSS chief hold none unless asked,
  so they lease none. The whole group is leased in one transaction, all or nothing: two
  half-started MWMS jobs can never each hold half of what both need. A training task left to
  the even split that would get a GPU alone waits for one rather than run without. Idle devices
  are dealt first (NVML's utilisation and memory, :func:`busy`); a busy device no run leases
  (another user's process) is used last, with a warning.
* **Ports**: a run whose tasks bind this machine's ports (the local backend, without fixed
  addresses in its spec) leases a block of them (:mod:`orchestrator.resources.portblocks`),
  disjoint from every other run's; its tasks' ports are drawn inside it. The block is part of the
  run's entry, so it is returned and reclaimed with its cores and GPUs.
* **Waiting**: when what it needs is held, the run says which run holds it, once per change
  (``waiting for cores 0-1, held by run 20261204-... (pid 4242, ports 20016-20031)``), is
  listed as waiting in the ledger (``list`` shows it), and tries again every :data:`POLL_S`
  seconds, for at most ``--wait-for-resources S`` (None: until free; 0: refused at once).
  Refused: that line as bad input (exit 2), nothing started.
* **First come, first served**: a waiting entry carries the time it started waiting and what it
  claims: of each kind it waits for, the whole pool it could be dealt from (every core it may run
  on, every GPU of the node, every port), of the others what it would be dealt now. A run (a new
  one, or a later waiter) treats the claims of the runs that waited before it as held, so what an
  earlier waiter wants goes to it first, however the polls of the waiters interleave; what no
  earlier waiter wants (disjoint cores of another affinity, a run that pins nothing) is dealt at
  once. As Slurm's and Kueue's ``StrictFIFO`` queues, an earlier waiter is never overtaken on what
  it waits for (:func:`ahead`).

* **Elastic workers** start at the largest size down to MIN that fits (:func:`decide_sized`).

The decision is a pure function (:func:`decide`, table-tested in ``tests/decisions``); the
ledger's file I/O is :class:`Ledger`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.resources.cores import assign_cores, format_cpus, training_roles
from orchestrator.resources.elastic import largest_that_fits, shrunk_note
from orchestrator.resources.gpus import GpuUsage, Inventory
from orchestrator.resources.placement import Placement, place
from orchestrator.resources.portblocks import PortBlock, block_size, format_block, free_block, port_range
from orchestrator.spec.model import JobSpec

LEDGER_FILE = "leases.json"
LOCK_FILE = "leases.lock"
POLL_S = 0.1
"""Seconds between two tries of a waiting run (the gap between a run's end and the next start)."""
LOCK_TIMEOUT_S = 10.0
"""Most seconds one transaction waits for the ledger's lock (held for a read and a write)."""
BUSY_UTILIZATION_PERCENT = 10.0
BUSY_MEMORY_FRACTION = 0.10
"""A device is busy at this utilisation, or with this share of its memory used (a CUDA context
alone takes a few hundred MiB)."""


def ledger_dir() -> Path:
    """``ORCH_LEASES_DIR``, else ``<tmp>/tf-orchestrator-leases`` (one ledger per machine)."""
    return Path(env.read(env.LEASES_DIR) or Path(tempfile.gettempdir()) / "tf-orchestrator-leases")


@dataclass(frozen=True)
class Holder:
    """One run in the ledger.

    Attributes:
        run_id: the run.
        pid: its orchestrator's pid.
        started: that process's start time (unix seconds, ``psutil``): with the pid, the key.
        cores: the cores it leases.
        gpus: the UUIDs of the devices it leases.
        waiting: what it waits for ("" when it holds its lease).
        runs_dir: its runs directory (for ``list``).
        ports: ``[low, high)``, the block of this machine's ports it leases; None: none.
        since: when it started waiting (unix seconds; its place in line); 0 for a holder.

    A waiting entry's ``cores``, ``gpus`` and ``ports`` are its claims (see the module docstring),
    a holder's its lease.
    """

    run_id: str
    pid: int
    started: float
    cores: tuple[int, ...] = ()
    gpus: tuple[str, ...] = ()
    waiting: str = ""
    runs_dir: str = ""
    ports: PortBlock | None = None
    since: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "pid": self.pid, "started": self.started, "cores": list(self.cores),
                "gpus": list(self.gpus), "ports": list(self.ports) if self.ports else None, "waiting": self.waiting,
                "since": self.since, "runs_dir": self.runs_dir}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Holder:
        ports = d.get("ports")
        return cls(str(d["run_id"]), int(d["pid"]), float(d["started"]), tuple(int(c) for c in d.get("cores", ())),
                   tuple(str(g) for g in d.get("gpus", ())), str(d.get("waiting", "")), str(d.get("runs_dir", "")),
                   (int(ports[0]), int(ports[1])) if ports else None, float(d.get("since") or 0.0))

    @property
    def key(self) -> tuple[int, float, str]:
        """(pid, start time, run id): one orchestrator process may run several jobs (the Python API)."""
        return (self.pid, self.started, self.run_id)

    def named(self) -> str:
        """``run ID (pid N)``, with ``, ports LOW-HIGH`` when it holds a block of ports."""
        ports = f", ports {format_block(self.ports)}" if self.ports and not self.waiting else ""
        return f"run {self.run_id} (pid {self.pid}{ports})"


def start_time(pid: int) -> float | None:
    """The start time of process ``pid`` (unix seconds), None when there is none (or a zombie)."""
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
    except psutil.Error:
        return None


def live(holder: Holder) -> bool:
    """True while the orchestrator that wrote the entry runs (same pid, same start time)."""
    started = start_time(holder.pid)
    return started is not None and abs(started - holder.started) < 0.5


def busy(usage: GpuUsage | None) -> bool:
    """A device some process uses now (:data:`BUSY_UTILIZATION_PERCENT`, :data:`BUSY_MEMORY_FRACTION`)."""
    if usage is None:
        return False
    return (usage.utilization_percent >= BUSY_UTILIZATION_PERCENT
            or usage.memory_used_bytes >= BUSY_MEMORY_FRACTION * max(1, usage.memory_total_bytes))


def _busyness(usage: GpuUsage | None, index: int) -> tuple[bool, float, int, int]:
    """Sort key of a device: idle ones first, then the least busy (utilisation, memory used), by index."""
    if usage is None:
        return (False, 0.0, 0, index)
    return (busy(usage), usage.utilization_percent, usage.memory_used_bytes, index)


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` grants, or why it cannot.

    Attributes:
        granted: True when the run may start now.
        cores: the cores to plan the run on (a subset of the allowed ones); None: plan as
            without leases (nothing pinned, or not this machine's cores).
        leased_cores: the cores its plan pins (what it leases).
        placement: its GPUs over the devices no other run leases (None: no device lease).
        waiting: ``cores 0-1, held by run ... (pid N)`` when not granted.
        warnings: busy devices it uses (one line each).
        ports: the block of ports it leases (None: none).
        claims: when not granted, what its waiting entry claims (cores, GPU UUIDs, ports):
            of a kind it waits for the whole pool, of the others what it would be dealt now.
    """

    granted: bool
    cores: tuple[int, ...] | None = None
    leased_cores: tuple[int, ...] = ()
    placement: Placement | None = None
    waiting: str = ""
    warnings: tuple[str, ...] = ()
    ports: PortBlock | None = None
    claims: tuple[tuple[int, ...], tuple[str, ...], PortBlock | None] = ((), (), None)

    @property
    def leased_gpus(self) -> tuple[str, ...]:
        if self.placement is None:
            return ()
        return tuple(dict.fromkeys(g.uuid for t in self.placement.tasks.values() for g in t.devices))


def _held_by(what: str, listing: str, holders: Sequence[Holder], first: Sequence[Holder] = ()) -> str:
    """``cores 0-1, held by run a (pid 7), first in line: run w (pid 9)``."""
    said = [f"held by {', '.join(h.named() for h in holders)}"] if holders else []
    said += [f"first in line: {', '.join(h.named() for h in first)}"] if first else []
    return f"{what} {listing}, {', '.join(said) or 'held by another run'}"


def ahead(others: Sequence[Holder], since: float) -> list[Holder]:
    """The runs of ``others`` waiting in line before a run whose place is ``since`` (unix seconds
    it started waiting; ``inf``: a run that has not asked yet, behind every waiter), oldest first.

    Their claims are held for it: first come, first served (Slurm's and Kueue's ``StrictFIFO``).
    Two entries of the same second order by their float; an equal one is not ahead (each of two
    runs with one place may go: no deadlock).
    """
    return sorted((h for h in others if h.waiting and h.since < since), key=lambda h: (h.since, h.key))


def decide(spec: JobSpec, allowed: Sequence[int], inventory: Inventory | None, usage: Mapping[str, GpuUsage],
           others: Sequence[Holder], host_cpus: bool = True, *, since: float = float("inf"), ports: int = 0,
           port_span: PortBlock = (20000, 32768), port_start: int = 0) -> Decision:
    """What a run of ``spec`` may lease now, beside the live runs ``others`` (the rules of the
    module docstring; pure).

    Args:
        spec: the run's validated spec.
        allowed: the cores this orchestrator may run on (:func:`orchestrator.resources.cores.allowed_cores`).
        inventory: the node's GPUs; None when the backend's scheduler assigns them.
        usage: device UUID -> its utilisation and memory now (NVML; {} when unknown).
        others: the other live runs of the ledger: holders hold their lease, the waiters
            :func:`ahead` of it their claims, later waiters nothing.
        host_cpus: the backend pins on this machine's cores.
        since: its place in line (:func:`ahead`).
        ports: how many ports of this machine its tasks bind (0: it leases no block).
        port_span: the ports blocks are dealt from (:func:`orchestrator.resources.portblocks.port_range`).
        port_start: the aligned start tried first (:func:`orchestrator.resources.portblocks.free_block`).

    Returns:
        The decision.
    """
    holding = [h for h in others if not h.waiting]
    first = ahead(others, since)
    taking = holding + first
    claim_cores: tuple[int, ...] = ()
    claim_gpus: tuple[str, ...] = ()
    roles = training_roles(spec)
    tasks = spec.tasks()
    training = [t for t in tasks if t.task_type in roles]
    rest = [t for t in tasks if t.task_type not in roles]
    blocked: list[str] = []
    cores: tuple[int, ...] | None = None
    leased_cores: tuple[int, ...] = ()
    if host_cpus and spec.pin_cpus and training and len(allowed) >= len(training):
        taken = {c for h in taking for c in h.cores}
        free = [c for c in allowed if c not in taken]
        keep = 1 if rest and len(allowed) > len(training) else 0
        if spec.threads_per_task:
            need = min(len(allowed), len(training) * spec.threads_per_task + keep)
            grant = free[:need]
        else:
            need = len(training)
            grant = free
        if len(free) < need:
            wanted = [c for c in allowed if c in taken]
            blocked.append(_held_by("cores", format_cpus(wanted), [h for h in holding if set(h.cores) & set(wanted)],
                                    [h for h in first if set(h.cores) & set(wanted)]))
            claim_cores = tuple(allowed)
        else:
            plan = assign_cores(grant, training, rest, threads=spec.threads_per_task)
            cores = tuple(grant)
            leased_cores = tuple(sorted({c for cs in plan.tasks.values() for c in cs} | set(plan.service)))
            claim_cores = leased_cores
    placement = None
    warnings: list[str] = []
    if inventory is not None and inventory.gpus:
        alone = place(spec, inventory)  # bad input (more than the node has) raised before: see acquire
        if alone.any:
            taken_gpus = {g for h in taking for g in h.gpus}
            free_gpus = sorted((g for g in inventory.gpus if g.uuid not in taken_gpus),
                               key=lambda g: _busyness(usage.get(g.uuid), g.index))
            try:
                mine: Placement | None = place(spec, replace(inventory, gpus=tuple(free_gpus)))
            except SpecError:
                mine = None
            if mine is not None and any(alone.of(t).count and not mine.of(t).count for t in tasks):
                mine = None  # a task that gets a GPU alone would run without: wait for one instead
            if mine is None:
                held = [g for g in inventory.gpus if g.uuid in taken_gpus]
                uuids = {g.uuid for g in held}
                blocked.append(_held_by("GPUs", ", ".join(f"{g.index} ({g.uuid})" for g in held),
                                        [h for h in holding if set(h.gpus) & uuids],
                                        [h for h in first if set(h.gpus) & uuids]))
                claim_gpus = tuple(g.uuid for g in inventory.gpus)
            else:
                placement = mine
                used = {g.uuid: g for t in mine.tasks.values() for g in t.devices}
                claim_gpus = tuple(used)
                for uuid, gpu in used.items():
                    u = usage.get(uuid)
                    if busy(u) and u is not None:
                        warnings.append(
                            f"GPU {gpu.index} ({uuid}) is busy: {u.utilization_percent:.0f} % utilised, "
                            f"{u.memory_used_bytes / 2**30:.1f} of {u.memory_total_bytes / 2**30:.1f} GiB used by a "
                            "process no run of this machine leases (another user's?); its tasks may run short of "
                            "memory")
    if placement is not None and warnings:
        placement = replace(placement, warnings=placement.warnings + tuple(warnings))
    block: PortBlock | None = None
    if ports > 0:
        size = block_size(ports)
        block = free_block(port_span, size, [h.ports for h in taking if h.ports], port_start)
        if block is None:
            blocked.append(_held_by("ports", f"{format_block(port_span)} (a block of {size})",
                                    [h for h in holding if h.ports], [h for h in first if h.ports]))
    if blocked:
        claim_ports = port_span if ports > 0 and block is None else block
        return Decision(False, waiting="; ".join(blocked), claims=(claim_cores, claim_gpus, claim_ports))
    return Decision(True, cores, leased_cores, placement, warnings=tuple(warnings), ports=block)


def decide_sized(spec: JobSpec, *args: Any, **kwargs: Any) -> tuple[JobSpec, Decision]:
    """:func:`decide` (same arguments), and for elastic workers that do not fit at their size, the
    largest size down to MIN that does (:func:`orchestrator.resources.elastic.largest_that_fits`):
    the spec at that size and its decision, the warning naming both sizes in its ``warnings`` (and
    its placement's); when not even MIN fits, the decision at MIN (what it waits for, its claims)."""
    tried, fit = largest_that_fits(spec, lambda sized: decide(sized, *args, **kwargs), lambda d: d.granted)
    sized, decision = tried[-1]
    if not fit:  # granted at its size (0), or waiting (None): for MIN
        return sized, decision
    note = shrunk_note(spec, sized.workers, tried[0][1].waiting)
    placement = decision.placement and replace(decision.placement, warnings=(*decision.placement.warnings, note))
    return sized, replace(decision, placement=placement, warnings=(*decision.warnings, note))


class Ledger:
    """The ledger file of :func:`ledger_dir`, one transaction at a time (``flock``)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or ledger_dir()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[list[Holder]]:
        """The live entries, under the lock; what the caller leaves in the list is written back.

        Raises:
            OSError: the directory cannot be made or the lock not taken in :data:`LOCK_TIMEOUT_S`.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise OSError(f"the lease ledger {self.dir / LOCK_FILE} stayed locked "
                                      f"{LOCK_TIMEOUT_S:g} s") from None
                    time.sleep(0.005)
            entries = [h for h in self.read() if live(h)]
            yield entries
            text = json.dumps([h.to_dict() for h in entries], indent=1) + "\n"
            partial = self.dir / f".{LEDGER_FILE}.{os.getpid()}.partial"
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, self.dir / LEDGER_FILE)
        finally:
            os.close(fd)

    def read(self) -> list[Holder]:
        """Every entry (live or not), without the lock: for ``list``; [] without a ledger."""
        try:
            raw = json.loads((self.dir / LEDGER_FILE).read_text(encoding="utf-8"))
            return [Holder.from_dict(d) for d in raw]
        except (OSError, ValueError, KeyError, TypeError):
            return []


@dataclass
class Lease:
    """What a run holds (release it at the end of its life).

    Attributes:
        cores: the cores to plan the run on (None: as without leases).
        placement: its GPUs (None: as without leases).
        warnings: busy devices it uses.
        waited_s: how long it waited.
        ports: ``[low, high)``, its block of this machine's ports (None: draw as without leases).
        spec: elastic workers granted below the size asked (:func:`decide_sized`): the spec at
            the size leased; None: at the size asked.
    """

    cores: tuple[int, ...] | None = None
    placement: Placement | None = None
    warnings: tuple[str, ...] = ()
    waited_s: float = 0.0
    ports: PortBlock | None = None
    spec: JobSpec | None = None
    _key: tuple[int, float, str] | None = None
    _ledger: Ledger | None = field(default=None, repr=False)

    def release(self) -> None:
        """Return the lease (idempotent; a run that dies returns it by dying)."""
        if self._ledger is None or self._key is None:
            return
        ledger, key, self._ledger = self._ledger, self._key, None
        try:
            with ledger.transaction() as entries:
                entries[:] = [h for h in entries if h.key != key]
        except OSError:
            pass


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def acquire(spec: JobSpec, run_id: str, inventory: Inventory | None, *, allowed: Sequence[int],
            host_cpus: bool, wait_s: float | None = None, runs_dir: str = "", ledger: Ledger | None = None,
            sample: Callable[[Sequence[str]], Sequence[GpuUsage]] | None = None,
            say: Callable[[str], None] = _say, ports: int = 0) -> Lease:
    """Lease what a run of ``spec`` needs on this machine, waiting while other runs hold it.

    Args:
        spec: the run's spec (its placement on the whole node already checked: bad input first).
        run_id: the run.
        inventory: the node's GPUs (None: the scheduler assigns them).
        allowed: the cores this orchestrator may run on.
        host_cpus: the backend pins on this machine's cores.
        wait_s: most seconds to wait (None: until free; 0: not at all).
        runs_dir: its runs directory (shown by ``list``).
        ledger: the ledger (default: :func:`ledger_dir`'s).
        sample: device UUIDs -> their usage now (default :func:`orchestrator.resources.gpus.sample`).
        say: where a ``waiting for ...`` line goes (default stderr).
        ports: how many ports of this machine its tasks bind (a block is leased for them; 0: none).

    Returns:
        The lease (with ``spec`` at the size granted when elastic workers start below theirs); an
        empty one when nothing is pinned, no device is dealt and no port is bound here (or when
        the ledger cannot be used: a warning says so).

    Raises:
        SpecError: naming ``wait-for-resources``: still held after ``wait_s`` seconds (the line
            names what, and which run holds it).
    """
    pins = host_cpus and spec.pin_cpus
    if not pins and (inventory is None or not inventory.gpus) and ports <= 0:
        return Lease()  # nothing on this machine to lease: no ledger read
    if sample is None:
        from orchestrator.resources.gpus import sample as sample_gpus

        sample = sample_gpus
    ledger = ledger or Ledger()
    me = os.getpid()
    started = start_time(me) or 0.0
    t0, since = time.monotonic(), time.time()  # its place in line: when it first asked
    said = ""
    uuids = [g.uuid for g in inventory.gpus] if inventory is not None else []
    span, start = port_range(), random.SystemRandom().randrange(1 << 30)  # a random block: see free_block
    while True:
        usage = {u.uuid: u for u in sample(uuids)} if uuids else {}
        try:
            with ledger.transaction() as entries:
                others = [h for h in entries if h.key != (me, started, run_id)]
                sized, decision = decide_sized(spec, allowed, inventory, usage, others, host_cpus=host_cpus,
                                               since=since, ports=ports, port_span=span, port_start=start)
                if decision.granted:
                    entry = Holder(run_id, me, started, decision.leased_cores, decision.leased_gpus,
                                   runs_dir=str(runs_dir), ports=decision.ports)
                else:
                    claimed_cores, claimed_gpus, claimed_ports = decision.claims
                    entry = Holder(run_id, me, started, claimed_cores, claimed_gpus, decision.waiting, str(runs_dir),
                                   claimed_ports, since)
                waited = time.monotonic() - t0
                expired = not decision.granted and wait_s is not None and waited >= wait_s
                entries[:] = others + ([] if expired else [entry])
        except OSError as exc:  # another user's ledger directory, a full disk: run as before the leases
            say(f"run {run_id}: warning: the lease ledger in {ledger.dir} cannot be used ({exc}); this run leases "
                f"nothing (set {env.LEASES_DIR} to a directory you can write)")
            return Lease()
        if decision.granted:
            return Lease(decision.cores, decision.placement, decision.warnings, waited, decision.ports,
                         None if sized is spec else sized, (me, started, run_id), ledger)
        line = f"waiting for {decision.waiting}"
        if expired:
            shown = int(wait_s) if wait_s is not None and float(wait_s).is_integer() else wait_s
            raise SpecError("wait-for-resources", shown, line,
                            "wait longer (--wait-for-resources S, or leave it out: until free), or stop that run")
        if line != said:
            say(f"run {run_id}: {line}")
            said = line
        time.sleep(POLL_S)
