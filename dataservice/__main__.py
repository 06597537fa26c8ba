"""``python -m dataservice``: entrypoint of the tf.data service's dispatcher and data workers."""

from orchestrator.env import bench_mark

bench_mark("task-main")  # bench/timeline.py: this task's interpreter is up

from orchestrator.resources.pinning import resolve_early  # noqa: E402

resolve_early()  # a Slurm node share -> this task's cores; pinned once TensorFlow is imported

from dataservice.server import serve  # noqa: E402
from orchestrator.task.runtime import run_task  # noqa: E402

raise SystemExit(run_task(serve))
