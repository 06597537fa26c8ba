"""``python -m worker``: entrypoint of chief and worker tasks."""

from orchestrator.task.runtime import run_task
from worker.train import train

raise SystemExit(run_task(train))
