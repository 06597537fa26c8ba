"""``python -m orchestrator.execwrap -- PROGRAM ARGS...``: run a user's program as a task.

Sets ``PR_SET_PDEATHSIG`` (which survives ``execve``) so the program dies with the
orchestrator, like the built-in task programs do, then replaces itself with the program:
no process stays in between. Used by ``launch ... -- PROGRAM``.
"""

from __future__ import annotations

import os
import sys

from orchestrator import env
from orchestrator.runtime import die_with_orchestrator


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m orchestrator.execwrap -- PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    die_with_orchestrator(int(os.environ.get(env.ORCHESTRATOR_PID, "0") or 0))
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"error: cannot run {argv[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
