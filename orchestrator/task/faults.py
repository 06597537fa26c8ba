"""Task side of fault injection: fires the faults the orchestrator put in ``ORCH_FAULTS``.

The syntax, the parsing (``--inject-fault``) and the record (:class:`~orchestrator.spec.faults.Fault`)
are in :mod:`orchestrator.spec.faults`. Who fires what:

* the built-in programs (:func:`orchestrator.task.runtime.run_task`): ``time=`` faults from
  a timer thread, ``step=`` faults from the training loop (:class:`worker.progress.Progress`);
  a task that reports no step (a ps, a PSS worker, the evaluator) takes its ``step=`` faults
  from the job's gate at the job's step, on a thread of its own (:mod:`orchestrator.task.relay`),
  and the gate hands them over from its training loop;
* a user's program: ``time=`` faults (``kill``, ``exit=N``, ``stop``) from its wrapper,
  :mod:`orchestrator.task.execwrap`, which acts on the program from outside; ``step=``
  faults from :func:`orchestrator.client.report` and the Keras callback.

Every fault that fires first prints one line, to stdout and to stderr (flushed)::

    injecting fault: KIND at TRIGGER=N (unix T)
    injecting fault: KIND at step=N (unix T; handed over at job step S)

e.g. ``injecting fault: kill at time=2 (unix 1718000000.123)``; the second form for a fault
handed over by the gate (S: the gate's step then, N or the step its loop reported after N).

A fault fired off the task's main thread means what it means on the main thread: ``hang`` stops
the task's work while heartbeats go on (:func:`freeze`: the process SIGSTOPs itself after a keeper
process, :mod:`orchestrator.task.keeper`, took over its heartbeats), ``raise`` ends the task as
an uncaught exception would (:func:`_die_raising`: the error file, the traceback, exit 1). The control plane looks for
it in an attempt's logs to tell which faults fired: keep the format stable (:func:`announce`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, Callable

from orchestrator import env
from orchestrator.spec.faults import ENV, Fault, decode
from orchestrator.spec.model import TaskId

KEEPER_READY_S = 20.0
"""Longest a task waits for its keeper's first heartbeat before it freezes anyway, seconds (the
keeper imports gRPC: ~0.5 s, seconds on a busy machine)."""


class InjectedFault(RuntimeError):
    """Raised in the training loop by a ``raise`` fault."""


def announce(fault: Fault, job_step: int | None = None) -> None:
    """Print the ``injecting fault: ...`` line of ``fault`` to stdout and stderr (flushed);
    ``job_step``: the gate's step when it handed the fault over."""
    handed = "" if job_step is None else f"; handed over at job step {job_step}"
    line = f"injecting fault: {fault.kind} at {fault.when} (unix {time.time():.3f}{handed})"
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)  # so the failure report's stderr tail shows it


def without_time_faults(raw: str) -> str:
    """``raw`` (an ``ORCH_FAULTS`` value) without its ``time=`` faults: what a wrapper that
    fires those itself passes on to the program it runs."""
    return json.dumps([f.to_json() for f in decode(raw) if f.trigger != "time"])


