"""``python -m orchestrator doctor``: can this machine run the job? Checked before anything starts.

TensorFlow and tf-keras are checked without importing them in the orchestrator process:
versions through ``importlib.metadata``, and one real import in a subprocess configured
like a task (``TF_USE_LEGACY_KERAS=1``), which also confirms ``tf.keras`` is tf-keras.
Memory and cores come from psutil and the process's CPU affinity; GPUs and the driver from NVML
(:mod:`orchestrator.resources.gpus`), and whether a task's TensorFlow sees them from
``tf.config.list_physical_devices("GPU")`` in a subprocess given one device as a task is.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from orchestrator import jsontext
from orchestrator.backends.host import TASK_RSS_BYTES  # one estimate for doctor and launch
from orchestrator.backends.ports import port_range
from orchestrator.cli.specflags import add_spec_flags, spec_from_flags
from orchestrator.plan import available_cores
from orchestrator.spec.address import parse_address
from orchestrator.spec.model import TASK_TYPES, JobSpec

MIN_FREE_DISK_BYTES = 2**30
IMPORT_TIMEOUT_S = 120.0
DISTRIBUTION = "tf-cluster-orchestrator"

_IMPORT_PROBE = """
import importlib, json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
t = time.monotonic()
tf = importlib.import_module("tensorflow")  # in the probe subprocess, never in the orchestrator
tf_keras = importlib.import_module("tf_keras")
print(json.dumps({"import_s": time.monotonic() - t, "tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
                  "tf_keras_is_tf_keras": tf.keras.__name__.startswith("tf_keras")
                  or tf.keras.__version__.startswith("2."),
                  "cpus": len(tf.config.list_physical_devices("CPU"))}))
