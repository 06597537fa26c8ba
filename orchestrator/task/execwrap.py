"""``python -m orchestrator.task.execwrap -- PROGRAM ARGS...``: run a user's program as a task.

Used by ``launch ... -- PROGRAM``. The built-in task programs die with the orchestrator
through ``PR_SET_PDEATHSIG``; a user's program may be a shell script whose real work runs
in its children, which a parent-death signal on the first process would not reach. So this
wrapper stays as the program's parent, in the task's process group:

* when the orchestrator dies (the kernel sends this process SIGUSR2: its parent-death
  signal), it SIGKILLs the whole process group: the program and everything it started;
* SIGTERM / SIGINT / SIGUSR1 sent to the group reach the program directly; the wrapper
  outlives them and waits for the program, then exits the way it did (same code, or the
  same signal), so the supervisor sees the program's own exit;
* prompt stops: when the orchestrator itself stops the task, the local backend first writes
  the marker file ``$ORCH_TASK_DIR/stop-requested`` (:data:`orchestrator.env.STOP_REQUESTED_FILE`).
  On SIGTERM with that marker present the wrapper gives the program :data:`STOP_GRACE_S`
  seconds, then SIGKILLs the group: a program whose SIGTERM is caught (TensorFlow's
  preemption notifier, created by ``MultiWorkerMirroredStrategy``, does that) no longer
  holds every stop for the whole ``--stop-timeout``. Without the marker (a preemption: docker
  stop, Slurm, Kubernetes, or ``kill`` of the pid ``status`` shows, which is this wrapper's) the
  wrapper writes the marker ``sigterm-received`` (:data:`orchestrator.env.SIGTERM_RECEIVED_FILE`:
  the report names this task as the preempted one) and passes the SIGTERM on to the program, so it
  gets the notice wherever it was sent (``docker stop`` and a Kubernetes eviction signal PID 1
  only). A program whose whole group was signalled then sees the notice twice; TensorFlow's
  ``PreemptionCheckpointHandler`` takes a second notice as the same one (it sets an event);
* what the program leaves behind (:mod:`orchestrator.task.leftovers`): the wrapper is a child
  subreaper, so a process the program started in a session of its own (a daemon) stays its
  descendant even once orphaned; when the program has exited (or is stopped) the wrapper ends every
  descendant still running (SIGTERM, then SIGKILL after :data:`~orchestrator.task.leftovers.LEFTOVER_GRACE_S`),
  before it exits the way the program did, and lists them in ``left-behind.jsonl``
  (:data:`orchestrator.env.LEFT_BEHIND_FILE`) for the report;
* injected faults (``--inject-fault TASK:KIND@time=S``, :mod:`orchestrator.task.faults`):
  the wrapper fires the ``time=`` faults of its attempt on the program, from outside, S
  seconds after it started: ``kill`` SIGKILLs the group (the wrapper included: the task dies
  of SIGKILL), ``exit=N`` SIGKILLs the program and exits N, ``stop`` SIGSTOPs the group,
  ``term`` SIGTERMs the group as a preemption would (no stop marker).
  ``hang`` and ``raise`` need the program's own loop and cannot fire from here (the wrapper
  says so on stderr). Each fault that fires prints ``injecting fault: KIND at time=S (unix T)``
  to stdout and stderr. The program gets ``ORCH_FAULTS`` without the ``time=`` faults; its
  ``step=`` faults fire in :func:`orchestrator.client.report` and the Keras callback.

In a Kubernetes JobSet pod without ``TF_CONFIG`` it first computes it
(:mod:`orchestrator.task.jobset`), so the program finds it in its environment, then waits
(bounded by ``ORCH_JOBSET_PEER_WAIT_S``, saying which peer it waits for) until its peers' names
resolve; past the bound it exits 1 naming them, and the program never starts.

Without an orchestrator pid (containers, where there is no parent to watch) and without
``time=`` faults it simply ``exec`` s the program: there the engine ends what it leaves behind (a
container's PID namespace dies with its first process; a Slurm step's processes are tracked by
its cgroup and killed at the step's end).

**Spare mode** (``execwrap --spare -- python SCRIPT ARGS``, or ``python -m MODULE ARGS``): a warm
spare for a user's program (``launch --spares N -- ...``, local backend). The wrapper starts at
once, as it would for a task, and starts the program's interpreter as
``python -m orchestrator.task.spare -- SCRIPT ARGS`` in its process group, which imports
TensorFlow (``ORCH_SPARE_PRELOAD``) and waits. The wrapper then reads ONE assignment line on its
stdin (:mod:`orchestrator.task.spare`: the task's environment and log files), takes it as its
own (environment, stdout and stderr, ``time=`` faults), installs the same signal handling as
above, waits (at most :data:`PORT_WAIT_S`) until the task's port is free (:func:`wait_for_own_port`)
and hands the program's environment to the interpreter, which runs the script as
``__main__``; from there on it is the wrapper of that program, exactly as above. End of stdin
without an assignment SIGKILLs the interpreter and exits 0; an interpreter that dies before it
is assigned (an import error) ends the wrapper with its exit status, so the backend never hands
a task to a dead spare.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from orchestrator import env
from orchestrator.net import can_listen
from orchestrator.resources.pinning import pin_self
from orchestrator.spec.faults import ENV as FAULTS_ENV
from orchestrator.spec.faults import Fault
from orchestrator.spec.model import TaskId
from orchestrator.task.context import TaskContext
from orchestrator.task.faults import FaultInjector, announce, without_time_faults
from orchestrator.task.jobset import PeersUnresolved, ensure_tf_config, wait_for_jobset_peers
from orchestrator.task.leftovers import become_subreaper, end_descendants, reap_orphans
from orchestrator.task.lifetime import die_with_orchestrator
from orchestrator.task.runtime import take_cluster
from orchestrator.task.spare import take_stdio

STOP_GRACE_S = 1.0
"""Seconds a user's program gets after the orchestrator's own SIGTERM before its group is SIGKILLed."""

OUTSIDE_KINDS = ("kill", "exit", "stop", "term", "lose")
"""Fault kinds the wrapper can fire on the program from outside."""


_exit_code: int | None = None
"""Set by an ``exit=N`` fault: the code this wrapper exits with."""

_program: subprocess.Popen | None = None
"""The program, once started: where a preemption notice sent to this wrapper goes on to."""

_stop_timer: threading.Timer | None = None
"""The SIGKILL of the group a grace after the orchestrator's own SIGTERM (cancelled once the program exited)."""

