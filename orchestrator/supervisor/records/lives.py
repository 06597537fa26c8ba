"""The lives of a run: one record per orchestrator lifetime, kept in ``run.json``.

A run can outlive its orchestrator (``launch --resume RUN_ID``: after a preemption, a Slurm
requeue, a time limit, or the orchestrator killed outright). What carries over from one life
to the next is small and explicit, and persisted atomically into the run directory as the job
goes (:data:`orchestrator.rundir.RECORD_FILE`): the lives so far, the restart budget used, the
failure history, and each task's next attempt number (``attempt-<n>`` counts on).

``steps_lost`` of a life is what the next life had to train again: the last step the life
reported minus the step the next life resumed from (its checkpoint); 0 when a preemption's
save covered every step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from orchestrator.spec.elastic import batch_facts, facts_at
from orchestrator.spec.model import JobSpec

RECORD_VERSION = 1

CAUSE_PREEMPTED = "preempted"
CAUSE_TIME_LIMIT = "time limit"
CAUSE_KILLED = "orchestrator killed"
CAUSE_INTERRUPTED = "interrupted"
CAUSE_FAILED = "failed"
CAUSE_SUCCEEDED = "succeeded"

SEGMENT_LAUNCHED = "launched"
"""``cause`` of a run's first segment (:func:`segments`)."""
SEGMENT_RESUMED = "resumed at another size"
"""``cause`` of a segment a ``launch --resume RUN --workers N`` began (docs/elastic.md)."""
SEGMENT_PARKED = "parked worker"
"""``cause`` of a segment a parked PSS worker began (:mod:`orchestrator.supervisor.rules.parking`)."""
RESIZED = ("resize asked", "slot lost", "grew back", "node lost")
"""Causes of a life a size change of the running job ended (:mod:`orchestrator.supervisor.rules.resize`'s
``CAUSES``), and of the segment the next life begins; under PSS, of a change within a life too."""


SAVED_FIRST = ("resize asked", "grew back")
"""Causes of a life that ended by a planned size change: its trainers saved at its last step first
(the coordinated save), so the next life continues from that step."""


def continued_from(earlier: tuple[Life, ...]) -> int | None:
    """The step a new life continues from, known before its coordinator says it: the last step of
    the life before it when a planned size change (:data:`SAVED_FIRST`) ended that one; None
    otherwise (a fresh start, a lost slot or node: the last checkpoint, which only the tasks read)."""
    before = earlier[-1] if earlier else None
    return before.last_step if before is not None and before.cause in SAVED_FIRST else None


def life_last_step(reported: int | None, reached: int | None, continued: int | None) -> int | None:
    """A life's last step as it ends: the largest it is known to have reached, from the coordinator's
    reports (``reported``), a ``lose`` fault's step (``reached``) and the step it continued from
    (:func:`continued_from`: a life stopped before its first report, or while its coordinator still
    said a step from before its restore, reached that one); None when none is known."""
    known = [step for step in (reported, reached, continued) if step is not None]
    return max(known) if known else None


def _iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


