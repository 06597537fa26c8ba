"""The supervision loop driven tick by tick with a fake backend and a fake clock (no processes).

The fake backend implements the declared contract (:class:`orchestrator.backends.base.Backend`);
heartbeats go into the real :class:`HeartbeatStore` on the same fake clock. A wrong decision
fails here in milliseconds, with its reason.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pytest

from orchestrator.backends.base import Backend, LaunchRequest, TaskHandle
from orchestrator.health.store import HeartbeatStore
from orchestrator.plan import make_plan
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.spec import JobSpec, TaskId
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import JobState, Supervisor, TaskState

PHASES = {"initializing": pb.PHASE_INITIALIZING, "serving": pb.PHASE_SERVING, "training": pb.PHASE_TRAINING,
          "done": pb.PHASE_DONE, "finishing": pb.PHASE_FINISHING}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass(eq=False)
class FakeHandle(TaskHandle):
    code: int | None = None
    signals: list[int] = field(default_factory=list)


class FakeBackend(Backend[FakeHandle]):
    """Tasks that run until the test ends them; SIGTERM/SIGKILL end them at once."""

    name = "fake"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.started: list[tuple[float, FakeHandle]] = []
        self.stopped: list[list[str]] = []
        self.closed = False

    def allocate(self, spec: JobSpec) -> dict[TaskId, str]:
        return {t: f"127.0.0.1:{30000 + i}" for i, t in enumerate(spec.tasks())}

    def start(self, request: LaunchRequest) -> FakeHandle:
        request.log_dir.mkdir(parents=True, exist_ok=True)
        handle = FakeHandle(request.task, request.attempt, 1000 + len(self.started),
                            request.log_dir / "stdout.log", request.log_dir / "stderr.log")
        self.started.append((self.clock(), handle))
        return handle

    def poll(self, handle: FakeHandle) -> int | None:
        return handle.code

    def wait(self, handle: FakeHandle, timeout_s: float) -> int | None:
        return handle.code

    def signal(self, handle: FakeHandle, signum: int) -> None:
        handle.signals.append(signum)
        if signum in (signal.SIGKILL, signal.SIGTERM) and handle.code is None:
            handle.code = -signum

    def stop(self, handles: Iterable[FakeHandle], timeout_s: float, abort: threading.Event | None = None) -> None:
        handles = list(handles)
        self.stopped.append([h.task.name for h in handles])
        for h in handles:
            self.signal(h, signal.SIGTERM)

    oom = None

    def oom_killed(self, handle: FakeHandle) -> bool | None:
        return self.oom

    def dump_stacks(self, handle: FakeHandle, timeout_s: float) -> str:
        return "Thread 0x01 (most recent call first):\n  File \"train.py\", line 3 in step\n"

    def close(self) -> None:
        self.closed = True

    def latest(self, name: str) -> FakeHandle:
        return [h for _, h in self.started if h.task.name == name][-1]


class RecordingView:
    interval_s = 0.0

    def __init__(self) -> None:
        self.events: list[str] = []

    def update(self, snapshot) -> None:
        pass

    def event(self, elapsed_s: float, text: str) -> None:
        self.events.append(text)

    def close(self) -> None:
        pass


class Harness:
    def __init__(self, tmp_path: Path, spec: JobSpec, commands: dict[str, list[str]] | None = None) -> None:
        self.clock = FakeClock()
        self.store = HeartbeatStore(clock=self.clock)
        self.backend = FakeBackend(self.clock)
        plan = make_plan(spec, self.backend.allocate(spec), run_id="t", run_dir=tmp_path, health_address="127.0.0.1:1",
                         token="x", cores=2, commands=commands)
        self.view = RecordingView()
        self.sup = Supervisor(plan, self.backend, self.store, self.view, clock=self.clock, stop_timeout_s=1.0)
        self.sup.start()

    def task(self, name: str):
        return next(t for t in self.sup.snapshot().tasks if t.name == name)

    def beat(self, name: str, phase: str = "training", step: int | None = None,
             rejoined: dict[str, int] | None = None, **metrics: float) -> None:
        """A heartbeat of ``name``'s current attempt, as the task's reporter sends it: ``replicas_in_sync``
        and ``cluster_workers`` go to its typed ``formed``, ``resumed_from_step``, ``evaluated_step`` and
        ``rejoined`` (worker name -> count) to their typed fields, every other keyword to its metrics."""
        t = self.task(name)
        formed = {k: int(metrics.pop(k)) for k in ("replicas_in_sync", "cluster_workers") if k in metrics}
        control = {k: int(metrics.pop(k)) for k in ("resumed_from_step", "evaluated_step") if k in metrics}
        hb = pb.Heartbeat(task=pb.TaskKey(task_type=t.task.task_type, task_index=t.task.task_index, attempt=t.attempt),
                          phase=PHASES[phase], metrics=metrics, formed=pb.Formed(**formed) if formed else None,
                          rejoined=rejoined, **control)
        if step is not None:
            hb.step = step
        self.store.record(hb)

    def all_beat(self, phase: str = "training", step: int | None = None) -> None:
        for t in self.sup.snapshot().tasks:
            if not t.state.terminal:
                self.beat(t.name, "serving" if t.serves_forever else phase, None if t.serves_forever else step)

    def exit(self, name: str, code: int) -> None:
        self.backend.latest(name).code = code

    def tick(self, advance_s: float = 0.0) -> bool:
        self.clock.now += advance_s
        return self.sup.tick()

    def finish(self, max_ticks: int = 100):
        for _ in range(max_ticks):
            if self.tick(0.1):
                return self.sup.finish()
        raise AssertionError(f"the job did not end: {self.sup.state}, {self.sup.reason}")


def spec_of(**kw) -> JobSpec:
    sup = kw.pop("supervision", {})
    return JobSpec.create(supervision=SupervisionSpec.create(**{"backoff_s": 1.0, **sup}), **kw)


def test_only_the_coordinator_exiting_0_makes_the_job_succeed(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"success_policy": "chief"}))
    h.all_beat(step=1)
    h.tick()
    h.exit("worker-1", 0)  # not the coordinator: worker 0 is
    h.tick(0.1)
    assert h.sup.state is JobState.RUNNING
    assert h.task("worker-1").state is TaskState.SUCCEEDED
    h.exit("worker-0", 0)
    result = h.finish()
    assert (result.state, result.exit_code, result.reason) == (JobState.SUCCEEDED, 0, "worker-0 exited 0")


def test_a_ps_failure_under_pss_restarts_the_whole_cluster(tmp_path):
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1))
    h.all_beat(step=5)
    h.tick()
    h.exit("ps-0", -signal.SIGKILL)
    h.tick(0.1)
    assert h.sup.state is JobState.RESTARTING
    assert h.backend.stopped == [["chief-0", "worker-0", "worker-1"]]  # the survivors, at once
    h.tick(1.0)  # the backoff
    assert {t.name: t.attempt for t in h.sup.snapshot().tasks} == {"chief-0": 1, "worker-0": 1, "worker-1": 1,
                                                                   "ps-0": 1}
    (recovery,) = h.sup.snapshot().recoveries
    assert (recovery.scope, recovery.tasks) == ("group", ("chief-0", "worker-0", "worker-1", "ps-0"))


def test_a_worker_failure_under_pss_restarts_that_worker_alone(tmp_path):
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    assert h.backend.stopped == []
    h.tick(1.0)
    assert {t.name: t.attempt for t in h.sup.snapshot().tasks} == {"chief-0": 0, "worker-0": 0, "worker-1": 1,
                                                                   "ps-0": 0}
    assert h.sup.state is not JobState.RESTARTING


def test_a_worker_failure_under_mwms_restarts_the_group(tmp_path):
    h = Harness(tmp_path, spec_of(workers=3))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-2", -signal.SIGKILL)
    h.tick(0.1)
    assert h.backend.stopped == [["worker-0", "worker-1"]]
    h.tick(1.0)
    assert [t.attempt for t in h.sup.snapshot().tasks] == [1, 1, 1]


def test_a_restarted_pss_worker_has_recovered_once_the_coordinator_took_it_back_not_once_it_serves(tmp_path):
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    h.tick(1.0)  # the backoff: attempt 1 starts
    h.beat("worker-1", "serving")
    h.beat("chief-0", "training", 40, rejoined={"worker-0": 1})  # another worker's count: not this recovery
    h.tick(0.5)
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.resumed_at_s is None  # its server is up; the coordinator has not used it yet
    h.beat("chief-0", "training", 50, rejoined={"worker-0": 1, "worker-1": 1})
    h.tick(0.75)
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.resumed_at_s == pytest.approx(recovery.detected_at_s + 1.5)  # when that heartbeat came
    assert "worker-1 back in chief-0's rotation 1.5 s after the failure" in h.view.events


def test_of_workers_exiting_preempted_together_the_one_that_got_the_sigterm_is_the_cause(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=5)
    h.tick()
    (h.backend.latest("worker-1").stdout_path.parent / "sigterm-received").write_text("1796000000.0\n")
    h.exit("worker-0", 143)  # seen first: TF's handler made it save and exit too
    h.exit("worker-1", 143)
    h.tick(0.1)
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.cause == ("worker-1 (attempt 0) failed: exit code 143 (preempted): received SIGTERM from outside "
                              "(a preemption notice)")


def test_a_preempted_mwms_worker_waits_for_its_peers_to_save_and_exit_before_the_group_restarts(tmp_path):
    h = Harness(tmp_path, spec_of(workers=3))
    h.all_beat(step=5)
    h.tick()
    (h.backend.latest("worker-1").stdout_path.parent / "sigterm-received").write_text("1796000000.0\n")
    h.exit("worker-1", 143)  # TF's handler: every worker saves at the same step, then exits
    h.tick(0.1)
    h.tick(0.5)
    assert not any("waiting" in e for e in h.view.events)  # peers normally exit within milliseconds
    h.tick(0.5)
    h.tick(0.5)
    assert (h.sup.state, h.backend.stopped, h.sup.snapshot().recoveries) == (JobState.RUNNING, [], ())
    assert h.view.events.count("worker-1 exited preempted 1.0 s ago; waiting up to 30 s for worker-0, worker-2 to "
                               "save and exit too (every MWMS worker saves when one is preempted; "
                               "--preemption-grace)") == 1
    h.exit("worker-2", 143)
    h.tick(0.5)
    assert h.sup.snapshot().recoveries == ()  # worker-0, the coordination service's leader, leaves last
    h.exit("worker-0", 143)
    h.tick(0.1)
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.cause == ("worker-1 (attempt 0) failed: exit code 143 (preempted): received SIGTERM from outside "
                              "(a preemption notice)")
    assert h.backend.stopped == [] and all(h.backend.latest(n).signals == [] for n in ("worker-0", "worker-2"))


def test_a_worker_exiting_preempted_because_a_peer_was_says_which_peer(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=5)
    h.tick()
    (h.backend.latest("worker-1").stdout_path.parent / "sigterm-received").write_text("1796000000.0\n")
    h.exit("worker-0", 143)  # worker-1 still saving, and it never exits on its own
    h.tick(0.1)
    for _ in range(149):  # the preemption grace (30 s) is not over; worker-1 beats through its save
        h.beat("worker-1", "training", 5)
        h.tick(0.2)
    assert h.sup.state is not JobState.RESTARTING and h.backend.stopped == []
    h.tick(0.3)
    assert h.backend.stopped == [["worker-1"]]
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.cause == ("worker-1 received SIGTERM from outside (a preemption notice): worker-0 (attempt 0) "
                              "failed: exit code 143 (preempted): worker-1 received SIGTERM from outside; every worker "
                              "saved and exited")  # named after the one preempted (issue 21)


def test_a_preempted_pss_worker_restarts_at_once_without_waiting_for_anyone(tmp_path):
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", 143)
    h.tick(0.1)
    (recovery,) = h.sup.snapshot().recoveries
    assert (recovery.scope, recovery.tasks) == ("task", ("worker-1",))


def test_a_sigterm_from_outside_too_late_to_matter_is_said_not_swallowed(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=5)
    h.tick()
    (h.backend.latest("worker-1").stdout_path.parent / "sigterm-received").write_text("1796000000.0\n")
    h.exit("worker-0", 0)
    h.exit("worker-1", 0)
    result = h.finish()
    assert result.exit_code == 0
    assert "worker-1 received SIGTERM from outside (a preemption notice) but finished first" in h.view.events
    assert not any("worker-0 received" in e for e in h.view.events)


def test_a_second_failure_of_a_pss_worker_waits_for_a_new_rejoin_not_the_old_count(tmp_path):
    # the ps is silent through these 7 fake seconds: a heartbeat timeout longer than that
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1,
                                  supervision={"heartbeat_timeout_s": 10.0}))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    h.tick(1.0)
    h.beat("chief-0", "training", 40, rejoined={"worker-1": 1})
    h.tick(0.1)
    h.beat("worker-1", "serving")
    h.tick(0.1)
    h.exit("worker-1", -signal.SIGKILL)  # again
    h.tick(0.1)
    h.tick(5.0)  # past the second restart's backoff
    h.beat("chief-0", "training", 60, rejoined={"worker-1": 1})  # the count of the first rejoin, sent again
    h.tick(0.5)
    first, second = h.sup.snapshot().recoveries
    assert second.restarted_at_s is not None
    assert first.resumed_at_s is not None and second.resumed_at_s is None
    h.beat("chief-0", "training", 70, rejoined={"worker-1": 2})
    h.tick(0.1)
    assert h.sup.snapshot().recoveries[1].resumed_at_s is not None


def test_a_pss_worker_restarted_before_the_coordinator_trains_has_recovered_once_it_serves(tmp_path):
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1))
    h.all_beat("initializing")
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    h.tick(1.0)
    h.beat("worker-1", "serving")  # the coordinator will connect to it like to any worker: no rotation news
    h.tick(0.5)
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.resumed_at_s == pytest.approx(recovery.detected_at_s + 1.0)


def test_a_restarted_pss_worker_of_a_users_program_has_recovered_once_it_serves(tmp_path):
    commands = {t: ["python", "train.py"] for t in ("chief", "worker", "ps")}
    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1), commands=commands)
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)
    h.tick(0.1)
    h.tick(1.0)
    h.beat("worker-1", "serving")
    h.tick(0.5)
    (recovery,) = h.sup.snapshot().recoveries
    assert recovery.resumed_at_s == pytest.approx(recovery.detected_at_s + 1.0)
    assert "worker-1 serving again 1.0 s after the failure" in h.view.events


@pytest.mark.parametrize("code, restarted", [(127, False), (128, True), (137, True), (1, False), (-9, True)])
def test_exit_code_policy_boundaries_in_the_loop(tmp_path, code, restarted):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-1", code)
    h.tick(0.1)
    if restarted:
        assert h.sup.state is JobState.RESTARTING and h.sup.restarts_used == 1
    else:
        assert h.sup.state is JobState.FAILED and h.sup.restarts_used == 0
        assert "exit codes 1-127 are permanent" in h.sup.reason


def test_the_first_restart_waits_backoff_s_exactly(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, supervision={"backoff_s": 2.0}))
    h.all_beat(step=5)
    h.tick()
    h.exit("worker-0", -signal.SIGKILL)
    h.tick(0.1)
    failed_at = h.clock.now
    assert len(h.backend.started) == 1
    h.tick(1.9)
    assert len(h.backend.started) == 1, "restarted before the backoff"
    h.tick(0.1)
    assert len(h.backend.started) == 2, "the first restart waited longer than backoff_s"
    assert h.backend.started[1][0] == pytest.approx(failed_at + 2.0)
    # the second restart waits twice as long
    h.beat("worker-0", step=6)
    h.tick()
    h.exit("worker-0", -signal.SIGKILL)
    h.tick(0.1)
    h.tick(3.9)
    assert len(h.backend.started) == 2
    h.tick(0.1)
    assert len(h.backend.started) == 3


def test_the_heartbeat_timeout_is_strictly_exceeded_before_a_task_is_hung(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"heartbeat_timeout_s": 4.0}))
    h.all_beat(step=5)
    h.tick()
    h.beat("worker-0", step=6)
    h.tick(4.0)  # worker-1 silent for exactly 4 s: not yet
    assert h.sup.failures == []
    h.beat("worker-0", step=7)
    h.tick(0.25)
    (failure,) = h.sup.failures
    assert failure.task == TaskId("worker", 1) and "no heartbeat for 4.2 s" in failure.message
    assert h.backend.latest("worker-1").signals[-1] == signal.SIGKILL
    stacks = tmp_path / "attempt-0" / "worker-1" / "stacks.txt"
    assert "most recent call first" in stacks.read_text() and str(stacks) in failure.message


def test_a_stalled_step_is_a_hang_and_the_furthest_behind_is_blamed_first(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"stall_timeout_s": 5.0, "restart_policy": {"all": "never"}}))
    h.beat("worker-0", step=12)
    h.beat("worker-1", step=9)
    h.tick()
    for _ in range(6):  # heartbeats go on, steps do not move
        h.all_beat()
        h.tick(1.0)
    assert h.sup.state is JobState.FAILED
    assert h.sup.failures[0].task == TaskId("worker", 1)  # step 9: it stopped first
    assert "no training progress" in h.sup.failures[0].message


def test_an_evaluator_failure_never_fails_the_job_nor_uses_the_jobs_restarts(tmp_path):
    # the restarted evaluator never beats in these 5 s steps: a heartbeat timeout longer than them
    h = Harness(tmp_path, spec_of(workers=1, evaluator=1, supervision={"max_restarts": 1, "heartbeat_timeout_s": 10.0}))
    h.all_beat(step=1)
    h.tick()
    for step in range(2, 5):
        h.exit("evaluator-0", 1)
        h.tick(0.1)
        h.beat("worker-0", step=step)
        h.tick(5.0)
    assert h.sup.state is JobState.RUNNING and h.sup.restarts_used == 0
    assert h.task("evaluator-0").state is TaskState.FAILED  # its own restarts ran out; the job goes on
    h.exit("worker-0", 0)
    assert h.finish().exit_code == 0


def test_the_deadline_fails_the_job_and_stops_every_task(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"deadline_s": 30.0}))
    for step in range(1, 30):
        h.all_beat(step=step)
        h.tick(1.0)
    h.all_beat(step=30)
    h.tick(0.9)
    assert not h.sup.state.terminal
    h.tick(0.1)
    result = h.finish()
    assert (result.exit_code, result.reason) == (1, "the job deadline of 30 s passed")
    assert [t.state for t in h.sup.snapshot().tasks] == [TaskState.STOPPED, TaskState.STOPPED]


def test_request_stop_ends_with_130_and_closes_the_backend(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=1)
    h.tick()
    h.sup.request_stop("interrupted by SIGINT")
    result = h.finish()
    assert (result.exit_code, result.reason) == (130, "interrupted by SIGINT")
    assert h.sup.snapshot().ended and h.sup.snapshot().exit_code == 130


def test_restarts_exhausted_fail_the_job(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, supervision={"max_restarts": 1, "backoff_s": 0.0}))
    h.all_beat(step=1)
    h.tick()
    h.exit("worker-0", -9)
    h.tick(0.1)
    h.tick(0.1)
    h.exit("worker-0", -9)
    result = h.finish()
    assert result.exit_code == 1
    assert "restarts exhausted: worker-0 failed on attempt 2 of 2, 1 of --max-restarts 1 used" in result.reason
    assert result.root_cause is not None and result.root_cause.attempt == 1  # the failure that ended the job


# -- issue 11: success policy, end of training, peers, memory, the failure that ended the job --
def test_all_workers_is_the_mwms_default_and_a_crash_after_the_chief_succeeded_fails_the_job(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=3)
    h.tick()
    h.exit("worker-0", 0)  # the coordinator succeeded ...
    h.tick(0.1)
    assert not h.sup.state.terminal
    h.exit("worker-1", 1)  # ... then worker-1 crashed (its save collided)
    result = h.finish()
    assert (result.state, result.exit_code) == (JobState.FAILED, 1)
    assert result.root_cause is not None and result.root_cause.task == TaskId("worker", 1)
    assert result.root_cause.after_training and h.sup.restarts_used == 0
    assert "training had ended (worker-0 succeeded)" in result.reason


def test_under_the_chief_policy_a_crash_after_success_is_named_not_hidden(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"success_policy": "chief"}))
    h.all_beat(step=3)
    h.tick()
    h.exit("worker-0", 0)
    h.tick(0.1)
    h.exit("worker-1", 1)
    result = h.finish()
    assert (result.state, result.exit_code) == (JobState.SUCCEEDED, 0)
    (late,) = h.sup.snapshot().late_failures
    assert late.task == TaskId("worker", 1) and late.after_success


def test_all_workers_succeed_only_when_every_trainer_exited_0(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.all_beat(step=3)
    h.tick()
    h.exit("worker-1", 0)
    h.tick(0.1)
    h.exit("worker-0", 0)
    result = h.finish()
    assert (result.state, result.reason) == (JobState.SUCCEEDED, "every chief and worker exited 0 (worker-0, worker-1)")


def test_post_training_work_is_never_a_stall_and_a_failure_then_never_reruns_training(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"stall_timeout_s": 5.0,
                                                          "restart_policy": {"all": "on-failure"}}))
    h.all_beat(step=90)
    h.tick()
    for _ in range(20):  # exporting for 20 s > stall timeout: heartbeats go on, no steps
        h.all_beat(phase="finishing")
        h.tick(1.0)
    assert h.sup.failures == [] and h.sup.state is JobState.RUNNING
    h.exit("worker-1", -signal.SIGKILL)
    result = h.finish()
    assert result.state is JobState.FAILED and h.sup.restarts_used == 0
    assert "training had ended (worker-0 reported finishing)" in result.reason


def test_the_finish_timeout_bounds_post_training_work_when_set(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, supervision={"finish_timeout_s": 5.0}))
    h.all_beat(step=9)
    h.tick()
    for _ in range(6):
        h.all_beat(phase="finishing")
        h.tick(1.0)
    (failure,) = h.sup.failures
    assert "after training ended (finish timeout 5 s)" in failure.message


def test_a_collective_timeout_is_retried_whatever_its_code_and_the_stuck_peer_is_the_culprit(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2))
    h.beat("worker-0", step=10)
    h.beat("worker-1", step=10)
    h.tick()
    for step in range(11, 15):  # worker-1 stops at step 10; worker-0 goes on into the collective
        h.beat("worker-0", step=step)
        h.beat("worker-1")
        h.tick(1.0)
    h.backend.latest("worker-0").stderr_path.write_text(
        "Traceback (most recent call last):\n  File \"train.py\", line 9\n"
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective has timed out\n")
    h.exit("worker-0", 1)  # exit 1: permanent under exit-code, but a consequence of a peer
    h.tick(0.1)
    assert h.sup.state is JobState.RESTARTING and h.sup.restarts_used == 1
    failure = h.sup.failures[0]
    assert failure.message == "DeadlineExceededError: Collective has timed out"
    assert failure.peer_error and failure.likely_culprit.startswith("worker-1 (last step 10")


def test_a_sigkill_with_an_oom_kill_counted_says_memory_with_the_peak_rss(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, supervision={"restart_policy": {"all": "never"}}))
    h.backend.oom = True
    t = h.task("worker-0")
    hb = pb.Heartbeat(task=pb.TaskKey(task_type="worker", task_index=0, attempt=t.attempt), phase=pb.PHASE_TRAINING,
                      rss_bytes=900 * 2**20, step=3)
    h.store.record(hb)
    h.tick()
    h.exit("worker-0", -signal.SIGKILL)
    result = h.finish()
    assert result.root_cause is not None and result.root_cause.likely_oom
    assert "peak RSS 900 MiB; likely killed for memory" in result.root_cause.message


@pytest.mark.parametrize("oom, says", [
    (False, "signal SIGKILL: peak RSS 200 MiB; not the OOM killer (no OOM kill counted)"),
    (None, "signal SIGKILL: peak RSS 200 MiB"),  # the cgroup could not be read: no claim either way
])
def test_a_sigkill_without_an_oom_kill_says_so_when_the_cgroup_was_read(tmp_path, oom, says):
    h = Harness(tmp_path, spec_of(workers=1, supervision={"restart_policy": {"all": "never"}}))
    h.backend.oom = oom
    t = h.task("worker-0")
    h.store.record(pb.Heartbeat(task=pb.TaskKey(task_type="worker", task_index=0, attempt=t.attempt),
                                phase=pb.PHASE_TRAINING, rss_bytes=200 * 2**20, step=3))
    h.tick()
    h.exit("worker-0", -signal.SIGKILL)
    result = h.finish()
    assert result.root_cause is not None and not result.root_cause.likely_oom
    assert result.root_cause.headline() == f"worker-0 (attempt 0) failed: {says}"


def test_the_root_cause_is_the_failure_that_ended_the_job_not_a_recovered_one(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"backoff_s": 0.0}))
    h.all_beat(step=3)
    h.tick()
    h.exit("worker-1", -signal.SIGKILL)  # recovered: group restart
    h.tick(0.1)
    h.tick(0.1)
    h.all_beat(step=1)
    h.tick(0.1)
    h.backend.latest("worker-1").stderr_path.write_text(
        "Traceback (most recent call last):\n  File \"main.py\", line 3, in <module>\n"
        "ZeroDivisionError: division by zero\n")
    h.exit("worker-1", 1)
    result = h.finish()
    assert result.root_cause is not None
    assert (result.root_cause.attempt, result.root_cause.message) == (1, "ZeroDivisionError: division by zero")
    assert [f.attempt for f in h.sup.snapshot().failures] == [0, 1]  # the recovered one is history


def test_time_the_health_server_was_deaf_is_no_task_silence(tmp_path):
    """10,000 tasks' ``status`` (7 MB of JSON) held the GIL for seconds at a time and the scale
    bench's tasks were declared hung by the hundred: a heartbeat not taken in because the
    server's own loop was held up is not the task's silence (``HeartbeatStore.deaf_s``)."""
    h = Harness(tmp_path, spec_of(workers=2, supervision={"heartbeat_timeout_s": 4.0}))
    h.store.pulse()
    h.all_beat(step=5)
    h.tick()
    for _ in range(10):  # 1 s of a loop on time: heartbeats keep coming from worker-0 only
        h.clock.now += 0.1
        h.store.pulse()
    h.beat("worker-0", step=6)
    h.clock.now += 3.0  # the loop held up 3 s: its next pulse is overdue
    h.tick(0.5)  # worker-1 silent 4.5 s, 3.4 of them while nothing could be heard: not hung
    assert h.sup.failures == []
    h.store.pulse()  # the loop runs again: the late pulse is recorded, the same 3.4 s
    h.beat("worker-0", step=7)
    h.tick(0.1)
    assert h.sup.failures == []
    for _ in range(35):  # 3.5 s more of silence from worker-1 while the loop keeps up: 8.1 - 3.4 > 4
        h.clock.now += 0.1
        h.store.pulse()
        h.beat("worker-0", step=8)
        h.tick()
    (failure,) = h.sup.failures
    assert failure.task == TaskId("worker", 1) and "no heartbeat for 4." in failure.message, failure.message


def test_a_store_no_server_pulses_is_never_deaf():
    clock = FakeClock()
    store = HeartbeatStore(clock=clock)
    clock.now += 100.0
    assert store.deaf_s(clock.now - 50.0) == 0.0
    store.pulse()
    clock.now += 0.1
    store.pulse()  # on time
    clock.now += 0.2  # 0.1 s late: a hiccup, not deafness
    store.pulse()
    assert store.deaf_s(clock.now - 50.0) == 0.0
    clock.now += 2.1  # 2 s late
    store.pulse()
    assert store.deaf_s(clock.now - 50.0) == pytest.approx(2.0)
    assert store.deaf_s(clock.now + 1.0, clock.now + 1.0) == 0.0  # none after it


class EventfdBackend(FakeBackend):
    """The fake backend with exit descriptors (``Capability.EXIT_EVENTS``): an eventfd per
    attempt, written when the test ends the attempt, as a pidfd becomes readable."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.fds: dict[str, int] = {}

    def exit_fd(self, handle: FakeHandle) -> int | None:
        fd = os.eventfd(0)
        self.fds[handle.task.name] = os.dup(fd)
        return fd

    def end(self, name: str, code: int) -> None:
        self.latest(name).code = code
        os.eventfd_write(self.fds.pop(name), 1)


