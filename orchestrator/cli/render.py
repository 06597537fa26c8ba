"""``python -m orchestrator render``: every task's TF_CONFIG from a spec, for processes you start yourself.

Addresses come from the spec's ``addresses``; without them, from ``--host`` (one host
for every task on consecutive ports from ``--base-port``, or one host per task in task
order, all on ``--base-port``). Nothing is started and nothing is bound: any host works.
``localhost`` is written ``127.0.0.1``, as ``launch`` does (tensorflow#19900).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

import yaml

from orchestrator.cli.specflags import add_spec_flags, spec_from_flags
from orchestrator.errors import SpecError
from orchestrator.render.elastic import bounds_not_rendered
from orchestrator.render.jobset import jobset_manifest
from orchestrator.render.kubernetes import tfjob_manifest, with_queue
from orchestrator.render.networkpolicy import network_policy
from orchestrator.render.secret import MOUNT_PATH, create_command, default_secret, with_tls_secret
from orchestrator.spec.address import check_addresses, localhost_as_ipv4
from orchestrator.spec.model import JobSpec, TaskId
from orchestrator.spec.tfconfig import cluster_spec, tf_config, tf_config_json

FORMATS = ("json", "env", "tf-config", "tfjob", "jobset")
KUBERNETES_FORMATS = ("tfjob", "jobset")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 2222


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "render",
        help="print every task's TF_CONFIG for processes you start yourself",
        description="Render the TF_CONFIG of every task (or one, --task) from a cluster spec file and/or flags. "
        "Formats: json (everything, default), env (export TF_CONFIG='...' lines for a shell), "
        "tf-config (the bare compact JSON, one task per line), tfjob (a Kubeflow TFJob manifest for Kubernetes "
        "with the training operator: needs --image), jobset (a JobSet manifest for Kubernetes with JobSet, "
        "e.g. under Kubeflow Trainer v2: needs --image). Exit codes: 0 ok, 2 bad input.",
    )
    add_spec_flags(p)
    p.add_argument("--host", action="append", default=None, metavar="HOST",
                   help="host of every task (once) or of each task in order chief, workers, ps, evaluator "
                   "(repeat); only without addresses in the spec (default 127.0.0.1)")
    p.add_argument("--base-port", type=int, default=None,
                   help=f"first port; tasks sharing a host take consecutive ports (default {DEFAULT_PORT})")
    p.add_argument("--task", default=None, metavar="TYPE:INDEX", help="only this task, e.g. worker:1")
    p.add_argument("--format", choices=FORMATS, default="json", help="json (default), env, tf-config, tfjob or jobset")
    k8s = p.add_argument_group("--format tfjob / jobset (Kubernetes: Kubeflow's training operator / JobSet)")
    k8s.add_argument("--image", default=None, help="the project image, pullable by the cluster")
    k8s.add_argument("--name", default="tf-orchestrator-job",
                     help="TFJob / JobSet name, a DNS label (default tf-orchestrator-job)")
    k8s.add_argument("--volume-claim", default=None, metavar="PVC",
                     help="ReadWriteMany claim mounted at /runs for checkpoints and the model")
    k8s.add_argument("--cpu", default=None, metavar="QUANTITY",
                     help="CPU of every pod, requests = limits (a Kubernetes quantity: 2, 500m)")
    k8s.add_argument("--memory", default=None, metavar="QUANTITY", dest="pod_memory",  # not containers.memory
                     help="memory of every pod, requests = limits (a Kubernetes quantity: 4Gi, 512Mi; default: the "
                     "spec file's containers.memory, else unset)")
    k8s.add_argument("--shm-size", default=None, metavar="SIZE",
                     help="each pod's /dev/shm: a memory-backed emptyDir with this sizeLimit (default: the spec "
                     "file's containers.shm_size, else 1Gi; it counts against the pod's memory)")
    k8s.add_argument("--queue", default=None, metavar="NAME",
                     help="label the manifest for Kueue's LocalQueue NAME (kueue.x-k8s.io/queue-name): Kueue admits "
                     "the whole job when its quota allows (docs/several-jobs.md)")
    k8s.add_argument("--isolate-network", action="store_true", default=None,
                     help="also a NetworkPolicy admitting to the job's pods only the job's own pods (TensorFlow's "
                     "ports answer anyone otherwise; docs/security.md)")
    k8s.add_argument("--tls-secret", default=None, metavar="NAME",
                     help="the Secret every pod mounts its certificates from, read-only at "
                     f"{MOUNT_PATH} (ORCH_TLS_DIR; default <name>-tls; docs/security.md)")
    k8s.add_argument("--tls-out", default=None, metavar="DIR",
                     help="write the job's certificates into DIR (new or empty) for: kubectl create secret generic "
                     "NAME --from-file=DIR")
    k8s.add_argument("--insecure", action="store_true", default=None,
                     help="no certificates and no Secret")
    p.set_defaults(func=run_render)


def addresses_for(spec: JobSpec, hosts: list[str] | None, base_port: int | None) -> dict[TaskId, str]:
    """The spec's fixed addresses, or addresses built from ``--host`` / ``--base-port``.

    Raises:
        SpecError: flags given together with fixed addresses, a host count that fits
            neither rule, a bad host or port.
    """
    tasks = spec.tasks()
    if spec.addresses:
        if hosts or base_port is not None:
            raise SpecError("host" if hosts else "base-port", hosts or base_port,
                            "the spec already fixes every address",
                            "drop --host/--base-port, or the spec's addresses")
        return {t: localhost_as_ipv4(spec.addresses[t], f"addresses.{t.task_type}[{t.task_index}]") for t in tasks}
    hosts = hosts or [DEFAULT_HOST]
    for host in hosts:
        if "," in host:
            raise SpecError("host", host, "TF1 comma-separated hosts: one host per --host",
                            "repeat the flag: " + " ".join(f"--host {h.strip()}" for h in host.split(",") if h.strip()))
    port = DEFAULT_PORT if base_port is None else base_port
    last = port + (len(tasks) - 1 if len(hosts) == 1 else 0)
    if not (1 <= port and last <= 65535):
        raise SpecError("base-port", base_port, f"ports {port}..{last} are not all in 1..65535",
                        "e.g. --base-port 2222")
    if len(hosts) == 1:
        out = {t: _join(hosts[0], port + i) for i, t in enumerate(tasks)}
    elif len(hosts) == len(tasks):
        out = {t: _join(h, port) for t, h in zip(tasks, hosts)}
    else:
        raise SpecError("host", hosts, f"{len(hosts)} hosts for {len(tasks)} tasks ({', '.join(map(str, tasks))})",
                        "give one --host for every task, or one per task in that order")
    fields = {f"host[{i}]" if len(hosts) > 1 else "host": t for i, t in enumerate(tasks)}
    check_addresses((f, out[t]) for f, t in fields.items())
    return {t: localhost_as_ipv4(a) for t, a in out.items()}


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def render(spec: JobSpec, addresses: dict[TaskId, str], fmt: str, only: TaskId | None = None) -> str:
    """The text ``render`` prints (pure)."""
    tasks = [only] if only else spec.tasks()
    if fmt == "json":
        if only:
            return json.dumps(tf_config(addresses, only), indent=2)
        return json.dumps({
            "strategy": spec.strategy.value,
            "cluster": cluster_spec(addresses),
            "tasks": {str(t): {"address": addresses[t], "TF_CONFIG": tf_config(addresses, t)} for t in tasks},
        }, indent=2)
    lines = []
    for t in tasks:
        if fmt == "tf-config":
            lines.append(tf_config_json(addresses, t))
            continue
        if not only:
            lines.append(f"# {t} on {addresses[t]}")
        lines.append("export TF_CONFIG=" + shlex.quote(tf_config_json(addresses, t)))
    return "\n".join(lines)


class _ManifestDumper(yaml.SafeDumper):
    """Block style, except lists of numbers (a Job's exit codes) on one wrapped line."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = bool(data) and all(isinstance(x, int) and not isinstance(x, bool) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_ManifestDumper.add_representer(list, _represent_list)


def manifest_yaml(manifest: dict) -> str:
    """A Kubernetes manifest as YAML, keys in the order written (no aliases: every list is the pod's own)."""
    return yaml.dump(manifest, Dumper=_ManifestDumper, sort_keys=False, width=120)


def run_render(args: argparse.Namespace) -> int:
    """Run ``render``. Returns 0 (bad input raises SpecError: exit 2)."""
    spec = spec_from_flags(args)
    only = TaskId.parse(args.task, "task") if args.task else None
    if only and only not in spec.tasks():
        raise SpecError("task", args.task, "the job has no such task",
                        "use one of: " + ", ".join(map(str, spec.tasks())))
    if args.format in KUBERNETES_FORMATS:
        if only or args.host or args.base_port is not None:
            raise SpecError("format", args.format, "Kubernetes assigns addresses and every task is rendered",
                            "drop --task/--host/--base-port")
        build = tfjob_manifest if args.format == "tfjob" else jobset_manifest
        manifest = build(spec, name=args.name, image=args.image or "", volume_claim=args.volume_claim,
                         cpu=args.cpu, memory=args.pod_memory)  # /dev/shm: spec.containers, --shm-size on top
        if args.queue is not None:
            manifest = with_queue(manifest, args.queue)
        secret = _tls_secret(args)
        if secret is not None:
            manifest = with_tls_secret(manifest, secret)
            _tls_files(spec, args, secret)
        print(manifest_yaml(manifest), end="")
        note = bounds_not_rendered(spec, args.format)  # no engine has a field for them (render/elastic.py)
        if note is not None:
            print(note, file=sys.stderr)
        if args.isolate_network:
            print("---\n" + manifest_yaml(network_policy(args.name, args.format)), end="")
        return 0
    for flag in ("image", "volume_claim", "cpu", "pod_memory", "shm_size", "queue", "isolate_network", "tls_secret",
                 "tls_out", "insecure"):
        if getattr(args, flag) is not None:
            raise SpecError(flag.removeprefix("pod_").replace("_", "-"), getattr(args, flag),
                            "only for --format tfjob or jobset", "drop it, or add --format jobset")
    addresses = addresses_for(spec, args.host, args.base_port)
    print(render(spec, addresses, args.format, only))
    return 0


def _tls_secret(args: argparse.Namespace) -> str | None:
    """The Secret the pods mount (``--tls-secret``, default ``<name>-tls``); None with ``--insecure``.

    Raises:
        SpecError: ``--insecure`` with ``--tls-secret`` or ``--tls-out``.
    """
    if not args.insecure:
        return args.tls_secret or default_secret(args.name)
    for flag in ("tls_secret", "tls_out"):
        if getattr(args, flag) is not None:
            raise SpecError(flag.replace("_", "-"), getattr(args, flag), "--insecure renders no certificates",
                            f"drop --{flag.replace('_', '-')} or --insecure")
    print("warning: --insecure: the pods get no certificates and mount no Secret", file=sys.stderr)
    return None


def _tls_files(spec: JobSpec, args: argparse.Namespace, secret: str) -> None:
    """Write ``--tls-out``'s certificates, then say on stderr how to make the Secret (or how to
    get the files, without ``--tls-out``).

    Raises:
        SpecError: ``--tls-out`` names a folder with files in it, or one that cannot be written.
    """
    if args.tls_out is None:
        print(f"note: the pods mount the Secret {secret} (the job's certificates): render again with --tls-out DIR "
              f"to write them, then {create_command(secret, 'DIR')}; or --insecure for none", file=sys.stderr)
        return
    from orchestrator.tls import make_secret_files

    try:
        make_secret_files(args.tls_out, args.name, [t.name for t in spec.tasks()])
    except FileExistsError:
        raise SpecError("tls-out", args.tls_out, "has files already, and every file in it would join the Secret",
                        "give a new or empty folder") from None
    except OSError as exc:
        raise SpecError("tls-out", args.tls_out, f"cannot be written ({exc.strerror})", "give a writable folder") \
            from None
    print(f"wrote the job's certificates to {args.tls_out} (the endpoint's own in {args.tls_out}/endpoint); "
          f"before kubectl apply, in the job's namespace: {create_command(secret, args.tls_out)}", file=sys.stderr)
