"""Restart policy and deadlines as data.

Restart policy per role (Kubeflow TFJob's ``restartPolicy`` values):

* ``never``: a failure of this role fails the job;
* ``on-failure``: any failure is retried (exit code != 0, a signal, a hang);
* ``exit-code``: Kubeflow's convention: exit codes 1-127 are permanent (a bug: retrying
  will not help), 128-255 and deaths by signal are retryable (preemption, OOM kill, hang).

``max_restarts`` bounds the restarts of the whole job (Kubeflow ``backoffLimit``); the
wait before restart *n* is ``backoff_s * 2**(n-1)`` capped at ``backoff_max_s``.

What a restart covers follows the strategy (TF "Handling task failure" guide): under
MultiWorkerMirroredStrategy every chief/worker is in every collective, so the whole group
restarts and resumes from BackupAndRestore; under ParameterServerStrategy a worker restarts
alone while the coordinator re-dispatches its work, and a ps or chief failure restarts the
whole cluster from the last checkpoint. An evaluator restarts alone and never fails the job.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.sizes import parse_size

ROLES = ("chief", "worker", "ps", "evaluator", "dispatcher", "data_worker")


class RestartPolicy(str, enum.Enum):
    NEVER = "never"
    ON_FAILURE = "on-failure"
    EXIT_CODE = "exit-code"

    @classmethod
    def parse(cls, value: str, field_name: str = "restart_policy") -> "RestartPolicy":
        text = str(value).strip().lower().replace("_", "-")
        for member in cls:
            if member.value == text:
                return member
        raise SpecError(field_name, value, "unknown restart policy", "use never, on-failure or exit-code")

    def retryable(self, exit_code: int | None) -> bool:
        """Whether a task that ended with ``exit_code`` (negative: signal) may be restarted."""
        if self is RestartPolicy.NEVER:
            return False
        if self is RestartPolicy.ON_FAILURE:
            return True
        if exit_code is None or exit_code < 0:
            return True
        return 128 <= exit_code <= 255


class SuccessPolicy(str, enum.Enum):
    """When the job has succeeded (Kubeflow TFJob's ``successPolicy``).

    * ``all-workers``: every training task (chief and workers) exited 0, as torchrun and TF's
      ``multi_process_runner`` require; the default under MultiWorkerMirroredStrategy, where
      every worker trains to the end.
    * ``chief``: the coordinator (the chief, or worker 0 without one) exited 0, TFJob's
      default; the only one possible under ParameterServerStrategy, whose workers serve
      until stopped.

    Under either, a task that fails after the coordinator succeeded is named in the report.
    """

    ALL_WORKERS = "all-workers"
    CHIEF = "chief"

    @classmethod
    def parse(cls, value: str, field_name: str = "success_policy") -> "SuccessPolicy":
        text = str(value).strip().lower().replace("_", "-")
        for member in cls:
            if member.value == text or (member is cls.ALL_WORKERS and text == "allworkers"):
                return member
        raise SpecError(field_name, value, "unknown success policy",
                        "use all-workers or chief, e.g. --success-policy chief")


def default_restart_policies() -> dict[str, RestartPolicy]:
    """The preset: ``exit-code`` for chief / worker / ps (a crash in user code is not
    retried, a kill or a hang is), ``on-failure`` for the evaluator (it never fails the job) and for
    the tf.data service's dispatcher and data workers (they serve until stopped: any exit is a
    failure, and each restarts alone)."""
    return {
        "chief": RestartPolicy.EXIT_CODE,
        "worker": RestartPolicy.EXIT_CODE,
        "ps": RestartPolicy.EXIT_CODE,
        "evaluator": RestartPolicy.ON_FAILURE,
        "dispatcher": RestartPolicy.ON_FAILURE,
        "data_worker": RestartPolicy.ON_FAILURE,
    }


@dataclass(frozen=True)
class SupervisionSpec:
    """How the supervisor restarts tasks and what it treats as hung.

    Attributes:
        restart_policy: role -> policy; roles left out take the preset.
        max_restarts: restarts allowed for the whole job (each group or task restart counts one).
        backoff_s: wait before the first restart, seconds; doubles with each restart. None
            (default): the first restart waits nothing, the next ones 1 s, doubling.
        backoff_max_s: cap of that wait, seconds.
        heartbeat_timeout_s: a task past start-up (training, serving, evaluating, saving,
            finishing) with no heartbeat for this long is hung. Default 4 s: a frozen task is
            found within 4 s, against a worst gap between heartbeats of 1.5 s past start-up on a
            loaded machine (``python -m bench.heartbeat_gaps``: 2 tasks and 4 busy processes on
            2 cores, TF ops, tracing, saving). A task still initializing is judged by
            ``startup_timeout_s`` alone: loading TensorFlow holds the GIL, which the heartbeat
            thread needs, for seconds; so may a trainer whose training ended (finishing,
            evaluating, saving: TF's teardown and export hold it too) go silent that long
            (:func:`orchestrator.supervisor.rules.hang_rules.silence_limit_s`).
        stall_timeout_s: a task reporting ``training`` whose step does not advance for this
            long is hung.
        startup_timeout_s: a task that has not reached training or serving this long after
            its start is hung (a peer that never starts).
        deadline_s: the whole job fails after this long; None for no deadline.
        success_policy: when the job has succeeded (:class:`SuccessPolicy`); None for the
            strategy's default (all-workers under MWMS, chief otherwise).
        finish_timeout_s: a task that reported the end of training (phase ``finishing``,
            ``evaluating`` or ``saving``) and has not exited this long after is hung; None
            (default) for no bound: post-training work (export, evaluation) is never a
            training stall.
        spares: warm spare task processes kept ready once the job trains; None (default)
            for as many as one restart needs (MWMS: the group; otherwise one), 0 for none.
        preemption_exit_codes: exit codes that mean "preempted: my state is saved, restart me":
            retried under every policy but ``never``, never counted against ``max_restarts``,
            never waiting a backoff. Default 143 (TF's ``_RESTARTABLE_EXIT_CODE``, what the
            built-in trainers exit with) and 42 (the ``exit_fn`` default of TF's
            ``TerminationConfig`` off Google Cloud: ``PreemptionCheckpointHandler`` exits 42 after
            its save); a program whose ``TerminationConfig(exit_fn=...)`` exits with another code
            lists it here (``--preemption-exit-codes 143,42,7``). A death by SIGTERM that the
            orchestrator did not send counts too.
        allow_cluster_mismatch: a training task whose strategy formed another cluster than the
            planned one (``replicas_in_sync 1`` with 2 workers planned: a program that built its
            own cluster) is a warning, not a failed job; default False: under MWMS it fails the
            job (:mod:`orchestrator.supervisor.rules.formed`).
        evaluator_grace_s: how long the evaluator may go on after the job succeeded, to evaluate
            the last checkpoint (``tf_keras.utils.SidecarEvaluator`` ends after it); then it is
            stopped, and the report says its final evaluation was lost. 0: stop it at once.
        crash_loop_limit: a task failing with the same exception line on this many consecutive
            attempts is in a crash loop and is not restarted again (a restart would fail the
            same way); 0: never. A training task's crash loop fails the job; the evaluator's
            leaves it ended, with a warning.
        exit_grace_s: a task that said it finished (phase ``done``, or its interpreter exiting
            after ``finishing``: training ended, outputs saved) and is still alive this long
            after is stuck in its exit: its stacks are kept, it is killed, and it counts as
            succeeded, with a warning naming the thread it was stuck in.
        on_nan: what a non-finite loss (or a metric of ``nan_metrics``) in a heartbeat does:
            ``warn`` (default: a warning naming the task and the first step, training goes on) or
            ``fail`` (the job fails at once, without a restart: a restart resumes the same weights
            and data and meets it again) (:mod:`orchestrator.supervisor.rules.training_rules`).
        nan_metrics: names of reported metrics checked like the loss (``--nan-metrics
            grad_norm,val_loss``); default none.
        max_log_size_bytes: the cap of each task attempt's ``stdout.log`` and ``stderr.log``,
            bytes (``--max-log-size 256M``); past it the middle is cut, the head and the tail kept
            (:mod:`orchestrator.supervisor.logcap`). Default 256 MiB; at least 64 KiB.
    """

    restart_policy: Mapping[str, RestartPolicy] = field(default_factory=default_restart_policies)
    max_restarts: int = 3
    backoff_s: float | None = None
    backoff_max_s: float = 30.0
    heartbeat_timeout_s: float = 4.0
    stall_timeout_s: float = 60.0
    startup_timeout_s: float = 180.0
    deadline_s: float | None = None
    success_policy: SuccessPolicy | None = None
    finish_timeout_s: float | None = None
    spares: int | None = None
    preemption_exit_codes: tuple[int, ...] = (143, 42)
    allow_cluster_mismatch: bool = False
    evaluator_grace_s: float = 120.0
    crash_loop_limit: int = 3
    exit_grace_s: float = 30.0
    on_nan: str = "warn"
    nan_metrics: tuple[str, ...] = ()
    max_log_size_bytes: int = 256 * 1024 * 1024

    @classmethod
    def create(cls, restart_policy: Mapping[str, str] | None = None, **fields) -> "SupervisionSpec":
        """Build and validate; ``restart_policy`` maps roles (or ``all``) to policy names.

        Raises:
            SpecError: naming the bad field.
        """
        policies = default_restart_policies()
        for role, value in (restart_policy or {}).items():
            name = f"restart_policy.{role}"
            if role == "all":
                policies = {r: RestartPolicy.parse(value, name) for r in ROLES}
            elif role in ROLES:
                policies[role] = RestartPolicy.parse(value, name)
            else:
                raise SpecError(name, role, "unknown role", "use " + ", ".join(ROLES) + " or all")
        if fields.get("success_policy") is not None:
            fields["success_policy"] = SuccessPolicy.parse(fields["success_policy"])
        if fields.get("preemption_exit_codes") is not None:
            fields["preemption_exit_codes"] = _exit_codes(fields["preemption_exit_codes"])
        allow = fields.get("allow_cluster_mismatch")
        if isinstance(allow, int) and not isinstance(allow, bool) and allow in (0, 1):  # a store_true flag: 1
            fields["allow_cluster_mismatch"] = bool(allow)
        if fields.get("on_nan") is not None:
            fields["on_nan"] = str(fields["on_nan"]).strip().lower()
        if fields.get("max_log_size_bytes") is not None:
            fields["max_log_size_bytes"] = parse_size("max_log_size_bytes", fields["max_log_size_bytes"],
                                                      FIX_EXAMPLES["max_log_size_bytes"])
        if fields.get("nan_metrics") is not None:
            fields["nan_metrics"] = _names("nan_metrics", fields["nan_metrics"])
        spec = cls(restart_policy=policies, **fields)
        spec.validate()
        return spec

    def validate(self) -> None:
        """Raises SpecError naming the first bad field."""
        if not isinstance(self.max_restarts, int) or isinstance(self.max_restarts, bool) or self.max_restarts < 0:
            raise SpecError("max_restarts", self.max_restarts, "must be a whole number >= 0", "e.g. --max-restarts 3")
        for name in ("backoff_s", "backoff_max_s"):
            if getattr(self, name) is not None:
                _seconds(name, getattr(self, name), allow_zero=True)
        if self.spares is not None and (not isinstance(self.spares, int) or isinstance(self.spares, bool)
                                        or not 0 <= self.spares <= 64):
            raise SpecError("spares", self.spares, "must be a whole number from 0 to 64",
                            "e.g. --spares 2, or --spares 0")
        for name in ("heartbeat_timeout_s", "stall_timeout_s", "startup_timeout_s", "exit_grace_s"):
            _seconds(name, getattr(self, name))
        if not isinstance(self.allow_cluster_mismatch, bool):
            raise SpecError("allow_cluster_mismatch", self.allow_cluster_mismatch, "must be true or false",
                            "e.g. allow_cluster_mismatch: true, or --allow-cluster-mismatch")
        _seconds("evaluator_grace_s", self.evaluator_grace_s, allow_zero=True)
        limit = self.crash_loop_limit
        if not isinstance(limit, int) or isinstance(limit, bool) or not (limit == 0 or 2 <= limit <= 100):
            raise SpecError("crash_loop_limit", limit, "must be 0 (never) or a whole number from 2 to 100",
                            FIX_EXAMPLES["crash_loop_limit"])
        for name in ("deadline_s", "finish_timeout_s"):
            if getattr(self, name) is not None:
                _seconds(name, getattr(self, name))
        size = self.max_log_size_bytes
        if not isinstance(size, int) or isinstance(size, bool) or size < MIN_LOG_SIZE_BYTES:
            raise SpecError("max_log_size_bytes", size, "must be a size of at least 64K",
                            FIX_EXAMPLES["max_log_size_bytes"])
        if self.on_nan not in ("warn", "fail"):
            raise SpecError("on_nan", self.on_nan, "must be warn or fail", FIX_EXAMPLES["on_nan"])

    def backoff_for(self, restart_number: int) -> float:
        """Seconds to wait before restart number ``restart_number`` (1 for the first):
        ``backoff_s * 2**(n-1)`` capped at ``backoff_max_s``; without ``backoff_s`` the first
        restart waits nothing (a lone failure is recovered at once) and restart n >= 2 waits
        ``2**(n-2)`` s, capped."""
        if self.backoff_s is None:
            return 0.0 if restart_number <= 1 else min(self.backoff_max_s, 2.0 ** (restart_number - 2))
        return min(self.backoff_max_s, self.backoff_s * 2 ** max(0, restart_number - 1))

    def policy(self, role: str) -> RestartPolicy:
        return self.restart_policy.get(role, RestartPolicy.EXIT_CODE)

    def preemption_code(self, exit_code: int | None) -> bool:
        """``exit_code`` (Popen's: negative for a signal) says the task was preempted: one of
        :attr:`preemption_exit_codes`, or a death by SIGTERM (the orchestrator's own stops are
        told apart before this is asked)."""
        return exit_code is not None and (exit_code in self.preemption_exit_codes or exit_code == -15)


def _exit_codes(value: object) -> tuple[int, ...]:
    """``"143,42"``, ``[143, 42]`` or ``143`` as a tuple of exit codes 1-255."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
    codes = []
    for item in items:
        try:
            code = int(str(item).strip())
        except ValueError:
            code = -1
        if not 1 <= code <= 255 or isinstance(item, bool):
            raise SpecError("preemption_exit_codes", value, "must be exit codes from 1 to 255",
                            "e.g. --preemption-exit-codes 143,42")
        codes.append(code)
    return tuple(codes)


FIX_EXAMPLES = {
    "backoff_s": "e.g. --restart-backoff 1",
    "backoff_max_s": "e.g. supervision: {backoff_max_s: 30} in the spec file (it has no flag)",
    "heartbeat_timeout_s": "e.g. --heartbeat-timeout 4",
    "stall_timeout_s": "e.g. --stall-timeout 60",
    "startup_timeout_s": "e.g. --startup-timeout 180",
    "deadline_s": "e.g. --deadline 600",
    "finish_timeout_s": "e.g. --finish-timeout 600",
    "spares": "e.g. --spares 2",
    "preemption_exit_codes": "e.g. --preemption-exit-codes 143,42",
    "evaluator_grace_s": "e.g. --evaluator-grace 120",
    "crash_loop_limit": "e.g. --crash-loop-limit 3, or 0 for never",
    "exit_grace_s": "e.g. --exit-grace 30",
    "on_nan": "e.g. --on-nan fail, or --on-nan warn",
    "nan_metrics": "e.g. --nan-metrics grad_norm,val_loss",
    "max_log_size_bytes": "e.g. --max-log-size 256M (K, M, G: KiB, MiB, GiB)",
}
"""Field -> the example of a good value each error names: ``launch``'s flag for the field, or
the spec-file field where there is no flag (flag names are not derived from field names:
``backoff_s`` is ``--restart-backoff``)."""


MIN_LOG_SIZE_BYTES = 64 * 1024


def _names(name: str, value: object) -> tuple[str, ...]:
    """``"a,b"`` or ``["a", "b"]`` as a tuple of metric names (no empty ones)."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else None
    names = tuple(str(item).strip() for item in items) if items is not None else ()
    if items is None or not all(names) or not all(isinstance(item, str) for item in items):
        raise SpecError(name, value, "must be metric names", FIX_EXAMPLES[name])
    return names


def _seconds(name: str, value: object, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecError(name, value, f"must be a number of seconds {bound}", FIX_EXAMPLES[name])
