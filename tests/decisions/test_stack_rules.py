"""Where a hung task is stuck, from its stack dump (issue 35, item 6): stack_rules as tables over
real dump formats (py-spy's, as the user-program tasks are dumped; faulthandler's, as the built-in
programs dump themselves)."""

from __future__ import annotations

import pytest

from orchestrator.supervisor.rules.stack_rules import culprit_order, in_collective, stuck_frame, stuck_line, waited_on

WRAPPER = """Process 4953: python -m orchestrator.task.execwrap -- python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4953 (idle): "MainThread"
    Popen._try_wait (subprocess.py:2004)
    Popen.wait (subprocess.py:1264)
    _supervise (orchestrator/task/execwrap.py:245)
    <module> (orchestrator/task/execwrap.py:349)
    _run_code (<frozen runpy>:88)

"""
STUCK_READING = WRAPPER + """Process 4960: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4960 (idle): "MainThread"
    Condition.wait (threading.py:331)
    Event.wait (threading.py:629)
    read_shard_record (programs/train.py:57)
    main (programs/train.py:80)
    <module> (programs/train.py:90)
Thread 4988 (idle): "heartbeats"
    _StreamUnaryMultiCallable._blocking (grpc/_channel.py:1488)
    HeartbeatReporter._run (orchestrator/task/reporter.py:311)
"""
IN_ALL_REDUCE = WRAPPER + """Process 4961: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4961 (idle): "MainThread"
    quick_execute (tensorflow/python/eager/execute.py:53)
    _batch_all_reduce (tensorflow/python/distribute/cross_device_ops.py:1150)
    train_step (programs/train.py:70)
    main (programs/train.py:82)
"""
FAULTHANDLER = """Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/work/orchestrator/task/reporter.py", line 266 in _heartbeats

Current thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 629 in wait
  File "/work/worker/custom_loop.py", line 41 in next_batch
  File "/work/worker/__main__.py", line 12 in <module>
"""
NO_THREADING = """Process 4707: python /tmp/sleep.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4707 (idle)
    read_shard_record (sleep.py:3)
    main (sleep.py:5)
"""


@pytest.mark.parametrize("dump, frame", [
    (STUCK_READING, "read_shard_record (train.py:57)"),     # the program's frame, not threading's or the wrapper's
    (IN_ALL_REDUCE, "train_step (train.py:70)"),
    (FAULTHANDLER, "next_batch (custom_loop.py:41)"),      # faulthandler: the current thread is the main one
    (NO_THREADING, "read_shard_record (sleep.py:3)"),      # py-spy names no thread: the one whose id is the pid's
    (WRAPPER, "Popen._try_wait (subprocess.py:2004)"),     # nothing of the program's: the innermost frame
    ("", ""),
])
def test_stuck_frame(dump, frame):
    assert stuck_frame(dump) == frame


@pytest.mark.parametrize("dump, inside", [(STUCK_READING, False), (IN_ALL_REDUCE, True), (FAULTHANDLER, False),
                                          ("", False)])
def test_in_collective(dump, inside):
    assert in_collective(dump) is inside


@pytest.mark.parametrize("steps, dumps, order", [
    ([44, 44], [IN_ALL_REDUCE, STUCK_READING], [1, 0]),  # a tie: the one outside the collective first
    ([44, 40], [IN_ALL_REDUCE, STUCK_READING], [1, 0]),
    ([40, 44], [IN_ALL_REDUCE, STUCK_READING], [1, 0]),  # the stacks before the steps
    ([44, 40], ["", ""], [1, 0]),                        # no dumps: by step, as before
    ([44, None], [IN_ALL_REDUCE, ""], [1, 0]),           # no dump ranks before a waiter
])
def test_culprit_order(steps, dumps, order):
    assert culprit_order(steps, dumps) == order


@pytest.mark.parametrize("hung, peers, found", [
    ([IN_ALL_REDUCE], [STUCK_READING, IN_ALL_REDUCE, ""], [0]),
    ([STUCK_READING], [STUCK_READING], []),  # the hung one is not waiting in a collective: its peers are not asked
    ([IN_ALL_REDUCE], [IN_ALL_REDUCE], []),
])
def test_waited_on(hung, peers, found):
    assert waited_on(hung, peers) == found


def test_stuck_line():
    assert stuck_line("worker-1", STUCK_READING) == "worker-1 is stuck in read_shard_record (train.py:57)"
    assert "inside a collective" in stuck_line("worker-0", IN_ALL_REDUCE)
    assert stuck_line("worker-0", "") == ""


def test_the_loop_dumps_every_hung_task_and_the_peer_a_collective_waits_for_then_kills_that_peer_first(tmp_path):
    """The loop (decide, then act): worker-0's stall deadline comes first and its stacks show it in
    the all-reduce; worker-1, whose deadline has not come, is dumped too, found outside any
    collective (reading its input), and killed first as the cause (hangs.culprits_first)."""
    from orchestrator.spec.model import TaskId
    from orchestrator.supervisor import JobState
    from tests.decisions.test_supervisor_loop import Harness, spec_of

    h = Harness(tmp_path, spec_of(workers=2, supervision={"stall_timeout_s": 5.0, "restart_policy": {"all": "never"}}))
    dumps = {"worker-0": IN_ALL_REDUCE, "worker-1": STUCK_READING}
    h.backend.dump_stacks = lambda handle, timeout_s: dumps[handle.task.name]  # type: ignore[method-assign]
    h.all_beat(step=43)
    h.tick()
    h.tick(2.0)
    h.beat("worker-1", step=44)  # it reported a step later than worker-0: its own deadline is later
    h.tick()
    for _ in range(4):
        h.all_beat()
        h.tick(1.0)
    assert h.sup.state is JobState.FAILED
    assert [f.task for f in h.sup.failures] == [TaskId("worker", 1), TaskId("worker", 0)]
    first = h.sup.failures[0].message
    assert "worker-0 waits in a collective for it (step 44)" in first, first
    assert "worker-1 is stuck in read_shard_record (train.py:57)" in first, first
    assert "inside a collective" in h.sup.failures[1].message
    assert "worker-1 is what worker-0 waits for in a collective; killing it too" in h.view.events
