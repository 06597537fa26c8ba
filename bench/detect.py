"""SIGKILL detection on the local backend: fault -> decision, with real task processes.

``python -m bench.detect [--kills K]`` prints one JSON object. One real Supervisor, the real
LocalBackend and HealthServer, and a PSS job (chief + 2 workers + 1 ps, workers restarted alone)
whose tasks are ``bench.simtask`` processes (the real HeartbeatReporter, no TensorFlow, so the
figure is the supervisor's, not TensorFlow's start-up). ``worker-1`` is SIGKILLed K times once it
reports; each latency is from the ``kill(2)`` to the failure the supervisor recorded
(``Failure.at``, the same monotonic clock). The loop's ``tick_s`` is the default (0.1 s): with
exit events (pidfds) the decision does not wait for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from bench.tfjobs import PY, REPO
from orchestrator.backends.local import LocalBackend
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.spec.model import JobSpec, Strategy
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import Supervisor, TaskState

VICTIM = "worker-1"


def _wait(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return False


def run(kills: int) -> dict:
    token = "t" + secrets.token_urlsafe(16)
    store, backend = HeartbeatStore(), LocalBackend()
    server = HealthServer(token, store, backend.release_port).start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-detect-"))
    supervision = SupervisionSpec.create(restart_policy={"worker": "on-failure"}, max_restarts=1000, backoff_s=0.1,
                                         backoff_max_s=0.2, spares=0)
    spec = JobSpec.create(strategy=Strategy.PARAMETER_SERVER, workers=2, ps=1, supervision=supervision)
    plan = make_plan(spec, backend.allocate(spec), run_id="detect", run_dir=tmp / "run",
                     health_address=server.address, token=token, orchestrator_pid=os.getpid())
    argv = (PY, "-m", "bench.simtask")
    plan = dataclasses.replace(plan, tasks=tuple(dataclasses.replace(tp, argv=argv) for tp in plan.tasks))
    plan.run_dir.mkdir(parents=True)
    sup = Supervisor(plan, backend, store, stop_timeout_s=5.0)
    out: dict = {"kill_detect_s": [], "exit_events": None, "errors": []}

    def faults() -> None:
        try:
            victim = next(rt for rt in sup.tasks if rt.task.name == VICTIM)
            for _ in range(kills):
                if not _wait(lambda: victim.current.state is TaskState.RUNNING and victim.current.heartbeat, 60):
                    out["errors"].append("victim not running")
                    return
                time.sleep(0.3)  # let the loop settle into its sleep, as in a job that runs
                out["exit_events"] = sup._exits.watched(VICTIM)
                before = len(sup.failures)
                at = time.monotonic()
                os.kill(victim.current.pid, signal.SIGKILL)
                if _wait(lambda: len(sup.failures) > before, 30):  # noqa: B023 - called in this iteration
                    out["kill_detect_s"].append(sup.failures[before].at - at)
        except Exception as exc:  # noqa: BLE001
            out["errors"].append(repr(exc))
        finally:
            sup.request_stop("benchmark done")

    old = os.getcwd()
    os.environ["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.chdir(REPO)
    threading.Thread(target=faults, daemon=True).start()
    try:
        sup.run()
    finally:
        os.chdir(old)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(run(args.kills)))


if __name__ == "__main__":
    main()
