"""The import boundaries of the project, checked on the source (``ast``: no import is run, no TensorFlow).

Every ``import`` and ``from ... import`` of ``orchestrator``, ``worker`` and ``ps`` counts,
those inside functions too, relative ones resolved. The rules:

* the task side and the control plane share only :data:`SHARED`; neither imports the other;
* no import cycle between modules of the project;
* the control plane is a straight stack of layers (:data:`LAYERS`, top to bottom): a
  module imports only modules of its own layer or below.

A new control-plane package must be given a layer here (the test names modules without one).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

ROOT = "orchestrator"
"""The package itself (``orchestrator/__init__.py``: the version): shared, like :data:`SHARED`."""

SHARED = ("orchestrator.spec", "orchestrator.env", "orchestrator.proto", "orchestrator.errors", "orchestrator.net",
          "orchestrator.rundir", "orchestrator.jsontext", "orchestrator.gpus", "orchestrator.cores")
"""All the task side and the control plane have in common: data, names, the wire format, errors,
port probes, the run directory's layout and its JSON encoder."""

TASK_SIDE = ("orchestrator.task", "orchestrator.client", "worker", "ps")
"""What runs inside a task process. ``orchestrator.client`` is its public face for user programs."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The control plane (everything of `orchestrator` but the task side), top to bottom.
    # A module may import modules of its own layer or of a layer below, never above.
    ("cli", ("orchestrator.cli", "orchestrator.__main__")),  # one module per subcommand
    ("job", ("orchestrator.api", "orchestrator.checks", "orchestrator.resume")),  # the Python API that runs one job
    ("web", ("orchestrator.web",)),  # the job's web page and /metrics (read statuses, never the supervisor)
    ("report", ("orchestrator.report",)),  # live view, summary.json
    ("supervisor", ("orchestrator.supervisor",)),  # decides: success, restarts, hangs
    ("health", ("orchestrator.health",)),  # the gRPC server tasks report to
    ("render", ("orchestrator.render",)),  # Compose file, TFJob: text for other engines
    ("backends", ("orchestrator.backends",)),  # what starts processes: local, docker, image, ports
    ("plan", ("orchestrator.plan", "orchestrator.placement", "orchestrator.cpus", "orchestrator.taskenv")),  # -> plan
    ("shared", SHARED),  # also the bottom of the task side
)

PACKAGES = ("orchestrator", "worker", "ps")


@dataclass(frozen=True)
class Import:
    """``module`` imports ``target`` (both project modules) at ``path:line``."""

    module: str
    target: str
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str


def _within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def side(module: str) -> str:
    """``task``, ``shared`` or ``control``."""
    if _within(module, TASK_SIDE):
        return "task"
    if module == ROOT or _within(module, SHARED):
        return "shared"
    return "control"


def layer(module: str) -> int | None:
    """Index of ``module``'s layer in :data:`LAYERS` (0 is the top), None when it has none."""
    if module == ROOT:
        return len(LAYERS) - 1
    for index, (_, prefixes) in enumerate(LAYERS):
        if _within(module, prefixes):
            return index
    return None


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def collect(root: Path, packages=PACKAGES) -> tuple[set[str], list[Import]]:
    """Every module of ``packages`` under ``root`` and every import between them.

    Imports of anything outside the project (stdlib, grpc, tensorflow, the Docker SDK
    ``docker``) are left out. ``from X import name`` imports the module ``X.name`` when it
    exists, else ``X``; ``import X.Y`` imports ``X.Y``.
    """
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[module_name(root, path)] = path
    modules = set(files)

    def known(name: str) -> str | None:  # the deepest project module ``name`` starts with
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                return candidate
        return None

    imports = []
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join(package + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}" if base else alias.name
                    targets.append(sub if sub in modules else known(base) if base else None)
            for target in targets:
                if target and target != module:
                    imports.append(Import(module, target, rel, node.lineno))
    return modules, imports


def _cycles(modules: set[str], imports: list[Import]) -> list[list[Import]]:
    """One cycle (as its import edges) per strongly connected component of the import graph."""
    edges: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for imp in imports:
        edges.setdefault(imp.module, {}).setdefault(imp.target, imp)
        edges.setdefault(imp.target, {})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan, iteratively (no recursion limit)
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)

    cycles = []
    for component in components:  # a shortest way back to the component's first module
        members, start = set(component), component[0]
        previous: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in previous:
            following = []
            for node in frontier:
                for child in sorted(edges[node]):
                    if child in members and child not in previous:
                        previous[child] = node
                        following.append(child)
            frontier = following
        path = [start]
        while True:
            path.append(previous[path[-1]])
            if path[-1] == start:
                break
        path.reverse()
        cycles.append([edges[a][b] for a, b in zip(path, path[1:])])
    return cycles


