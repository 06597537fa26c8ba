"""``run.json``: the record of a run that a later life resumes from (:mod:`~orchestrator.supervisor.records.lives`)."""

from __future__ import annotations

from typing import Any

from orchestrator.supervisor.loop import Supervisor
from orchestrator.supervisor.records import lives as lifelog


def run_record(sup: Supervisor) -> dict[str, Any]:
    """``run.json`` for the supervisor's run as it stands now (what
    :meth:`~orchestrator.supervisor.records.lives.Carried.from_record` reads back): a running task's next
    attempt is the one after its current one."""
    next_attempt = {rt.task.name: rt.current.number + (1 if rt.current.process is not None else 0)
                    for rt in sup.tasks}
    failures = [dict(f) for f in sup.carried.failures] + [f.to_dict() for f in sup.failures]
    return lifelog.record_dict(sup.plan.run_id, sup.lives.lives(), restarts_used=sup.restarts_used,
                       next_attempt=next_attempt, task_restarts={rt.task.name: rt.restarts for rt in sup.tasks},
                       failures=failures, status=sup.state.value)
