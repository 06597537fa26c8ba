"""Per-task cost of the health client: a bare Python process vs one running the real
HeartbeatReporter (1 heartbeat/s to a real HealthServer), and one that only imports it."""

from __future__ import annotations

import json
import secrets
import subprocess
import time

import psutil

from bench.tfjobs import PY, REPO, base_env
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore


def measure(window_s: float = 15.0, settle_s: float = 3.0) -> dict:
    token = "t" + secrets.token_urlsafe(16)  # never starts with "-" (argv)
    store = HeartbeatStore()
    server = HealthServer(token, store).start()
    env = base_env()
    env.update({"BENCH_SIM_SECONDS": str(settle_s + window_s + 5),
                "TF_CONFIG": json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                         "task": {"type": "worker", "index": 0}}),
                "ORCH_HEALTH_ADDRESS": server.address, "ORCH_JOB_TOKEN": token, "ORCH_HEARTBEAT_INTERVAL_S": "1.0"})
    kinds = {"bare": ["--bare"], "imports_only": ["--idle"], "reporter": []}
    procs = {k: subprocess.Popen([PY, "-m", "bench.simtask", *a], env=env, cwd=REPO) for k, a in kinds.items()}
    try:
        time.sleep(settle_s)
        ps = {k: psutil.Process(p.pid) for k, p in procs.items()}
        c0 = {k: sum(p.cpu_times()[:2]) for k, p in ps.items()}
        t0 = time.monotonic()
        time.sleep(window_s)
        span = time.monotonic() - t0
        out = {}
        for k, p in ps.items():
            out[k] = {"cpu_percent": 100 * (sum(p.cpu_times()[:2]) - c0[k]) / span,
                      "rss_mb": p.memory_info().rss / 2**20}
        out["heartbeats_received"] = store.total
        out["reporter_minus_bare_rss_mb"] = out["reporter"]["rss_mb"] - out["bare"]["rss_mb"]
        out["reporter_minus_bare_cpu_percent"] = out["reporter"]["cpu_percent"] - out["bare"]["cpu_percent"]
        return out
    finally:
        for p in procs.values():
            p.kill()
            p.wait(10)
        server.stop()
