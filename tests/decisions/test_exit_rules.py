"""The rules for the ends of tasks (:mod:`orchestrator.supervisor.rules.exitrules`) by tables, and the
loop acting on them with a fake backend and clock: the evaluator's grace, a task stuck in its
exit, crash loops."""

from __future__ import annotations

import pytest

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor import JobState, TaskState
from orchestrator.supervisor.rules.exitrules import crash_loop, exit_overdue, finished, stuck_thread
from tests.decisions.test_supervisor_loop import PHASES, Harness, spec_of

KEY_ERROR = "KeyError: 'evaluator'"


@pytest.mark.parametrize("errors, limit, expect", [
    ([(0, KEY_ERROR), (1, KEY_ERROR), (2, KEY_ERROR)], 3, 3),
    ([(0, KEY_ERROR), (1, KEY_ERROR)], 3, 0),  # not yet
    ([(0, KEY_ERROR), (1, KEY_ERROR), (2, KEY_ERROR), (3, KEY_ERROR)], 3, 4),
    ([(0, "ValueError: x"), (1, KEY_ERROR), (2, KEY_ERROR)], 3, 0),  # a different error breaks the run
    ([(0, KEY_ERROR), (1, "ValueError: x"), (2, KEY_ERROR), (3, KEY_ERROR)], 3, 0),
    ([(0, KEY_ERROR), (2, KEY_ERROR), (3, KEY_ERROR)], 3, 0),  # attempt 1 failed elsewhere (not consecutive)
    ([(0, ""), (1, ""), (2, "")], 3, 0),  # kills and hangs carry no exception line: never a loop
    ([(0, KEY_ERROR), (1, KEY_ERROR), (2, KEY_ERROR)], 0, 0),  # 0: never
    ([(0, KEY_ERROR), (1, KEY_ERROR)], 2, 2),
    ([], 3, 0),
])
def test_a_crash_loop_is_the_same_exception_line_on_consecutive_attempts(errors, limit, expect):
    assert crash_loop(errors, limit) == expect


@pytest.mark.parametrize("phase, exiting, expect", [
    ("done", False, True), ("finishing", True, True), ("saving", True, True), ("evaluating", True, True),
    ("finishing", False, False),  # still exporting, evaluating: not finished
    ("training", True, False),  # exiting without saying training ended: maybe an exception in main
    ("serving", True, False), (None, True, False),
])
def test_finished_is_done_or_exiting_after_training_ended(phase, exiting, expect):
    assert finished(phase, exiting) is expect


def test_the_exit_grace_is_strictly_exceeded():
    s = SupervisionSpec.create(exit_grace_s=5.0)
    assert exit_overdue(10.0, 15.0, s) is None
    assert exit_overdue(10.0, 15.01, s) == "still alive 5.0 s after it finished (exit grace 5 s)"
    assert exit_overdue(None, 1e9, s) is None


PY_SPY_THREAD = """Process 3354: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 3354 (idle): "MainThread"
    _shutdown (threading.py:1590)
Thread 3357 (idle): "heartbeats"
    Condition.wait (threading.py:327)
Thread 3356 (idle): "loader"
    Condition.wait (threading.py:327)
    Event.wait (threading.py:629)
    load_forever (train.py:12)
    Thread.run (threading.py:982)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
"""
PY_SPY_ATEXIT = """Process 40: python -m orchestrator.task.execwrap -- python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 40 (idle): "MainThread"
    _supervise (execwrap.py:210)

Process 41: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 41 (idle): "MainThread"
    Event.wait (threading.py:629)
    flush_forever (train.py:7)
"""
FAULTHANDLER = """Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/work/worker/train.py", line 40 in pump

Current thread 0x00007f00 (most recent call first):
  File "/work/worker/train.py", line 99 in teardown
"""


@pytest.mark.parametrize("dump, waits_for, expect", [
    (PY_SPY_THREAD, (), 'the main thread waits in threading._shutdown for the non-daemon thread "loader" in '
                        'load_forever (train.py:12), waiting in Condition.wait (threading.py:327)'),
    (PY_SPY_THREAD, ("loader",), 'the main thread waits in threading._shutdown for the non-daemon thread "loader" in '
                                 'load_forever (train.py:12), waiting in Condition.wait (threading.py:327)'),
    (PY_SPY_ATEXIT, (), 'the main thread "MainThread" in flush_forever (train.py:7), waiting in Event.wait '
                        '(threading.py:629)'),  # the program's process, not execwrap's
    (FAULTHANDLER, (), 'the main thread "thread 0x00007f00" in teardown (train.py:99)'),
    ("", (), ""),
])
def test_the_thread_a_task_is_stuck_in_is_read_from_its_stack_dump(dump, waits_for, expect):
    assert stuck_thread(dump, waits_for) == expect


# -- the loop --------------------------------------------------------------------------------------


def _exiting(h: Harness, name: str, phase: str = "finishing", message: str = "") -> None:
    t = h.task(name)
    h.store.record(pb.Heartbeat(task=pb.TaskKey(task_type=t.task.task_type, task_index=t.task.task_index,
                                                attempt=t.attempt), phase=PHASES[phase], exiting=True,
                                message=message))


def _crash(h: Harness, name: str, line: str) -> None:
    t = h.task(name)
    (t.stderr_path.parent / "stderr.log").write_text(f"Traceback (most recent call last):\n  File \"e.py\", "
                                                     f"line 1, in <module>\n{line}\n")
    h.exit(name, 1)


