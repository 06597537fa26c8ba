"""The GPU check: run on a machine with an NVIDIA GPU (one is enough), no TensorFlow, no package registry.

    python tests/gpu/check.py [--wheels DIR] [--keep DIR]

From the repository root. It runs the orchestrator from this checkout (``PYTHONPATH``), never
installs TensorFlow and never reaches a registry: the orchestrator's few dependencies must be
importable already, or lie as wheels in ``--wheels DIR`` (then ``pip install --no-index
--find-links DIR`` installs them; make the directory on a machine with a registry with
``pip download grpcio grpcio-health-checking protobuf psutil rich PyYAML aiohttp prometheus-client
nvidia-ml-py -d DIR`` for the GPU machine's Python and platform). The user program allocates GPU
memory with CuPy or PyTorch, whichever imports.

Checks, each printed ``PASS`` / ``FAIL`` with what it saw (exit 0 when all pass, 1 when one
fails, 2 when the machine cannot run the check: no GPU, no GPU library, a missing dependency):

1. discovery: :func:`orchestrator.resources.gpus.discover` finds the GPUs through NVML (index, UUID, name,
   memory, driver), as ``nvidia-smi -L`` lists them when it is there;
2. a two-task launch (``launch --workers 2 -- python tests/gpu/alloc.py``): one device per task
   with two GPUs or more, the one GPU shared (``--share-gpus``) otherwise; each task's
   ``CUDA_VISIBLE_DEVICES`` is its device's UUID, its GPU library sees exactly that many devices,
   and TensorFlow is imported by no process of the job;
3. ``status --json`` while the tasks hold their memory: each task's ``gpus`` shows its devices,
   memory used at least what it allocated and the device's total;
4. a forced GPU out-of-memory (one task allocating twice its device's memory, ``--restart-policy
   exit-code``): the job fails with the task's GPU OOM as its root cause (device, memory used and
   total, the hint) and no restart.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ALLOC = REPO / "tests" / "gpu" / "alloc.py"
DEPENDENCIES = {"grpc": "grpcio", "grpc_health": "grpcio-health-checking", "google.protobuf": "protobuf",
                "psutil": "psutil", "rich": "rich", "yaml": "PyYAML", "aiohttp": "aiohttp",
                "prometheus_client": "prometheus-client", "pynvml": "nvidia-ml-py"}
"""Module -> distribution: all the orchestrator process and a user's task need (no TensorFlow)."""
WAIT_S = 90.0
ALLOC_BYTES = 512 * 2**20

results: list[dict] = []


