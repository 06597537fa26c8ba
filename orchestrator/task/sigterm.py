"""SIGTERM in a task: the orchestrator's own (die at once) or a preemption from outside (checkpoint,
then exit :data:`orchestrator.env.PREEMPTED_EXIT_CODE`): :func:`route_sigterm`, :func:`exit_preempted`."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

from orchestrator import env


def stop_requested(task_dir: str | None = None) -> bool:
    """Whether the orchestrator itself is stopping this task: the local backend writes the
    marker :data:`orchestrator.env.STOP_REQUESTED_FILE` into the task's directory right
    before its SIGTERM. Any other SIGTERM (``docker stop``, a Kubernetes eviction, Slurm
    preemption, a spot reclaim) comes from outside: a preemption."""
    task_dir = env.read(env.TASK_DIR) if task_dir is None else task_dir
    return bool(task_dir) and os.path.exists(os.path.join(task_dir, env.STOP_REQUESTED_FILE))


_preemption_handler: Callable[[int, Any], Any] | None = None
"""The Python SIGTERM handler a preemption goes to (TF's ``PreemptionCheckpointHandler``)."""
_wakeup_thread: threading.Thread | None = None


def _die_of_sigterm() -> None:
    """Die of SIGTERM now, from any thread: the default action, as the orchestrator expects of
    its own stops (a Python handler could only run once the main thread leaves TF's C++)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal(int(signal.SIGTERM), 0)  # SIG_DFL, at the C level: allowed from any thread
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # delivered before it returns
    finally:
        os.kill(os.getpid(), signal.SIGKILL)  # not reached unless the above failed


def exit_preempted(why: str) -> None:
    """Exit at once with :data:`orchestrator.env.PREEMPTED_EXIT_CODE` (from any thread).

    Args:
        why: one clause for the task's logs, e.g. ``checkpoint saved at step 37``.
    """
    cause = "SIGTERM from outside" if _sigterm_received() else "a peer received SIGTERM from outside"
    line = f"preempted ({cause}): {why}; exiting with code {env.PREEMPTED_EXIT_CODE}"
    for stream in (sys.stdout, sys.stderr):
        try:
            print(line, file=stream, flush=True)
        except (OSError, ValueError):
            pass
    os._exit(env.PREEMPTED_EXIT_CODE)


def _marker(name: str) -> str:
    task_dir = env.read(env.TASK_DIR)
    return os.path.join(task_dir, name) if task_dir else ""


def _note_sigterm_from_outside() -> None:
    """Write :data:`orchestrator.env.SIGTERM_RECEIVED_FILE` (its Unix time) into the task's
    directory, once: this task is the one that was preempted (best effort)."""
    path = _marker(env.SIGTERM_RECEIVED_FILE)
    if not path or os.path.exists(path):
        return
    try:
        with open(path, "w", encoding="utf-8") as marker:
            marker.write(f"{time.time():.3f}\n")
    except OSError:
        pass


def _sigterm_received() -> bool:
    path = _marker(env.SIGTERM_RECEIVED_FILE)
    return bool(path) and os.path.exists(path)


def _has_preemption_handler() -> bool:
    current = signal.getsignal(signal.SIGTERM)
    return _preemption_handler is not None or (callable(current) and current is not _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM in the main thread: ours -> die at once; from outside -> the preemption path."""
    if stop_requested():
        _die_of_sigterm()
    _note_sigterm_from_outside()
    if _preemption_handler is not None:
        _preemption_handler(signum, frame)  # TF: flag it; the checkpoint is saved at the next step
    else:
        exit_preempted("nothing to checkpoint in this task")


def _watch_wakeups(read_fd: int) -> None:
    """Act on SIGTERM even while the main thread is blocked in TensorFlow's C++ (a collective,
    ``Server.join()``), where Python handlers wait: CPython's C handler writes the signal
    number to the wakeup fd at once (``signal.set_wakeup_fd``)."""
    while True:
        try:
            data = os.read(read_fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM not in data:
            continue
        if stop_requested():
            _die_of_sigterm()
        _note_sigterm_from_outside()
        if not _has_preemption_handler():
            exit_preempted("nothing to checkpoint in this task")
        # else: the main thread hands it to TF's handler between two steps


def route_sigterm() -> None:
    """Tell the orchestrator's own SIGTERM from a preemption (call in the main thread).

    TensorFlow catches SIGTERM twice: its coordination service's preemption notifier (C++,
    ``preemption_notifier.cc: SIGTERM caught``) when a multi-worker strategy or server
    starts, and ``tf.distribute.experimental.PreemptionCheckpointHandler``, which installs a
    Python handler that makes the cluster checkpoint at the next step and exit. Call this right
    after the strategy or server is created, and again right after a
    ``PreemptionCheckpointHandler`` is (its handler is then chained behind ours):

    * the orchestrator's own stop (the marker :func:`stop_requested`): the task dies of SIGTERM
      at once, even while its main thread is blocked in a collective (a wakeup-fd thread), so
      stops stay prompt and never write a preemption checkpoint;
    * a SIGTERM from outside: TF's ``PreemptionCheckpointHandler`` takes it when there is one
      (checkpoint at the next step, then :data:`~orchestrator.env.PREEMPTED_EXIT_CODE`); a
      task without one (ps, PSS worker: nothing of its own to save) exits with that code at once.

    Raises:
        ValueError: when called outside the main thread (``signal.signal``'s rule).
    """
    global _preemption_handler, _wakeup_thread
    current = signal.getsignal(signal.SIGTERM)
    if callable(current) and current is not _on_sigterm:
        _preemption_handler = current
    signal.signal(signal.SIGTERM, _on_sigterm)
    if _wakeup_thread is None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        if signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False) != -1:
            raise RuntimeError("signal.set_wakeup_fd is already in use in this task")
        _wakeup_thread = threading.Thread(target=_watch_wakeups, args=(read_fd,), name="sigterm-router", daemon=True)
        _wakeup_thread.start()
