"""``python -m orchestrator list [--runs-dir DIR]``: every run with its status, strategy, tasks,
start, wall time and test accuracy (running jobs are asked over gRPC, others read from their
``summary.json``; runs waiting for cores or GPUs other runs lease, and the block of ports each live
run leases, come from the lease ledger).
Exit codes: 0, 2 bad input."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator import jsontext
from orchestrator.errors import SpecError
from orchestrator.report.runs import run_dirs, run_status
from orchestrator.resources.leases import Holder, Ledger, live
from orchestrator.resources.portblocks import format_block

COLUMNS = ("run", "status", "strategy", "tasks", "ports", "started", "wall", "accuracy")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "list",
        help="runs with status, strategy, tasks, start, wall time and accuracy",
        description="List the runs under --runs-dir, oldest first. Exit codes: 0, 2 bad input.",
    )
    p.add_argument("--runs-dir", default="runs", help="where run directories are (default ./runs)")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=run_list)


def run_entry(status: dict) -> dict:
    """One run's line of ``list`` as plain data."""
    tasks = status.get("tasks") or []
    metrics = status.get("metrics") or {}
    counts: dict[str, int] = {}
    for t in tasks:
        kind = str(t.get("task", "?")).split(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
    return {
        "run_id": status.get("run_id"),
        "run_dir": status.get("run_dir"),
        "status": status.get("status"),
        "live": bool(status.get("live")),
        "strategy": status.get("strategy"),
        "tasks": counts,
        "started_at": status.get("started_at"),
        "wall_time_s": status.get("elapsed_s", status.get("wall_time_s")),
        # the built-in program's test accuracy; a user's program: the accuracy it reported, if any
        "test_accuracy": next((metrics[k] for k in ("test_accuracy", "val_accuracy", "accuracy") if k in metrics),
                              None),
        "exit_code": status.get("exit_code"),
        "ports": None,
    }


def leased_ports(root: Path, entries: list[Holder]) -> dict[str, str]:
    """Run id -> the block of ports (``20016-20031``) each live run of ``root`` leases (the ledger's
    ``entries``); runs that lease none are left out."""
    return {h.run_id: format_block(h.ports) for h in entries
            if h.ports and not h.waiting and (not h.runs_dir or Path(h.runs_dir).resolve() == root.resolve())
            and live(h)}


def waiting_entries(root: Path, entries: list[Holder]) -> list[dict]:
    """The runs of ``root`` waiting for cores or GPUs that other runs lease (the lease ledger's
    ``entries``, :mod:`orchestrator.resources.leases`): status ``Waiting``, and ``waiting`` says
    for what (and which runs hold it, with their blocks of ports)."""
    out = []
    for h in entries:
        if not h.waiting or not live(h) or (h.runs_dir and Path(h.runs_dir).resolve() != root.resolve()):
            continue
        out.append({"run_id": h.run_id, "run_dir": str(Path(h.runs_dir) / h.run_id), "status": "Waiting", "live": True,
                    "strategy": None, "tasks": {}, "started_at": None, "wall_time_s": None, "test_accuracy": None,
                    "exit_code": None, "ports": None, "waiting": h.waiting, "pid": h.pid})
    return out


def _cells(e: dict) -> dict[str, str]:
    started = str(e["started_at"] or "-").replace("T", " ")[:19]
    return {
        "run": str(e["run_id"]),
        "status": f"{e['status']} for {e['waiting']}" if e.get("waiting") else str(e["status"]),
        "strategy": str(e["strategy"] or "-"),
        "tasks": " ".join(f"{k}:{v}" for k, v in e["tasks"].items()) or "-",
        "ports": str(e.get("ports") or "-"),
        "started": started,
        "wall": f"{e['wall_time_s']:.1f}s" if isinstance(e["wall_time_s"], (int, float)) else "-",
        "accuracy": f"{e['test_accuracy']:.4f}" if isinstance(e["test_accuracy"], (int, float)) else "-",
    }


def run_list(args: argparse.Namespace) -> int:
    """Run ``list``. Returns the exit code."""
    root = Path(args.runs_dir)
    if root.exists() and not root.is_dir():
        raise SpecError("runs-dir", args.runs_dir, "is not a directory", "point --runs-dir at your runs directory")
    ledger = Ledger().read()
    ports = leased_ports(root, ledger)
    entries = []
    for run_dir in run_dirs(root):
        status = run_status(run_dir, timeout_s=1.0)
        status.setdefault("run_dir", str(run_dir))
        entry = run_entry(status)
        entry["ports"] = ports.get(str(entry["run_id"])) if entry["live"] else None
        entries.append(entry)
    entries += waiting_entries(root, ledger)
    if args.json:
        print(jsontext.dumps(entries, indent=2))
        return 0
    if not entries:
        print(f"no runs under {root}")
        return 0
    rows = [dict(zip(COLUMNS, COLUMNS))] + [_cells(e) for e in entries]
    widths = {c: max(len(r[c]) for r in rows) for c in COLUMNS}
    for r in rows:
        print("  ".join(r[c].rjust(widths[c]) if c in ("wall", "accuracy") else r[c].ljust(widths[c])
                        for c in COLUMNS).rstrip())
    return 0
