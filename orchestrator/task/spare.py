"""``python -m orchestrator.task.spare``: a warm spare, a task process started before it is needed.

A restart normally starts a new process that spends most of its time importing TensorFlow
and tf-keras (about 3.5 s here, more on a busy machine) before it trains again. A spare does
that work in advance, then waits on its stdin for the identity of the task it becomes:

1. started by the backend with the job's common environment (thread limits,
   ``TF_USE_LEGACY_KERAS`` and the orchestrator's pid, so it dies with the orchestrator
   like any task) plus ``ORCH_SPARE_MODULE`` (the task program to become, e.g. ``worker``)
   and ``ORCH_SPARE_PRELOAD`` (comma-separated modules to import now, e.g.
   ``tensorflow,tf_keras,worker.train``; a name ending in ``?`` is imported when installed);
   its output goes to its own log until assigned;
2. imports the preload modules in a thread of its own at the lowest CPU priority
   (``SCHED_IDLE``: it runs only on cycles no other thread of the machine wants, so a
   training job does not feel it), on the cores kept off the training tasks when there are
   some (``ORCH_SERVICE_CPUS``), and creates ``ORCH_SPARE_READY_FILE`` when done (the backend
   hands a task only to a ready spare). The main thread never lowers its priority: an
   unprivileged thread cannot leave ``SCHED_IDLE`` (the kernel allows it only when
   ``RLIMIT_NICE`` permits nice 0, and its default is 0: measured, ``EPERM`` as a user, fine as
   root), but it never needs to: the task runs on the main thread, at normal priority, and so
   do the thread pools TensorFlow starts with its first op. TensorFlow's runtime is not started
   by the imports (no op has run), so TF_CONFIG and the strategy are read only after the
   assignment;
3. reads ONE line of JSON from stdin: ``{"env": {...}, "stdout": PATH, "stderr": PATH}``:
   the task attempt's whole orchestrator environment (TF_CONFIG, attempt, task dir, token,
   faults) and its log files;
4. updates ``os.environ``, pins itself to the task's cores (``ORCH_CPUS``), points its stdout
   and stderr at the task's log files, and runs the module as ``python -m MODULE`` would
   (``runpy``), exiting with its exit code.

A user's program (``python -m orchestrator.task.spare -- SCRIPT ARGS`` or ``-- -m MODULE ARGS``,
started by the spare mode of :mod:`orchestrator.task.execwrap`, which stays its parent): the
assignment's ``env`` is the program's whole environment (it replaces ``os.environ``); stdin
becomes ``/dev/null`` (as a task's); the script runs as ``python SCRIPT ARGS`` would run it:
``sys.argv`` is ``[SCRIPT, *ARGS]``, ``sys.path[0]`` the script's directory (symlinks
resolved) instead of this directory, ``__name__ == "__main__"``, ``__file__`` its absolute
path; ``-m MODULE`` runs through ``runpy.run_module`` as ``python -m`` does. Its exceptions and
``sys.exit`` end this process as they would end the program's own interpreter.

End of stdin without an assignment (the job ended, the spare is not needed) exits 0 at once.
A spare is in its own session (a user's: in its wrapper's), so the backend stops it like any task.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import runpy
import sys
import threading
import time
import traceback
import types

from orchestrator import env
from orchestrator.resources.pinning import pin_self
from orchestrator.task.lifetime import die_with_orchestrator

MODULE_ENV = env.SPARE_MODULE
PRELOAD_ENV = env.SPARE_PRELOAD


def _mark(label: str) -> None:
    """``bench: mark LABEL (unix T)`` with ``BENCH_TIMING`` set (``worker.progress.mark``)."""
    if env.is_set(env.BENCH_TIMING):
        print(f"bench: mark {label} (unix {time.time():.3f})", flush=True)


def preload(names: str) -> None:
    """Import the comma-separated modules ``names``; ``name?`` only when it is installed."""
    for name in filter(None, (n.strip() for n in names.split(","))):
        optional = name.endswith("?")
        try:
            importlib.import_module(name.rstrip("?"))
        except ModuleNotFoundError as exc:
            if not optional or exc.name != name.rstrip("?"):
                raise


def lowest_priority() -> str:
    """Put the calling thread at the lowest CPU priority (``SCHED_IDLE``; where that policy is
    missing, nice 19 for the thread: Linux's ``setpriority(PRIO_PROCESS, 0)`` is per thread).
    Threads it starts inherit it; other threads of the process keep theirs. Lowering needs no
    privilege.

    Returns:
        What was set: ``SCHED_IDLE``, ``nice 19``, or ``unchanged (why)``.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError) as exc:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 19)
            return "nice 19"
        except (AttributeError, OSError):
            return f"unchanged ({exc})"