def report(name: str, ok: bool, detail: str) -> bool:
    results.append({"check": name, "ok": ok, "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    return ok


def missing_modules() -> list[str]:
    out = []
    for module in DEPENDENCIES:
        try:
            importlib.import_module(module)
        except ImportError:
            out.append(module)
    return out


def gpu_library() -> str:
    for name in ("cupy", "torch"):
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, timeout=120, check=False)
        if probe.returncode == 0:
            return name
    return ""


def environ() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = str(REPO) + os.pathsep + out.get("PYTHONPATH", "")
    out.pop("ORCH_FAKE_GPUS", None)  # the real devices
    return out


def orchestrator(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator", *args]


def status(runs: Path, run_id: str) -> dict:
    proc = subprocess.run(orchestrator("status", run_id, "--runs-dir", str(runs), "--json"), env=environ(),
                          capture_output=True, text=True, timeout=30, check=False)
    try:
        return json.loads(proc.stdout) if proc.returncode == 0 else {}
    except json.JSONDecodeError:
        return {}


def wait_for(predicate, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"{what} not within {timeout_s:.0f} s")


def check_launch(work: Path, library: str, inventory) -> None:
    runs, out = work / "runs", work / "two"
    out.mkdir()
    placement = ["--gpus-per-task", "1"] if len(inventory.gpus) >= 2 else ["--share-gpus"]
    argv = orchestrator("launch", "--workers", "2", *placement, "--runs-dir", str(runs), "--run-id", "two", "--quiet",
                        "--deadline", "300", "--", sys.executable, str(ALLOC), str(out), library, str(ALLOC_BYTES))
    print("$ " + " ".join(argv), flush=True)
    launcher = subprocess.Popen(argv, env=environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    live: dict = {}
    try:
        wait_for(lambda: all((out / f"worker-{i}.json").exists() for i in range(2)), "both tasks allocating")
        live = wait_for(lambda: (s := status(runs, "two")) and all(
            (t.get("gpus") or {}).get("memory_used_bytes", 0) >= ALLOC_BYTES for t in s.get("tasks", [])) and s,
            "status --json showing each task's GPU memory")
    except TimeoutError as exc:
        report("status --json", False, str(exc))
    finally:
        (out / "go").write_text("")
        _, stderr = launcher.communicate(timeout=WAIT_S)
    report("two-task launch", launcher.returncode == 0, f"exit {launcher.returncode}" + (
        f": {stderr.strip().splitlines()[-1]}" if launcher.returncode and stderr.strip() else ""))
    seen = {i: json.loads((out / f"worker-{i}.json").read_text())
            for i in range(2) if (out / f"worker-{i}.json").exists()}
    plan = json.loads((runs / "two" / "plan.json").read_text())
    assigned = {t["task"]: [d["uuid"] for d in t["gpus"]["devices"]] for t in plan["tasks"]}
    for i, record in seen.items():
        want = ",".join(assigned[f"worker:{i}"])
        report(f"placement worker-{i}", record["CUDA_VISIBLE_DEVICES"] == want and record["devices"] == 1,
               f"CUDA_VISIBLE_DEVICES={record['CUDA_VISIBLE_DEVICES']} (plan: {want}); {library} sees "
               f"{record['devices']} device(s)")
        report(f"no TensorFlow in worker-{i}", not record["tensorflow_imported"], "tensorflow not in sys.modules"
               if not record["tensorflow_imported"] else "the user's program process imported tensorflow")
    if len(inventory.gpus) >= 2:
        report("disjoint devices", set(assigned["worker:0"]).isdisjoint(assigned["worker:1"]), json.dumps(assigned))
    if live:
        for t in live["tasks"]:
            g = t["gpus"]
            report(f"status --json {t['name']}", g["memory_used_bytes"] >= ALLOC_BYTES and g["memory_total_bytes"] > 0,
                   f"gpus {g['devices']}: {g['utilization_percent']}% busy, {g['memory_used_bytes'] / 2**20:.0f} of "
                   f"{g['memory_total_bytes'] / 2**20:.0f} MiB")
        report("status --json", True, "GPU columns present for every task")


def check_oom(work: Path, library: str) -> None:
    runs, out = work / "runs", work / "oom"
    out.mkdir()
    argv = orchestrator("launch", "--workers", "1", "--gpus-per-task", "1", "--restart-policy", "exit-code",
                        "--max-restarts", "2", "--runs-dir", str(runs), "--run-id", "oom", "--json",
                        "--deadline", "300",
                        "--", sys.executable, str(ALLOC), str(out), library, "oom")
    print("$ " + " ".join(argv), flush=True)
    proc = subprocess.run(argv, env=environ(), capture_output=True, text=True, timeout=WAIT_S * 2, check=False)
    try:
        summary = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report("forced GPU OOM", False, f"exit {proc.returncode}, no summary: {proc.stderr.strip()[-300:]}")
        return
    cause = summary.get("root_cause") or {}
    oom = cause.get("gpu_oom")
    report("forced GPU OOM", proc.returncode == 1 and oom is not None and summary.get("restarts") == 0,
           f"exit {proc.returncode}, restarts {summary.get('restarts')}; root cause: {cause.get('message')}")
    if oom:
        report("GPU OOM record", bool(oom.get("uuid")) and bool(oom.get("memory_total_bytes")),
               json.dumps(oom))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", default=None, metavar="DIR", help="install missing dependencies from these wheels")
    parser.add_argument("--keep", default=None, metavar="DIR", help="keep the run directories here")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON here")
    args = parser.parse_args(argv)
    missing = missing_modules()
    if missing and args.wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", args.wheels,
                        *(DEPENDENCIES[m] for m in missing)], check=False, timeout=600)
        importlib.invalidate_caches()
        missing = missing_modules()
    if missing:
        print("cannot check: missing " + ", ".join(DEPENDENCIES[m] for m in missing) + "; give --wheels DIR "
              "(see this script's docstring)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from orchestrator.resources.gpus import discover

    inventory = discover()
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout.strip() \
        if smi else "(no nvidia-smi)"
    if not report("discovery", bool(inventory.gpus), inventory.describe() + f"; nvidia-smi -L: {listed}"):
        return 2
    library = gpu_library()
    if not report("GPU library", bool(library), library or "neither cupy nor torch imports"):
        return 2
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        check_launch(work, library, inventory)
        check_oom(work, library)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ok = all(r["ok"] for r in results)
    if args.json:
        Path(args.json).write_text(json.dumps({"ok": ok, "results": results}, indent=2))
    print("all GPU checks passed" if ok else "GPU check FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
