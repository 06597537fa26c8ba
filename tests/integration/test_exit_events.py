"""Exit events with real processes (no TensorFlow): the supervision loop sleeps in its exit watch,
so a task's exit, and a stop request from another thread, are acted on without waiting for a
tick (here ``tick_s`` is 600 s: a loop that still polled would not end within the test's bound)."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading

from orchestrator.backends.local import LocalBackend
from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.spec import JobSpec
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import JobState, Supervisor
from tests.conftest import REPO, assert_no_process_left, wait_until

PROGRAM = (sys.executable, "-m", "tests.programs.task")
TICK_S = 600.0
BOUND_S = 30.0


def supervise(tmp_path, monkeypatch, behaviors: dict[str, str]):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    for name, behavior in behaviors.items():
        monkeypatch.setenv(f"TEST_BEHAVIOR_{name}", behavior)
    spec = JobSpec.create(workers=2, supervision=SupervisionSpec.create(restart_policy={"worker": "never"}))
    backend, store = LocalBackend(), HeartbeatStore()
    server = HealthServer("t0ken", store, backend.release_port).start()
    plan = make_plan(spec, backend.allocate(spec), run_id="r", run_dir=tmp_path / "r", health_address=server.address,
                     token="t0ken", orchestrator_pid=os.getpid())
    plan = dataclasses.replace(plan, tasks=tuple(dataclasses.replace(tp, argv=PROGRAM) for tp in plan.tasks))
    plan.run_dir.mkdir(parents=True)
    sup = Supervisor(plan, backend, store, stop_timeout_s=5.0, tick_s=TICK_S)
    result: list = []
    loop = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    return sup, server, loop, result


def finish(sup, server, loop) -> None:
    if loop.is_alive():  # the assertion failed: end the job anyway, leave nothing running
        sup.request_stop("test over")
        loop.join(BOUND_S)
    server.stop()


def test_a_task_exit_wakes_the_loop_without_a_tick(tmp_path, monkeypatch):
    sup, server, loop, result = supervise(tmp_path, monkeypatch, {"worker_0": "serve", "worker_1": "exit:3"})
    loop.start()
    try:
        loop.join(BOUND_S)
        assert not loop.is_alive(), "the exit of worker-1 did not wake the supervision loop"
    finally:
        finish(sup, server, loop)
    final = result[0]
    assert final.state is JobState.FAILED and final.fatal is not None and final.fatal.exit_code == 3
    assert_no_process_left([t.pid for t in final.tasks])


def test_a_stop_request_from_another_thread_wakes_the_loop(tmp_path, monkeypatch):
    sup, server, loop, result = supervise(tmp_path, monkeypatch, {"worker_0": "serve", "worker_1": "serve"})
    loop.start()
    try:
        wait_until(lambda: all(rt.current.pid for rt in sup.tasks), BOUND_S, what="both tasks started")
        sup.request_stop("stopped by the test")  # from this thread, while the loop sleeps (or is about to)
        loop.join(BOUND_S)
        assert not loop.is_alive(), "a stop request did not wake the supervision loop"
    finally:
        finish(sup, server, loop)
    assert result[0].state is JobState.INTERRUPTED
    assert_no_process_left([t.pid for t in result[0].tasks])
