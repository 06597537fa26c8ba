"""``python -m orchestrator.task.keeper``: heartbeats for a task that an injected ``hang`` froze.

A ``hang`` fired off a task's main thread (a ps or a PSS worker in ``server.join()``, an
evaluator, a ``hang@time=S`` timer) cannot block the task's work by blocking a thread: TF's
in-process ``tf.distribute.Server`` serves from threads of its own, and a blocked timer blocks
only itself. So the task starts this keeper, waits until the keeper's first heartbeat went out,
and SIGSTOPs itself (:func:`orchestrator.task.faults.freeze`): its work stops (a ps stops
serving, an evaluator stops evaluating, a trainer stops stepping) while the keeper sends the
heartbeats the task sent last (its phase, step, loss; ``ORCH_KEEPER_FIELDS``), so the
orchestrator sees what a hang is, a live task that makes no progress, not a frozen one.

The keeper dies with the task (``PR_SET_PDEATHSIG`` on its parent): the orchestrator's kill of
the hung task ends both. It prints ``keeper: heartbeating`` on stdout once its first heartbeat
went out (the task reads it from a pipe).
"""

from __future__ import annotations

import json
import os
import signal

from orchestrator import env
from orchestrator.task.context import TaskContext
from orchestrator.task.lifetime import die_with_orchestrator


def main() -> int:
    die_with_orchestrator(os.getppid())  # dies with the frozen task
    from orchestrator.task.reporter import HeartbeatReporter

    context = TaskContext.from_env()
    reporter = HeartbeatReporter(context.health_address, context.token, context.task_type, context.task_index,
                                 context.attempt, context.heartbeat_interval_s, 0, 0.0, context.tls_dir)
    fields = json.loads(env.read(env.KEEPER_FIELDS) or "{}")
    phase, message = fields.pop("phase", None), fields.pop("message", None)
    values: dict[str, float] = {k: v for k, v in fields.items() if isinstance(v, (int, float))}
    rejoined = fields.get("rejoined")
    reporter.update(phase=phase, message=message, now=True,
                    rejoined=rejoined if isinstance(rejoined, dict) else None, **values)
    reporter.start()
    reporter.flush(10.0)
    print("keeper: heartbeating", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    raise SystemExit(main())
