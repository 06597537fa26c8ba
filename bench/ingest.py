"""Heartbeat ingest: how many heartbeats per second the real HealthServer absorbs, and its CPU."""

from __future__ import annotations

import secrets
import subprocess
import time

import psutil

from bench.tfjobs import PY, REPO, base_env


def _query(server: subprocess.Popen) -> tuple[int, float]:
    server.stdin.write("q\n")
    server.stdin.flush()
    _, total, _, at = server.stdout.readline().split()
    return int(total), float(at)


def measure(streams: int, processes: int = 2, window_s: float = 6.0, warmup_s: float = 1.5,
            profile: str | None = None) -> dict:
    """Open ``streams`` heartbeat streams from ``processes`` simulated-task processes, send as
    fast as they go, and measure the server's stored heartbeats per second and its CPU over
    ``window_s`` seconds (after ``warmup_s``)."""
    token = "t" + secrets.token_urlsafe(16)  # never starts with "-" (argv)
    env = base_env()
    server = subprocess.Popen([PY, "-m", "bench.ingest_server", token, *(["--profile", profile] if profile else [])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO, env=env)
    hosts = []
    try:
        address = server.stdout.readline().split()[1]
        per = streams // processes
        for i in range(processes):
            hosts.append(subprocess.Popen(
                [PY, "-m", "bench.simhost", address, token, "--mode", "ingest", "--streams", str(per),
                 "--first", str(i * per), "--seconds", str(warmup_s + window_s + 1.0)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env))
        for h in hosts:
            assert h.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while _query(server)[0] < per * processes and time.monotonic() < deadline:  # every stream connected
            time.sleep(0.1)
        for h in hosts:
            h.stdin.write("go\n")
            h.stdin.flush()
        time.sleep(warmup_s)
        proc = psutil.Process(server.pid)
        hosts_ps = [psutil.Process(h.pid) for h in hosts]

        def cpu(p):
            t = p.cpu_times()
            return t.user + t.system

        n0, t0 = _query(server)
        c0, hc0 = cpu(proc), sum(cpu(h) for h in hosts_ps)
        time.sleep(window_s)
        n1, t1 = _query(server)
        c1, hc1 = cpu(proc), sum(cpu(h) for h in hosts_ps)
        for h in hosts:
            h.wait(60)
        rate = (n1 - n0) / (t1 - t0)
        server_cores = (c1 - c0) / (t1 - t0)
        return {
            "streams": per * processes,
            "client_processes": processes,
            "heartbeats_per_s": rate,
            "server_cpu_percent": 100 * server_cores,
            "clients_cpu_percent": 100 * (hc1 - hc0) / (t1 - t0),
            "heartbeats_per_server_cpu_s": rate / server_cores if server_cores > 0 else None,
            "server_rss_mb": proc.memory_info().rss / 2**20,
        }
    finally:
        for h in hosts:
            if h.poll() is None:
                h.kill()
                h.wait(10)
        server.stdin.close()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
