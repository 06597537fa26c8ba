"""Heartbeat ingest: how many heartbeats per second the real HealthServer absorbs, and its CPU.

:func:`capacity` is the figure: paced load from :mod:`bench.h2load` (the real call as raw
HTTP/2, one heartbeat per write, about a fifth of grpc.aio's client CPU per heartbeat) at rising offered
rates; the capacity is the highest rate the server stores as fast as it is sent.
:func:`measure` is the older saturating load from grpc.aio clients (:mod:`bench.simhost`), kept as
a cross-check: on 2 cores those clients need about as much CPU as the server, so it measures the
machine more than the server.
"""

from __future__ import annotations

import secrets
import subprocess
import tempfile
import time

import psutil

from bench.tfjobs import PY, REPO, base_env
from orchestrator.tls import make_run_pki, server_hosts


def _query(server: subprocess.Popen) -> tuple[int, float]:
    server.stdin.write("q\n")
    server.stdin.flush()
    _, total, _, at = server.stdout.readline().split()
    return int(total), float(at)


def _cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def _start_server(profile: str | None = None, tls_dir: str | None = None) -> tuple[subprocess.Popen, str, str]:
    token = "t" + secrets.token_urlsafe(16)  # never starts with "-" (argv)
    extra = [*(["--profile", profile] if profile else []), *(["--tls", tls_dir] if tls_dir else [])]
    server = subprocess.Popen([PY, "-m", "bench.ingest_server", token, *extra],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=base_env())
    return server, server.stdout.readline().split()[1], token


