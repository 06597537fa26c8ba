"""``python -m ps``: entrypoint of parameter-server tasks."""

from orchestrator.task.runtime import run_task
from ps.server import serve

raise SystemExit(run_task(serve))
