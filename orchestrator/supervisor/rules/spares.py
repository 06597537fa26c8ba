"""Which warm spares a job keeps: stand-ins for its trainers, started once it trains.

A spare is an interpreter that has already imported what a trainer's start would (TensorFlow,
the built-in program, the health client) and waits to be handed a task's attempt
(:mod:`orchestrator.task.spare`; for a user's Python program, the spare mode of
:mod:`orchestrator.task.execwrap`). The count is :func:`~orchestrator.supervisor.rules.decisions.spare_count`.
"""

from __future__ import annotations

from orchestrator.backends.base import SpareRequest
from orchestrator.plan import SPARE_PRELOAD, Plan, user_spare
from orchestrator.resources.gpus import VISIBLE_ENV
from orchestrator.rundir import RunDir
from orchestrator.supervisor.rules import decisions

_PER_TASK_ENV = ("TF_CONFIG", "ORCH_FAULTS")


def spare_request(plan: Plan) -> SpareRequest | None:
    """The warm spares ``plan`` keeps once it trains, None for none (elastic workers: what a
    group at MAX needs, whatever the size now): every trainer must run the same command (a spare
    cannot know which task it will become); the job's common environment, without the per-task
    variables, is the spares' environment."""
    spec = plan.spec
    trainers = [plan.task_plan(t) for t in spec.trainers()]
    if not trainers:
        return None
    first = trainers[0]
    if any(tp.argv != first.argv for tp in trainers):
        return None
    builtin = first.reports_heartbeats
    # elastic workers: as many as the group at MAX, so a grow back starts warm too (docs/elastic.md)
    group = len(trainers) if spec.elastic is None else spec.chief + spec.elastic.max
    count = decisions.spare_count(spec.strategy, group, spec.supervision.spares, builtin)
    if count <= 0:
        return None
    common = {k: v for k, v in first.env.items() if k not in _PER_TASK_ENV}
    if VISIBLE_ENV in common:  # a waiting spare holds no device; it takes the task's own when assigned
        common[VISIBLE_ENV] = ""
    log_dir = RunDir(plan.run_dir).spares
    if not builtin:  # a user's Python program (opt-in, --spares N): execwrap's spare mode
        spare = user_spare(first.argv, common)
        if spare is None:
            return None
        command, preload = spare
        return SpareRequest(count=count, argv=first.argv, env=common, preload=preload, log_dir=log_dir,
                            command=command)
    if not first.module:
        return None
    return SpareRequest(count=count, argv=first.argv, env=common, preload=SPARE_PRELOAD.get(first.module, ()),
                        log_dir=log_dir)
