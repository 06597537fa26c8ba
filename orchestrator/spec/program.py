"""A user's Python program as a warm spare can become it: ``python SCRIPT ARGS`` or ``python -m MODULE ARGS``.

Shared by the control plane (``launch --spares N -- PROGRAM`` is checked before anything
starts) and the task side (:mod:`orchestrator.task.spare` runs the parsed program).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Sequence

from orchestrator.errors import SpecError

PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")
"""Names of a Python interpreter: ``python``, ``python3``, ``python3.11`` (any directory)."""

FORMS = "python SCRIPT.py ARGS or python -m MODULE ARGS"


@dataclass(frozen=True)
class PythonProgram:
    """A user's program a spare can run in its own, already started, interpreter.

    Attributes:
        interpreter: ``argv[0]`` as given (``python``, ``/venv/bin/python3``).
        script: the script path as given, or None with ``module``.
        module: the module of ``-m MODULE``, or None with ``script``.
        args: the program's own arguments (``sys.argv[1:]`` when it runs).
    """

    interpreter: str
    script: str | None
    module: str | None
    args: tuple[str, ...]


def python_program(argv: Sequence[str], spares: int = 1) -> PythonProgram:
    """Parse a user's program for a warm spare (``launch --spares N -- PROGRAM``).

    Only the two plain forms are accepted: the interpreter is a Python (its file name is
    ``python``, ``python3``, ``python3.11``, ...), followed by a script or by ``-m MODULE``,
    then the program's arguments. Interpreter options (``-u``, ``-X ...``, ``-c CODE``) are
    refused: a spare's interpreter is started before the program is known.

    Args:
        argv: the program and its arguments (``launch ... -- PROGRAM ARGS...``).
        spares: the ``--spares`` value, quoted in the error.

    Raises:
        SpecError: one line naming ``--spares``, what is wrong and the fix (exit code 2).
    """
    shown = " ".join(argv)[:120]
    fix = f"write the program as {FORMS}, or drop --spares"
    if not argv or not PYTHON_NAME.fullmatch(os.path.basename(argv[0])):
        raise SpecError("spares", spares, f"--spares needs a Python program ({FORMS}), not {shown!r}: a spare is a "
                        "Python interpreter that imported TensorFlow and then runs the script",
                        "run a Python script with python (-- python train.py), or drop --spares")
    if len(argv) < 2:
        raise SpecError("spares", spares, f"--spares needs a script or -m MODULE after {argv[0]!r}", fix)
    first = argv[1]
    if first == "-m":
        if len(argv) < 3 or not argv[2] or argv[2].startswith("-"):
            raise SpecError("spares", spares, f"--spares: no module after -m in {shown!r}", fix)
        return PythonProgram(argv[0], None, argv[2], tuple(argv[3:]))
    if first.startswith("-"):
        raise SpecError("spares", spares, f"--spares: the interpreter option {first!r} in {shown!r} cannot be given to "
                        "a spare (its interpreter starts before the program is known)", fix)
    return PythonProgram(argv[0], first, None, tuple(argv[2:]))