def preload_in_background(names: str, ready_file: str, label: str) -> threading.Thread:
    """Import ``names`` (:func:`preload`) in a thread at the lowest priority
    (:func:`lowest_priority`), pinned to ``ORCH_SERVICE_CPUS`` when set; then create
    ``ready_file`` (when given). An import that fails ends the process with status 1 (the
    backend counts it as a spare that died)."""
    def run() -> None:
        policy = lowest_priority()
        pin_self(variable=env.SERVICE_CPUS)
        _mark("spare-start")
        try:
            preload(names)
        except BaseException:  # noqa: BLE001 - visible in the spare's log, and the spare ends
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        if ready_file:
            with open(ready_file + ".tmp", "w") as fh:
                fh.write(f"{os.getpid()}\n")
            os.replace(ready_file + ".tmp", ready_file)
        print(f"spare for {label}: ready (pid {os.getpid()}), imported at {policy}", flush=True)
        _mark("spare-ready")

    thread = threading.Thread(target=run, name="spare-preload", daemon=True)
    thread.start()
    return thread


def take_stdio(assignment: dict) -> None:
    """Point this process's stdout and stderr (fds 1, 2) at the assignment's log files (appending)."""
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, assignment["stdout"]), (2, assignment["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)


def run_program(program_argv: list[str]) -> None:
    """Run a user's program (``SCRIPT ARGS`` or ``-m MODULE ARGS``) in this interpreter as
    ``python PROGRAM_ARGV`` would, as ``__main__``. Returns when the program returns;
    its ``SystemExit`` and exceptions propagate."""
    from orchestrator.spec.program import python_program

    program = python_program(["python", *program_argv])
    if program.module is not None:
        sys.argv = [program.module, *program.args]  # run_module sets argv[0] to the module's file, as -m does
        runpy.run_module(program.module, run_name="__main__", alter_sys=True)
        return
    script = program.script
    assert script is not None
    sys.argv = [script, *program.args]
    path = os.path.abspath(script)
    if os.path.isdir(path) or not path.endswith(".py") and _is_zip(path):  # a directory or zip with __main__.py
        sys.path[0] = path
        runpy.run_path(path, run_name="__main__")
        return
    sys.path[0] = os.path.dirname(os.path.realpath(path))  # what `python SCRIPT` puts first (not this directory)
    with open(path, "rb") as fh:
        source = fh.read()
    code = compile(source, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    except Exception as exc:  # noqa: BLE001 - print it as `python SCRIPT` does: from the script's frame, not the spare's
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        raise SystemExit(1) from None


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    program_argv = argv[1:] if argv[:1] == ["--"] else None
    module = env.read(MODULE_ENV)
    if not module and not program_argv:
        print(f"error: {MODULE_ENV} is not set; spares are started by the orchestrator", file=sys.stderr)
        return 2
    # like every task: die with the orchestrator (a user's spare: with its wrapper), even in the imports below
    die_with_orchestrator(env.read_int(env.ORCHESTRATOR_PID))
    importing = preload_in_background(env.read(PRELOAD_ENV), env.read(env.SPARE_READY_FILE),
                                      module or " ".join(program_argv or []))
    line = sys.stdin.readline()
    if not line.strip():
        sys.stdout.flush()
        os._exit(0)  # not needed: the job ended (at once, even in the middle of an import)
    assignment = json.loads(line)
    importing.join()  # the backend hands tasks to ready spares only; a user's wrapper may not wait
    _mark("assigned")
    if program_argv:
        os.environ.clear()  # the program's whole environment, as its wrapper would have started it with
        os.environ.update({str(k): str(v) for k, v in assignment["env"].items()})
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # a task's stdin
        os.close(devnull)
        pin_self()
        take_stdio(assignment)
        run_program(program_argv)
        return 0
    os.environ.update({str(k): str(v) for k, v in assignment["env"].items()})
    pin_self()
    take_stdio(assignment)
    sys.argv = [module]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
