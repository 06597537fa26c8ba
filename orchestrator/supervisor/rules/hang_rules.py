"""Hang rules (pure: plain data in, a reason or a time out): :func:`hang_reason` says whether a
live task counts as hung now, :func:`next_check_at` when it first could. The rules, and their
sources, are in :mod:`orchestrator.supervisor.rules.decisions` (which re-exports these); the loop's
heap of checks is :mod:`orchestrator.supervisor.hangs`."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.spec.supervision import SupervisionSpec

WORKING_PHASES = frozenset({"training", "serving", "evaluating", "saving", "finishing", "done"})
"""Phases of a task past its start-up (heartbeat ``phase`` names, lower case)."""
POST_TRAINING_PHASES = frozenset({"finishing", "evaluating", "saving", "done"})
"""Phases a trainer reports once its training ended (``on_train_end``, ``training_finished()``)."""


def silence_limit_s(watch: "TaskWatch", supervision: SupervisionSpec) -> float:
    """How long a task past start-up may go without a heartbeat: ``heartbeat_timeout_s``, but
    for a trainer whose training ended (``finishing``, ``evaluating``, ``saving``) at least
    ``startup_timeout_s``. After ``fit``, TensorFlow's teardown of its traced functions, the
    evaluation and the SavedModel export are C calls that can hold the GIL, and so the heartbeat
    thread, for seconds as importing TensorFlow does (measured on a loaded 2-core machine: a PSS
    coordinator's function teardown past 4 s in four attempts in a row, an export of 20.7 s); a
    false kill there costs a job whose training is done. ``finish_timeout_s`` bounds that work."""
    if watch.trains and watch.phase in POST_TRAINING_PHASES - {"done"}:
        return max(supervision.heartbeat_timeout_s, supervision.startup_timeout_s)
    return supervision.heartbeat_timeout_s


@dataclass(frozen=True)
class TaskWatch:
    """What the hang checks need to know about one live task attempt.

    Times are the orchestrator's monotonic seconds.

    Attributes:
        reports: the task reports heartbeats (the built-in programs always; a user's program
            once it called ``report()`` / ``keras_callback()``).
        started_at: when the attempt was started.
        heartbeat_at: when its latest heartbeat arrived; None before the first.
        phase: phase of that heartbeat (``training``, ``serving``, ...); None before it.
        progress_at: when it last made progress (a new step, or a phase change).
        step: its latest step, if any.
        trains: a chief or worker (the evaluator's evaluating is its main work, not post-training).
        exiting: its last heartbeat said its interpreter is exiting (a user's program's
            ``atexit``): the heartbeats stop there, and only its exit is watched from then on.
        in_first_step: it reports ``training`` but its step has not moved past the first one it
            reported (``on_train_begin``'s step 0, or the step it resumed at): the first step
            traces the graph and warms caches, and is judged by :func:`first_step_due_at`, not
            the stall timeout.
        training_at: when it first reported ``training`` in this attempt; None before.
    """

    reports: bool
    started_at: float
    heartbeat_at: float | None = None
    phase: str | None = None
    progress_at: float | None = None
    step: int | None = None
    trains: bool = True
    exiting: bool = False
    in_first_step: bool = False
    training_at: float | None = None


def first_step_due_at(watch: TaskWatch, supervision: SupervisionSpec) -> float:
    """When a task still in its first step (``watch.in_first_step``) counts as hung: judged by the
    start-up allowance, not the stall timeout (issue 35: a 25 s first step, graph tracing of a large
    model or a cold cache, was killed by a 15 s stall timeout and restarted to do it again). The
    later of ``startup_timeout_s`` after the attempt's start and ``stall_timeout_s`` after it began
    training, so never stricter than the stall rule."""
    began = watch.training_at if watch.training_at is not None else watch.progress_at
    began = began if began is not None else watch.started_at
    return max(watch.started_at + supervision.startup_timeout_s, began + supervision.stall_timeout_s)


def hang_reason(watch: TaskWatch, now: float, supervision: SupervisionSpec) -> str | None:
    """Why a live task counts as hung at ``now``, or None.

    Checked in this order: start-up (no working phase ``startup_timeout_s`` after start),
    heartbeat (none for ``heartbeat_timeout_s``, past start-up only: while it is initializing,
    importing TensorFlow holds the heartbeat thread off the GIL for seconds), first step (in its
    first step past :func:`first_step_due_at`), stall (``training`` without a new step for
    ``stall_timeout_s``, once past its first step). A task that does not report is never hung:
    only its exit is watched.
    """
    if not watch.reports and watch.heartbeat_at is None:
        return None
    if watch.phase == "done" or watch.exiting:  # it is on its way out: its heartbeats stop there
        return None
    s = supervision
    if watch.heartbeat_at is None or watch.phase not in WORKING_PHASES:
        since = now - watch.started_at
        if since > s.startup_timeout_s:
            return f"not training or serving {since:.1f} s after its start (startup timeout {s.startup_timeout_s:g} s)"
    if watch.heartbeat_at is None or watch.phase not in WORKING_PHASES:
        return None
    silent, limit = now - watch.heartbeat_at, silence_limit_s(watch, s)
    if silent > limit:
        what = "heartbeat timeout" if limit == s.heartbeat_timeout_s else f"{watch.phase} after training, limit"
        return f"no heartbeat for {silent:.1f} s ({what} {limit:g} s)"
    if watch.phase == "training" and watch.in_first_step:
        if now > first_step_due_at(watch, s):
            began = watch.training_at if watch.training_at is not None else watch.started_at
            return (f"no first step {now - watch.started_at:.1f} s after its start (in its first step for "
                    f"{now - began:.1f} s; a first step is judged by the startup timeout {s.startup_timeout_s:g} s)")
        return None
    if watch.phase == "training" and watch.progress_at is not None and now - watch.progress_at > s.stall_timeout_s:
        step = watch.step if watch.step is not None else "-"
        return (f"no training progress for {now - watch.progress_at:.1f} s at step {step} "
                f"(stall timeout {s.stall_timeout_s:g} s)")
    if (s.finish_timeout_s is not None and watch.trains and watch.phase in POST_TRAINING_PHASES - {"done"}
            and watch.progress_at is not None and now - watch.progress_at > s.finish_timeout_s):
        return (f"still {watch.phase} {now - watch.progress_at:.1f} s after training ended "
                f"(finish timeout {s.finish_timeout_s:g} s)")
    return None


def next_check_at(watch: TaskWatch, supervision: SupervisionSpec) -> float | None:
    """The earliest time :func:`hang_reason` could first say the task is hung, given what is
    known now (None: never, until something changes). Any time strictly after it may be hung;
    no time at or before it is. The loop keeps these in a heap, so a tick checks only the
    tasks whose deadline has passed (O(changes), not O(tasks))."""
    if (not watch.reports and watch.heartbeat_at is None) or watch.phase == "done" or watch.exiting:
        return None
    s = supervision
    times: list[float] = []
    if watch.heartbeat_at is None or watch.phase not in WORKING_PHASES:
        times.append(watch.started_at + s.startup_timeout_s)
    if watch.heartbeat_at is not None and watch.phase in WORKING_PHASES:
        times.append(watch.heartbeat_at + silence_limit_s(watch, s))
        if watch.phase == "training" and watch.in_first_step:
            times.append(first_step_due_at(watch, s))
        elif watch.phase == "training" and watch.progress_at is not None:
            times.append(watch.progress_at + s.stall_timeout_s)
        if (s.finish_timeout_s is not None and watch.trains and watch.phase in POST_TRAINING_PHASES - {"done"}
                and watch.progress_at is not None):
            times.append(watch.progress_at + s.finish_timeout_s)
    return min(times) if times else None