def check(modules: set[str], imports: list[Import]) -> list[Violation]:
    """Every broken rule, each naming the importing module, the imported one and the rule."""
    found = []
    names = [name for name, _ in LAYERS]
    for module in sorted(modules):
        if side(module) == "control" and layer(module) is None:
            found.append(Violation("layers", f"{module} is in no layer: add its package to LAYERS in {__name__}"))
    for imp in imports:
        a, b = side(imp.module), side(imp.target)
        head = f"{imp.where}: {imp.module} imports {imp.target}"
        if a == "task" and b == "control":
            found.append(Violation("task-side", f"{head}: the task side ({', '.join(TASK_SIDE)}) must not import the "
                                   f"control plane; they share only {', '.join(SHARED)}"))
        elif a == "control" and b == "task":
            found.append(Violation("control-plane", f"{head}: the control plane must not import the task side "
                                   f"({', '.join(TASK_SIDE)}); they share only {', '.join(SHARED)}"))
        elif a == "shared" and b != "shared":
            found.append(Violation("shared", f"{head}: a shared module ({', '.join(SHARED)}) "
                                   "imports only shared modules"))
        elif a == "control" and b == "control":
            upper, lower = layer(imp.module), layer(imp.target)
            if upper is not None and lower is not None and lower < upper:
                found.append(Violation("layers", f"{head}: layer {names[upper]!r} must not import layer "
                                       f"{names[lower]!r} above it (layers, top to bottom: {' -> '.join(names)})"))
    for cycle in _cycles(modules, imports):
        path = " -> ".join([cycle[0].module] + [imp.target for imp in cycle])
        lines = ", ".join(imp.where for imp in cycle)
        found.append(Violation("cycle", f"import cycle: {path} ({lines})"))
    return found


@pytest.fixture(scope="module")
def violations() -> list[Violation]:
    return check(*collect(REPO))


def _assert_none(violations, rule: str) -> None:
    messages = [v.message for v in violations if v.rule == rule]
    if messages:
        pytest.fail(f"{len(messages)} import(s) break the {rule!r} rule:\n" + "\n".join(messages), pytrace=False)


def test_the_checker_sees_the_project():
    modules, imports = collect(REPO)
    assert {"orchestrator.cli", "orchestrator.task.runtime", "worker.train", "ps.server"} <= modules
    pairs = {(imp.module, imp.target) for imp in imports}
    assert ("worker.train", "orchestrator.task.runtime") in pairs  # from X import name
    assert ("orchestrator.plan", "orchestrator.env") in pairs  # from package import module
    assert ("orchestrator.client", "orchestrator.task.keras_callback") in pairs  # inside a function


def test_every_name_in_the_tables_is_a_module_of_the_project():
    modules, _ = collect(REPO)
    named = [*SHARED, *TASK_SIDE, *(p for _, prefixes in LAYERS for p in prefixes)]
    ghosts = [name for name in named if not any(m == name or m.startswith(name + ".") for m in modules)]
    assert ghosts == [], f"no such module (renamed or removed? update the tables in {__name__}): {ghosts}"


def test_task_side_imports_no_control_plane(violations):
    _assert_none(violations, "task-side")


def test_control_plane_imports_no_task_side(violations):
    _assert_none(violations, "control-plane")


def test_shared_modules_import_only_shared_modules(violations):
    _assert_none(violations, "shared")


def test_no_import_cycle(violations):
    _assert_none(violations, "cycle")


def test_control_plane_layers(violations):
    _assert_none(violations, "layers")


def test_the_checker_finds_planted_violations(tmp_path):
    files = {
        "orchestrator/__init__.py": "",
        "orchestrator/env.py": "",
        "orchestrator/plan.py": "from orchestrator import env\n",
        "orchestrator/supervisor/__init__.py": "",
        "orchestrator/supervisor/job.py": "from . import states\n",  # relative: a cycle with states
        "orchestrator/supervisor/states.py": "def f():\n    from orchestrator.supervisor.job import x\n",
        "orchestrator/backends/__init__.py": "",
        "orchestrator/backends/local.py": "import orchestrator.supervisor.states\n",  # a layer above
        "orchestrator/task/__init__.py": "",
        "orchestrator/task/runtime.py": "import os\n\ndef run():\n    from ..plan import x\n",  # control plane
        "orchestrator/sideways.py": "from orchestrator.task import runtime\n",  # no layer, imports the task side
        "worker/__init__.py": "",
        "ps/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = check(*collect(tmp_path))
    messages = {v.rule: [] for v in found}
    for v in found:
        messages[v.rule].append(v.message)
    assert messages["cycle"] == [
        "import cycle: orchestrator.supervisor.job -> orchestrator.supervisor.states -> orchestrator.supervisor.job "
        "(orchestrator/supervisor/job.py:1, orchestrator/supervisor/states.py:2)"
    ]
    assert messages["task-side"] == [
        "orchestrator/task/runtime.py:4: orchestrator.task.runtime imports orchestrator.plan: the task side "
        f"({', '.join(TASK_SIDE)}) must not import the control plane; they share only {', '.join(SHARED)}"
    ]
    assert len(messages["control-plane"]) == 1
    assert messages["control-plane"][0].startswith(
        "orchestrator/sideways.py:1: orchestrator.sideways imports orchestrator.task.runtime: "
        "the control plane must not"
    )
    layers = "\n".join(messages["layers"])
    assert "orchestrator.sideways is in no layer" in layers
    assert ("orchestrator/backends/local.py:1: orchestrator.backends.local imports orchestrator.supervisor.states: "
            "layer 'backends' must not import layer 'supervisor' above it") in layers
    assert len(found) == 5
