"""The supervisor's decisions as tables (no processes, no clock): strategy x role x policy x exit."""

from __future__ import annotations

import pytest

from orchestrator.env import PREEMPTED_EXIT_CODE
from orchestrator.spec.model import Strategy, TaskId
from orchestrator.spec.supervision import RestartPolicy, SupervisionSpec
from orchestrator.supervisor.records.states import TaskState, describe_exit
from orchestrator.supervisor.rules.decisions import (
    RestartScope,
    TaskWatch,
    backoff_s,
    classify_exit,
    culprit_order,
    ends_job_successfully,
    hang_reason,
    likely_culprit,
    next_check_at,
    restart_scope,
    retry_verdict,
    spare_count,
    spares_start_at,
)

MWMS, PSS = Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER
W0, W1, W2 = TaskId("worker", 0), TaskId("worker", 1), TaskId("worker", 2)
CHIEF, PS0, PS1 = TaskId("chief", 0), TaskId("ps", 0), TaskId("ps", 1)
PSS_CLUSTER = (CHIEF, W0, W1, PS0, PS1)
MWMS_CLUSTER = (W0, W1, W2)


# -- restart scope: TF "Handling task failure" -----------------------------------------------
@pytest.mark.parametrize(
    "strategy, cluster, failed, scope, restarted",
    [
        (MWMS, MWMS_CLUSTER, [W1], RestartScope.GROUP, MWMS_CLUSTER),  # every worker is in every collective
        (MWMS, MWMS_CLUSTER, [W0], RestartScope.GROUP, MWMS_CLUSTER),
        (MWMS, (CHIEF, W0), [CHIEF], RestartScope.GROUP, (CHIEF, W0)),
        (PSS, PSS_CLUSTER, [W1], RestartScope.TASK, (W1,)),  # the coordinator re-dispatches its closures
        (PSS, PSS_CLUSTER, [W0, W1], RestartScope.TASK, (W0, W1)),
        (PSS, PSS_CLUSTER, [PS0], RestartScope.GROUP, PSS_CLUSTER),  # a ps holds variables: restore from checkpoint
        (PSS, PSS_CLUSTER, [PS1, W0], RestartScope.GROUP, PSS_CLUSTER),
        (PSS, PSS_CLUSTER, [CHIEF], RestartScope.GROUP, PSS_CLUSTER),  # the coordinator
        (PSS, PSS_CLUSTER, [W0, CHIEF], RestartScope.GROUP, PSS_CLUSTER),
    ],
)
def test_restart_scope_follows_the_strategy(strategy, cluster, failed, scope, restarted):
    targets = restart_scope(strategy, failed, cluster)
    assert (targets.scope, targets.tasks) == (scope, restarted)


# -- retry: Kubeflow restart policies and backoffLimit -----------------------------------------
SIGKILL, SIGTERM = -9, -15
RETRY_TABLE = [
    # policy, exit code, retried
    (RestartPolicy.NEVER, 137, False),
    (RestartPolicy.NEVER, SIGKILL, False),
    (RestartPolicy.NEVER, None, False),
    (RestartPolicy.ON_FAILURE, 1, True),
    (RestartPolicy.ON_FAILURE, 3, True),
    (RestartPolicy.ON_FAILURE, 127, True),
    (RestartPolicy.ON_FAILURE, SIGKILL, True),
    (RestartPolicy.ON_FAILURE, None, True),  # killed as hung
    (RestartPolicy.EXIT_CODE, 1, False),  # 1-127: permanent (a bug)
    (RestartPolicy.EXIT_CODE, 3, False),
    (RestartPolicy.EXIT_CODE, 127, False),
    (RestartPolicy.EXIT_CODE, 128, True),  # 128-255: retryable
    (RestartPolicy.EXIT_CODE, 137, True),
    (RestartPolicy.EXIT_CODE, 143, True),
    (RestartPolicy.EXIT_CODE, 255, True),
    (RestartPolicy.EXIT_CODE, SIGKILL, True),  # preemption, OOM kill
    (RestartPolicy.EXIT_CODE, SIGTERM, True),
    (RestartPolicy.EXIT_CODE, None, True),  # killed as hung
]


