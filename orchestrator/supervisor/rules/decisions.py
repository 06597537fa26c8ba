"""The supervisor's decisions as pure functions over plain data (no processes, no clock, no I/O).

:class:`orchestrator.supervisor.loop.Supervisor` is the one place that acts; it asks these
functions what to do. They are tested by tables (strategy x role x policy x exit) in
``tests/decisions/`` (the fast part: ``python -m pytest tests/decisions`` runs in seconds).

Rules and their sources:

* Exit of a task (:func:`classify_exit`): exit 0 is success, except for a task that serves
  until stopped (ps, PSS worker: TF's ``tf.distribute.Server.join()`` never returns), for
  which any exit is a failure; an exit the orchestrator asked for is a stop.
* Job success (:func:`success_reached`): Kubeflow TFJob's ``successPolicy``: ``chief``,
  the coordinator (the chief, or worker 0 without one: TF ``multi_worker_util.is_chief``)
  exits 0; ``all-workers`` (default under MWMS, as torchrun and TF's multi_process_runner),
  every chief and worker exits 0.
* Hang (:func:`hang_reason`): no heartbeat for ``heartbeat_timeout_s`` once past start-up (a task
  still ``initializing`` is judged by ``startup_timeout_s`` alone: loading TensorFlow's shared
  libraries holds the GIL, and so the heartbeat thread, for seconds: up to 13.5 s measured on a
  loaded 2-core machine, ``bench/heartbeat_gaps.py``); training with no new
  step for ``stall_timeout_s``; not training or serving ``startup_timeout_s`` after start;
  optionally, post-training work (``finishing``) longer than ``finish_timeout_s``: it is
  never a training stall. A timeout is passed when the time since is strictly greater.
* Training ended (the coordinator, or the failed task, reported ``finishing`` or later, or
  exited 0): a failure is never restarted, since a restart would rerun finished training.
* Peer consequences (:func:`peer_error`): collective timeouts, ``UnavailableError``, ...
  are retryable under ``exit-code`` whatever the code; the task that stopped progressing
  first (:func:`likely_culprit`) is named.
* Retry (:func:`retry_verdict`): the role's restart policy (Kubeflow's ``never`` /
  ``OnFailure`` / ``ExitCode``: exit codes 1-127 permanent, 128-255 and signals retryable)
  and the job's ``max_restarts`` (Kubeflow ``backoffLimit``). A preemption
  (:data:`orchestrator.env.PREEMPTED_EXIT_CODE`: the task saved its state and asks to be
  restarted) is retried under every policy except ``never``.
* Scope (:func:`restart_scope`): TF's "Handling task failure" guide. MWMS: every worker is in
  every collective, so the whole group restarts. PSS: a worker restarts alone (the
  coordinator re-dispatches its closures); a ps or the coordinator failing restarts the
  whole cluster from the last checkpoint. The evaluator restarts alone, never fails the job.
* Order (:func:`exit_order`, :func:`cause_first`): of exits seen in one look, deaths by a
  signal are handled first; of failures seen together, the one that got the preemption notice;
  a preemption is named after the task that received the notice (:func:`preempted_task`), even
  when a peer that only saved and exited is seen first.
* Late notice (:func:`late_notice`): a SIGTERM from outside that reaches a task after its
  training ended, whether sent to its wrapper's pid or to its whole process group, is a notice
  that came too late to matter, not a failure: the task counts as succeeded, with a note.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import AbstractSet, Sequence

from orchestrator.env import PREEMPTED_EXIT_CODE
from orchestrator.spec.model import Strategy, TaskId
from orchestrator.spec.supervision import RestartPolicy, SuccessPolicy, SupervisionSpec
from orchestrator.supervisor.records.states import TaskState, describe_exit
from orchestrator.supervisor.rules.hang_rules import POST_TRAINING_PHASES as POST_TRAINING_PHASES  # re-exported
from orchestrator.supervisor.rules.hang_rules import WORKING_PHASES as WORKING_PHASES
from orchestrator.supervisor.rules.hang_rules import TaskWatch as TaskWatch
from orchestrator.supervisor.rules.hang_rules import hang_reason as hang_reason
from orchestrator.supervisor.rules.hang_rules import next_check_at as next_check_at

PEER_ERRORS = re.compile(
    r"Collective has timed out|DeadlineExceededError|UnavailableError|AbortedError|CancelledError"
    r"|tasks? (?:are|is) unhealthy|unhealthy tasks?|coordination service|Connection reset by peer|Socket closed"
    r"|failed to connect to all addresses|Stopped receiving heartbeats"
    r"|NCCL (?:error|communicator was aborted)|nccl(?:Remote|System|Internal|Unhandled(?:Cuda)?)Error|NCCL_ERROR",
    re.IGNORECASE,
)
"""Errors a task dies of because of a peer, not of its own bug: collective timeouts, a peer
gone (``UnavailableError``), an aborted collective, TF's coordination service reporting
unhealthy tasks, and the same on GPUs: an NCCL collective failing (``NCCL error``,
``ncclRemoteError``: a peer's rank went away). They are retryable under ``exit-code`` whatever
the exit code."""


def peer_error(text: str) -> str:
    """The first peer-consequence error named in ``text`` (an error message or a stderr tail),
    or ""."""
    m = PEER_ERRORS.search(text or "")
    return m.group(0) if m else ""


class RestartScope(str, enum.Enum):
    """What one restart covers."""

    TASK = "task"
    """The failed task(s) alone: a PSS worker, the evaluator."""
    GROUP = "group"
    """Every training task (chief, workers, ps): MWMS, or a PSS ps / coordinator failure."""


@dataclass(frozen=True)
class RestartTargets:
    """The scope of a restart and the tasks it covers, in plan order."""

    scope: RestartScope
    tasks: tuple[TaskId, ...]


def restart_scope(strategy: Strategy, failed: Sequence[TaskId], training_tasks: Sequence[TaskId]) -> RestartTargets:
    """What to restart after training tasks failed (the evaluator is never passed here).

    Args:
        strategy: the job's strategy.
        failed: the training tasks that failed in one look, earliest first (not empty).
        training_tasks: every task of the training cluster, in plan order.

    Returns:
        Under ParameterServerStrategy, when only workers failed: those workers alone.
        Otherwise every training task.
    """
    if strategy is Strategy.PARAMETER_SERVER and all(t.task_type == "worker" for t in failed):
        return RestartTargets(RestartScope.TASK, tuple(dict.fromkeys(failed)))
    return RestartTargets(RestartScope.GROUP, tuple(training_tasks))


@dataclass(frozen=True)
class RetryVerdict:
    """Whether a failure is retried, and if not, why (one clause for the report)."""

    retry: bool
    why_not: str = ""


def retry_verdict(
    policy: RestartPolicy,
    role: str,
    exit_code: int | None,
    *,
    restarts_used: int,
    max_restarts: int,
    task_name: str,
    attempt: int,
    peer: str = "",
    preempted: bool | None = None,
    gpu_oom: bool = False,
) -> RetryVerdict:
    """Decide whether a failure may be restarted.

    Args:
        policy: the failed role's restart policy.
        role: its task type.
        exit_code: Popen return code (negative: signal; None: killed as hung, no code).
        restarts_used: restarts already counted against ``max_restarts``.
        max_restarts: the bound (the job's; the evaluator's own for the evaluator).
        task_name: ``worker-1``, for the message.
        attempt: the attempt that failed (0 first), for the message.
        peer: the peer-consequence error it died of (:func:`peer_error`), or "": retryable
            under ``exit-code`` whatever the code.
        preempted: the exit is a preemption (the spec's ``preemption_exit_codes``); None:
            ``exit_code`` == :data:`~orchestrator.env.PREEMPTED_EXIT_CODE`.
        gpu_oom: it ran out of GPU memory (:func:`orchestrator.supervisor.rules.gpu.gpu_oom`):
            permanent under ``exit-code`` whatever the code (a CUDA abort is a signal), since a
            retry with the same batch would run out again.

    A preemption is retried under every policy except ``never``, whatever the exit-code
    ranges say, and never runs out of restarts: it is not counted against ``max_restarts``
    (a disruption must not use up the budget; Kubernetes' ``DisruptionTarget`` rule).
    """
    if preempted is None:
        preempted = exit_code == PREEMPTED_EXIT_CODE
    if policy is RestartPolicy.EXIT_CODE and gpu_oom:
        return RetryVerdict(False, f"the {policy.value} restart policy of {role} does not retry a GPU out-of-memory "
                                   "(the same batch would run out again)")
    if policy is not RestartPolicy.NEVER and preempted:
        return RetryVerdict(True)  # preempted: it saved its state and asks to be restarted
    elif policy is RestartPolicy.EXIT_CODE and peer:
        pass  # a consequence of a peer: retryable whatever the exit code
    elif not policy.retryable(exit_code):
        why = f"the {policy.value} restart policy of {role} does not retry {describe_exit(exit_code)}"
        if policy is RestartPolicy.EXIT_CODE:
            why += " (exit codes 1-127 are permanent)"
        return RetryVerdict(False, why)
    if restarts_used >= max_restarts:
        return RetryVerdict(
            False,
            f"restarts exhausted: {task_name} failed on attempt {attempt + 1} of {attempt + 1}, "
            f"{restarts_used} of --max-restarts {max_restarts} used",
        )
    return RetryVerdict(True)


def backoff_s(supervision: SupervisionSpec, restart_number: int) -> float:
    """Seconds to wait before restart number ``restart_number`` (1 for the first):
    ``backoff_s * 2**(n-1)``, capped at ``backoff_max_s``."""
    return supervision.backoff_for(restart_number)


@dataclass(frozen=True)
class ExitVerdict:
    """What an exit means for the task.

    Attributes:
        state: Succeeded, Stopped or Failed.
        message: a reason when the exit is a failure the exit code does not explain.
    """

    state: TaskState
    message: str = ""


def classify_exit(exit_code: int, *, stop_requested: bool, serves_forever: bool, task_type: str) -> ExitVerdict:
    """Classify a task's exit (Popen return code).

    Args:
        exit_code: the code (negative: signal).
        stop_requested: the orchestrator asked it to stop (then any exit is a stop).
        serves_forever: a ps or PSS worker: it never exits on its own unless something broke.
        task_type: for the message.
    """
    if stop_requested:
        return ExitVerdict(TaskState.STOPPED)
    if exit_code == 0 and not serves_forever:
        return ExitVerdict(TaskState.SUCCEEDED)
    if exit_code == 0:
        return ExitVerdict(TaskState.FAILED, f"a {task_type} task serves until stopped, but it exited on its own")
    return ExitVerdict(TaskState.FAILED)


def ends_job_successfully(task: TaskId, verdict: ExitVerdict, coordinator: TaskId) -> bool:
    """True when this exit is the coordinator's success (what the ``chief`` policy waits for)."""
    return verdict.state is TaskState.SUCCEEDED and task == coordinator


def success_reached(policy: SuccessPolicy, coordinator: TaskId, trainers: Sequence[TaskId],
                    succeeded: AbstractSet[TaskId]) -> bool:
    """Whether the job has succeeded (Kubeflow TFJob ``successPolicy``).

    Args:
        policy: ``chief``: the coordinator exited 0; ``all-workers``: every trainer did.
        coordinator: the chief, or worker 0 without one.
        trainers: tasks that train to the end and exit on their own (chief, MWMS workers).
        succeeded: tasks whose current attempt exited 0.
    """
    if policy is SuccessPolicy.CHIEF:
        return coordinator in succeeded
    return all(t in succeeded for t in trainers)


def likely_culprit(candidates: Sequence[tuple[str, int | None, float | None]]) -> str:
    """The task that stopped progressing first, among ``(name, last step, last progress time)``:
    the lowest step, then the oldest progress; "" when there is none."""
    if not candidates:
        return ""

    def key(c: tuple[str, int | None, float | None]) -> tuple[int, float]:
        return (-1 if c[1] is None else c[1], float("inf") if c[2] is None else c[2])

    return min(candidates, key=key)[0]


def spare_count(strategy: Strategy, trainers: int, requested: int | None, builtin: bool) -> int:
    """Warm spares to keep once the job trains: what one restart needs, unless requested.

    Args:
        strategy: MWMS restarts the whole group (every trainer); PSS restarts one worker;
            mirrored has one task.
        trainers: chief and workers of the job.
        requested: ``--spares`` (None: the default).
        builtin: the built-in program; a user's program gets none by default (it runs in
            a process that has imported TensorFlow first only if asked, with ``--spares N``).
    """
    if requested is not None:
        return requested
    if not builtin:
        return 0
    return trainers if strategy is Strategy.MULTI_WORKER_MIRRORED else 1


def spares_start_at(first_step_at: float, cold_start_s: float) -> float:
    """When a job's warm spares start: once it has trained as long as a start takes
    (``cold_start_s``: its first attempt's start -> first step), counted from the first step
    after each (re)start. A spare started sooner could not be ready sooner, a shorter job never
    pays for one, and the start and the first steps' tracing run without it (issue 23). It
    imports at the lowest CPU priority (:mod:`orchestrator.task.spare`)."""
    return first_step_at + max(0.0, cold_start_s)


def culprit_order(steps: Sequence[int | None]) -> list[int]:
    """Indices of hung tasks, the one furthest behind first (peers blocked in a collective
    stall with the task that stopped first; a task with no step yet counts as furthest)."""
    def behind(i: int) -> int:
        step = steps[i]
        return -1 if step is None else step

    return sorted(range(len(steps)), key=behind)


def exit_order(codes: Sequence[int]) -> list[int]:
    """Indices of exits seen in the same look, in the order to handle them: deaths by a
    signal first (negative Popen codes: a SIGKILL or SIGSEGV is the likelier cause, its peers'
    non-zero exits are consequences), otherwise in the order seen (the sort is stable).
    The first one handled becomes the root cause when the job fails."""
    return sorted(range(len(codes)), key=lambda i: codes[i] >= 0)


def cause_first(notices: Sequence[bool]) -> list[int]:
    """Indices of training-task failures seen together, the one that received a preemption
    notice itself first (every MWMS worker saves and exits when one is preempted: the others
    are its consequence), otherwise in the order given (stable)."""
    return sorted(range(len(notices)), key=lambda i: not notices[i])


def preempted_task(cause: str, notice: bool, noticed: Sequence[str]) -> str:
    """The task a preemption is named after: the cause itself when it received the notice
    (``notice``), else the first of the training tasks that did (``noticed``: their names, in
    plan order; every MWMS worker saves and exits when one is preempted, and the one seen first
    may be a peer); ``cause`` when none did."""
    return cause if notice or not noticed else noticed[0]


def awaits_saving_peers(*, preemption_exit: bool, strategy: Strategy, saving: Sequence[str], waited_s: float,
                        bound_s: float) -> bool:
    """Whether to hold the decision on a trainer's preemption exit until its peers exit too.

    Under MultiWorkerMirroredStrategy every trainer saves the preemption checkpoint and exits
    when one is preempted (TF's ``PreemptionCheckpointHandler``: one coordinated save, at the same
    step, then ``exit_fn`` in every worker). A group restart at the first exit would stop the
    others in the middle of their own exit (the rendezvous after the save,
    ``worker.train.SaveBarrier``, and their last report) and cut it short. So the
    decision waits for the other live trainers, at most ``bound_s`` (the preemption grace).

    Args:
        preemption_exit: the first training failure is a preemption exit (the spec's
            ``preemption_exit_codes``, or a death by SIGTERM).
        strategy: the job's strategy; ParameterServerStrategy has no such handler (a
            preempted PSS worker exits alone).
        saving: the trainers still alive, besides those a restart already waits for.
        waited_s: seconds since that first failure was seen.
        bound_s: the longest wait, seconds.

    Returns:
        True to wait (decide nothing yet), False to decide now.
    """
    return (preemption_exit and strategy is Strategy.MULTI_WORKER_MIRRORED and bool(saving)
            and waited_s < bound_s)


def late_notice(*, preemption_exit: bool, notice: bool, ended: str) -> str:
    """The note for a task that exited on a SIGTERM from outside after training ended, or "".

    Args:
        preemption_exit: it exited preempted (the spec's ``preemption_exit_codes``: SIGTERM, 143, 42).
        notice: it received the SIGTERM from outside itself (its ``sigterm-received`` marker:
            through its wrapper's pid or its whole process group alike).
        ended: why training counts as ended (:func:`training_ended`), "" when it does not.

    Returns:
        "" when it is not a late notice; otherwise why it counts as succeeded: nothing is left
        to checkpoint or restart, so a late notice is never a failure (issue 21).
    """
    if not (preemption_exit and notice and ended):
        return ""
    return f"received SIGTERM from outside after training ended ({ended}): a late notice, not a failure"


def fatal_after_training(failed: Sequence[TaskId], *, trainers: Sequence[TaskId], coordinator: TaskId,
                         success_policy: SuccessPolicy) -> list[int]:
    """Of failures after training ended (never restarted: a restart would rerun training),
    the indices of those that fail the job, earliest first: a chief, worker or ps failing
    fails it; under the ``chief`` success policy only the coordinator's own failure (or a ps')
    counts, since the coordinator's exit 0 is all the policy asks. Empty: the job goes on."""
    fatal = [i for i, t in enumerate(failed) if t in trainers or t.task_type == "ps"]
    if success_policy is SuccessPolicy.CHIEF and coordinator not in failed:
        fatal = [i for i in fatal if failed[i].task_type == "ps"]
    return fatal


def training_ended(coordinator: str, coordinator_succeeded: bool, phases: Sequence[tuple[str, str | None]]) -> str:
    """Why training counts as ended at a failure, "" when it does not: the coordinator
    succeeded, or the coordinator or the failed task (``phases``: their names and last
    reported phases, the evaluator left out) reported a post-training phase
    (:data:`POST_TRAINING_PHASES`). A failure then is never restarted: a restart would rerun
    finished training."""
    if coordinator_succeeded:
        return f"{coordinator} succeeded"
    for name, phase in phases:
        if phase in POST_TRAINING_PHASES:
            return f"{name} reported {phase}"
    return ""


@dataclass(frozen=True)
class FailureAction:
    """What to do about the training-task failures seen in one look (:func:`failure_action`).

    Attributes:
        kind: ``restart`` (``tasks`` in ``scope``), ``fail`` (the job, ``why``), ``goes-on``
            (training had ended and these failures do not count: ``why``), or ``preempt`` (the
            whole job is being preempted: save and leave, restart nothing).
        cause: index of the failure that is the cause (the root cause when the job fails).
        tasks: what to restart.
        scope: the restart's scope.
        why: the reason, for ``fail`` and ``goes-on``.
    """

    kind: str
    cause: int = 0
    tasks: tuple[TaskId, ...] = ()
    scope: RestartScope | None = None
    why: str = ""


def failure_action(failed: Sequence[TaskId], *, ended: str, job_preempted: bool, strategy: Strategy,
                   training_tasks: Sequence[TaskId], trainers: Sequence[TaskId], coordinator: TaskId,
                   success_policy: SuccessPolicy) -> FailureAction:
    """Decide on training-task failures seen together, ``failed`` ordered by :func:`cause_first`.

    Args:
        failed: the failed tasks (chief, worker, ps), the likeliest cause first.
        ended: why training counts as ended (:func:`training_ended`), "" when it does not.
        job_preempted: the first failure is a preemption notice and the whole job is being
            preempted (every task got SIGTERM from outside, or the engine says so).
        strategy, training_tasks: for the restart scope (:func:`restart_scope`).
        trainers, coordinator, success_policy: for failures after training (:func:`fatal_after_training`).

    Whether a restart is allowed (policy, budget) is :func:`retry_verdict`'s, asked after this.
    """
    if job_preempted:
        return FailureAction("preempt")
    if ended:
        fatal = fatal_after_training(failed, trainers=trainers, coordinator=coordinator, success_policy=success_policy)
        if not fatal:
            return FailureAction("goes-on", why=f"training had ended ({ended}); the job goes on")
        return FailureAction("fail", cause=fatal[0],
                             why=f"training had ended ({ended}), and a restart would run it again")
    targets = restart_scope(strategy, list(failed), list(training_tasks))
    return FailureAction("restart", tasks=targets.tasks, scope=targets.scope)


@dataclass(frozen=True)
class RestartPlan:
    """Whether and how to restart after a failure (:func:`restart_plan`).

    Attributes:
        retry: restart it.
        why_not: why not, when not.
        counted: the restart counts against ``max_restarts`` (a preemption does not).
        delay_s: seconds to wait first (none after a preemption).
        label: ``restart 2/3`` or ``not counted: a preemption``, for the event line.
    """

    retry: bool
    why_not: str = ""
    counted: bool = True
    delay_s: float = 0.0
    label: str = ""


def restart_plan(supervision: SupervisionSpec, role: str, exit_code: int | None, *, restarts_used: int,
                 task_name: str, attempt: int, peer: str = "", gpu_oom: bool = False) -> RestartPlan:
    """:func:`retry_verdict` with the job's policy, then the backoff (:func:`backoff_s`) of the
    restart it would be; a preemption (the spec's ``preemption_exit_codes``) is free: not
    counted, no backoff."""
    preempted = supervision.preemption_code(exit_code)
    verdict = retry_verdict(supervision.policy(role), role, exit_code, restarts_used=restarts_used,
                            max_restarts=supervision.max_restarts, task_name=task_name, attempt=attempt,
                            peer=peer, preempted=preempted, gpu_oom=gpu_oom)
    if not verdict.retry:
        return RestartPlan(False, verdict.why_not)
    if preempted:
        return RestartPlan(True, counted=False, delay_s=0.0, label="not counted: a preemption")
    return RestartPlan(True, delay_s=backoff_s(supervision, restarts_used + 1),
                       label=f"restart {restarts_used + 1}/{supervision.max_restarts}")


def success_reason(policy: SuccessPolicy, coordinator: TaskId, trainers: Sequence[TaskId]) -> str:
    """Why the job succeeded, for the report: ``worker-0 exited 0`` or ``every chief and worker
    exited 0 (worker-0, worker-1)``."""
    if policy is SuccessPolicy.ALL_WORKERS:
        return f"every chief and worker exited 0 ({', '.join(t.name for t in trainers)})"
    return f"{coordinator.name} exited 0"