_ending = threading.Lock()
"""Held while the wrapper ends what the program left behind: once taken, the group's SIGKILL waits for it."""


def _kill_group(_signum=None, _frame=None) -> None:
    """SIGKILL the group, this wrapper included; first what the program started outside it
    (its own session or group: the kernel would hand it to init). While the wrapper is ending
    those already (the program exited), leave the rest to it."""
    if not _ending.acquire(blocking=False):
        return
    try:
        end_descendants(outside_group_only=True, grace_s=0.0)
    except Exception:  # noqa: BLE001 - the group's SIGKILL must happen whatever failed here
        pass
    os.killpg(0, signal.SIGKILL)


def _on_sigterm(_signum, _frame) -> None:
    """SIGTERM: the orchestrator's own stop (its marker) SIGKILLs the group after a grace; any
    other is a preemption notice: say so (the marker file) and pass it on to the program."""
    task_dir = env.read(env.TASK_DIR)
    if task_dir and os.path.exists(os.path.join(task_dir, env.STOP_REQUESTED_FILE)):
        global _stop_timer
        if _stop_timer is None:
            _stop_timer = threading.Timer(STOP_GRACE_S, _kill_group)
            _stop_timer.daemon = True
            _stop_timer.start()
        return
    if task_dir:
        try:
            with open(os.path.join(task_dir, env.SIGTERM_RECEIVED_FILE), "x", encoding="utf-8") as marker:
                marker.write(f"{time.time():.3f}\n")
        except OSError:  # written already (a second notice), or no directory
            pass
    if _program is not None and _program.poll() is None:
        try:
            _program.send_signal(signal.SIGTERM)
        except OSError:
            pass


def _fire(fault: Fault, program: subprocess.Popen[bytes], job_step: int | None = None) -> None:
    """Fire one ``time=`` fault, or one handed over at the gate's ``job_step``, on the program
    (from a timer thread, or the thread that takes them: :func:`_take_faults`)."""
    if program.poll() is not None:
        return
    kind = fault.kind
    if kind not in OUTSIDE_KINDS:
        print(f"execwrap: cannot inject {kind} at {fault.when} into a user's program "
              "from outside; skipped", file=sys.stderr, flush=True)
        return
    announce(fault, job_step)
    if kind in ("kill", "lose"):
        _kill_group()
    elif kind == "exit":
        global _exit_code
        _exit_code = fault.exit_code  # main() exits with it once the program is gone
        program.kill()  # the backend then kills what the program left in the group
    elif kind == "stop":
        os.killpg(0, signal.SIGSTOP)
    elif kind == "term":  # a preemption: no stop marker, so _on_sigterm leaves the program alone
        os.killpg(0, signal.SIGTERM)


