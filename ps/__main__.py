"""``python -m ps``: entrypoint of parameter-server tasks."""

from orchestrator.env import bench_mark

bench_mark("task-main")  # bench/timeline.py: this task's interpreter is up

from orchestrator.resources.pinning import resolve_early  # noqa: E402

resolve_early()  # a Slurm node share -> this task's cores; pinned once TensorFlow is imported

from orchestrator.task.runtime import run_task  # noqa: E402
from ps.server import serve  # noqa: E402

raise SystemExit(run_task(serve))