@pytest.mark.parametrize("role", ["chief", "worker", "ps", "evaluator"])
@pytest.mark.parametrize("policy, code, retried", RETRY_TABLE)
def test_retry_follows_the_policy_for_every_role(policy, code, retried, role):
    verdict = retry_verdict(policy, role, code, restarts_used=0, max_restarts=3, task_name=f"{role}-0", attempt=0)
    assert verdict.retry is retried
    if not retried:
        assert f"the {policy.value} restart policy of {role} does not retry" in verdict.why_not
        assert ("exit codes 1-127 are permanent" in verdict.why_not) is (policy is RestartPolicy.EXIT_CODE)


@pytest.mark.parametrize("used, retried", [(0, True), (2, True), (3, False), (4, False)])
def test_restarts_are_bounded_by_max_restarts(used, retried):
    verdict = retry_verdict(RestartPolicy.ON_FAILURE, "worker", 137, restarts_used=used, max_restarts=3,
                            task_name="worker-1", attempt=used)
    assert verdict.retry is retried
    if not retried:
        assert verdict.why_not == (f"restarts exhausted: worker-1 failed on attempt {used + 1} of {used + 1}, "
                                   f"{used} of --max-restarts 3 used")


@pytest.mark.parametrize("policy, retried", [
    (RestartPolicy.NEVER, False),
    (RestartPolicy.ON_FAILURE, True),
    (RestartPolicy.EXIT_CODE, True),
])
@pytest.mark.parametrize("role", ["chief", "worker", "ps"])
def test_a_preemption_is_retried_under_every_policy_but_never(policy, retried, role):
    verdict = retry_verdict(policy, role, PREEMPTED_EXIT_CODE, restarts_used=0, max_restarts=3,
                            task_name=f"{role}-0", attempt=0)
    assert verdict.retry is retried
    if not retried:
        assert "does not retry exit code 143 (preempted)" in verdict.why_not


def test_the_preemption_exit_code_is_tensorflows_restartable_code_and_reads_as_preempted():
    assert PREEMPTED_EXIT_CODE == 143  # tensorflow failure_handling_util._RESTARTABLE_EXIT_CODE
    assert describe_exit(PREEMPTED_EXIT_CODE) == "exit code 143 (preempted)"
    assert describe_exit(-15) == "signal SIGTERM"  # a death by SIGTERM is not a preemption exit


def test_max_restarts_zero_never_restarts():
    assert not retry_verdict(RestartPolicy.ON_FAILURE, "worker", SIGKILL, restarts_used=0, max_restarts=0,
                             task_name="worker-0", attempt=0).retry


@pytest.mark.parametrize("n, expected", [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 5.0), (9, 5.0)])
def test_backoff_starts_at_backoff_s_doubles_and_is_capped(n, expected):
    spec = SupervisionSpec.create(backoff_s=0.5, backoff_max_s=5.0)
    assert backoff_s(spec, n) == expected


# -- what an exit means ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "code, stop_requested, serves_forever, state, says",
    [
        (0, False, False, TaskState.SUCCEEDED, ""),
        (3, False, False, TaskState.FAILED, ""),
        (SIGKILL, False, False, TaskState.FAILED, ""),
        (0, False, True, TaskState.FAILED, "serves until stopped"),  # a ps must not exit on its own
        (1, False, True, TaskState.FAILED, ""),
        (SIGTERM, True, True, TaskState.STOPPED, ""),  # we asked
        (0, True, False, TaskState.STOPPED, ""),
        (SIGKILL, True, False, TaskState.STOPPED, ""),
    ],
)
def test_classify_exit(code, stop_requested, serves_forever, state, says):
    verdict = classify_exit(code, stop_requested=stop_requested, serves_forever=serves_forever, task_type="ps")
    assert verdict.state is state
    assert (says in verdict.message) if says else verdict.message == ""