def test_the_evaluator_gets_its_own_grace_after_the_job_succeeded_then_its_final_evaluation_is_lost(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, evaluator=1, supervision={"evaluator_grace_s": 60.0}))
    h.all_beat(step=1)
    h.beat("evaluator-0", "training", step=1, evaluated_step=1, eval_accuracy=0.5)
    h.tick()
    h.exit("worker-0", 0)
    h.tick(0.1)
    assert h.sup.state is JobState.SUCCEEDED
    h.tick(45.0)  # past the 30 s other tasks get: the evaluator is still evaluating the last checkpoint
    assert h.task("evaluator-0").state is TaskState.RUNNING and not h.sup.warnings
    h.tick(15.1)
    final = h.finish()
    assert h.task("evaluator-0").state is TaskState.STOPPED
    assert final.exit_code == 0
    assert final.warnings == ("evaluator-0: final evaluation lost: still evaluating 60 s after the job succeeded "
                              "(evaluator grace 60 s, --evaluator-grace); its last result is of step 1",)


def test_an_evaluator_that_finishes_within_its_grace_loses_nothing(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, evaluator=1, supervision={"evaluator_grace_s": 60.0}))
    h.all_beat(step=1)
    h.tick()
    h.exit("worker-0", 0)
    h.tick(50.0)
    h.beat("evaluator-0", "training", step=2, evaluated_step=2)
    h.exit("evaluator-0", 0)
    final = h.finish()
    assert h.task("evaluator-0").state is TaskState.SUCCEEDED and final.warnings == ()


def test_an_evaluator_failing_with_the_same_error_is_a_crash_loop_and_a_warning(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, evaluator=1, supervision={"max_restarts": 5, "heartbeat_timeout_s": 30.0}))
    h.all_beat(step=1)
    h.tick()
    for attempt in range(3):
        assert h.task("evaluator-0").attempt == attempt
        _crash(h, "evaluator-0", KEY_ERROR)
        h.tick(0.1)
        h.beat("worker-0", step=2 + attempt)
        h.tick(5.0)
    assert h.task("evaluator-0").state is TaskState.FAILED and h.task("evaluator-0").attempt == 2  # no 4th attempt
    assert any("evaluator-0 is not restarted: the same error 3 times in a row (KeyError: 'evaluator')" in e
               for e in h.view.events), h.view.events
    h.exit("worker-0", 0)
    final = h.finish()
    assert final.exit_code == 0
    assert final.warnings == ("evaluator-0 never evaluated: it failed with the same error 3 times in a row "
                              "(KeyError: 'evaluator'): a crash loop, a restart would fail the same way (crash "
                              "loop limit 3, --crash-loop-limit)",)


def test_a_training_task_in_a_crash_loop_fails_the_job_before_its_restarts_run_out(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"max_restarts": 10, "restart_policy": {"all": "on-failure"}}))
    for attempt in range(3):
        h.all_beat(step=1)
        h.tick(0.1)
        _crash(h, "worker-1", "ValueError: bad shape" if attempt == 0 else KEY_ERROR)
        h.tick(0.1)
        h.tick(10.0)
    assert h.sup.state is JobState.RESTARTING or h.sup.state is JobState.STARTING  # 2 the same so far: restarted
    h.all_beat(step=1)
    h.tick(0.1)
    _crash(h, "worker-1", KEY_ERROR)
    final = h.finish()
    assert final.exit_code == 1 and h.sup.restarts_used == 3
    assert "the same error 3 times in a row (KeyError: 'evaluator')" in final.reason, final.reason


def test_a_finished_task_stuck_in_its_exit_is_killed_and_counts_as_succeeded_with_the_thread_named(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, supervision={"exit_grace_s": 5.0, "heartbeat_timeout_s": 2.0}))
    h.backend.dump_stacks = lambda handle, timeout_s: PY_SPY_THREAD  # type: ignore[method-assign]
    h.all_beat(step=3)
    h.tick()
    _exiting(h, "worker-0", message="exiting; waiting for non-daemon thread(s): loader")
    h.tick(0.1)
    h.tick(4.9)
    assert h.sup.state is JobState.RUNNING  # within its exit grace (and past the heartbeat timeout: never hung)
    h.tick(0.2)
    final = h.finish()
    assert final.exit_code == 0, final.reason
    assert h.backend.latest("worker-0").signals[-1] == 9
    assert h.task("worker-0").state is TaskState.SUCCEEDED
    (warning,) = final.warnings
    assert warning.startswith('worker-0 finished its work but was stuck in its exit, in the main thread waits in '
                              'threading._shutdown for the non-daemon thread "loader" in load_forever (train.py:12)')
    assert "stack dump in" in warning and (tmp_path / "attempt-0" / "worker-0" / "stacks.txt").is_file()
    assert not final.failures


def test_a_trainer_stuck_in_its_exit_after_the_coordinator_succeeded_does_not_fail_the_job(tmp_path):
    h = Harness(tmp_path, spec_of(workers=2, supervision={"exit_grace_s": 300.0}))  # all-workers
    h.all_beat(step=3)
    h.tick()
    h.exit("worker-0", 0)
    _exiting(h, "worker-1")
    h.tick(0.1)
    h.tick(30.1)  # the other trainers' 30 s after the coordinator succeeded
    final = h.finish()
    assert final.exit_code == 0, final.reason
    assert "worker-1 finished its work but was stuck in its exit" in final.warnings[0]


def test_a_task_exiting_before_it_said_training_ended_is_not_given_the_exit_grace(tmp_path):
    h = Harness(tmp_path, spec_of(workers=1, supervision={"exit_grace_s": 5.0, "deadline_s": 60.0}))
    h.all_beat(step=3)
    h.tick()
    _exiting(h, "worker-0", phase="training")  # an exception in main may be on its way: wait for its exit
    h.tick(0.1)
    final = h.finish(max_ticks=1000)
    assert final.exit_code == 1 and final.reason == "the job deadline of 60 s passed"
