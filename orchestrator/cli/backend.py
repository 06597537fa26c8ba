"""``--backend`` and the docker backend's options, shared by ``launch`` (and ``compose``)."""

from __future__ import annotations

import argparse
import sys

from orchestrator.backends import BACKENDS


def add_backend_arguments(parser: argparse.ArgumentParser, *, with_backend: bool = True) -> None:
    """Add ``--backend`` (optional) and the image options of the docker backend."""
    group = parser.add_argument_group("backend")
    if with_backend:
        group.add_argument("--backend", default="local", choices=sorted(BACKENDS),
                           help="local: one process per task (default); docker: one container per task "
                           "on a private network (needs a Docker engine and pip install -e '.[docker]'); slurm: one "
                           "job step per task inside a Slurm allocation (run under salloc or sbatch)")
    group.add_argument("--image", default=None,
                       help="docker: image to run as it is (default: the project image, built from docker/Dockerfile "
                       "when missing, tagged by the hash of its files)")
    group.add_argument("--base-image", default=None,
                       help="docker: base of the project image (default $ORCH_DOCKER_BASE_IMAGE or python:3.11-slim)")
    group.add_argument("--tasks-per-node", type=int, default=None, metavar="N",
                       help="slurm: most tasks on one node (default: one per node when there are enough nodes, "
                       "else as few as fit)")
    group.add_argument("--health-host", default=None, metavar="ADDRESS",
                       help="slurm: this machine's address the nodes reach the health endpoint at (default: the "
                       "source address of the route to the first node; never a wildcard)")


def backend_options(args: argparse.Namespace) -> dict:
    """Options for :func:`orchestrator.backends.get_backend` from the parsed flags."""
    backend = getattr(args, "backend", "local")
    if backend == "slurm":
        return {"tasks_per_node": args.tasks_per_node, "health_host": args.health_host}
    if backend != "docker":
        return {}

    def progress(line: str) -> None:
        print(f"[image] {line}", file=sys.stderr, flush=True)

    return {"image": args.image, "base_image": args.base_image, "progress": progress}
