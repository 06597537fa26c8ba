"""Scale: one real Supervisor + HealthServer over many simulated tasks; detection latency at N.

``python -m bench.scale --tasks N [--kills K] [--hangs H] [--profile FILE]`` prints one JSON
object. The job is ParameterServerStrategy (chief + N-2 workers + 1 ps, workers restarted
alone on failure), so faults can be repeated in one job. Every task but one is a heartbeat
stream carried by a few ``bench.simhost`` processes (``--per-connection`` streams share one
HTTP/2 connection: at 10,000 tasks one connection each plus one exit descriptor each would pass
this machine's open-file limit of 20,000); ``worker-1`` is a real process (``bench.simtask``: the
real HeartbeatReporter) that is SIGKILLed, so its exit is seen through its pidfd as a real
task's. A simulated task's exit descriptor is an eventfd that the fake backend writes when it
ends the task (it only ends when the supervisor signals it). A hang freezes a simulated task's
stream (no more heartbeats, stream open). Latencies are from the fault to the supervisor's
decision (``Failure.at``, its monotonic clock). Per-tick work of the supervisor loop is timed by
wrapping its ``tick`` (no change to the supervisor). The supervisor's view is the real
:class:`~orchestrator.report.history.Recorder` (a snapshot every 0.25 s, as under ``launch``),
serving ``GetStatus`` (what ``status`` asks) and the web page's ``/api/status``; both are asked
while the tasks report, and their latency is measured from this process (``status_ms``, ``web_ms``).
``rss_per_task_kb``: the orchestrator's RSS in the steady state less its RSS before the plan, per task.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.tfjobs import PY, REPO, base_env
from orchestrator.backends.base import Backend, LaunchRequest, TaskHandle
from orchestrator.backends.host import pidfd
from orchestrator.health.client import EndpointClient
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.report.history import Recorder
from orchestrator.spec.model import JobSpec, Strategy, TaskId
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import JobState, Supervisor, TaskState
from orchestrator.supervisor.exits import descriptor_budget

REAL = "worker-1"


@dataclass(eq=False)
class SimHandle(TaskHandle):
    name: str = ""
    key: str = ""
    host: subprocess.Popen | None = None
    popen: subprocess.Popen | None = None
    exit_code: int | None = None
    event_fd: int = -1  # the simulated task's exit descriptor (the supervisor owns and closes it)


class SimBackend(Backend[SimHandle]):
    """Starts simulated tasks on host processes (one real process for ``worker-1``); implements
    the declared backend contract, so the supervisor drives it exactly as a real backend."""

    name = "sim"

    def __init__(self, hosts: list[subprocess.Popen], logs: Path) -> None:
        self.hosts = hosts
        self.logs = logs  # files under it are never created: no stack dump to wait for
        self._next = 0
        self._lock = threading.Lock()
        self._fds_out, self._fd_budget = 0, descriptor_budget() - 16

    def allocate(self, spec: JobSpec) -> dict[TaskId, str]:
        return {task: f"127.0.0.1:{20000 + i}" for i, task in enumerate(spec.tasks())}

    def _send(self, host: subprocess.Popen, line: str) -> None:
        with self._lock:
            host.stdin.write(line + "\n")
            host.stdin.flush()

    def start(self, request: LaunchRequest) -> SimHandle:
        env, task = request.env, request.task
        name = task.name
        key = f"{task.task_type} {task.task_index} {request.attempt}"
        out, err = self.logs / f"{name}.out", self.logs / f"{name}.err"
        if name == REAL:
            # its TF_CONFIG with its own type's first addresses only: at 10,000 tasks the whole one is
            # past the kernel's 128 KiB limit on one environment string (MAX_ARG_STRLEN: E2BIG)
            tf = json.loads(env["TF_CONFIG"])
            kind, index = tf["task"]["type"], tf["task"]["index"]
            tf["cluster"] = {kind: tf["cluster"][kind][:index + 1]}
            env = {**env, "TF_CONFIG": json.dumps(tf)}
            popen = subprocess.Popen([PY, "-m", "bench.simtask"], env={**base_env(), **env}, cwd=REPO,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
            return SimHandle(task, request.attempt, popen.pid, out, err, name=name, key=key, popen=popen)
        host = self.hosts[self._next % len(self.hosts)]
        self._next += 1
        self._send(host, f"start {key}")
        return SimHandle(task, request.attempt, host.pid, out, err, name=name, key=key, host=host)

    def exit_fd(self, p: SimHandle) -> int | None:
        if p.popen:
            return pidfd(p.popen)
        with self._lock:
            # past the supervisor's descriptor budget it closes what it is given and polls the task
            # instead: hand out none then (a closed number may be reused, and must never be written)
            if self._fds_out >= self._fd_budget:
                return None
            self._fds_out += 1
        p.event_fd = os.eventfd(0)
        return p.event_fd

    def poll(self, p: SimHandle) -> int | None:
        return p.popen.poll() if p.popen else p.exit_code

    def wait(self, p: SimHandle, timeout_s: float) -> int | None:
        if p.popen:
            try:
                return p.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return None
        return p.exit_code

    def signal(self, p: SimHandle, signum: int) -> None:
        if p.popen:
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signum)
        elif signum in (signal.SIGKILL, signal.SIGTERM) and p.exit_code is None:
            self._send(p.host, f"kill {p.key}")
            p.exit_code = -signum
            if p.event_fd >= 0:
                os.eventfd_write(p.event_fd, 1)  # before the supervisor learns of the end: still open
                with self._lock:
                    self._fds_out -= 1

    def freeze(self, p: SimHandle) -> None:
        self._send(p.host, f"freeze {p.key}")

    def stop(self, processes, timeout_s: float = 10.0, abort: threading.Event | None = None) -> None:
        for p in processes:
            self.signal(p, signal.SIGTERM)
        for p in processes:
            if p.popen:
                try:
                    p.popen.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    os.killpg(p.popen.pid, signal.SIGKILL)
                    p.popen.wait(10)

def time_ticks(sup: Supervisor) -> list[float]:
    """Wrap ``sup.tick`` (an instance attribute: the loop calls ``self.tick()``) to time each tick's
    work; returns the list the durations go to, seconds."""
    work_s: list[float] = []
    tick = sup.tick

    def timed() -> bool:
        t0 = time.perf_counter()
        try:
            return tick()
        finally:
            work_s.append(time.perf_counter() - t0)

    sup.tick = timed  # type: ignore[method-assign]
    return work_s


def _latency_ms(call, n: int) -> dict:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(1000 * (time.perf_counter() - t0))
    return {"median": statistics.median(times), "max": max(times), "n": n}


def _cpu_s(hosts: list[subprocess.Popen]) -> float:
    """CPU seconds (user + system) the simulated hosts used so far."""
    total = 0.0
    for h in hosts:
        try:
            total += sum(psutil.Process(h.pid).cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def _web_status(url: str) -> None:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as reply:
        json.loads(reply.read())


def _runtime(sup: Supervisor, name: str):
    return sup.table.named(name)  # a dict look-up: this thread's polls share the orchestrator's interpreter


def _wait(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def run(tasks: int, kills: int, hangs: int, heartbeat_timeout_s: float, hosts_n: int, profile: str | None,
        per_connection: int = 1) -> dict:
    from orchestrator.web.server import WebServer

    me = psutil.Process()
    rss_before = me.memory_info().rss
    token = "t" + secrets.token_urlsafe(16)  # never starts with "-" (argv)
    store, recorder = HeartbeatStore(), Recorder()
    server = HealthServer(token, store, status=recorder.status_reply).start()
    web_token = secrets.token_urlsafe(12)
    web = WebServer(recorder.status, web_token).start()
    hosts = [subprocess.Popen([PY, "-m", "bench.simhost", server.address, token, "--mode", "scale",
                               "--per-connection", str(per_connection)],
                              stdin=subprocess.PIPE, text=True, cwd=REPO, env=base_env()) for _ in range(hosts_n)]
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    supervision = SupervisionSpec.create(restart_policy={"worker": "on-failure"}, max_restarts=1000, backoff_s=0.1,
                                         backoff_max_s=0.2, heartbeat_timeout_s=heartbeat_timeout_s)
    spec = JobSpec.create(strategy=Strategy.PARAMETER_SERVER, workers=tasks - 2, ps=1, supervision=supervision)
    backend = SimBackend(hosts, tmp / "logs")
    plan = make_plan(spec, backend.allocate(spec), run_id="scale", run_dir=tmp / "run", health_address=server.address,
                     token=token, orchestrator_pid=os.getpid())
    sup = Supervisor(plan, backend, store, recorder, stop_timeout_s=5.0)
    ticks = time_ticks(sup)
    out: dict = {"tasks": len(sup.tasks), "heartbeat_timeout_s": heartbeat_timeout_s, "kill_detect_s": [],
                 "hang_detect_s": [], "errors": [], "per_connection": per_connection}

    def faults() -> None:
        try:
            t0 = time.monotonic()
            if not _wait(lambda: sup.state is JobState.RUNNING, 120):
                out["errors"].append("job never Running")
                return
            out["all_running_s"] = time.monotonic() - t0
            time.sleep(heartbeat_timeout_s + 1)  # steady state
            cpu0, beats0, w0, n0 = sum(me.cpu_times()[:2]), store.total, time.monotonic(), len(ticks)
            host_cpu0 = _cpu_s(hosts)
            for _ in range(kills):
                rt = _runtime(sup, REAL)
                # the lambda is called within this iteration, so the loop variable cannot go stale
                if not _wait(lambda: rt.current.state is TaskState.RUNNING and rt.current.heartbeat is not None,  # noqa: B023
                             30):
                    out["errors"].append("victim not running")
                    return
                before = len(sup.failures)
                at = time.monotonic()
                os.kill(rt.current.pid, signal.SIGKILL)
                # the lambda is called within this iteration, so the loop variable cannot go stale
                if _wait(lambda: len(sup.failures) > before, 30):  # noqa: B023
                    out["kill_detect_s"].append(sup.failures[before].at - at)
                _wait(lambda: _runtime(sup, REAL).current.state is TaskState.RUNNING, 30)
            for i in range(hangs):
                rt = _runtime(sup, f"worker-{2 + i}")
                before = len(sup.failures)
                at = time.monotonic()
                backend.freeze(rt.current.process)
                # the lambda is called within this iteration, so the loop variable cannot go stale
                if _wait(lambda: len(sup.failures) > before, heartbeat_timeout_s + 30):  # noqa: B023
                    out["hang_detect_s"].append(sup.failures[before].at - at)
            span = time.monotonic() - w0
            out["cpu_percent"] = 100 * (sum(me.cpu_times()[:2]) - cpu0) / span
            out["hosts_cpu_percent"] = 100 * (_cpu_s(hosts) - host_cpu0) / span  # the simulators, same cores
            out["heartbeats_per_s"] = (store.total - beats0) / span
            work = ticks[n0:]
            out["tick_ms"] = {"median": 1000 * statistics.median(work),
                              "p99": 1000 * sorted(work)[int(0.99 * (len(work) - 1))],
                              "max": 1000 * max(work), "ticks": len(work)}
            rss = me.memory_info().rss
            out["rss_mb"] = rss / 2**20
            out["rss_per_task_kb"] = (rss - rss_before) / len(sup.tasks) / 1024
            # asked from another process, as `status` and a browser ask: decoding several MB here
            # would hold this interpreter's GIL, which the orchestrator's threads share
            url = f"{web.url.split('?')[0].rstrip('/')}/api/status?token={web_token}"
            asked = subprocess.run([PY, "-m", "bench.scale", "--ask", server.address, token, url], cwd=REPO,
                                   env=base_env(), capture_output=True, text=True, timeout=300)
            out.update(json.loads(asked.stdout.strip().splitlines()[-1]))
            out["status_bytes"] = recorder.status_reply().ByteSize()  # the serialized GetStatus reply
            out["false_hangs"] = len(sup.failures) - kills - hangs  # failures nobody caused
        except Exception as exc:  # noqa: BLE001
            out["errors"].append(repr(exc))
        finally:
            out["failures"] = [f.headline()[:200] for f in sup.failures]
            sup.request_stop("benchmark done")

    threading.Thread(target=faults, daemon=True).start()
    try:
        if profile:
            prof = cProfile.Profile()
            prof.runcall(sup.run)
            text = io.StringIO()
            stats = pstats.Stats(prof, stream=text)
            stats.sort_stats("cumulative").print_stats(30)
            stats.sort_stats("tottime").print_stats(30)
            Path(profile).write_text(text.getvalue())
        else:
            sup.run()
    finally:
        server.stop()
        web.stop()
        for h in hosts:
            h.stdin.close()
        for h in hosts:
            try:
                h.wait(20)
            except subprocess.TimeoutExpired:
                h.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def ask(address: str, token: str, url: str) -> dict:
    """What a `status` client and the web page see: GetStatus and ``/api/status`` latency, 5 each."""
    client = EndpointClient(address, token, timeout_s=30.0)
    status = client.status()
    return {"status_tasks": len(status.get("tasks", [])),
            "status_key_bytes": dict(sorted(((k, len(json.dumps(v))) for k, v in status.items()),
                                            key=lambda kv: -kv[1])[:4]),
            "status_ms": _latency_ms(client.status, 5), "web_ms": _latency_ms(lambda: _web_status(url), 5)}


def main() -> None:
    if sys.argv[1:2] == ["--ask"]:
        print(json.dumps(ask(*sys.argv[2:5])))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--hangs", type=int, default=3)
    parser.add_argument("--heartbeat-timeout", type=float, default=4.0)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--per-connection", type=int, default=1, help="simulated tasks per HTTP/2 connection")
    parser.add_argument("--profile")
    args = parser.parse_args()
    print(json.dumps(run(args.tasks, args.kills, args.hangs, args.heartbeat_timeout, args.hosts, args.profile,
                         args.per_connection)))


if __name__ == "__main__":
    main()
