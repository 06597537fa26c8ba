"""How late heartbeats come under load, measured where it counts: at the orchestrator.

``python -m bench.heartbeat_gaps [--tasks 2] [--busy 4] [--interval 1.0] [--stage-seconds 8]``
starts a real :class:`~orchestrator.health.server.HealthServer`, ``--busy`` pure-Python busy
processes (more runnable processes than cores), and ``--tasks`` task processes
(:mod:`bench.beattask`: the real reporter, then ``import tensorflow``, long TF ops, a
pure-Python loop, ``tf.function`` tracing, ``tf.saved_model.save``). It records every
heartbeat's arrival time per task and prints JSON: the largest inter-arrival gap of each
task, with the stage it ended in, and the gaps over the interval by stage. The
heartbeat timeout's default must stay well above the worst gap (issue 23 item 6).
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import tempfile
import time
from collections import defaultdict

from bench.tfjobs import PY, REPO, base_env
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.proto import supervisor_pb2 as pb

BUSY = "while True: pass"


class GapStore(HeartbeatStore):
    """The orchestrator's store that also keeps each task's arrival times and stages."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: dict[int, list[tuple[float, str]]] = defaultdict(list)

    def record(self, heartbeat: pb.Heartbeat) -> None:
        super().record(heartbeat)
        self.arrivals[heartbeat.task.task_index].append((time.monotonic(), heartbeat.message))


def gaps(arrivals: list[tuple[float, str]], interval_s: float) -> dict:
    """The largest inter-arrival gap (and its stage: the one the late beat announced), the
    largest by stage, and the gaps over 1.5 intervals by stage."""
    worst, worst_stage, late = 0.0, "", defaultdict(list)
    by_stage: dict[str, float] = defaultdict(float)
    for (t0, _), (t1, stage) in zip(arrivals, arrivals[1:]):
        gap = t1 - t0
        by_stage[stage] = round(max(by_stage[stage], gap), 3)
        if gap > worst:
            worst, worst_stage = gap, stage
        if gap > 1.5 * interval_s:
            late[stage].append(round(gap, 2))
    return {"beats": len(arrivals), "max_gap_s": round(worst, 3), "max_gap_stage": worst_stage,
            "max_gap_by_stage_s": dict(by_stage), "late": dict(late)}


def measure(tasks: int = 2, busy: int = 4, interval_s: float = 1.0, stage_s: float = 8.0,
            timeout_s: float = 600.0) -> dict:
    token = "t" + secrets.token_urlsafe(16)
    store = GapStore()
    server = HealthServer(token, store).start()
    env = base_env()
    env.update({"ORCH_HEALTH_ADDRESS": server.address, "ORCH_JOB_TOKEN": token,
                "ORCH_HEARTBEAT_INTERVAL_S": repr(interval_s), "TF_CPP_MIN_LOG_LEVEL": "2",
                "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
    loads = [subprocess.Popen([PY, "-c", BUSY]) for _ in range(busy)]
    procs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(tasks):
                tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{i + 1}" for i in range(tasks)]},
                                        "task": {"type": "worker", "index": i}})
                procs.append(subprocess.Popen([PY, "-m", "bench.beattask", str(stage_s), f"{tmp}/save-{i}"],
                                              env={**env, "TF_CONFIG": tf_config}, cwd=REPO))
            codes = [p.wait(timeout_s) for p in procs]
    finally:
        for p in loads + procs:
            p.kill()
            p.wait(10)
        server.stop()
    per_task = {f"worker-{i}": gaps(store.arrivals[i], interval_s) for i in range(tasks)}
    after_import = [g for t in per_task.values() for s, g in t["max_gap_by_stage_s"].items() if s != "import"]
    return {"tasks": tasks, "busy_processes": busy, "interval_s": interval_s, "stage_s": stage_s,
            "exit_codes": codes, "max_gap_s": max(t["max_gap_s"] for t in per_task.values()),
            "max_gap_after_import_s": max(after_import, default=None), "per_task": per_task}


def section(suite) -> None:
    """The bench's ``beats`` section (:class:`bench.run.Suite`): rows ``heartbeat_gap_loaded_s``
    (the worst gap past start-up, against half the default heartbeat timeout) and
    ``heartbeat_gap_import_s`` (the worst while ``import tensorflow`` holds the GIL: why start-up
    is judged by the startup timeout instead)."""
    from orchestrator.spec.supervision import SupervisionSpec

    timeout_s = SupervisionSpec().heartbeat_timeout_s
    runs = [measure(stage_s=2.0 if suite.quick else 8.0) for _ in range(1 if suite.quick else 2)]
    for r in runs:
        print(f"beats: max gap {r['max_gap_s']} s, past start-up {r['max_gap_after_import_s']} s "
              f"(exit codes {r['exit_codes']})", flush=True)
    ok = [r for r in runs if r["exit_codes"] == [0] * r["tasks"]]
    setting = (f"{runs[0]['tasks']} tasks, real HeartbeatReporter at the default {runs[0]['interval_s']:g} s, "
               f"{runs[0]['busy_processes']} busy processes on the same cores")
    suite.add("3", "heartbeat_gap_loaded_s", f"worst gap between two heartbeats at the orchestrator past start-up "
              f"(TF ops, pure-Python loop, tracing, saving), {setting}", "s",
              [r["max_gap_after_import_s"] for r in ok], f"<= {timeout_s / 2:g}",
              {"heartbeat_timeout_s": timeout_s, "runs": runs})
    suite.add("3", "heartbeat_gap_import_s", f"worst gap between two heartbeats during import tensorflow "
              f"(the GIL held while its libraries load; judged by the startup timeout), {setting}", "s",
              [r["per_task"][t]["max_gap_by_stage_s"].get("import") for r in ok for t in r["per_task"]])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.heartbeat_gaps")
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--busy", type=int, default=4)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--stage-seconds", type=float, default=8.0)
    args = p.parse_args(argv)
    print(json.dumps(measure(args.tasks, args.busy, args.interval, args.stage_seconds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
