"""What a part of the supervisor wants done: small frozen records, returned, never carried out by the part.

The parts (:mod:`~orchestrator.supervisor.beats`, :mod:`~orchestrator.supervisor.failures`,
:mod:`~orchestrator.supervisor.ending`, :mod:`~orchestrator.supervisor.hangs`,
:mod:`~orchestrator.supervisor.preemption`) decide; :mod:`~orchestrator.supervisor.loop`, the
one module that holds the backend, carries the records out, in the order given (Ray Train v2's
``FailurePolicy.make_decision`` returns its decision as a value in the same way, and its
``TrainController._step`` acts on it). Tasks are named by their task name (``worker-0``).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.spec.model import TaskId
from orchestrator.supervisor.records.states import Failure, JobState
from orchestrator.supervisor.rules.decisions import RestartScope


@dataclass(frozen=True)
class Event:
    """Say ``text`` in the live view's events."""

    text: str


@dataclass(frozen=True)
class Warn:
    """A warning: work lost or cut off, the job not failed (the snapshot's ``warnings``, and an event)."""

    text: str


@dataclass(frozen=True)
class Persist:
    """Write the run record now (``run.json``: what a resume starts from)."""


@dataclass(frozen=True)
class Become:
    """The job moves to ``state`` (not an end: starting, running, restarting)."""

    state: JobState


@dataclass(frozen=True)
class End:
    """The job ends ``state`` with ``exit_code`` because of ``reason``; pending restarts are dropped.
    ``fatal``: the failure that ended it (its root cause), when one did."""

    state: JobState
    exit_code: int
    reason: str
    fatal: Failure | None = None


@dataclass(frozen=True)
class Stop:
    """Stop ``tasks`` (their live attempts; None: every live task when the stop is carried out)
    in two phases: SIGTERM, then SIGKILL after ``grace_s`` seconds (None: the stop timeout; 0:
    SIGKILL at once)."""

    tasks: tuple[str, ...] | None
    reason: str
    grace_s: float | None = None


@dataclass(frozen=True)
class Notice:
    """The preemption notice to ``tasks``: SIGTERM without the stop marker (TF saves and exits).
    ``planned``: the orchestrator restarts them itself afterwards (a PSS coordinator's save before its
    restart with a larger cluster): their exit is a stop, not a failure."""

    tasks: tuple[str, ...]
    planned: bool = False


@dataclass(frozen=True)
class Failed:
    """Record the failure of ``task``'s attempt (exit ``code``; ``killed``: SIGKILL it first and
    take the code it died with)."""

    task: str
    code: int | None
    message: str
    killed: bool = False
    preemption_notice: bool = False


@dataclass(frozen=True)
class Hung:
    """``task`` is hung (``why``): dump its stacks, then kill it and record the failure. ``dump``:
    its stack dump, when the loop took it already (every hung task's before any is killed)."""

    task: str
    why: str
    dump: str | None = None


@dataclass(frozen=True)
class Stuck:
    """``task`` finished its work but its process does not end (``why``): dump its stacks, kill it."""

    task: str
    why: str


@dataclass(frozen=True)
class Restart:
    """Restart ``tasks`` after ``cause`` in ``delay_s`` seconds, once the backend can place them
    (:meth:`~orchestrator.backends.base.PlacementHooks.prepare_restart`); the rest of the decision
    (:meth:`~orchestrator.supervisor.failures.Restarts.placed`) waits for its answer."""

    cause: Failure
    tasks: tuple[TaskId, ...]
    scope: RestartScope
    job_restart: bool
    counted: bool
    delay_s: float
    label: str
    culprit: str


@dataclass(frozen=True)
class RestartAt:
    """Start the next attempt of ``tasks`` at ``at`` (orchestrator monotonic seconds)."""

    tasks: tuple[str, ...]
    at: float


@dataclass(frozen=True)
class DropRestarts:
    """No pending restart starts (a preemption began)."""


@dataclass(frozen=True)
class Preempt:
    """Preempt the whole job: save and leave (``reason``)."""

    reason: str


@dataclass(frozen=True)
class Start:
    """Start ``tasks``' current attempts, in this order (the first attempts the start order held
    back: :mod:`~orchestrator.supervisor.waves`); none once a stop was requested."""

    tasks: tuple[str, ...]


@dataclass(frozen=True)
class Spares:
    """Keep the plan's warm spares ready (:meth:`~orchestrator.backends.base.SpareHooks.keep_spares`)."""


@dataclass(frozen=True)
class Resize:
    """ParameterServerStrategy: the job goes on at ``workers`` workers because of ``cause`` (``resize
    asked``, ``grew back``): ``park`` stopped (the coordinator trains on without them), ``unpark``
    started again at their addresses (the coordinator re-adds them), or, with ``coordinator`` (its
    task name: a grow past the cluster its ``TF_CONFIG`` names, its save taken), started with the
    coordinator's next attempt, whose ``TF_CONFIG`` names them
    (:meth:`~orchestrator.supervisor.failures.Restarts.resized`); worker task names."""

    workers: int
    cause: str
    park: tuple[str, ...] = ()
    unpark: tuple[str, ...] = ()
    coordinator: str = ""


@dataclass(frozen=True)
class NodeLost:
    """Ask the backend whether the node of ``task``'s attempt (failed, or live beside a failed peer) is lost
    (:meth:`~orchestrator.backends.base.LostNodes.node_of`) and hand its answer to
    :meth:`~orchestrator.supervisor.resizing.Resizing.node_lost`, which decides (an elastic MWMS
    group continues one smaller; an elastic PSS worker is parked); worker task name."""

    task: str


Action = (Event | Warn | Persist | Become | End | Stop | Notice | Failed | Hung | Stuck | Restart | RestartAt
          | DropRestarts | Preempt | Start | Spares | Resize | NodeLost)
"""Every record a part may return."""
