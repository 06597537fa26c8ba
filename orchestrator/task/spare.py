"""``python -m orchestrator.task.spare``: a warm spare, a task process started before it is needed.

A restart normally starts a new process that spends most of its time importing TensorFlow
and tf-keras (about 3.5 s here, more on a busy machine) before it trains again. A spare does
that work in advance, then waits on its stdin for the identity of the task it becomes:

1. started by the backend with the job's common environment (thread limits,
   ``TF_USE_LEGACY_KERAS`` and the orchestrator's pid, so it dies with the orchestrator
   like any task) plus ``ORCH_SPARE_MODULE`` (the task program to become, e.g. ``worker``)
   and ``ORCH_SPARE_PRELOAD`` (comma-separated modules to import now, e.g.
   ``tensorflow,tf_keras,worker.train``); its output goes to its own log until assigned;
2. imports the preload modules; TensorFlow's runtime is not started (no op has run), so
   TF_CONFIG and the strategy are read only after the assignment;
3. reads ONE line of JSON from stdin: ``{"env": {...}, "stdout": PATH, "stderr": PATH}``:
   the task attempt's whole orchestrator environment (TF_CONFIG, attempt, task dir, token,
   faults) and its log files;
4. updates ``os.environ``, points its stdout and stderr at the task's log files, and runs
   the module as ``python -m MODULE`` would (``runpy``), exiting with its exit code.

End of stdin without an assignment (the job ended, the spare is not needed) exits 0 at once.
A spare is in its own session, so the backend stops it like any task.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time

from orchestrator import env
from orchestrator.task.runtime import die_with_orchestrator

MODULE_ENV = env.SPARE_MODULE
PRELOAD_ENV = env.SPARE_PRELOAD


def _mark(label: str) -> None:
    """``bench: mark LABEL (unix T)`` with ``BENCH_TIMING`` set (``worker.progress.mark``)."""
    if os.environ.get("BENCH_TIMING"):
        print(f"bench: mark {label} (unix {time.time():.3f})", flush=True)


def main() -> int:
    module = os.environ.get(MODULE_ENV, "")
    if not module:
        print(f"error: {MODULE_ENV} is not set; spares are started by the orchestrator", file=sys.stderr)
        return 2
    # like every task: die with the orchestrator, even in the middle of the imports below
    die_with_orchestrator(int(os.environ.get(env.ORCHESTRATOR_PID, "0") or 0))
    _mark("spare-start")
    for name in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):
        importlib.import_module(name.strip())
    print(f"spare for {module}: ready (pid {os.getpid()})", flush=True)
    _mark("spare-ready")
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # not needed: the job ended
    assignment = json.loads(line)
    _mark("assigned")
    os.environ.update({str(k): str(v) for k, v in assignment["env"].items()})
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, assignment["stdout"]), (2, assignment["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = [module]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