def main(argv: list[str]) -> int:
    """Run the program ``argv`` (after an optional ``--``) as this task.

    Returns:
        The program's exit code; 127 when it cannot be run; 2 without a program or with an
        inconsistent JobSet environment (``TF_CONFIG`` is computed from it when absent:
        :func:`orchestrator.task.jobset.ensure_tf_config`); 1 when a JobSet pod's peers' names
        never resolved. When the
        program dies of a signal, the wrapper dies of the same signal.
    """
    if argv[:1] == ["--spare"]:
        argv = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        if not argv:
            print("usage: python -m orchestrator.task.execwrap --spare -- PYTHON SCRIPT [ARGS...]", file=sys.stderr)
            return 2
        return spare(argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m orchestrator.task.execwrap -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    try:
        ensure_tf_config()  # a Kubernetes JobSet pod: the program inherits the computed TF_CONFIG
        wait_for_jobset_peers()  # ... once its peers' names resolve (bounded, said on stderr)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PeersUnresolved as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    orchestrator_pid = env.read_int(env.ORCHESTRATOR_PID)
    injector = FaultInjector.from_env()
    time_faults, handed = injector.time_faults, injector.to_take
    pin_self()  # the task's cores (ORCH_CPUS): the program and what it starts inherit them
    if env.read_flag(env.ADDRESS_FROM_TASK):  # Slurm: register a port of this node, get TF_CONFIG
        try:
            take_cluster(TaskContext.from_env())  # sets TF_CONFIG; the program binds the port itself
        except (RuntimeError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    try:
        if orchestrator_pid <= 0 and not time_faults and not handed:
            os.execvp(argv[0], argv)
        _install_handlers()
        die_with_orchestrator(orchestrator_pid, signal.SIGUSR2)
        become_subreaper()  # orphans of the program come to this wrapper, which ends them
        global _program
        program = _program = subprocess.Popen(argv, env=_program_env(orchestrator_pid))
    except OSError as exc:
        print(f"error: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        return 127
    return _supervise(program, time_faults, handed)


def _install_handlers() -> None:
    signal.signal(signal.SIGUSR2, _kill_group)
    signal.signal(signal.SIGTERM, _on_sigterm)  # a Python handler: reset to default in the program
    for signum in (signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, lambda *_: None)


def _program_env(orchestrator_pid: int) -> dict[str, str]:
    """The program's environment: this wrapper's, with itself as the pid not to outlive and
    without the ``time=`` faults (the wrapper fires those)."""
    program_env = {k: v for k, v in os.environ.items() if k not in (env.SPARE_PRELOAD, env.SPARE_MODULE,
                                                                    env.SPARE_READY_FILE)}
    if orchestrator_pid > 0:  # the program's parent is now this wrapper: it must not outlive it
        program_env[env.ORCHESTRATOR_PID] = str(os.getpid())
    if FAULTS_ENV in program_env:
        program_env[FAULTS_ENV] = without_time_faults(program_env[FAULTS_ENV])
    return program_env


def _take_faults(program: subprocess.Popen[bytes], handed: list[Fault]) -> None:
    """Take the ``step=`` faults the job's gate hands over to this task (a ps or an evaluator
    running a user's program, which reports no step: :mod:`orchestrator.task.relay`) and fire
    each on the program from outside."""
    from orchestrator.task import relay

    me = TaskId.parse(env.read(env.TASK), "task")
    left = list(handed)
    while left and program.poll() is None:
        got = relay.take(me, env.read_int(env.ATTEMPT))
        fault = next((f for f in left if got is not None and f.name == got[0]), None)
        if fault is not None and got is not None:
            left.remove(fault)
            _fire(fault, program, got[1])


def _supervise(program: subprocess.Popen[bytes], time_faults: list[Fault], handed: Sequence[Fault] = ()) -> int:
    """Fire the ``time=`` faults and those handed over on the running program, wait for it, end
    what it left behind, exit the way it did."""
    reap_orphans(program.pid)
    for fault in time_faults:
        timer = threading.Timer(fault.at, _fire, args=(fault, program))
        timer.daemon = True
        timer.start()
    if handed:
        threading.Thread(target=_take_faults, args=(program, list(handed)), name="fault-relay", daemon=True).start()
    code = program.wait()
    if _stop_timer is not None:
        _stop_timer.cancel()
    if _ending.acquire(blocking=False):  # else the group is being SIGKILLed: this wrapper with it
        end_descendants()  # nothing the program started outlives it, in whatever session
    if _exit_code is not None:
        return _exit_code
    if code < 0:  # die of the same signal, so the supervisor sees what the program saw
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: no handler to reset
            pass
        os.kill(os.getpid(), -code)
    return code


PORT_WAIT_S = 10.0
"""Most seconds a spare waits for its task's port to be free before it runs the program anyway."""


def wait_for_own_port(timeout_s: float) -> bool:
    """Wait (bounded) until this task's ``TF_CONFIG`` port can be bound; True when it can.

    The task's previous attempt may still be exiting and hold the port: the group restart
    SIGKILLs a wrapper and its program together, the backend reaps the wrapper, and the kernel
    tears the program's threads down a moment later. A cold start spends seconds importing
    TensorFlow before its server binds; a spare binds at once and would fail with "Could not
    start gRPC server". Binds like gRPC (``SO_REUSEADDR``: connections in TIME_WAIT do not count).
    A task without a port of its own (the evaluator) returns at once.
    """
    try:
        config = json.loads(env.read("TF_CONFIG"))
        task = config["task"]
        port = int(str(config["cluster"][task["type"]][int(task["index"])]).rsplit(":", 1)[1])
    except (ValueError, KeyError, IndexError, TypeError):
        return True
    deadline = time.monotonic() + timeout_s
    while not can_listen(port):
        if time.monotonic() >= deadline:
            print(f"execwrap: port {port} is still in use after {timeout_s:g} s; starting the program anyway",
                  file=sys.stderr, flush=True)
            return False
        time.sleep(0.05)
    return True


def spare(argv: list[str]) -> int:
    """Spare mode: start the program's interpreter with TensorFlow preloaded, wait for the
    assignment on stdin, then be the wrapper of the program it becomes (see the module doc).

    Returns:
        The program's exit code (as :func:`main`); 0 at the end of stdin without an
        assignment; the interpreter's exit code when it died before its assignment; 127
        when it cannot be started.
    """
    orchestrator_pid = env.read_int(env.ORCHESTRATOR_PID)
    signal.signal(signal.SIGUSR2, _kill_group)  # the orchestrator died: the group (the interpreter too) dies
    die_with_orchestrator(orchestrator_pid, signal.SIGUSR2)
    become_subreaper()
    interpreter_env = dict(os.environ)
    if orchestrator_pid > 0:
        interpreter_env[env.ORCHESTRATOR_PID] = str(os.getpid())  # its PR_SET_PDEATHSIG watches this wrapper
    try:
        program = subprocess.Popen([argv[0], "-m", "orchestrator.task.spare", "--", *argv[1:]], env=interpreter_env,
                                   stdin=subprocess.PIPE)
    except OSError as exc:
        print(f"error: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        return 127
    assigned = threading.Lock()

    def end_with_the_interpreter() -> None:  # it died unassigned: so does this spare, visibly
        code = program.wait()
        if assigned.acquire(blocking=False):
            print(f"execwrap: the spare's interpreter ended before its assignment ({code})",
                  file=sys.stderr, flush=True)
            os._exit(code if code >= 0 else 128 - code)

    threading.Thread(target=end_with_the_interpreter, daemon=True).start()
    line = sys.stdin.readline()
    if not assigned.acquire(blocking=False):  # the interpreter is gone; its thread ends this process
        threading.Event().wait(10.0)
        return 1
    if not line.strip():  # not needed: the job ended
        program.kill()
        program.wait()
        return 0
    assignment = json.loads(line)
    os.environ.update({str(k): str(v) for k, v in assignment["env"].items()})
    take_stdio(assignment)
    injector = FaultInjector.from_env()
    global _program
    _program = program
    _install_handlers()
    wait_for_own_port(PORT_WAIT_S)
    handover = {"env": _program_env(orchestrator_pid), "stdout": assignment["stdout"], "stderr": assignment["stderr"]}
    try:
        assert program.stdin is not None
        program.stdin.write((json.dumps(handover) + "\n").encode())
        program.stdin.close()
    except OSError:  # it died just now: its exit below is the task's
        pass
    return _supervise(program, injector.time_faults, injector.to_take)

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