class SlowDrainStore(HeartbeatStore):
    """The real store, whose drained records take ``per_record_s`` of the fake clock each to go
    through, and call ``at(i)`` before the i-th (a long tick of a large job, and what happens
    during it)."""

    def __init__(self, clock: FakeClock, per_record_s: float) -> None:
        super().__init__(clock=clock)
        self.clock, self.per_record_s = clock, per_record_s
        self.at: Callable[[int], None] = lambda i: None

    def drain(self):
        records = super().drain()
        store = self

        class Slow(dict):
            def items(self):
                for i, item in enumerate(super().items(), 1):
                    store.at(i)
                    store.clock.now += store.per_record_s
                    yield item

        return Slow(records)


def test_an_exit_during_a_long_tick_is_taken_within_a_slice_of_its_work(tmp_path):
    """1,000 tasks' heartbeats in one tick, 1 ms each; worker-7 exits at the 300th. Its failure is
    taken at the next look at the exit descriptors (after the 512th), ~0.21 s into the tick, not at
    the next tick's start, ~0.7 s after the exit."""
    clock = FakeClock()
    store = SlowDrainStore(clock, per_record_s=0.001)
    backend = EventfdBackend(clock)
    spec = spec_of(strategy="parameter_server", workers=998, ps=1)
    plan = make_plan(spec, backend.allocate(spec), run_id="t", run_dir=tmp_path, health_address="127.0.0.1:1",
                     token="x", cores=2)
    sup = Supervisor(plan, backend, store, RecordingView(), clock=clock, stop_timeout_s=1.0)

    def all_beat(step: int) -> None:  # Harness.all_beat pictures the job per heartbeat: O(tasks²)
        for t in spec.tasks():
            store.record(pb.Heartbeat(task=pb.TaskKey(task_type=t.task_type, task_index=t.task_index, attempt=0),
                                      phase=pb.PHASE_SERVING if t.task_type == "ps" else pb.PHASE_TRAINING, step=step))

    try:
        sup.start()
        all_beat(5)
        sup.tick()
        all_beat(6)
        exited_at: list[float] = []

        def at(i: int) -> None:
            if i == 300:
                backend.end("worker-7", -signal.SIGKILL)
                exited_at.append(clock.now)

        store.at = at
        clock.now += 0.1
        sup.tick()
        (failure,) = sup.failures
        assert failure.task == TaskId("worker", 7), failure
        assert 0.2 <= failure.at - exited_at[0] <= 0.22, (failure.at, exited_at)  # 212 records later
    finally:
        sup._exits.close()
        for fd in backend.fds.values():
            os.close(fd)
