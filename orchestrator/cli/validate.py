"""``python -m orchestrator validate``: check spec files, TF_CONFIGs and cluster specs without starting anything.

Each input is recognised by its shape: a TF_CONFIG (``cluster`` / ``task`` keys, or TF1's
``ps_hosts`` / ``worker_hosts``), a bare cluster spec (task types -> lists of addresses),
or a cluster spec file of this orchestrator. Several TF_CONFIGs are also checked against
each other (one cluster, each task once). The first problem is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import os
from typing import Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.loader import build_spec, check_spec_mapping, read_document
from orchestrator.spec.model import TASK_TYPES, JobSpec
from orchestrator.spec.validate import (
    TF1_HOST_FLAGS,
    TF1_NAMES,
    ClusterReport,
    check_cluster,
    check_consistent,
    check_tf_config,
    parse_json,
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "validate",
        help="check spec files, TF_CONFIGs and cluster specs (nothing is started)",
        description="Check cluster spec files (YAML/JSON), TF_CONFIG files or strings, and bare cluster specs. "
        "Without inputs, checks $TF_CONFIG. Exit codes: 0 all valid, 2 the first problem (one line on stderr).",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="spec files, TF_CONFIG files or cluster spec files")
    p.add_argument("--tf-config", action="append", default=[], metavar="JSON", help="a TF_CONFIG string (repeatable)")
    p.add_argument("--env", action="store_true", help="check the TF_CONFIG environment variable too")
    p.add_argument("--strategy", default=None,
                   help="the strategy the TF_CONFIGs are meant for (default: parameter_server if there is a ps)")
    p.set_defaults(func=run_validate)


def kind_of(document: object) -> str:
    """``tf_config``, ``cluster`` or ``spec``: what a parsed document is, by its shape."""
    if isinstance(document, Mapping):
        keys = set(document)
        if keys & {"cluster", "task"} or keys & set(TF1_HOST_FLAGS):
            return "tf_config"
        cluster_keys = set(TASK_TYPES) | set(TF1_NAMES)
        if keys and keys <= cluster_keys and not any(isinstance(v, (int, float)) for v in document.values()):
            return "cluster"
    return "spec"


def describe_spec(spec: JobSpec) -> str:
    tasks = ", ".join(f"{t} {spec.count(t)}" for t in TASK_TYPES if spec.count(t))
    where = "fixed addresses" if spec.addresses else "addresses chosen at launch"
    return f"spec: {spec.strategy.value}, {tasks} ({len(spec.tasks())} tasks), {where}"


def check_input(name: str, document: object, strategy: str | None) -> tuple[str, ClusterReport | JobSpec]:
    """Check one parsed input; SpecErrors name the input. Returns (kind, result)."""
    kind = kind_of(document)
    try:
        if kind == "tf_config":
            return kind, check_tf_config(document, strategy)
        if kind == "cluster":
            return kind, check_cluster(document, "cluster", strategy)
        return kind, build_spec(check_spec_mapping(document, name))
    except SpecError as exc:
        raise SpecError(f"{name}: {exc.field}", exc.value, exc.problem, exc.fix) from None


def run_validate(args: argparse.Namespace) -> int:
    """Run ``validate``. Returns 0; the first problem raises SpecError (exit 2)."""
    inputs: list[tuple[str, object]] = [(path, read_document(path, "file")) for path in args.files]
    inputs += [(f"--tf-config #{i + 1}", parse_json(text, "tf-config")) for i, text in enumerate(args.tf_config)]
    if args.env or not inputs:
        if "TF_CONFIG" not in os.environ:
            raise SpecError("TF_CONFIG", None, "nothing to validate: no FILE, no --tf-config and $TF_CONFIG is not set",
                            "e.g. python -m orchestrator validate cluster_specs/mwms-4-workers.yaml")
        inputs.append(("$TF_CONFIG", parse_json(os.environ["TF_CONFIG"], "TF_CONFIG")))
    tf_configs: dict[str, ClusterReport] = {}
    lines = []
    for name, document in inputs:
        kind, result = check_input(name, document, args.strategy)
        if kind == "tf_config":
            tf_configs[name] = result  # type: ignore[assignment]
        text = describe_spec(result) if isinstance(result, JobSpec) else result.describe()
        lines.append(f"ok  {name}: {text}")
    if len(tf_configs) > 1:
        check_consistent(tf_configs)
        lines.append(f"ok  {len(tf_configs)} TF_CONFIGs agree on the cluster and name different tasks")
    print("\n".join(lines))
    return 0
