"""The Slurm job the orchestrator runs in: is it being preempted, and requeueing it.

Measured on the simulated cluster (``shared/engines/NOTES.md``, "Slurm preemption and requeue";
Slurm 22.05, ``PreemptMode=REQUEUE`` with a ``GraceTime``):

* At preemption ``scontrol show job`` keeps ``JobState=RUNNING`` for the grace but sets
  ``PreemptTime`` (``None`` before); Slurm SIGTERMs every job step at once (or, with
  ``SlurmctldParameters=preempt_send_user_signal``, sends the job's ``--signal`` instead) and the
  batch shell only when the grace ends.
* A preempted batch job whose script **ends on its own within the grace is not requeued**: it
  ends ``FAILED`` (or ``COMPLETED``) like any job. Slurm requeues it only when it has to kill it
  at the end of the grace. So an orchestrator that saved and left early requeues its own job
  (``scontrol requeue``: ``Restarts`` counts on, the job is held ``Reason=BeginTime`` for about
  2 minutes, then runs the batch script again with ``SLURM_RESTART_COUNT`` > 0).
* ``scontrol requeue`` of the running job SIGTERMs its batch shell at once: it is the last thing
  the orchestrator does.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

SCONTROL_TIMEOUT_S = 5.0
"""Bound on one ``scontrol`` call, seconds (it runs on the supervisor's loop)."""
CACHE_S = 1.0
"""How long one answer of ``scontrol show job`` is reused, seconds."""
PREEMPTED_STATES = frozenset({"PREEMPTED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
"""``JobState`` values that mean the job is being taken away to run again later."""


@dataclass(frozen=True)
class JobRecord:
    """What ``scontrol show job -o`` says of a job (the fields used here).

    Attributes:
        job_id: ``JobId``.
        state: ``JobState`` (``RUNNING``, ``PREEMPTED``, ...).
        reason: ``Reason`` (``None``, ``BeginTime``, ...).
        preempt_time: ``PreemptTime``: when Slurm began preempting it ("" when it has not).
        requeue: ``Requeue=1``: the job may be requeued (``sbatch --requeue``, or ``JobRequeue=1``).
        batch: ``BatchFlag=1``: a batch job (only those can be requeued).
        restarts: ``Restarts``: how often it was requeued.
    """

    job_id: str
    state: str
    reason: str
    preempt_time: str
    requeue: bool
    batch: bool
    restarts: int

    @property
    def preempted(self) -> bool:
        """Slurm is preempting the job (``PreemptTime`` set, or a preempted/requeued state)."""
        return bool(self.preempt_time) or self.state in PREEMPTED_STATES or "preempt" in self.reason.lower()


def parse_job(text: str) -> JobRecord | None:
    """The job of ``scontrol show job -o JOB`` output (one line of ``Key=Value``), None when absent."""
    fields: dict[str, str] = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if sep and key not in fields:
            fields[key] = value
    if "JobId" not in fields:
        return None
    preempt = fields.get("PreemptTime", "None")
    restarts = fields.get("Restarts", "0")
    return JobRecord(
        job_id=fields["JobId"], state=fields.get("JobState", ""), reason=fields.get("Reason", ""),
        preempt_time="" if preempt in ("None", "Unknown", "") else preempt, requeue=fields.get("Requeue") == "1",
        batch=fields.get("BatchFlag") == "1", restarts=int(restarts) if restarts.isdigit() else 0)


def _scontrol(environ: Mapping[str, str], *argv: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["scontrol", *argv], check=False, capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT_S, env=dict(environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("scontrol %s: %s", " ".join(argv), exc)
        return None


class JobProbe:
    """Reads the job's record with ``scontrol show job -o``, at most once per :data:`CACHE_S`.

    Args:
        job_id: ``SLURM_JOB_ID``.
        environ: the environment the Slurm commands run with (``SLURM_CONF``, ``PATH``).
    """

    def __init__(self, job_id: str, environ: Mapping[str, str]) -> None:
        self.job_id = job_id
        self.environ = dict(environ)
        self._lock = threading.Lock()
        self._at: float | None = None
        self._record: JobRecord | None = None

    def record(self) -> JobRecord | None:
        """The job's record now (cached for :data:`CACHE_S`); None when ``scontrol`` cannot say."""
        with self._lock:
            now = time.monotonic()
            if self._at is not None and now - self._at < CACHE_S:
                return self._record
            result = _scontrol(self.environ, "show", "job", "-o", self.job_id) if self.job_id else None
            self._record = parse_job(result.stdout) if result is not None and result.returncode == 0 else None
            self._at = time.monotonic()
            return self._record

    def preempted(self) -> bool | None:
        """True while Slurm preempts the job, False when it does not, None when it cannot be told."""
        record = self.record()
        return None if record is None else record.preempted


def requeue(job_id: str, environ: Mapping[str, str]) -> tuple[bool, str]:
    """``scontrol requeue JOB``: the job runs its batch script again later (``SLURM_RESTART_COUNT``
    counting on). It SIGTERMs the batch shell at once.

    Returns:
        ``(True, "")`` when Slurm took it, or ``(False, why)``.
    """
    result = _scontrol(environ, "requeue", job_id)
    if result is None:
        return False, f"scontrol requeue {job_id} did not answer within {SCONTROL_TIMEOUT_S:g} s"
    if result.returncode != 0:
        return False, f"scontrol requeue {job_id}: {(result.stderr or result.stdout).strip()}"
    return True, ""


def requeue_decision(record: JobRecord | None, *, time_limit: bool) -> tuple[bool, str]:
    """Whether an orchestrator that ended ``Preempted`` requeues its own job, and why (not).

    Args:
        record: the job's record now (None: ``scontrol`` could not say).
        time_limit: the preemption was the time limit's warning (``launch --continue``, SIGUSR1).

    Returns:
        ``(requeue, why)``: requeue after the time limit's warning, and after a preemption by Slurm
        of a requeueable batch job (Slurm itself requeues only jobs it has to kill at the end of the
        grace: the orchestrator left earlier); never after a plain SIGTERM (``scancel``: stop).
    """
    if record is None:
        return False, "the Slurm job's state is unknown (scontrol show job failed)"
    if not record.batch:
        return False, f"job {record.job_id} is not a batch job (salloc): only batch jobs can be requeued"
    if time_limit:
        return True, "the time limit is near"
    if not record.preempted:
        return False, "Slurm is not preempting the job (a SIGTERM from scancel or the time limit: the run ends here)"
    if not record.requeue:
        return False, f"job {record.job_id} is not requeueable (--no-requeue)"
    return True, "Slurm preempts the job"
