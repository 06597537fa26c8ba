"""Flags shared by ``render`` and ``doctor``: a spec file and the topology flags that override it."""

from __future__ import annotations

import argparse

from orchestrator.errors import SpecError
from orchestrator.spec.elastic import parse_workers
from orchestrator.spec.loader import build_spec, overrides_from_flags, read_spec_file
from orchestrator.spec.model import JobSpec


def add_spec_flags(p: argparse.ArgumentParser) -> None:
    """``--spec FILE`` plus ``--strategy/--workers/--ps/--chief/--evaluator`` (default None: not given)."""
    p.add_argument("--spec", metavar="FILE", default=None,
                   help="cluster spec file (YAML or JSON, see cluster_specs/); the flags below override its fields")
    topo = p.add_argument_group("topology (without --spec: what launch would run)")
    topo.add_argument("--strategy", default=None, help="multi_worker_mirrored (default) or parameter_server")
    topo.add_argument("--workers", type=workers_arg, default=None, metavar="N|MIN:MAX",
                      help="worker tasks (default 4; 2 with parameter_server); MIN:MAX: elastic workers, at MAX "
                      "(docs/elastic.md)")
    topo.add_argument("--ps", type=int, default=None, help="parameter-server tasks (parameter_server only; default 1)")
    topo.add_argument("--chief", action="store_true", default=None, help="add a chief task")
    topo.add_argument("--evaluator", action="store_const", const=1, default=None, help="add an evaluator task")
    add_data_service_flags(topo)
    add_gpu_flags(p.add_argument_group("GPUs (docs/gpus.md)"))


def workers_arg(text: str) -> int | dict:
    """``--workers``: a count, or ``MIN:MAX`` (:func:`orchestrator.spec.elastic.parse_workers`); argparse's
    one-line refusal otherwise."""
    try:
        return parse_workers(text)  # type: ignore[return-value]
    except SpecError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (give N or MIN:MAX)") from None


def add_data_service_flags(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """``--data-service N`` and ``--data-service-sharding`` (docs/data-service.md)."""
    group.add_argument("--data-service", type=int, default=None, metavar="N", dest="data_service",
                       help="read the input through a tf.data service: one dispatcher and N data workers, started "
                            "before the trainers, restarted alone, stopped at the end (multi_worker_mirrored and "
                            "parameter_server only; docs/data-service.md)")
    group.add_argument("--data-service-sharding", choices=("off", "dynamic"), default=None,
                       dest="data_service_sharding",
                       help="the service's sharding policy: dynamic (default: the dispatcher hands out splits) or off")


def add_gpu_flags(group: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """``--gpus-per-task N`` and ``--share-gpus`` (docs/gpus.md)."""
    group.add_argument("--gpus-per-task", type=int, default=None, metavar="N",
                       help="GPUs of each chief and worker task (disjoint devices by UUID; default: the node's GPUs "
                            "split evenly; ps and evaluator get none unless the spec file's gpus_per_task names them)")
    group.add_argument("--share-gpus", action="store_true", default=None,
                       help="let tasks share devices, with memory growth on (TF_FORCE_GPU_ALLOW_GROWTH=true)")


def spec_from_flags(args: argparse.Namespace) -> JobSpec:
    """The validated spec: ``--spec`` file (if any) with the given flags on top.

    Raises:
        SpecError: naming the bad flag or field.
    """
    raw = read_spec_file(args.spec) if args.spec else {}
    return build_spec(raw, overrides_from_flags(args))
