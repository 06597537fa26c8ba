"""The bench's sections that start no TensorFlow (:class:`LightSections`, which
:class:`bench.run.Suite` holds): ``beats`` (how late heartbeats arrive on a loaded machine), ``detect``
(a SIGKILLed task on the local backend), ``client`` (the health client's cost per task), ``ingest``
(heartbeats/s into the HealthServer), ``scale`` (detection with many simulated tasks) and ``several``
(two runs on one machine: leased cores, waiting)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Protocol

from bench import client_cost, heartbeat_gaps, ingest, several_jobs
from bench.report import log
from bench.stats import summarize
from bench.tfjobs import PY, REPO, base_env

SECTIONS = ("beats", "detect", "client", "ingest", "scale", "several")
"""The sections :class:`LightSections` runs."""
INGEST_TLS_RATE = 20000
"""Heartbeats/s offered, paced, in the TLS / plaintext comparison at the same load: below what the
TLS clients send flat out on these 2 loaded cores (about 25,000-30,000), so both sides store it all."""


class Figures(Protocol):
    """What the light sections use of the suite they run in (:class:`bench.run.Suite`)."""

    quick: bool
    notes: list[str]
    workdir: Path

    def add(self, ident: str, name: str, measure: str, unit: str, values: Any, target: str | None = None,
            details: dict[str, Any] | None = None) -> dict[str, Any]: ...


class LightSections:
    """Sections of :class:`bench.run.Suite` without TensorFlow.

    Args:
        suite: where the figures go (``add``), and whether the run is ``--quick``.
    """

    def __init__(self, suite: Figures) -> None:
        self.suite = suite

    @property
    def quick(self) -> bool:
        return self.suite.quick

    def add(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """One figure, into the suite (:meth:`Figures.add`)."""
        return self.suite.add(*args, **kwargs)

    # -- 3b: heartbeat gaps under load --------------------------------------------------------
    def beats(self) -> None:
        """How late heartbeats arrive while the machine is loaded (:mod:`bench.heartbeat_gaps`)."""
        heartbeat_gaps.section(self.suite)

    # -- 3: exit detection on the local backend --------------------------------------------------
    def detect(self) -> None:
        kills = 3 if self.quick else 10
        proc = subprocess.run([PY, "-m", "bench.detect", "--kills", str(kills)], capture_output=True, text=True,
                              cwd=REPO, env=base_env(), timeout=300)
        try:
            out = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            log(f"detect: failed: {proc.stderr[-2000:]}")
            out = {"kill_detect_s": [], "errors": [proc.stderr[-2000:]]}
        self.add("3", "detect_sigkill_local", "detection of a SIGKILLed task, local backend, real processes without "
                 "TensorFlow (kill -> decision; exit events: pidfd)", "s", out["kill_detect_s"], "<= 0.01", out)

    # -- 36: several jobs on one machine --------------------------------------------------------
    def several(self) -> None:
        """Two runs together against back to back, and the waiting run's gap (:mod:`bench.several_jobs`)."""
        several_jobs.section(self.suite)  # the suite itself: its workdir, quick and add

    # -- 6: client cost -----------------------------------------------------------------------
    def client(self) -> None:
        runs = 1 if self.quick else 3
        res = [client_cost.measure(3.0 if self.quick else 15.0, 1.5 if self.quick else 3.0) for _ in range(runs)]
        self.add("6", "client_rss", "health client per task: RSS, reporter process - bare Python", "MB",
                 [r["reporter_minus_bare_rss_mb"] for r in res], None,
                 {"bare_mb": summarize([r["bare"]["rss_mb"] for r in res]),
                  "imports_only_mb": summarize([r["imports_only"]["rss_mb"] for r in res]),
                  "reporter_mb": summarize([r["reporter"]["rss_mb"] for r in res])})
        self.add("6", "client_cpu", "health client per task: CPU at 1 heartbeat/s", "% of a core",
                 [r["reporter_minus_bare_cpu_percent"] for r in res])

    # -- 5: ingest ----------------------------------------------------------------------------
    def ingest(self) -> None:
        """The server's capacity under paced load (:func:`bench.ingest.capacity`: 1,000 streams
        of raw HTTP/2, one heartbeat per write, rising offered rates), then the older saturating
        load from grpc.aio clients as a cross-check (client-bound on 2 cores)."""
        runs = 1 if self.quick else 3
        rates = [20000] if self.quick else [20000, 25000, 30000, 35000, 40000, 50000]
        window = 2.0 if self.quick else 4.0
        res = [ingest.capacity(rates, window_s=window) for _ in range(runs)]
        for r in res:
            log("ingest: " + "; ".join(f"offered {s['offered_per_s']:.0f}/s: stored {s['stored_per_s']:.0f}/s, server "
                                       f"{s['server_cpu_percent']:.0f} %, clients {s['clients_cpu_percent']:.0f} %, "
                                       f"backlog {s['backlog_start']} -> {s['backlog_end']}"
                                       f"{'' if s['sustained'] else ' (not sustained)'}" for s in r["steps"]))
        first = [r["steps"][0] for r in res]
        self.add("5", "ingest_rate", f"heartbeat ingest capacity: highest offered rate stored as fast as sent, "
                 f"{res[0]['connections']} streams of paced load, same 2 cores", "heartbeats/s",
                 [r["capacity"] for r in res], ">= 20000", {"runs": res})
        self.add("5", "ingest_server_cpu", f"HealthServer CPU at {rates[0]:,} heartbeats/s offered", "% of a core",
                 [s["server_cpu_percent"] for s in first])
        self.add("5", "ingest_per_server_core", f"heartbeats stored per server CPU-second at {rates[0]:,}/s offered",
                 "heartbeats/core-s", [s["per_server_core_s"] for s in first])
        grpc_runs = [ingest.measure(200, 2, 2.0 if self.quick else 6.0) for _ in range(runs)]
        for r in grpc_runs:
            log(f"ingest, grpc.aio clients: {r}")
        self.add("5", "ingest_grpc_clients", "heartbeat ingest, 200 grpc.aio streams sending flat out (the clients "
                 "share the 2 cores: client-bound)", "heartbeats/s", [r["heartbeats_per_s"] for r in grpc_runs], None,
                 {"runs": grpc_runs, "clients_cpu_percent": summarize(r["clients_cpu_percent"] for r in grpc_runs),
                  "server_cpu_percent": summarize(r["server_cpu_percent"] for r in grpc_runs)})
        self._ingest_tls(runs)

    def _ingest_tls(self, runs: int) -> None:
        """Mutual TLS (a launch's default) against plaintext (``--insecure``), interleaved pairs of
        the grpc.aio load: heartbeats stored per server CPU-second as the ratio TLS / plaintext
        (issue 37: >= 0.9) at the same offered load (:data:`INGEST_TLS_RATE`, paced), and flat out.

        Flat out the ratio is not the server's alone: the clients share the 2 cores and pay for TLS
        too, so the TLS load is smaller, and the server's cost per heartbeat rises as its load falls
        (fewer heartbeats per wake-up: about 0.4 us per 1,000/s less, fitted over 44 flat-out runs).
        Paced at one rate both sides store the same heartbeats/s and only the server's TLS work
        differs (docs/benchmarks.md)."""
        window = 2.0 if self.quick else 6.0
        pairs = [(ingest.measure(200, 2, window, tls=False), ingest.measure(200, 2, window, tls=True))
                 for _ in range(max(runs, 2))]
        for plain, tls in pairs:
            log(f"ingest flat out, plaintext / mutual TLS: {plain['heartbeats_per_s']:.0f} / "
                f"{tls['heartbeats_per_s']:.0f} heartbeats/s, {plain['heartbeats_per_server_cpu_s'] or 0:.0f} / "
                f"{tls['heartbeats_per_server_cpu_s'] or 0:.0f} per server CPU-s")
        paced = [(ingest.measure(200, 2, window, tls=False, rate=INGEST_TLS_RATE),
                  ingest.measure(200, 2, window, tls=True, rate=INGEST_TLS_RATE))
                 for _ in range(1 if self.quick else max(runs, 2) + 2)]
        for plain, tls in paced:
            log(f"ingest at {INGEST_TLS_RATE:,}/s offered, plaintext / mutual TLS: {plain['heartbeats_per_s']:.0f} / "
                f"{tls['heartbeats_per_s']:.0f} heartbeats/s, {plain['heartbeats_per_server_cpu_s'] or 0:.0f} / "
                f"{tls['heartbeats_per_server_cpu_s'] or 0:.0f} per server CPU-s")

        def kept(r: dict) -> bool:  # the server stored what was offered (a starved client sends less)
            return bool(r["heartbeats_per_server_cpu_s"]) and r["heartbeats_per_s"] >= 0.97 * INGEST_TLS_RATE

        # the pairs where both sides stored what was offered; none on a loaded machine (--quick in CI): every pair,
        # its count of pairs not sustained in the details
        same = [(p, t) for p, t in paced if kept(p) and kept(t)] or \
            [(p, t) for p, t in paced if p["heartbeats_per_server_cpu_s"] and t["heartbeats_per_server_cpu_s"]]
        self.add("5", "ingest_tls_per_core_ratio_same_load", "heartbeats stored per server CPU-second, mutual TLS / "
                 f"plaintext, same offered load (200 grpc.aio streams paced at {INGEST_TLS_RATE:,}/s in all, "
                 "interleaved pairs)", "ratio",
                 [t["heartbeats_per_server_cpu_s"] / p["heartbeats_per_server_cpu_s"] for p, t in same], ">= 0.9",
                 {"pairs": paced, "pairs_not_sustained": sum(1 for p, t in paced if not (kept(p) and kept(t)))})
        self.add("5", "ingest_tls_per_core_ratio", "heartbeats stored per server CPU-second, mutual TLS / plaintext "
                 "(200 grpc.aio streams flat out, interleaved pairs; client-bound: the TLS load is smaller)", "ratio",
                 [t["heartbeats_per_server_cpu_s"] / p["heartbeats_per_server_cpu_s"] for p, t in pairs
                  if p["heartbeats_per_server_cpu_s"] and t["heartbeats_per_server_cpu_s"]], None,
                 {"pairs": pairs})
        self.add("5", "ingest_tls_rate_ratio", "heartbeat ingest rate, mutual TLS / plaintext (client-bound on "
                 "2 cores)", "ratio", [t["heartbeats_per_s"] / p["heartbeats_per_s"] for p, t in pairs
                                       if p["heartbeats_per_s"]])

    # -- 7: scale -----------------------------------------------------------------------------
    def scale(self) -> None:
        sizes = [100] if self.quick else [1000, 5000, 10000]
        kills, hangs = (1, 1) if self.quick else (3, 3)
        timeout = 4.0
        per_connection = 10  # streams per HTTP/2 connection: 10,000 sockets + 10,000 exit fds pass 20,000 open files
        supported, per_size = [], []
        for n in sizes:
            proc = subprocess.run([PY, "-m", "bench.scale", "--tasks", str(n), "--kills", str(kills), "--hangs",
                                   str(hangs), "--heartbeat-timeout", str(timeout), "--per-connection",
                                   str(per_connection)],
                                  capture_output=True, text=True, cwd=REPO, env=base_env(), timeout=600)
            try:
                out = json.loads(proc.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                log(f"scale {n}: failed: {proc.stderr[-2000:]}")
                continue
            kd, hd = summarize(out["kill_detect_s"]), summarize(out["hang_detect_s"])
            ok = (not out["errors"] and kd["runs"] == kills and hd["runs"] == hangs and kd["max"] <= 0.2
                  and hd["max"] <= timeout + 1 and out.get("status_tasks") == n and out.get("false_hangs") == 0)
            out["within_targets"] = ok
            per_size.append(out)
            log(f"scale {n}: kill {kd}, hang {hd}, tick {out.get('tick_ms')}, cpu {out.get('cpu_percent')}, ok {ok}")
            if ok:
                supported.append(n)
            self.add("7", f"scale_{n}_detect_sigkill", f"{n} simulated tasks: SIGKILL detection", "s",
                     out["kill_detect_s"], "<= 0.2", out)
            self.add("7", f"scale_{n}_detect_hang", f"{n} simulated tasks: hang detection (timeout {timeout:g} s)", "s",
                     out["hang_detect_s"], f"<= {timeout + 1:g}")
            self.add("7", f"scale_{n}_tick", f"{n} simulated tasks: supervisor loop work per tick (median of ticks)",
                     "ms", [out["tick_ms"]["median"]] if out.get("tick_ms") else [])
            self.add("7", f"scale_{n}_cpu", f"{n} simulated tasks at 1 heartbeat/s: orchestrator CPU", "% of a core",
                     [out.get("cpu_percent")])
            self.add("7", f"scale_{n}_simulators_cpu", f"{n} simulated tasks: CPU of the simulated hosts (the same "
                     "2 cores as the orchestrator)", "% of a core", [out.get("hosts_cpu_percent")],
                     details={"heartbeats_per_s": out.get("heartbeats_per_s")})
            self.add("7", f"scale_{n}_rss_per_task", f"{n} simulated tasks: orchestrator RSS per task (steady state "
                     "less before the plan)", "KB", [out.get("rss_per_task_kb")])
            self.add("7", f"scale_{n}_status", f"{n} simulated tasks reporting: `status` (GetStatus over gRPC) "
                     "latency, median of 5", "ms", [(out.get("status_ms") or {}).get("median")],
                     details={"web_api_status_ms": out.get("web_ms"), "status_bytes": out.get("status_bytes")})
        self.add("7", "scale_supported_tasks", "most simulated tasks supervised with SIGKILL detection <= 0.2 s, hang "
                 f"detection <= {timeout + 1:g} s, no false hang and `status` answering (sizes tried {sizes})", "tasks",
                 [max(supported)] if supported else [0], ">= 100" if self.quick else ">= 10000", {"sizes": per_size})
