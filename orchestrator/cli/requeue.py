"""``launch --backend slurm`` in a batch job: the time limit's warning, and requeueing the job.

* ``launch --continue`` (written by ``sbatch --continue``, with ``#SBATCH --signal=B:USR1@N``):
  SIGUSR1 to the orchestrator is the warning Slurm sends N s before the job's time limit: the job
  saves and leaves as on a preemption (every trainer checkpoints at its next step, the job ends
  ``Preempted``, exit 75), then the orchestrator requeues its own job (``scontrol requeue``) and
  the batch script's next run continues the run (``launch --resume``). Under
  ``SlurmctldParameters=preempt_send_user_signal`` Slurm sends that same signal at a preemption:
  the job's record (``PreemptTime``) tells which it is. A warning that comes once training has
  ended (the final evaluation or the model's export under way) saves nothing: the job is left to
  finish (TensorFlow's ``BackupAndRestore`` has deleted its backup at the end of ``fit``, so a
  save-and-leave then would cost the run its training).
* After a preemption by Slurm (its steps SIGTERMed at once, or the signal above), a batch script
  that ends within the partition's ``GraceTime`` is not requeued by Slurm (measured: it ends
  ``FAILED``; see :mod:`orchestrator.backends.slurm_job`): the orchestrator requeues a
  requeueable job itself. A SIGTERM that is no preemption (``scancel``, the time limit itself)
  ends the run: it is not requeued.

``scontrol requeue`` SIGTERMs the batch shell at once, so it is the last thing done.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from orchestrator.errors import SpecError

if TYPE_CHECKING:
    from orchestrator.backends.slurm_job import JobProbe

TIME_LIMIT_REASON = "the time limit is near (SIGUSR1 from Slurm)"
AFTER_TRAINING = frozenset({"evaluating", "saving", "finishing", "done"})
"""Phases of a task whose training has ended."""
PREEMPT_REASON = "Slurm preempts the job (SIGUSR1 from Slurm: preempt_send_user_signal)"


def check(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """Bad input for ``--continue``: it needs the slurm backend inside a batch job.

    Raises:
        SpecError: naming ``continue``.
    """
    if not getattr(args, "continue_run", False):
        return
    environ = os.environ if environ is None else environ
    if args.backend != "slurm":
        raise SpecError("continue", True, "requeues a Slurm batch job: it needs --backend slurm",
                        "run it from a script written by `orchestrator sbatch --continue`, or drop --continue")
    if not environ.get("SLURM_JOB_ID"):
        raise SpecError("continue", True, "not inside a Slurm job (SLURM_JOB_ID is not set)",
                        "submit a script written by `orchestrator sbatch --continue`")


class SlurmContinuation:
    """The Slurm side of one ``launch``: the SIGUSR1 handler and the requeue at the end.

    Args:
        continue_run: ``--continue`` was given (SIGUSR1 means the time limit is near).
        backend: the backend's name (nothing happens but under ``slurm``).
        environ: where ``SLURM_JOB_ID`` and ``SLURM_CONF`` come from.
    """

    def __init__(self, continue_run: bool, backend: str, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.job_id = self.environ.get("SLURM_JOB_ID", "") if backend == "slurm" else ""
        self.continue_run = continue_run and bool(self.job_id)
        self.probe: JobProbe | None = None  # made at its first use: a local launch never imports slurm_job
        self.time_limit = False
        self._reason: str | None = None

    def install(self, request_preemption: Callable[[str], None], phases: Callable[[], list[str]],
                out=None) -> dict[int, object]:
        """With ``--continue``: handle SIGUSR1 (the previous handlers are returned to restore).
        The job's record is read on a thread, never in the handler.

        Args:
            request_preemption: the supervisor's save-and-leave.
            phases: the phase of every chief and worker now (``initializing``, ``training``,
                ``evaluating``, ...): one past training means training has ended.
            out: where the one line about a warning that comes after training goes (stdout).
        """
        if not self.continue_run:
            return {}
        probe = self._probe()

        def decide() -> None:
            preempted = probe.preempted()
            now = phases()
            if not preempted and AFTER_TRAINING & set(now):  # MWMS trainers end together; PSS: the chief
                print(f"{TIME_LIMIT_REASON}, but training has ended: the job finishes its post-training work "
                      "(nothing to save)", file=out or sys.stdout, flush=True)
                return
            self._reason = PREEMPT_REASON if preempted else TIME_LIMIT_REASON
            self.time_limit = not preempted
            request_preemption(self._reason)

        def on_usr1(_signum, _frame) -> None:
            if self._reason is None:
                self._reason = "pending"
                threading.Thread(target=decide, name="slurm-usr1", daemon=True).start()

        signal.signal(signal.SIGUSR1, on_usr1)
        # once the job ended a late warning must not kill the orchestrator (SIGUSR1's default): ignored then
        return {signal.SIGUSR1: signal.SIG_IGN}

    def _probe(self) -> JobProbe:
        """The reader of this job's record (``scontrol show job``), made at its first use."""
        from orchestrator.backends.slurm_job import JobProbe

        if self.probe is None:
            self.probe = JobProbe(self.job_id, self.environ)
        return self.probe

    def after(self, preempted: bool, run_id: str, out=None) -> None:
        """The job ended; when it ended ``Preempted`` and should run again, requeue it (the last
        thing done: Slurm SIGTERMs the batch shell, which is ignored from here on)."""
        if not preempted or not self.job_id:
            return
        out = out or sys.stdout
        from orchestrator.backends.slurm_job import requeue, requeue_decision

        go, why = requeue_decision(self._probe().record(), time_limit=self.time_limit)
        if not go:
            print(f"Slurm job {self.job_id} not requeued: {why}", file=out, flush=True)
            return
        print(f"{why}: requeueing Slurm job {self.job_id} (scontrol requeue); its next run continues the run"
              f" {run_id} (launch --resume)", file=out, flush=True)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ok, error = requeue(self.job_id, self.environ)
        if not ok:
            print(f"could not requeue Slurm job {self.job_id}: {error}; continue the run by hand with "
                  "launch --resume", file=out, flush=True)
