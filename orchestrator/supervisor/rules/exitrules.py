"""Rules for the ends of tasks, as pure functions over plain data: crash loops, a task stuck in
its exit, the thread a stack dump shows it stuck in.

They complete :mod:`~orchestrator.supervisor.rules.decisions` (same contract: no processes, no clock,
no I/O; tested by tables in ``tests/decisions/``).

* Crash loop (:func:`crash_loop`): the same exception line on consecutive attempts of one task,
  ``crash_loop_limit`` times in a row (default 3), is a crash loop: a deterministic error (a
  ``KeyError`` on a missing ``TF_CONFIG`` entry, a bad path) that every restart meets again. It
  is not restarted again, whatever the restart policy or the budget left. Hangs, kills, peer
  consequences and preemptions carry no exception line and never count (torch elastic and
  Kubernetes' ``CrashLoopBackOff`` only back off; here the error itself is compared).
* Finished (:func:`finished`): a task said its work is over: phase ``done``, or its interpreter
  is exiting (the client's exit heartbeat) after it reported the end of training (``finishing``
  or later). Its outputs are saved; only its exit is left.
* Stuck in exit (:func:`exit_overdue`): a finished task still alive ``exit_grace_s`` after it
  finished (a non-daemon thread that never ends, an ``atexit`` handler that blocks, a
  teardown that hangs). That is a warning and a kill, not a failure: the work is done.
* Where it is stuck (:func:`stuck_thread`): read from the stack dump (py-spy's or
  ``faulthandler``'s format): the non-daemon thread the interpreter's exit waits for, or the
  main thread's handler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from orchestrator.spec.supervision import SupervisionSpec
from orchestrator.supervisor.rules.decisions import POST_TRAINING_PHASES


def crash_loop(errors: Sequence[tuple[int, str]], limit: int) -> int:
    """How many times in a row a task failed with the same error, when that makes a crash loop.

    Args:
        errors: ``(attempt, exception line)`` of each failure of one task, earliest first
            ("" for a failure without one: a kill, a hang, a peer's consequence).
        limit: the spec's ``crash_loop_limit`` (0: never a crash loop).

    Returns:
        N >= ``limit`` when the last N failures are on consecutive attempts with the same,
        non-empty exception line; otherwise 0.
    """
    if limit <= 0 or not errors or not errors[-1][1]:
        return 0
    attempt, line = errors[-1]
    count = 1
    for earlier_attempt, earlier_line in reversed(errors[:-1]):
        if earlier_line != line or earlier_attempt != attempt - 1:
            break
        count, attempt = count + 1, earlier_attempt
    return count if count >= limit else 0


def finished(phase: str | None, exiting: bool) -> bool:
    """The task said its work is over: phase ``done``, or its interpreter is exiting after it
    reported the end of training (:data:`~orchestrator.supervisor.rules.decisions.POST_TRAINING_PHASES`)."""
    return phase == "done" or (exiting and phase in POST_TRAINING_PHASES)


def exit_overdue(finished_at: float | None, now: float, supervision: SupervisionSpec) -> str | None:
    """Why a finished task (``finished_at``: when it finished, None while it has not) counts as
    stuck in its exit at ``now``, or None: strictly more than ``exit_grace_s`` since it finished."""
    if finished_at is None:
        return None
    since = now - finished_at
    if since <= supervision.exit_grace_s:
        return None
    return f"still alive {since:.1f} s after it finished (exit grace {supervision.exit_grace_s:g} s)"


@dataclass(frozen=True)
class DumpedThread:
    """One thread of a stack dump: its name (py-spy's; ``faulthandler`` has none: its id) and
    its frames as ``function (file:line)``, innermost first."""

    name: str
    frames: tuple[str, ...]
    main: bool


_PYSPY_THREAD = re.compile(r'^Thread (\d+) \([^)]*\): "(.*)"\s*$')
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (\S+)')
_BOOTSTRAP = ("Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap", "run", "_bootstrap_inner", "_bootstrap")


def dumped_threads(dump: str) -> list[DumpedThread]:
    """The threads of a stack dump: py-spy's (``Thread 123 (idle): "name"``, frames indented
    below) or ``faulthandler``'s (``Thread 0x... (most recent call first):``, ``File ..., line N
    in f``), in the order dumped."""
    threads: list[DumpedThread] = []
    name, main, frames = "", False, []  # type: ignore[var-annotated]

    def close() -> None:
        if name:
            threads.append(DumpedThread(name, tuple(frames), main))

    for line in dump.splitlines():
        m, f = _PYSPY_THREAD.match(line), _FH_THREAD.match(line)
        if m or f:
            close()
            name = m.group(2) if m else f"thread {f.group(2)}"  # type: ignore[union-attr]
            main = (m.group(2) == "MainThread") if m else f.group(1) == "Current thread"  # type: ignore[union-attr]
            frames = []
            continue
        fh = _FH_FRAME.match(line)
        if name and fh:
            frames.append(f"{fh.group(3)} ({fh.group(1).rsplit('/', 1)[-1]}:{fh.group(2)})")
        elif name and line.startswith("    ") and line.strip():
            frames.append(line.strip())
        elif name and not line.strip():
            close()
            name = ""
    close()
    return threads


def _where(t: DumpedThread) -> str:
    frames = list(t.frames)
    while len(frames) > 1 and frames[-1].split(" (")[0] in _BOOTSTRAP:
        frames.pop()  # the thread machinery below its target
    if not frames:
        return f'thread "{t.name}" (no Python frame: in the interpreter\'s own teardown)'
    text = f'thread "{t.name}" in {frames[-1]}'
    return text + (f", waiting in {frames[0]}" if len(frames) > 1 else "")


def stuck_thread(dump: str, waits_for: Sequence[str] = ()) -> str:
    """Where a finished task is stuck, in words, from its stack dump ("" without one).

    Args:
        dump: the task's stack dump (every thread of every Python process of the task).
        waits_for: the non-daemon threads the task's exit heartbeat named (the interpreter
            joins them before it exits), if it named any.

    Returns:
        The thread(s) the interpreter's exit waits for, when the main thread is in
        ``threading._shutdown`` (a non-daemon thread that never ends), else the main thread
        and its frame (an ``atexit`` handler that blocks, a teardown that hangs).
    """
    threads = dumped_threads(dump)
    mains = [i for i, t in enumerate(threads) if t.main]
    for n, i in enumerate(mains):
        if any(frame.split(" (")[0] in ("_shutdown", "threading._shutdown") for frame in threads[i].frames):
            peers = threads[i + 1:mains[n + 1] if n + 1 < len(mains) else len(threads)]  # its own process
            peers = [o for o in peers if o.name in waits_for] or [o for o in peers if o.name != "heartbeats"]
            if peers:
                return ("the main thread waits in threading._shutdown for the non-daemon "
                        + "; ".join(_where(o) for o in peers[:3]))
    return f"the main {_where(threads[mains[-1]])}" if mains else ""