def _stop(server: subprocess.Popen, clients: list[subprocess.Popen]) -> None:
    for c in clients:
        if c.poll() is None:
            c.kill()
            c.wait(10)
    server.stdin.close()
    try:
        server.wait(15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(10)


def capacity(rates: list[float], connections: int = 1000, processes: int = 2, window_s: float = 4.0,
             warmup_s: float = 1.0, profile: str | None = None) -> dict:
    """Offer each of ``rates`` (heartbeats/s, rising) over ``connections`` streams from
    ``processes`` :mod:`bench.h2load` processes; per rate, measure over ``window_s`` seconds
    (after ``warmup_s``) what the server stored per second, its CPU and the backlog (sent, not
    yet stored). A rate is sustained when the server stored >= 98 % of what was sent and the
    backlog grew by at most 2 % of it. Stops at the first rate not sustained.

    Returns ``{"capacity": the highest sustained rate's stored heartbeats/s (or, when none was,
    the first rate's), "steps": [...], ...}``."""
    server, address, token = _start_server(profile)
    clients: list[subprocess.Popen] = []
    try:
        per = connections // processes
        for i in range(processes):
            clients.append(subprocess.Popen(
                [PY, "-m", "bench.h2load", address, token, "--connections", str(per), "--first", str(i * per)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=base_env()))
        for c in clients:
            line = c.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"bench.h2load did not start: {line!r}")
        deadline = time.monotonic() + 30
        while _query(server)[0] < per * processes:  # every stream's first heartbeat is in
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {_query(server)[0]} of {per * processes} streams reached the server in 30 s")
            time.sleep(0.1)
        proc = psutil.Process(server.pid)
        client_ps = [psutil.Process(c.pid) for c in clients]

        def snap() -> tuple[int, int, int, float, float, float]:
            sent = blocked = 0
            for c in clients:
                c.stdin.write("q\n")
                c.stdin.flush()
                _, s, _, b = c.stdout.readline().split()
                sent, blocked = sent + int(s), blocked + int(b)
            stored, at = _query(server)
            return sent, blocked, stored, at, _cpu_s(proc), sum(_cpu_s(p) for p in client_ps)

        steps = []
        for rate in rates:
            for c in clients:
                c.stdin.write(f"rate {rate / processes}\n")
                c.stdin.flush()
            time.sleep(warmup_s)
            a = snap()
            time.sleep(window_s)
            b = snap()
            span = b[3] - a[3]
            sent, stored = b[0] - a[0], b[2] - a[2]
            step = {"offered_per_s": rate, "sent_per_s": sent / span, "stored_per_s": stored / span,
                    "blocked_per_s": (b[1] - a[1]) / span, "backlog_start": a[0] - a[2], "backlog_end": b[0] - b[2],
                    "server_cpu_percent": 100 * (b[4] - a[4]) / span, "clients_cpu_percent": 100 * (b[5] - a[5]) / span}
            step["sustained"] = (sent > 0 and stored >= 0.98 * sent
                                 and step["backlog_end"] - step["backlog_start"] <= 0.02 * sent)
            step["per_server_core_s"] = (step["stored_per_s"] / (step["server_cpu_percent"] / 100)
                                         if step["server_cpu_percent"] > 0 else None)
            steps.append(step)
            if not step["sustained"]:
                break
        kept = [s for s in steps if s["sustained"]]
        best = kept[-1] if kept else steps[0]
        return {"capacity": best["stored_per_s"], "sustained": bool(kept), "connections": per * processes,
                "client_processes": processes, "steps": steps, "server_rss_mb": proc.memory_info().rss / 2**20}
    finally:
        _stop(server, clients)


def measure(streams: int, processes: int = 2, window_s: float = 6.0, warmup_s: float = 1.5,
            profile: str | None = None, tls: bool = False, rate: float = 0.0) -> dict:
    """Open ``streams`` heartbeat streams from ``processes`` grpc.aio simulated-task processes
    (:mod:`bench.simhost`), send as fast as they go (``rate``: that many heartbeats/s in all,
    paced evenly over the streams), and measure the server's stored heartbeats per second, its
    CPU and the clients' over ``window_s`` seconds (after ``warmup_s``). With ``tls``: mutual
    TLS with a run's certificates (:mod:`orchestrator.tls`), as a launch has it."""
    if tls:
        with tempfile.TemporaryDirectory() as run_dir:
            folder = str(make_run_pki(run_dir, "bench", server_hosts("127.0.0.1"), []).folder)
            return _measure(streams, processes, window_s, warmup_s, profile, folder, rate)
    return _measure(streams, processes, window_s, warmup_s, profile, None, rate)


def _measure(streams: int, processes: int, window_s: float, warmup_s: float, profile: str | None,
             tls_dir: str | None, rate: float = 0.0) -> dict:
    server, address, token = _start_server(profile, tls_dir)
    hosts: list[subprocess.Popen] = []
    try:
        per = streams // processes
        for i in range(processes):
            hosts.append(subprocess.Popen(
                [PY, "-m", "bench.simhost", address, token, "--mode", "ingest", "--streams", str(per),
                 "--first", str(i * per), "--seconds", str(warmup_s + window_s + 1.0),
                 "--rate", str(rate / processes), *(["--tls", tls_dir] if tls_dir else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=base_env()))
        for h in hosts:
            line = h.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"bench.simhost did not start: {line!r}")
        deadline = time.monotonic() + 30
        while _query(server)[0] < per * processes and time.monotonic() < deadline:  # every stream connected
            time.sleep(0.1)
        for h in hosts:
            h.stdin.write("go\n")
            h.stdin.flush()
        time.sleep(warmup_s)
        proc = psutil.Process(server.pid)
        hosts_ps = [psutil.Process(h.pid) for h in hosts]
        n0, t0 = _query(server)
        c0, hc0 = _cpu_s(proc), sum(_cpu_s(h) for h in hosts_ps)
        time.sleep(window_s)
        n1, t1 = _query(server)
        c1, hc1 = _cpu_s(proc), sum(_cpu_s(h) for h in hosts_ps)
        for h in hosts:
            h.wait(60)
        stored = (n1 - n0) / (t1 - t0)
        server_cores = (c1 - c0) / (t1 - t0)
        return {
            "streams": per * processes,
            "client_processes": processes,
            "offered_per_s": rate or None,
            "heartbeats_per_s": stored,
            "server_cpu_percent": 100 * server_cores,
            "clients_cpu_percent": 100 * (hc1 - hc0) / (t1 - t0),
            "heartbeats_per_server_cpu_s": stored / server_cores if server_cores > 0 else None,
            "server_rss_mb": proc.memory_info().rss / 2**20,
        }
    finally:
        _stop(server, hosts)
