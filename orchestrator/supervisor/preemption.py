"""A preemption of the whole job: save and leave, within a grace.

SIGTERM to the orchestrator (Slurm at preemption or at a time limit's warning, ``docker stop``,
a Kubernetes eviction, ``systemctl stop``, a spot notice script), or every task receiving
SIGTERM from outside at once (Slurm signals the job steps before the batch shell), means the
job is being preempted: every training task gets the preemption notice (a SIGTERM without the
stop marker: TF's ``PreemptionCheckpointHandler`` saves at the next step and exits 143 or 42),
and once every trainer has left, or the grace is over, the rest is stopped and the job ends
``Preempted``. Nothing is restarted meanwhile. This part decides (:meth:`Preemption.step`);
the loop carries out what it returns (:mod:`~orchestrator.supervisor.actions`).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.supervisor import forensics
from orchestrator.supervisor.actions import Action, DropRestarts, End, Event, Notice, Stop
from orchestrator.supervisor.records.snapshot import phase_name
from orchestrator.supervisor.records.states import EXIT_PREEMPTED, JobState, TaskRuntime
from orchestrator.supervisor.rules import decisions


class Preemption:
    """The state of a job preemption.

    Args:
        grace_s: seconds the trainers get to save and exit after the notice (Slurm's
            ``GraceTime`` and Kubernetes' ``terminationGracePeriodSeconds`` default to 30 s).
    """

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.reason: str | None = None
        self.deadline: float | None = None

    def request(self, reason: str) -> None:
        """The job is preempted because of ``reason`` (the first reason counts)."""
        if self.reason is None:
            self.reason = reason

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def begin(self, now: float, trainers: list[str]) -> str:
        """The notice goes out at ``now``; returns the event to show."""
        self.deadline = now + self.grace_s
        return (f"preempted ({self.reason}): {len(trainers)} training task(s) save at their next step, "
                f"then every task stops (grace {self.grace_s:g} s)")

    def over(self, now: float, trainers_left: list[str]) -> bool:
        """Every trainer has left, or the grace is over."""
        return not trainers_left or (self.deadline is not None and now >= self.deadline)

    def outcome(self, trainers_left: list[str], last_step: int | None) -> str:
        """The job's end reason: saved (at which step), or who did not save in time."""
        if trainers_left:
            saved = (f"{', '.join(trainers_left)} did not save within the {self.grace_s:g} s grace: "
                     "a resume starts from the last checkpoint")
        else:
            saved = "every training task saved and left" + (f" at step {last_step}" if last_step is not None else "")
        return f"preempted ({self.reason}): {saved}"

    def step(self, now: float, trainers: Sequence[TaskRuntime], coordinator: TaskRuntime,
             last_step: int | None) -> list[Action]:
        """First the notice to every live trainer (``trainers``: under PSS the coordinator alone,
        its workers serve until stopped and must keep serving while it saves); then, once every
        trainer has left or the grace is over, stop the rest and end Preempted (``last_step``:
        how far training got)."""
        names = [rt.task.name for rt in trainers]
        if self.deadline is None:
            hb = coordinator.current.heartbeat
            phase = phase_name(hb.heartbeat.phase) if hb else None
            if phase in decisions.POST_TRAINING_PHASES:  # a notice now would lose it (BackupAndRestore's
                # backup is gone once fit returns): let evaluation and export finish in the grace
                return [DropRestarts(), Event(self.begin(now, []) + "; training had ended: letting it finish")]
            return [DropRestarts(), Event(self.begin(now, names)),
                    Notice(tuple(rt.task.name for rt in trainers  # no stop marker: a notice
                                 if rt.current.process is not None and not forensics.sigterm_received(rt)))]
        if self.over(now, names):
            return [End(JobState.PREEMPTED, EXIT_PREEMPTED, self.outcome(names, last_step)),
                    Stop(None, "stopped: the job was preempted")]
        return []