@dataclass(frozen=True)
class Life:
    """One orchestrator lifetime of a run.

    Attributes:
        number: 1 for the first.
        started_at: Unix seconds when it started.
        ended_at: Unix seconds when it ended (None: still running, or killed before it could say).
        ended: its final job state (``Succeeded``, ``Failed``, ``Preempted``, ``Interrupted``,
            ``Lost`` for an orchestrator that died without a word), None while it runs.
        cause: why it ended (``preempted``, ``time limit``, ``orchestrator killed``, ...), "" while it runs.
        resumed_from_step: the step its training resumed from (the checkpoint), None for a fresh
            start or when not reported.
        last_step: the last training step the coordinator reported in this life.
        steps_lost: steps trained in this life that the next one trained again (None until a
            next life resumed).
        pid: the orchestrator's pid.
        global_batch_size: the global batch (examples per step) the coordinator reported in
            this life (the built-in worker, ``report(global_batch_size=)``, the Keras callback);
            None when not reported.
        size: the size this life ran at, as planned (:func:`size_of`: ``workers``,
            ``global_batch_size``, ``per_replica_batch_size``, ``learning_rate_factor``); None in a
            record of an earlier version.
        resized: the sizes it changed to while it ran (ParameterServerStrategy: workers parked and
            taken back), in order, each ``{"step": the last step at the size before (None: none
            yet), "size": as ``size``, "cause": why (:data:`SEGMENT_PARKED`, ``slot lost``, ``resize
            asked``, ``grew back``), "tasks": the workers it concerns, "back": they came back (else
            they were parked)}``; a grow past the coordinator's cluster (it restarts from its save): the
            step is the one it resumed from once it says so (``"resumes": True`` until then), and
            ``"steps_lost"`` the steps it had reported past that save (0 with the custom loop's save).
        held: ParameterServerStrategy workers planned in this life and not started yet (a job started
            below MAX: :attr:`orchestrator.plan.Plan.held`), lowest first; a grow takes them (and
            leaves them out of here).
    """

    number: int
    started_at: float
    ended_at: float | None = None
    ended: str | None = None
    cause: str = ""
    resumed_from_step: int | None = None
    last_step: int | None = None
    steps_lost: int | None = None
    pid: int = 0
    global_batch_size: int | None = None
    size: Mapping[str, Any] | None = None
    resized: tuple[Mapping[str, Any], ...] = ()
    held: tuple[str, ...] = ()

    @property
    def idle(self) -> list[str]:
        """The worker tasks not training now: parked (:attr:`parked`) or held (:attr:`held`)."""
        return [*self.parked, *self.held]

    @property
    def size_now(self) -> Mapping[str, Any] | None:
        """The size it runs at now (or ended at): the last it changed to, else ``size``."""
        return self.resized[-1]["size"] if self.resized else self.size

    @property
    def parked(self) -> list[str]:
        """The workers parked in this life and not back, in the order parked."""
        out: list[str] = []
        for change in self.resized:
            tasks = list(change.get("tasks") or ())
            out = [t for t in out if t not in tasks] if change.get("back") else out + tasks
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "life": self.number,
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
            "started_at_unix": self.started_at,
            "ended_at_unix": self.ended_at,
            "ended": self.ended,
            "cause": self.cause or None,
            "resumed_from_step": self.resumed_from_step,
            "last_step": self.last_step,
            "steps_lost": self.steps_lost,
            "pid": self.pid,
            "global_batch_size": self.global_batch_size,
            "size": dict(self.size) if self.size is not None else None,
            "resized": [dict(r) for r in self.resized],
            **({"held": list(self.held)} if self.held else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Life":
        return cls(
            number=int(data.get("life", 1)),
            started_at=float(data.get("started_at_unix") or 0.0),
            ended_at=None if data.get("ended_at_unix") is None else float(data["ended_at_unix"]),
            ended=data.get("ended"),
            cause=str(data.get("cause") or ""),
            resumed_from_step=data.get("resumed_from_step"),
            last_step=data.get("last_step"),
            steps_lost=data.get("steps_lost"),
            pid=int(data.get("pid") or 0),
            global_batch_size=data.get("global_batch_size"),
            size=data.get("size"),
            resized=tuple(data.get("resized") or ()),
        )


@dataclass(frozen=True)
class Carried:
    """What a resumed life takes over from the earlier ones (empty for a new run).

    Attributes:
        lives: the earlier lives, in order (the last one closed: a life that died without a word
            reads ``Lost`` / ``orchestrator killed``).
        restarts_used: restarts counted against ``max_restarts`` so far.
        next_attempt: each task's next attempt number, by task name.
        task_restarts: each task's restarts so far, by task name.
        failures: the failure history (``Failure.to_dict`` records), earliest first.
    """

    lives: tuple[Life, ...] = ()
    restarts_used: int = 0
    next_attempt: Mapping[str, int] = field(default_factory=dict)
    task_restarts: Mapping[str, int] = field(default_factory=dict)
    failures: tuple[Mapping[str, Any], ...] = ()

    @property
    def resumed(self) -> bool:
        return bool(self.lives)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "Carried":
        """What ``run.json`` carries; the last life, when it never said how it ended (its
        orchestrator was killed), is closed as ``Lost``."""
        lives = [Life.from_dict(d) for d in record.get("lives") or []]
        if lives and lives[-1].ended is None:
            lives[-1] = replace(lives[-1], ended="Lost", cause=CAUSE_KILLED)
        return cls(
            lives=tuple(lives),
            restarts_used=int(record.get("restarts_used") or 0),
            next_attempt={str(k): int(v) for k, v in (record.get("next_attempt") or {}).items()},
            task_restarts={str(k): int(v) for k, v in (record.get("task_restarts") or {}).items()},
            failures=tuple(record.get("failures") or ()),
        )


def close_previous(lives: tuple[Life, ...], resumed_from_step: int | None) -> tuple[Life, ...]:
    """The earlier lives with ``steps_lost`` filled in once a new life knows the step it resumed
    from: for the latest life that trained (lives after it that never reached training lost
    nothing and are skipped); unknown (None) until then."""
    if resumed_from_step is None:
        return lives
    for i in range(len(lives) - 1, -1, -1):
        life = lives[i]
        if life.steps_lost is not None:
            return lives
        if life.last_step is not None:
            lost = max(0, life.last_step - resumed_from_step)
            return lives[:i] + (replace(life, steps_lost=lost),) + lives[i + 1:]
    return lives


def record_dict(run_id: str, lives: tuple[Life, ...], *, restarts_used: int, next_attempt: Mapping[str, int],
                task_restarts: Mapping[str, int], failures: list[dict[str, Any]], status: str) -> dict[str, Any]:
    """``run.json``: the record a later life resumes from (see :class:`Carried`)."""
    return {
        "version": RECORD_VERSION,
        "run_id": run_id,
        "status": status,
        "lives": [life.to_dict() for life in lives],
        "restarts_used": restarts_used,
        "next_attempt": dict(next_attempt),
        "task_restarts": dict(task_restarts),
        "failures": failures,
    }


def closed(life: Life, state: str, preempted: str | None, *, ended_at: float, last_step: int | None,
           cause: str | None = None) -> Life:
    """``life`` as it ended in ``state`` (``preempted``: why the job was preempted, if it was;
    ``cause``: the size change that ended it, one of :data:`RESIZED`, which overrides the state's)."""
    resized = cause
    causes = {"Succeeded": CAUSE_SUCCEEDED, "Failed": CAUSE_FAILED, "Interrupted": CAUSE_INTERRUPTED,
              "Preempted": CAUSE_PREEMPTED}
    cause = causes.get(state, state.lower())
    if state == "Preempted" and preempted and "time limit" in preempted:
        cause = CAUSE_TIME_LIMIT
    return replace(life, ended_at=ended_at, ended=state, cause=cause if resized is None else resized,
                   last_step=last_step if last_step is not None else life.last_step)


def every_life(carried: Carried, life: Life) -> tuple[Life, ...]:
    """Every life of the run, ``life`` (the current one) last, the previous one's
    ``steps_lost`` filled in once ``life`` knows the step it resumed from."""
    return close_previous(carried.lives, life.resumed_from_step) + (life,)



def batch_change(earlier: tuple[Life, ...], global_batch_size: int | None) -> str | None:
    """The warning when this life trains with another global batch than the latest earlier
    life that reported one (the learning rate, steps per epoch and the data each step sees
    change with it); None when it is the same, or either is unknown."""
    before = next((life for life in reversed(earlier) if life.global_batch_size is not None), None)
    if before is None or global_batch_size is None or before.global_batch_size == global_batch_size:
        return None
    return (f"WARNING: the global batch changed from {before.global_batch_size} (life {before.number}) to "
            f"{global_batch_size} in this resumed run: steps mean other examples now (the learning rate and "
            "steps per epoch that suited the old batch may not suit this one)")


def size_of(spec: JobSpec, workers: int | None = None) -> dict[str, Any]:
    """The size ``spec`` runs at (at ``workers`` workers; None: its own count), as a life records
    it: ``workers`` (the worker tasks), and the batch facts there
    (:func:`orchestrator.spec.elastic.batch_facts`, :func:`~orchestrator.spec.elastic.facts_at`)."""
    workers = spec.workers if workers is None else workers
    facts = batch_facts(spec) if spec.elastic is None or workers == spec.workers else facts_at(
        spec.elastic, spec.strategy.value, spec.chief, workers, spec.training.batch_size_per_replica)
    return {"workers": workers, "global_batch_size": facts.global_batch_size,
            "per_replica_batch_size": facts.per_replica_batch_size,
            "learning_rate_factor": facts.learning_rate_factor}


def segments(lives: tuple[Life, ...]) -> list[dict[str, Any]]:
    """``summary.json``'s ``segments``: one per size the run trained at, in order (consecutive lives
    at one size are one segment; a size a life changed to while it ran, :attr:`Life.resized`, begins
    one): its ``workers`` and batch facts (:func:`size_of`; the global batch the coordinator
    reported, when it did), ``first_step`` (the step it resumed from, or the last step before the
    change; 0 for a fresh start), ``last_step`` (the last step reported, or the next segment's
    ``first_step`` when that is later: a preemption saves steps not yet reported), ``cause``
    (:data:`SEGMENT_LAUNCHED`, :data:`SEGMENT_RESUMED`, the size change that ended the life before:
    :data:`RESIZED`, or of the change within a life: :data:`SEGMENT_PARKED`, ...), ``steps_lost``
    (steps trained in it that the next one trained again; None while unknown), ``lives`` (their
    numbers) and, for a change within a life, ``tasks`` (the workers it concerns). Lives without a
    recorded size (an earlier version's) are left out."""
    out: list[dict[str, Any]] = []
    for i, life in enumerate(lives):
        if life.size is None:
            continue
        before = lives[i - 1].cause if i else ""  # a size change of the running job ended it: this one's cause
        size = dict(life.size)
        if life.global_batch_size is not None:
            size["global_batch_size"] = life.global_batch_size
        last = out[-1] if out else None
        lost = 0 if life.resized else life.steps_lost  # a life's steps lost are its last size's
        if last is not None and all(last[k] == size[k] for k in ("workers", "global_batch_size")):
            if last["first_step"] is None and last["last_step"] is None and life.resumed_from_step is not None:
                last["first_step"] = life.resumed_from_step  # its earlier lives ended before their first step
                if len(out) > 1 and (out[-2]["last_step"] or 0) < life.resumed_from_step:
                    out[-2]["last_step"] = life.resumed_from_step  # saved before it was reported
            last["last_step"] = life.last_step if life.last_step is not None else last["last_step"]
            last["steps_lost"] = _add(last["steps_lost"], lost)
            last["lives"].append(life.number)
        else:
            first = life.resumed_from_step if life.resumed_from_step is not None else (0 if last is None else None)
            if last is not None and first is not None:
                _saved_before_reported(last, first, size.get("global_batch_size"))
            out.append({**size, "first_step": first, "last_step": life.last_step,
                        "cause": SEGMENT_LAUNCHED if last is None else before if before in RESIZED else SEGMENT_RESUMED,
                        "steps_lost": lost, "lives": [life.number]})
        for n, change in enumerate(life.resized, 1):  # sizes it changed to while it ran: no step trained again
            out[-1]["last_step"] = change.get("step")  # but a coordinator's restart from its last save (PSS grow):
            out[-1]["steps_lost"] = change.get("steps_lost", out[-1]["steps_lost"])
            out.append({**dict(change["size"]), "first_step": change.get("step"), "last_step": life.last_step,
                        "cause": change["cause"], "steps_lost": life.steps_lost if n == len(life.resized) else 0,
                        "lives": [life.number], "tasks": list(change.get("tasks") or ())})
    return _untrained(out)


def _untrained(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Segments whose lives ended before their first step (a resize asked while the group was still
    starting) trained nothing: they resumed from the checkpoint the next one resumed from, and lost 0."""
    known = None
    for seg in reversed(out):
        if seg["first_step"] is None and known is not None and seg["last_step"] in (None, known):
            seg.update(first_step=known, last_step=known, steps_lost=0 if seg["steps_lost"] is None else
                       seg["steps_lost"])
        known = seg["first_step"]
    for before, seg in zip(out, out[1:]):
        if seg["first_step"] is not None:
            _saved_before_reported(before, seg["first_step"], seg.get("global_batch_size"))
    return out


def _saved_before_reported(before: dict[str, Any], first: int, now: int | None) -> None:
    """``before``'s last step raised to ``first``, where the next segment (at the global batch ``now``) resumed: its
    last steps were saved before they were reported. Counted in ``before``'s steps: under ``keep-per-replica`` a
    step of another global batch is another count of examples (step k at G is k x G examples:
    :func:`worker.elastic.converted_step`)."""
    was = before.get("global_batch_size")
    if was and now and was != now:
        first = first * now // was
    if (before["last_step"] or 0) < first:
        before["last_step"] = first


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def planned_change(earlier: tuple[Life, ...], life: Life) -> bool:
    """Whether ``life``'s global batch is the one its size plans and the latest earlier life that
    reported one trained at its own size's: elastic workers under ``keep-per-replica`` resumed at
    another size (docs/elastic.md), a change the user asked for, not a warning."""
    before = next((e for e in reversed(earlier) if e.global_batch_size is not None), None)
    return (before is not None and before.size is not None and life.size is not None
            and before.global_batch_size == before.size.get("global_batch_size")
            and life.global_batch_size == life.size.get("global_batch_size")
            and before.size.get("workers") != life.size.get("workers"))


class LifeBook:
    """This life of the run as it goes: what it carried over, the step it resumed from, the
    coordinator's last step, when the record was last persisted.

    Args:
        carried: what earlier lives left (:class:`Carried`; empty for a new run).
        started_at: Unix seconds.
        pid: the orchestrator's pid.
        persist_every_s: least seconds between two persists for a new step alone (a SIGKILLed
            orchestrator's resume then knows the last step within this much training).
    """

    def __init__(self, carried: Carried, started_at: float, pid: int, persist_every_s: float = 1.0,
                 spec: JobSpec | None = None, held: tuple[str, ...] = ()) -> None:
        self.carried = carried
        self.life = Life(number=len(carried.lives) + 1, started_at=started_at, pid=pid,
                         size=size_of(spec, spec.workers - len(held)) if spec is not None else None, held=held)
        self.last_step: int | None = None
        self.persist_every_s = persist_every_s
        self.persisted_at: float | None = None
        self._warnings: list[str] = []

    def started(self, at: float) -> None:
        self.life = replace(self.life, started_at=at)

    def coordinator_beat(self, step: int | None, resumed_from_step: int | None, now: float,
                         global_batch_size: float | None = None) -> bool:
        """The coordinator reported ``step`` (and, after a resume, the step it resumed from, and
        its global batch); returns True when the record should be persisted now."""
        due = False
        if global_batch_size is not None and int(global_batch_size) != self.life.global_batch_size:
            self.life = replace(self.life, global_batch_size=int(global_batch_size))
            change = batch_change(self.carried.lives, self.life.global_batch_size)
            if change and not planned_change(self.carried.lives, self.life):
                self._warnings.append(change)
            due = True
        if resumed_from_step is not None and self.life.resized and self.life.resized[-1].get("resumes"):
            saved = {k: v for k, v in self.life.resized[-1].items() if k != "resumes"}  # the step it saved at
            lost = max(0, (self.last_step or 0) - resumed_from_step)  # reported past its save: trained again
            self.life = replace(self.life, resized=(*self.life.resized[:-1], {**saved, "step": resumed_from_step,
                                                                              "steps_lost": lost}))
            due = True
        elif resumed_from_step is not None and self.carried.resumed and self.life.resumed_from_step is None:
            self.life = replace(self.life, resumed_from_step=resumed_from_step)
            due = True
        if step is not None and step != self.last_step:
            first = self.last_step is None  # the life's first step is persisted at once, whatever was before it
            self.last_step = step
            due = due or first or self.persisted_at is None or now - self.persisted_at >= self.persist_every_s
        return due

    def resized(self, size: Mapping[str, Any], cause: str, tasks: tuple[str, ...], back: bool = False,
                resumes: bool = False) -> None:
        """The job goes on at ``size`` (:func:`size_of`) from the last step seen, because of ``cause``
        (:data:`SEGMENT_PARKED`, ...): ``tasks`` parked, or taken back (``back``) (a new segment:
        :func:`segments`); ``resumes``: the coordinator restarts from its save, and the step it says it
        resumed from replaces the last step seen (a save comes after the step last reported)."""
        change = {"step": self.last_step, "size": dict(size), "cause": cause, "tasks": list(tasks), "back": back,
                  **({"resumes": True} if resumes else {})}
        self.life = replace(self.life, resized=self.life.resized + (change,),
                            held=tuple(t for t in self.life.held if not back or t not in tasks))

    def take_warnings(self) -> list[str]:
        """The warnings about this life found since the last call (a changed global batch)."""
        out, self._warnings = self._warnings, []
        return out

    def close(self, state: str, preempted: str | None, ended_at: float, cause: str | None = None,
              reached: int | None = None) -> None:
        """The life ended in ``state``; ``cause``: the size change that ended it (:func:`closed`);
        ``reached``: a step training is known to have reached though not reported (a ``lose``
        fault's step), which the last step is at least."""
        continued = continued_from(self.carried.lives)
        last = self.last_step = life_last_step(self.last_step, reached, continued)
        if self.life.resumed_from_step is None and continued is not None and last == continued:
            self.life = replace(self.life, resumed_from_step=continued)  # ended before it said where it resumed
        self.life = closed(self.life, state, preempted, ended_at=ended_at, last_step=last, cause=cause)

    def lives(self) -> tuple[Life, ...]:
        """Every life so far, this one last, with the last step seen so far (what ``run.json``
        keeps, so that the resume of an orchestrator killed outright can count the steps lost)."""
        last = self.last_step if self.last_step is not None else self.life.last_step
        return every_life(self.carried, replace(self.life, last_step=last))