"""


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report. ``status`` is ok, warn or FAIL; ``fix`` says what to do."""

    status: str
    name: str
    detail: str
    fix: str = ""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check that this machine can run the job (TF / tf-keras, memory, cores, ports)",
        description="Check Python, TensorFlow and tf-keras (versions, and a real import in a subprocess), memory, "
        "cores, disk and the job's fixed ports, for a spec file and/or topology flags. "
        "Exit codes: 0 ready (warnings allowed), 1 a check failed, 2 bad input.",
    )
    add_spec_flags(p)
    p.add_argument("--runs-dir", default="runs", help="where run directories go, for the disk check (default ./runs)")
    p.add_argument("--quick", action="store_true", help="skip the TensorFlow import in a subprocess (~4 s)")
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument("--exposure", nargs="?", const="", default=None, metavar="RUN",
                   help="instead of the checks: every address from which a running job's TensorFlow ports are "
                   "reachable (RUN: a run id or directory; default the latest run); exit 1 when one answers outside "
                   "loopback")
    p.set_defaults(func=run_doctor)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def _satisfies(version: str, requirement: str) -> bool:
    """``2.21.0`` against ``tensorflow<2.22,>=2.21`` (only >=, <, ==, <=, > are used here)."""
    spec = re.sub(r"^[A-Za-z0-9_.\-]+", "", requirement.split(";")[0]).strip()
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
           "<": lambda a, b: a < b, ">": lambda a, b: a > b}
    have = _version_tuple(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op = next(o for o in (">=", "<=", "==", "<", ">") if clause.startswith(o))
        want = _version_tuple(clause[len(op):])
        if not ops[op](have[: len(want)], want):
            return False
    return True


def _requirement(name: str) -> str:
    try:
        for req in metadata.requires(DISTRIBUTION) or []:
            if re.match(rf"^{re.escape(name)}\b", req, re.I) and "extra ==" not in req:
                return req
    except metadata.PackageNotFoundError:
        pass
    return name


def check_packages() -> list[Check]:
    """Versions of TensorFlow, tf-keras and the orchestrator's own dependencies (no imports)."""
    checks = []
    versions = {}
    for name in ("tensorflow", "tf-keras", "grpcio", "protobuf", "psutil", "PyYAML"):
        req = _requirement(name)
        try:
            version = versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            checks.append(Check("FAIL", name, "not installed", f"python -m pip install '{req}'"))
            continue
        if _satisfies(version, req):
            checks.append(Check("ok", name, f"{version} ({req})"))
        else:
            checks.append(Check("FAIL", name, f"{version} does not satisfy {req}", f"python -m pip install '{req}'"))
    tf, tfk = versions.get("tensorflow"), versions.get("tf-keras")
    if tf and tfk and _version_tuple(tf)[:2] != _version_tuple(tfk)[:2]:
        minor = ".".join(map(str, _version_tuple(tf)[:2]))
        checks.append(Check("FAIL", "tf-keras/tf", f"tf-keras {tfk} does not match TensorFlow {tf}",
                            f"python -m pip install 'tf-keras=={minor}.*'"))
    return checks


def check_tf_import(python: str = sys.executable) -> Check:
    """Import TensorFlow and tf-keras in a subprocess set up like a task."""
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": ""}
    try:
        proc = subprocess.run([python, "-c", _IMPORT_PROBE], capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S,
                              env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Check("FAIL", "tf import", f"importing tensorflow took over {IMPORT_TIMEOUT_S:.0f} s",
                     "check the installation: python -c 'import tensorflow'")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Check("FAIL", "tf import", f"exit code {proc.returncode}: {last}",
                     "reinstall: python -m pip install -e '.[test]'")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if not info["tf_keras_is_tf_keras"]:
        return Check("FAIL", "tf import", "tf.keras is Keras 3 even with TF_USE_LEGACY_KERAS=1 (fit fails under MWMS)",
                     "python -m pip install tf-keras matching TensorFlow")
    return Check("ok", "tf import", f"{info['import_s']:.1f} s in a task-like subprocess; tf.keras is tf-keras "
                 f"{info['tf_keras']}; {info['cpus']} CPU device(s)")


_GPU_PROBE = """
import json, os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # in the probe subprocess, never in the orchestrator
print(json.dumps({"gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
                  "cuda": bool(tf.test.is_built_with_cuda())}))
"""
AND_CUDA = "python -m pip install 'tensorflow[and-cuda]'"
"""TensorFlow's own install step for GPUs on Linux (tensorflow.org/install/pip): the CUDA and
cuDNN libraries as wheels, so no system CUDA is needed, only the NVIDIA driver."""


def check_gpus(spec: JobSpec, quick: bool = False, python: str = sys.executable) -> list[Check]:
    """The node's GPUs and driver (NVML, :mod:`orchestrator.resources.gpus`), whether the job's
    ``--gpus-per-task`` fits them (:func:`orchestrator.resources.placement.place`), and (not ``quick``)
    whether TensorFlow in a task-like subprocess sees a device given to it the way a task gets
    one (``CUDA_VISIBLE_DEVICES=<uuid>``); it names ``tensorflow[and-cuda]`` when it does not."""
    from orchestrator.errors import SpecError
    from orchestrator.resources.gpus import discover
    from orchestrator.resources.placement import place

    inventory = discover()
    asked = any(spec.gpus_per_task.values())
    if not inventory.gpus:
        status = "FAIL" if asked else "ok"
        return [Check(status, "gpus", inventory.describe() + ("" if asked else ": tasks run on the CPU"),
                      "drop --gpus-per-task, or run on a node with NVIDIA GPUs and their driver "
                      "(pip install 'tf-cluster-orchestrator[gpu]' for NVML)" if asked else "")]
    checks = [Check("ok", "gpus", inventory.describe())]
    try:
        placement = place(spec, inventory)
        checks.append(Check("ok", "placement", placement.describe()))
    except SpecError as exc:
        checks.append(Check("FAIL", "placement", str(exc)))
    if quick:
        return checks
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": inventory.gpus[0].uuid}
    try:
        proc = subprocess.run([python, "-c", _GPU_PROBE], capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S,
                              env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [*checks, Check("FAIL", "tf gpu", f"TensorFlow took over {IMPORT_TIMEOUT_S:.0f} s to list its GPUs")]
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [*checks, Check("warn", "tf gpu", f"a task's TensorFlow could not be asked: {last}",
                               f"{AND_CUDA} (a user's program may bring its own GPU library)")]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if info["gpus"]:
        return [*checks, Check("ok", "tf gpu", f"a task's TensorFlow sees {inventory.gpus[0].uuid} as "
                               f"{info['gpus'][0]}")]
    why = ("built without CUDA" if not info["cuda"]
           else "built with CUDA, but its CUDA libraries or the driver do not load")
    return [*checks, Check("FAIL" if asked else "warn", "tf gpu", f"a task's TensorFlow sees no GPU ({why})",
                           f"{AND_CUDA} in the tasks' environment")]


def check_resources(spec: JobSpec, runs_dir: Path) -> list[Check]:
    """Cores, memory and disk for the job's TensorFlow processes."""
    tasks = spec.tf_process_count()
    cores = available_cores()
    checks = []
    if tasks > cores:
        checks.append(Check("warn", "cores", f"{cores} core(s) for {tasks} TF tasks: 1 intra-op thread each and "
                            "they take turns on the cores (slow steps, late heartbeats)",
                            "use fewer tasks, or raise --heartbeat-timeout / --stall-timeout"))
    else:
        checks.append(Check("ok", "cores", f"{cores} core(s) for {tasks} TF task(s): {max(1, cores // tasks)} "
                            "intra-op thread(s) each"))
    available = psutil.virtual_memory().available
    need = tasks * TASK_RSS_BYTES
    detail = f"{available / 2**30:.1f} GiB available, ~{need / 2**30:.1f} GiB needed ({tasks} tasks x ~700 MiB)"
    if available < need:
        checks.append(Check("FAIL", "memory", detail, "use fewer tasks or free memory (tasks would be OOM-killed)"))
    elif available < 1.5 * need:
        checks.append(Check("warn", "memory", detail, "little headroom: a larger model or data set will not fit"))
    else:
        checks.append(Check("ok", "memory", detail))
    existing = runs_dir.resolve()
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    detail = f"{free / 2**30:.1f} GiB free for run directories under {runs_dir}"
    if free < MIN_FREE_DISK_BYTES:
        checks.append(Check("warn", "disk", detail, "free space: checkpoints and SavedModels land there"))
    else:
        checks.append(Check("ok", "disk", detail))
    return checks


def check_network(spec: JobSpec) -> list[Check]:
    """localhost resolution and the job's ports (fixed ones must be free and loopback to launch here)."""
    checks = []
    try:
        resolved = {str(info[4][0]) for info in socket.getaddrinfo("localhost", None, proto=socket.IPPROTO_TCP)}
    except socket.gaierror:
        resolved = set()
    if "127.0.0.1" in resolved:
        checks.append(Check("ok", "localhost", "resolves to " + ", ".join(sorted(resolved))))
    else:
        checks.append(Check("warn", "localhost", "does not resolve to 127.0.0.1 (" + (", ".join(sorted(resolved)) or
                            "not at all") + ")", "write 127.0.0.1 in addresses, not localhost (tensorflow#19900)"))
    if not spec.addresses:
        low, high = port_range()
        checks.append(Check("ok", "ports", f"chosen at launch from {low}..{high - 1} and held until each task binds"))
        return checks
    remote, busy = [], []
    for task in spec.tasks():
        address = parse_address(spec.addresses[task], f"addresses.{task.task_type}[{task.task_index}]")
        if not address.is_loopback:
            remote.append(f"{task}={address}")
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", address.port))
            except OSError as exc:
                busy.append(f"{task}={address} ({exc.strerror})")
    if remote:
        checks.append(Check("warn", "ports", "addresses on other hosts: " + ", ".join(remote) + "; launch runs "
                            "loopback addresses only", "python -m orchestrator render --spec FILE --format env, "
                            "and start each task on its host"))
    elif busy:
        checks.append(Check("FAIL", "ports", "fixed port(s) in use: " + ", ".join(busy),
                            "stop what holds them (ss -ltnp), or change the spec's addresses"))
    else:
        checks.append(Check("ok", "ports", f"{len(spec.tasks())} fixed loopback port(s) are free"))
    return checks


def run_checks(spec: JobSpec, runs_dir: Path, quick: bool = False) -> list[Check]:
    """Every check, in report order."""
    version = ".".join(map(str, sys.version_info[:3]))
    checks = [Check("ok", "python", version) if sys.version_info >= (3, 10)
              else Check("FAIL", "python", version, "use Python 3.10 or newer")]
    checks += check_packages()
    if not quick and all(c.status == "ok" for c in checks if c.name in ("tensorflow", "tf-keras")):
        checks.append(check_tf_import())
    checks += check_gpus(spec, quick=quick or not any(c.name == "tensorflow" and c.status == "ok" for c in checks))
    checks += check_resources(spec, runs_dir)
    checks += check_network(spec)
    checks.append(check_isolation())
    return checks


def check_isolation() -> Check:
    """Whether ``--isolate-network`` can work here: a real network namespace made and dropped
    (:func:`orchestrator.backends.netns.probe`); a warning, never a failure (it is an option)."""
    from orchestrator.backends.netns import probe

    allowed, detail = probe()
    if allowed:
        return Check("ok", "isolation", f"--isolate-network: {detail}")
    return Check("warn", "isolation", f"--isolate-network cannot work here: {detail}",
                 "allow unprivileged user namespaces, run as root, or keep the job on a private network "
                 "(docs/security.md)")


def run_doctor(args: argparse.Namespace) -> int:
    """Run ``doctor``. Returns 0 (ready), 1 (a check failed; ``--exposure``: a TF port answers
    outside loopback)."""
    if args.exposure is not None:
        from orchestrator.cli.exposure import report
        from orchestrator.report.runs import resolve_run

        code, text = report(resolve_run(args.exposure or None, args.runs_dir), as_json=args.json)
        print(text)
        return code
    spec = spec_from_flags(args)
    checks = run_checks(spec, Path(args.runs_dir), quick=args.quick)
    failed = any(c.status == "FAIL" for c in checks)
    if args.json:
        print(jsontext.dumps({"ready": not failed, "checks": [asdict(c) for c in checks]}, indent=2))
        return 1 if failed else 0
    counts = ", ".join(f"{t} {spec.count(t)}" for t in TASK_TYPES if spec.count(t))
    print(f"doctor: {spec.strategy.value}, {counts} ({spec.tf_process_count()} TF processes)")
    for c in checks:
        print(f"  {c.status:<5} {c.name:<11} {c.detail}" + (f"\n  {'':<5} {'':<11} fix: {c.fix}" if c.fix else ""))
    print("not ready: fix the FAIL lines above" if failed else "ready")
    return 1 if failed else 0
