"""Continuing a run in its own directory: ``launch --resume RUN_ID``.

A run ends early for reasons that are not its fault: a preemption (Slurm ``PreemptMode=REQUEUE``,
a spot VM reclaimed, a Kubernetes eviction), a partition's time limit, the orchestrator killed
outright. ``--resume`` starts the next life of the same run: the same plan, the checkpoints in
``backup/`` reused (the built-in trainers restore from BackupAndRestore), attempt numbers counting
on, the restart budget and the failure history carried over (``run.json``,
:mod:`orchestrator.supervisor.records.lives`).

The rules (bad input is one line, exit 2, nothing started, nothing in the run directory changed):

* the run must exist, must not have succeeded, and its orchestrator must not be alive: no
  other life may hold its lock (:mod:`orchestrator.resources.runlock`, taken for the life);
* the spec is the run's own (``plan.json``); flags, a spec file or a program given with
  ``--resume`` must agree with it in everything but ``--deadline`` (a resumed run of another
  shape would restore a checkpoint it cannot use), and, for elastic workers (``--workers
  MIN:MAX``), ``--workers N`` within the run's MIN..MAX: under ``keep-global`` the global batch
  and so the checkpoint's (epoch, step) index stay valid at any size (docs/elastic.md); under
  ``keep-per-replica`` the built-in ``fit`` loop converts the index through the examples seen
  (:func:`worker.elastic.converted_position`), and its custom loop the step
  (:func:`worker.elastic.converted_step`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from orchestrator.errors import SpecError
from orchestrator.report.runs import alive
from orchestrator.resources import runlock
from orchestrator.rundir import RunDir, read_json
from orchestrator.spec.fields import spec_fields
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import JobSpec
from orchestrator.supervisor.records.lives import Carried

CHANGEABLE = frozenset({"supervision.deadline_s", "workers.start", "workers.grow_back", "containers.shm_size",
                        "containers.memory"})
"""Spec fields a resumed run may change: the job deadline (each life's own), the size of
elastic workers (within MIN..MAX, checked by :func:`orchestrator.spec.elastic.check_elastic`) and
their grow-back cooldown (``--grow-back``: a run of an earlier version has none), and
the size of its containers (a run that died of a full ``/dev/shm`` resumes with ``--shm-size 2G``:
the fix its failure names)."""

FLATTENED = ("training", "supervision", "restart_policy", "addresses", "workers", "containers")
"""Sections of a spec compared field by field."""


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and key in FLATTENED:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def check_resumable(run_dir: RunDir, runs_dir: str | Path) -> dict[str, Any]:
    """The run's ``plan.json`` when ``run_dir`` may be continued.

    Raises:
        SpecError: naming ``resume``: no such run, its orchestrator is still alive, or it succeeded.
    """
    plan = read_json(run_dir.plan)
    if plan is None or "spec" not in plan:
        known = sorted(p.name for p in Path(runs_dir).glob("*/plan.json") for p in [p.parent])[-3:]
        hint = f"runs under {runs_dir}: {', '.join(known)}" if known else f"no run under {runs_dir}; check --runs-dir"
        why = ("is not a run that can be resumed (no plan.json with its spec)" if run_dir.path.is_dir()
               else "no such run")
        raise SpecError("resume", run_dir.run_id, why, hint)
    holder = runlock.holder(run_dir)
    if holder is not None and holder != os.getpid():
        raise runlock.refusal(run_dir, holder, "resume")
    endpoint = read_json(run_dir.endpoint) or {}  # a life of a version without the lock
    pid = int(endpoint.get("pid") or 0)
    if pid and pid != os.getpid() and alive(pid):
        raise SpecError("resume", run_dir.run_id, f"its orchestrator (pid {pid}) is still running",
                        f"watch it with `orchestrator status {run_dir.run_id}`, or stop it first")
    summary = read_json(run_dir.summary) or {}
    if summary.get("status") == "Succeeded":
        raise SpecError("resume", run_dir.run_id, "already succeeded: there is nothing left to train",
                        "launch a new run (a new --run-id)")
    return plan


def resumed_spec(plan: Mapping[str, Any], given: Mapping[str, Any]) -> JobSpec:
    """The run's spec, checked against what was ``given`` with ``--resume`` (spec-file fields
    from a spec file and flags, as :func:`~orchestrator.spec.loader.build_spec` takes them);
    only :data:`CHANGEABLE` fields may differ.

    Raises:
        SpecError: naming the first field given that differs from the run's.
    """
    original = plan["spec"]
    if isinstance(original.get("workers"), Mapping) and isinstance(given.get("workers"), int):
        given = {**given, "workers": {"start": given["workers"]}}  # elastic: continue at another size
    spec = build_spec(original, given)
    before, after = _flatten(original), _flatten(spec_fields(spec))
    for name in sorted(set(before) | set(after)):
        if name not in CHANGEABLE and before.get(name) != after.get(name):
            raise SpecError(name, after.get(name), f"differs from the resumed run's {before.get(name)!r}",
                            "a resumed run keeps its spec (only --deadline may change): drop the flag, "
                            "or launch a new run")
    return spec


def check_program(plan: Mapping[str, Any], commands: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]] | None:
    """The run's own program (None: the built-in one); a program given with ``--resume`` must be it.

    Raises:
        SpecError: naming ``--`` when the program given differs.
    """
    program = plan.get("program")
    original = {t: list(program) for t in ("chief", "worker", "ps", "evaluator")} if program else None
    if commands is not None and {t: list(v) for t, v in commands.items()} != original:
        shown = " ".join(program) if program else "the built-in program"
        raise SpecError("--", " ".join(next(iter(commands.values()))),
                        f"differs from the resumed run's program ({shown})",
                        "resume without a program (the run's own is used), or launch a new run")
    return original


def carried_over(run_dir: RunDir) -> Carried:
    """What the next life takes over (``run.json``); attempt numbers count on past every attempt
    directory on disk (an orchestrator killed outright may have started one it never recorded)."""
    carried = Carried.from_record(read_json(run_dir.record) or {})
    on_disk = run_dir.attempts()
    floor = (on_disk[-1] + 1) if on_disk else 0
    next_attempt = {name: max(n, floor) for name, n in carried.next_attempt.items()}
    plan = read_json(run_dir.plan) or {}
    for task in plan.get("tasks") or []:
        name = str(task.get("task", "")).replace(":", "-")
        next_attempt.setdefault(name, floor)
    return dataclasses.replace(carried, next_attempt=next_attempt)


def resized_spec(plan: Mapping[str, Any], workers: int) -> JobSpec:
    """The run's spec (``plan.json``'s) at ``workers`` workers: what ``resize RUN --workers N``
    asks of a running job, checked as ``launch --resume RUN --workers N`` is (:func:`resumed_spec`).

    Raises:
        SpecError: naming ``workers``: the run's workers are not elastic, ``workers`` is outside
            its MIN..MAX, the size it runs at now, or a size its batch policy refuses.
    """
    original = plan["spec"]
    bounds = original.get("workers")
    if not isinstance(bounds, Mapping):
        raise SpecError("workers", workers, f"the run's workers are a fixed count ({bounds}), not elastic",
                        "only a run launched with --workers MIN:MAX can be resized")
    if not isinstance(workers, int) or isinstance(workers, bool) or not bounds["min"] <= workers <= bounds["max"]:
        raise SpecError("workers", workers, f"outside the job's elastic range {bounds['min']}..{bounds['max']}",
                        f"use a size in {bounds['min']}..{bounds['max']}")
    return resumed_spec(plan, {"workers": workers})
