"""What ``launch`` checks before anything starts, beyond the spec itself, and how it says warnings."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Sequence, TextIO


def check_program(argv: Sequence[str], backend: str = "local") -> None:
    """Check that the program after ``--`` can be executed here, before any task starts.

    A bare name (``python``) must be found on ``PATH``, as ``execvp`` in the task will
    look it up; a path (``./train.sh``, ``/opt/bin/train``, relative to this directory, where
    tasks start) must be an executable file. Without this check a typo is a job failure:
    every task exits 127 after the cluster was planned and started.

    Args:
        argv: the program and its arguments (``launch ... -- PROGRAM ARGS...``); empty for
            the built-in program (nothing to check).
        backend: a backend whose tasks do not see this machine's files
            (:attr:`~orchestrator.backends.base.Capability.HOST_FILES`: docker) skips the check:
            the program runs inside the image, whose files and ``PATH`` this machine does not see.

    Raises:
        SpecError: naming the program, what is wrong and the fix (exit code 2).
    """
    from orchestrator.backends import backend_class
    from orchestrator.backends.base import Capability
    from orchestrator.errors import SpecError

    if not argv or not backend_class(backend).supports(Capability.HOST_FILES):
        return
    program = argv[0]
    example = "e.g. -- python train.py"
    if not program:
        raise SpecError("program", program, "an empty program name", example)
    if os.sep not in program:
        if shutil.which(program) is None:
            local = os.path.isfile(program)
            fix = (f"write ./{program} to run the file in this directory" if local
                   else f"install it, give its path, or run a script with its interpreter: {example}")
            raise SpecError("program", program, "not found on PATH", fix)
        _check_script(argv)
        return
    _check_script(argv)
    if not os.path.exists(program):
        raise SpecError("program", program, f"no such file (from {os.getcwd()})", f"check the path, {example}")
    if os.path.isdir(program):
        raise SpecError("program", program, "is a directory", f"name the program to run, {example}")
    if not os.access(program, os.X_OK):
        interpreter = {".py": "python", ".sh": "bash"}.get(os.path.splitext(program)[1])
        raise SpecError("program", program, "is not executable",
                        f"chmod +x {program}" + (f", or run it with its interpreter: -- {interpreter} {program}"
                                                 if interpreter else ""))



def print_warnings(warnings: Sequence[str], file: TextIO | None = None) -> None:
    """Print each plan warning (:func:`orchestrator.plan.plan_warnings`) as one
    ``warning: ...`` line, on stderr by default: stdout stays the plan or the summary."""
    for text in warnings:
        print(f"warning: {text}", file=file or sys.stderr, flush=True)


def _check_script(argv: Sequence[str]) -> None:
    """``python train.py``: the script an interpreter is asked to run must exist (relative to
    this directory, where tasks start), or every task fails with ``can't open file``."""
    from orchestrator.errors import SpecError

    name = os.path.basename(argv[0])
    if not (name.startswith("python") or name in ("bash", "sh")):
        return
    script = next((a for a in argv[1:] if not a.startswith("-")), None)
    if script is None or "-c" in argv[1:2] or "-m" in argv[1:2]:
        return
    if not os.path.isfile(script):
        raise SpecError("program", " ".join(argv[:2]), f"{script}: no such file (from {os.getcwd()})",
                        f"check the path, e.g. -- {argv[0]} examples/mwms_train.py")
