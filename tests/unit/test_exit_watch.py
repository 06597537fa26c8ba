"""The supervisor's exit watch (orchestrator.supervisor.exits) with real processes: a pidfd wakes
the loop when its process dies; a wake-up from another thread does too; tasks without a
descriptor (or past the descriptor budget) are polled. Every wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from orchestrator.backends.host import pidfd
from orchestrator.supervisor.exits import ExitWatch, descriptor_budget

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd_open (Linux >= 5.3, Python >= 3.9)")


@pytest.fixture
def sleeper():
    started = []

    def start() -> subprocess.Popen[bytes]:
        popen = subprocess.Popen(["sleep", "60"], start_new_session=True)
        started.append(popen)
        return popen

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def ready_within(watch: ExitWatch, timeout_s: float) -> list[str]:
    """What the watch reports ready, waiting in it (not polling) at most ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        names = watch.ready()
        if names:
            return names
        watch.wait(deadline - time.monotonic())
    return watch.ready()


def test_a_sigkilled_process_wakes_the_watch_and_only_it_is_reported(sleeper):
    watch = ExitWatch()
    victim, bystander = sleeper(), sleeper()
    watch.watch("worker-1", pidfd(victim))
    watch.watch("worker-2", pidfd(bystander))
    assert watch.watched("worker-1") and watch.watched("worker-2")
    assert watch.ready() == []  # both run
    os.kill(victim.pid, signal.SIGKILL)
    assert ready_within(watch, 30.0) == ["worker-1"]
    assert victim.poll() == -signal.SIGKILL  # readable before the reap; the poll reaps it
    watch.forget("worker-1")
    assert not watch.watched("worker-1") and watch.ready() == []
    watch.close()
    assert not watch.watched("worker-2")


def test_a_wake_from_another_thread_ends_the_wait_and_is_drained():
    watch = ExitWatch()
    watch.open()
    waker = threading.Thread(target=watch.wake)
    waker.start()
    assert watch.wait(60.0)  # the pending byte (or the one written while it slept) ends the wait
    waker.join(10)
    assert watch.ready() == []  # a wake-up names no task, and is consumed
    assert not watch.wait(0.0)


def test_a_wake_before_the_loop_opened_is_a_no_op():
    watch = ExitWatch()
    watch.wake()
    assert watch.ready() == []


def test_tasks_without_a_descriptor_are_polled_while_live(sleeper):
    watch = ExitWatch()
    watch.watch("worker-0", None)
    live = {"worker-0": True}
    assert watch.to_poll(live.__getitem__) == ["worker-0"]
    live["worker-0"] = False
    assert watch.to_poll(live.__getitem__) == []
    assert watch.polled == set()


def test_past_the_descriptor_budget_a_task_is_polled_and_its_descriptor_closed(sleeper):
    watch = ExitWatch(budget=1)
    first, second = sleeper(), sleeper()
    watch.watch("worker-0", pidfd(first))
    fd = pidfd(second)
    assert fd is not None
    watch.watch("worker-1", fd)
    assert watch.watched("worker-0") and not watch.watched("worker-1") and watch.polled == {"worker-1"}
    with pytest.raises(OSError):
        os.fstat(fd)  # closed, not leaked
    watch.close()


def test_a_new_attempt_replaces_the_old_descriptor(sleeper):
    watch = ExitWatch()
    old, new = sleeper(), sleeper()
    watch.watch("worker-0", pidfd(old))
    watch.watch("worker-0", pidfd(new))
    os.kill(old.pid, signal.SIGKILL)
    old.wait(30)
    assert watch.ready() == []  # the old attempt's exit is no longer watched
    os.kill(new.pid, signal.SIGKILL)
    assert ready_within(watch, 30.0) == ["worker-0"]
    watch.close()


def test_a_reaped_child_gives_no_pidfd(sleeper):
    p = sleeper()
    p.kill()
    p.wait(30)
    assert pidfd(p) is None


def test_the_budget_leaves_room_for_heartbeat_connections():
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert descriptor_budget() <= soft // 2