def freeze(fields: dict[str, Any]) -> None:
    """An injected ``hang`` off the main thread: start a keeper that heartbeats ``fields`` (the
    task's last heartbeat) for this task, wait for its first heartbeat (at most
    :data:`KEEPER_READY_S`), then SIGSTOP this whole process (its work stops; the orchestrator's
    kill of the hung task ends it and, by its parent-death signal, the keeper)."""
    keeper = subprocess.Popen([sys.executable, "-m", "orchestrator.task.keeper"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, env={**os.environ, env.KEEPER_FIELDS: json.dumps(fields)})
    assert keeper.stdout is not None
    started = time.monotonic()
    if select.select([keeper.stdout], [], [], KEEPER_READY_S)[0]:
        print(f"hang: keeper (pid {keeper.pid}) heartbeats for this task; freezing (keeper ready in "
              f"{time.monotonic() - started:.2f} s)", flush=True)
    else:
        print(f"hang: the keeper gave no sign in {KEEPER_READY_S:g} s; freezing anyway", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


def _die_raising(fault: Fault) -> None:
    """An injected ``raise`` off the main thread (nothing there to raise into: a ps blocks in
    ``server.join()``): end the task as an uncaught exception would, error file included."""
    from orchestrator.task.errorfile import write_error_file

    try:
        raise InjectedFault(f"injected fault at {fault.when}")
    except InjectedFault as exc:
        traceback.print_exc()
        write_error_file(env.read(env.ERROR_FILE), exc, env.read(env.TASK))
    sys.stderr.flush()
    os._exit(1)


class FaultInjector:
    """Task side: fires the faults of ``ORCH_FAULTS`` that match this attempt, and as the job's
    gate hands over the faults of tasks that report no step (:mod:`orchestrator.task.relay`).

    Args:
        raw: the ``ORCH_FAULTS`` JSON ("" for none).
        attempt: this task's attempt.
        task: this task's name (``chief-0``; ``ORCH_TASK``), "" when unknown.
    """

    def __init__(self, raw: str, attempt: int, task: str = "") -> None:
        me = TaskId.parse(task, "task") if task else None
        faults = decode(raw)
        mine = [f for f in faults if f.attempt == attempt and (me is None or f.task == me)]
        self._attempt, self._me = attempt, me
        self._step_faults = [f for f in mine if f.trigger == "step" and not f.relay]
        self._time_faults = [f for f in mine if f.trigger == "time"]
        self._to_take = [f for f in mine if f.trigger == "step" and f.relay]  # handed over to this task
        self._to_hand = [f for f in faults if f.relay and me is not None and f.task != me]  # this task is the gate
        self._reporter: Any = None

    @property
    def time_faults(self) -> list[Fault]:
        """This attempt's ``time=`` faults."""
        return list(self._time_faults)

    @property
    def to_take(self) -> list[Fault]:
        """This attempt's ``step=`` faults that the gate hands over to this task."""
        return list(self._to_take)

    @classmethod
    def from_env(cls) -> "FaultInjector":
        return cls(env.read(ENV), env.read_int(env.ATTEMPT), env.read(env.TASK))

    def start(self, reporter: Any = None) -> None:
        """Arm the ``time=`` faults (daemon timers from now) and, when this task takes faults
        handed over, the thread that polls for them. ``reporter``: the task's heartbeat reporter,
        whose fields a ``hang`` fired off the main thread keeps sending (:func:`freeze`)."""
        self._reporter = reporter
        for fault in self._time_faults:
            timer = threading.Timer(fault.at, self._fire, args=(fault, None, False))
            timer.daemon = True
            timer.start()
        if self._to_take and self._me is not None:
            threading.Thread(target=self._take_faults, name="fault-relay", daemon=True).start()

    def on_step(self, step: int, report: Callable[[], None] | None = None) -> None:
        """Call after each training step; fires ``step=`` faults whose step has come, and as the
        gate hands over those of other tasks, waiting until each was taken. ``report``: sends
        this step at once (called before a hand-over: the supervisor then knows the job's step
        the fault landed at, even when the task it hits stops the training at once)."""
        for fault in list(self._step_faults):
            if step >= fault.at:
                self._step_faults.remove(fault)
                self._fire(fault)
        due = [fault for fault in self._to_hand if step >= fault.at]
        if due and report is not None:
            report()
        for fault in due:
            self._hand_over(fault, step)

    def _hand_over(self, fault: Fault, step: int) -> None:
        from orchestrator.task import relay

        outcome = relay.hand_over(fault, fault.name, step)
        if outcome != "early":  # early: its task runs an earlier attempt; again at the next step
            self._to_hand.remove(fault)
        print(f"fault relay: {fault.name} handed over at step {step}: {outcome} (unix {time.time():.3f})",
              flush=True)

    def _take_faults(self) -> None:
        from orchestrator.task import relay

        assert self._me is not None
        while self._to_take:
            got = relay.take(self._me, self._attempt)
            if got is None:
                continue
            name, job_step = got
            fault = next((f for f in self._to_take if f.name == name), None)
            if fault is not None:
                self._to_take.remove(fault)
                self._fire(fault, job_step, False)

    def _fire(self, fault: Fault, job_step: int | None = None, main: bool = True) -> None:
        """Fire ``fault``; ``main``: from the task's main loop (a training step), else from a
        thread of its own (a timer, the relay), where ``hang`` and ``raise`` end the whole task's work."""
        announce(fault, job_step)
        kind = fault.kind
        if kind in ("kill", "lose"):  # lose: the slot is withdrawn too (the supervisor's part)
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "exit":
            os._exit(fault.exit_code)
        elif kind == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif kind == "term":  # a preemption: SIGTERM without the orchestrator's stop marker
            os.kill(os.getpid(), signal.SIGTERM)
        elif kind == "hang" and not main:
            freeze(self._reporter.fields() if self._reporter is not None else {})
        elif kind == "hang":
            while True:  # blocks the training loop; heartbeats continue
                time.sleep(3600)
        elif kind == "raise" and not main:
            _die_raising(fault)
        elif kind == "raise":
            raise InjectedFault(f"injected fault at {fault.when}")
