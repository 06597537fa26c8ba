"""``python -m orchestrator compose``: the job as a Docker Compose file (nothing is started)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.backends.image import default_base_image
from orchestrator.cli.backend import add_backend_arguments
from orchestrator.cli.specflags import add_data_service_flags, add_gpu_flags, spec_from_flags
from orchestrator.errors import SpecError
from orchestrator.render.compose import (
    DEFAULT_HEALTH_ADDRESS,
    dump_compose,
    relative_context,
    render_compose,
    up_command,
)
from orchestrator.resources.gpus import discover
from orchestrator.spec.model import JobSpec


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compose",
        help="render the job as a Docker Compose file: one service per task",
        description="Write a Compose file with one service per task (TF_CONFIG from service names, a private "
        "network, a volume for checkpoints and the model, a gRPC healthcheck per service). Run it with "
        "`docker compose up --abort-on-container-exit --exit-code-from worker-0` (the chief-0 with one).",
    )
    p.add_argument("spec", nargs="?", metavar="SPEC",
                   help="cluster spec file (YAML or JSON); flags override its fields")
    topo = p.add_argument_group("topology")
    topo.add_argument("--strategy", default=None, help="multi_worker_mirrored (default) or parameter_server")
    topo.add_argument("--workers", type=int, default=None, help="worker tasks (default 4; 2 with parameter_server)")
    topo.add_argument("--ps", type=int, default=None, help="parameter-server tasks (parameter_server only; default 1)")
    topo.add_argument("--chief", action="store_true", default=None, help="add a chief task")
    add_data_service_flags(topo)
    train = p.add_argument_group("training (built-in program)")
    train.add_argument("--epochs", type=int, default=None, help="epochs (default 10)")
    train.add_argument("--batch-size", type=int, default=None, dest="batch_size", help="per replica")
    train.add_argument("--steps-per-epoch", type=int, default=None, help="default: train examples / global batch")
    train.add_argument("--learning-rate", type=float, default=None, help="Adam learning rate (default 0.005)")
    train.add_argument("--seed", type=int, default=None, help="seed of the split and initial weights (default 0)")
    run = p.add_argument_group("run")
    add_gpu_flags(p.add_argument_group("GPUs (docs/gpus.md)"))
    run.add_argument("--threads-per-task", type=int, default=None,
                     help="TF intra-op threads per task (default cores / tasks)")
    run.add_argument("--heartbeat-interval", type=float, default=None, help="seconds between heartbeats (default 1)")
    run.add_argument("--health-address", default=DEFAULT_HEALTH_ADDRESS,
                     help=f"the orchestrator's health endpoint as the containers reach it "
                     f"(default {DEFAULT_HEALTH_ADDRESS}; "
                     "tasks run without one)")
    run.add_argument("--stop-timeout", type=float, default=10.0, help="seconds from SIGTERM to SIGKILL (default 10)")
    add_backend_arguments(p, with_backend=False)
    p.add_argument("-o", "--output", default="docker-compose.yml",
                   help="file to write, - for stdout (default docker-compose.yml)")
    p.set_defaults(func=run_compose)


def spec_from_args(args: argparse.Namespace) -> JobSpec:
    """The job spec from SPEC (if given) and the flags given explicitly on top.

    Raises:
        SpecError: naming the bad flag or field.
    """
    return spec_from_flags(args)


def run_compose(args: argparse.Namespace) -> int:
    """Write the Compose file. Returns 0 (2 for bad input, raised as SpecError)."""
    spec = spec_from_args(args)
    if args.stop_timeout <= 0:
        raise SpecError("stop-timeout", args.stop_timeout, "must be > 0 seconds", "e.g. --stop-timeout 10")
    if ":" not in args.health_address:
        raise SpecError("health-address", args.health_address, "must be HOST:PORT", f"e.g. {DEFAULT_HEALTH_ADDRESS}")
    if spec.addresses:
        print("note: the spec's addresses are replaced by service names (worker-0:2222) in containers", file=sys.stderr)
    to_stdout = args.output == "-"
    context = None if args.image or to_stdout else relative_context(args.output)
    inventory = discover()
    document = render_compose(spec, image=args.image, base_image=args.base_image or default_base_image(),
                              build_context=context, health_address=args.health_address, stop_grace_s=args.stop_timeout,
                              inventory=inventory)  # shm_size, mem_limit: spec.containers (--shm-size, --memory on top)
    if any(count for count in spec.gpus_per_task.values()) and not inventory.gpus:
        print(f"note: {inventory.describe()} here, so each service reserves a count of GPUs: the engine gives "
              "every service the first devices it finds; on the GPU machine, render the file there for disjoint "
              "devices by UUID", file=sys.stderr)
    text = dump_compose(document, spec, "docker-compose.yml" if to_stdout else args.output)
    if to_stdout:
        sys.stdout.write(text)
        return 0
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {len(document['services'])} services ({', '.join(document['services'])})\n"
          f"run it: {up_command(spec, args.output)}")
    return 0