@pytest.mark.parametrize(
    "task, code, coordinator, ends",
    [
        (W0, 0, W0, True),  # worker 0 is the chief without one
        (W1, 0, W0, False),  # any other task's success does not end the job
        (W0, 0, CHIEF, False),
        (CHIEF, 0, CHIEF, True),
        (CHIEF, 3, CHIEF, False),
        (TaskId("evaluator", 0), 0, W0, False),
    ],
)
def test_only_the_coordinator_succeeding_ends_the_job(task, code, coordinator, ends):
    verdict = classify_exit(code, stop_requested=False, serves_forever=False, task_type=task.task_type)
    assert ends_job_successfully(task, verdict, coordinator) is ends


# -- hangs ------------------------------------------------------------------------------------------
TIMEOUTS = SupervisionSpec.create(heartbeat_timeout_s=10.0, stall_timeout_s=60.0, startup_timeout_s=180.0)


@pytest.mark.parametrize(
    "watch, now, hung_because",
    [
        # heartbeat timeout: strictly more than 10 s of silence
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="serving", progress_at=100.0), 110.0, None),
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="serving", progress_at=100.0), 110.01,
         "no heartbeat for 10.0 s"),
        # stall: training, no new step for strictly more than 60 s
        (TaskWatch(True, 0.0, heartbeat_at=159.0, phase="training", progress_at=100.0, step=7), 160.0, None),
        (TaskWatch(True, 0.0, heartbeat_at=159.0, phase="training", progress_at=100.0, step=7), 160.5,
         "no training progress for 60.5 s at step 7"),
        # serving tasks (ps) never stall: no step to advance
        (TaskWatch(True, 0.0, heartbeat_at=499.0, phase="serving", progress_at=100.0), 500.0, None),
        # start-up: not training or serving strictly more than 180 s after the start
        (TaskWatch(True, 10.0), 190.0, None),
        (TaskWatch(True, 10.0), 190.5, "not training or serving 180.5 s after its start"),
        (TaskWatch(True, 10.0, heartbeat_at=190.0, phase="initializing", progress_at=11.0), 191.0,
         "not training or serving"),
        (TaskWatch(True, 10.0, heartbeat_at=190.0, phase="training", progress_at=185.0, step=0), 191.0, None),
        # a task still initializing (importing TensorFlow holds the GIL: its heartbeats come seconds
        # late) is judged by the startup timeout alone, not by the heartbeat timeout
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="initializing", progress_at=100.0), 170.0, None),
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="initializing", progress_at=100.0), 180.5,
         "not training or serving 180.5 s after its start"),
        # past start-up it is; a trainer whose training ended (evaluating, saving, finishing: TF's
        # teardown and export hold the GIL for seconds) has at least the startup timeout
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="evaluating", progress_at=100.0), 110.5, None),
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="finishing", progress_at=100.0), 280.0, None),
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="saving", progress_at=100.0), 280.5,
         "no heartbeat for 180.5 s (saving after training, limit 180 s)"),
        # the evaluator's evaluating is its main work: the heartbeat timeout
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="evaluating", progress_at=100.0, trains=False), 110.5,
         "no heartbeat"),
        # a program that does not report is watched by its exit only
        (TaskWatch(False, 0.0), 10_000.0, None),
        # a task that reported done is exiting: its heartbeats stop on the way out (the success
        # grace bounds it, not the heartbeat timeout)
        (TaskWatch(True, 0.0, heartbeat_at=100.0, phase="done", progress_at=100.0), 500.0, None),
        # ... until it reports: then it is covered like the others
        (TaskWatch(False, 0.0, heartbeat_at=100.0, phase="training", progress_at=100.0), 111.0, "no heartbeat"),
        # a user's program whose interpreter is exiting (its atexit said so): only its exit counts
        (TaskWatch(False, 0.0, heartbeat_at=100.0, phase="finishing", progress_at=100.0, exiting=True), 500.0, None),
        (TaskWatch(False, 0.0, heartbeat_at=100.0, phase="training", progress_at=100.0, exiting=True), 500.0, None),
    ],
)
def test_hang_reason(watch, now, hung_because):
    why = hang_reason(watch, now, TIMEOUTS)
    if hung_because is None:
        assert why is None
    else:
        assert why is not None and hung_because in why, why


