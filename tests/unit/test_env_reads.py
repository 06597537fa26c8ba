"""The task side reads its environment in two places only: ``TaskContext.from_env`` and the readers
of ``orchestrator.env`` (checked on the source with ``ast``; nothing is imported)."""

from __future__ import annotations

import ast

from orchestrator import env
from tests.conftest import REPO

TASK_SIDE = ("orchestrator/task", "worker", "ps")
ALLOWED = {("orchestrator/task/context.py", "from_env")}
"""(file, function) pairs that may read ``os.environ`` directly."""


def _is_os_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def direct_reads(source: str, path: str) -> list[str]:
    """``path:line`` of every direct read of one variable: ``os.environ.get(...)``, ``os.getenv(...)``,
    ``os.environ[...]`` (read, not assigned) and ``... in os.environ``, outside :data:`ALLOWED`."""
    tree = ast.parse(source)
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        read = (
            (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and ((node.func.attr == "get" and _is_os_environ(node.func.value))
                  or (node.func.attr == "getenv" and isinstance(node.func.value, ast.Name)
                      and node.func.value.id == "os")))
            or (isinstance(node, ast.Subscript) and _is_os_environ(node.value) and isinstance(node.ctx, ast.Load))
            or (isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                and any(_is_os_environ(c) for c in node.comparators))
        )
        if read and (path, function) not in ALLOWED:
            found.append(f"{path}:{node.lineno}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return found


def test_the_task_side_reads_no_variable_directly():
    found = []
    for folder in TASK_SIDE:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            found += direct_reads(path.read_text(encoding="utf-8"), rel)
    assert found == [], "read them with orchestrator.env.read/read_int/read_flag or TaskContext.from_env: " + \
        ", ".join(found)


def test_the_checker_finds_every_kind_of_direct_read():
    source = ("import os\n"
              "a = os.environ.get('X')\n"
              "b = os.getenv('X')\n"
              "c = os.environ['X']\n"
              "d = 'X' in os.environ\n"
              "os.environ['X'] = '1'\n"  # a write: fine
              "e = dict(os.environ)\n"  # the whole environment passed on: fine
              "def from_env():\n    return os.environ.get('Y')\n")
    assert direct_reads(source, "worker/x.py") == [f"worker/x.py:{n}" for n in (2, 3, 4, 5, 9)]
    assert direct_reads(source, "orchestrator/task/context.py") == [f"orchestrator/task/context.py:{n}"
                                                                     for n in (2, 3, 4, 5)]


def test_the_readers_of_the_env_registry():
    environ = {"A": "7", "B": "", "F": "1", "G": "yes"}
    assert env.read("A", environ=environ) == "7" and env.read("Z", "d", environ) == "d"
    assert env.read_int("A", environ=environ) == 7 and env.read_int("B", 3, environ) == 3
    assert env.read_int("Z", 5, environ) == 5
    assert env.read_flag("F", environ) and not env.read_flag("G", environ) and not env.read_flag("Z", environ)
    assert env.is_set("A", environ) and not env.is_set("B", environ)
