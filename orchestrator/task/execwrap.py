"""``python -m orchestrator.task.execwrap -- PROGRAM ARGS...``: run a user's program as a task.

Used by ``launch ... -- PROGRAM``. The built-in task programs die with the orchestrator
through ``PR_SET_PDEATHSIG``; a user's program may be a shell script whose real work runs
in its children, which a parent-death signal on the first process would not reach. So this
wrapper stays as the program's parent, in the task's process group:

* when the orchestrator dies (the kernel sends this process SIGUSR2: its parent-death
  signal), it SIGKILLs the whole process group: the program and everything it started;
* SIGTERM / SIGINT / SIGUSR1 sent to the group reach the program directly; the wrapper
  outlives them and waits for the program, then exits the way it did (same code, or the
  same signal), so the supervisor sees the program's own exit.

Without an orchestrator pid (containers, where there is no parent to watch) it simply
``exec`` s the program.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from orchestrator import env
from orchestrator.task.runtime import die_with_orchestrator


def _kill_group(_signum, _frame) -> None:
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m orchestrator.task.execwrap -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    orchestrator_pid = int(os.environ.get(env.ORCHESTRATOR_PID, "0") or 0)
    try:
        if orchestrator_pid <= 0:
            os.execvp(argv[0], argv)
        signal.signal(signal.SIGUSR2, _kill_group)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(signum, lambda *_: None)  # a Python handler: reset to default in the program
        die_with_orchestrator(orchestrator_pid, signal.SIGUSR2)
        # the program's parent is now this wrapper: it is the process the program must not outlive
        program = subprocess.Popen(argv, env={**os.environ, env.ORCHESTRATOR_PID: str(os.getpid())})
    except OSError as exc:
        print(f"error: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        return 127
    code = program.wait()
    if code < 0:  # die of the same signal, so the supervisor sees what the program saw
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: no handler to reset
            pass
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