def test_the_task_furthest_behind_is_handled_first():
    assert culprit_order([50, 12, None, 30]) == [2, 1, 3, 0]


@pytest.mark.parametrize(
    "watch",
    [
        TaskWatch(True, 10.0),  # starting
        TaskWatch(True, 10.0, heartbeat_at=12.0, phase="initializing", progress_at=12.0),
        TaskWatch(True, 10.0, heartbeat_at=50.0, phase="serving", progress_at=20.0),
        TaskWatch(True, 10.0, heartbeat_at=50.0, phase="training", progress_at=45.0, step=3),
        TaskWatch(True, 10.0, heartbeat_at=50.0, phase="finishing", progress_at=45.0),
        TaskWatch(False, 10.0, heartbeat_at=50.0, phase="training", progress_at=49.0),
    ],
)
@pytest.mark.parametrize("finish_timeout_s", [None, 3.0])
def test_next_check_at_is_exactly_when_a_task_can_first_be_hung(watch, finish_timeout_s):
    spec = SupervisionSpec.create(heartbeat_timeout_s=10.0, stall_timeout_s=60.0, startup_timeout_s=180.0,
                                  finish_timeout_s=finish_timeout_s)
    when = next_check_at(watch, spec)
    assert when is not None
    assert hang_reason(watch, when, spec) is None  # not hung at the deadline itself ...
    assert hang_reason(watch, when + 0.01, spec) is not None  # ... but just after it
    assert hang_reason(watch, (watch.started_at + when) / 2, spec) is None


def test_a_program_that_never_reported_has_no_hang_check():
    assert next_check_at(TaskWatch(False, 0.0), TIMEOUTS) is None


def test_an_exiting_program_has_no_hang_check():
    assert next_check_at(TaskWatch(False, 0.0, heartbeat_at=5.0, phase="training", progress_at=5.0, exiting=True),
                         TIMEOUTS) is None


@pytest.mark.parametrize(
    "candidates, culprit",
    [
        ([("worker-0", 50, 10.0), ("worker-1", 12, 30.0), ("worker-2", 40, 5.0)], "worker-1"),  # lowest step
        ([("worker-0", 12, 30.0), ("worker-1", 12, 20.0)], "worker-1"),  # same step: the older progress
        ([("worker-0", 3, 1.0), ("chief-0", None, 9.0)], "chief-0"),  # no step yet: furthest behind
        ([], ""),
    ],
)
def test_the_likely_culprit_is_the_task_that_stopped_progressing_first(candidates, culprit):
    assert likely_culprit(candidates) == culprit


@pytest.mark.parametrize(
    "strategy, trainers, requested, builtin, count",
    [
        (MWMS, 3, None, True, 3),  # a group restart needs the whole group
        (PSS, 1, None, True, 1),  # a PSS worker restarts alone
        (Strategy.MIRRORED, 1, None, True, 1),
        (MWMS, 3, 0, True, 0),  # --spares 0
        (MWMS, 3, 5, True, 5),  # --spares N wins
        (MWMS, 3, None, False, 0),  # a user's program: none by default
    ],
)
def test_spare_count_follows_the_restart_scope(strategy, trainers, requested, builtin, count):
    assert spare_count(strategy, trainers, requested, builtin) == count


def test_spares_start_once_the_job_has_trained_as_long_as_its_start_took():
    # first step 9 s after the start (a cold start of 9 s): spares from 9 s of training on
    assert spares_start_at(first_step_at=109.0, cold_start_s=9.0) == 118.0
    assert spares_start_at(first_step_at=50.0, cold_start_s=-1.0) == 50.0  # a clock step backwards: at once
