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
          "orchestrator.rundir", "orchestrator.jsontext", "orchestrator.resources.gpus", "orchestrator.resources.cores",
          "orchestrator.resources.pinning", "orchestrator.tls")
"""All the task side and the control plane have in common: data, names, the wire format, errors,
port probes, the run directory's layout, the run's certificates."""

TASK_SIDE = ("orchestrator.task", "orchestrator.client", "worker", "ps", "dataservice")
"""What runs inside a task process. ``orchestrator.client`` is its public face for user programs."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The control plane (everything of `orchestrator` but the task side), top to bottom.
    # A module may import modules of its own layer or of a layer below, never above.
    ("cli", ("orchestrator.cli", "orchestrator.__main__")),  # one module per subcommand
    # the Python API that runs one job
    ("job", ("orchestrator.api", "orchestrator.checks", "orchestrator.handle", "orchestrator.resume",
             "orchestrator.pkimaker")),  # the run's certificates, made beside the launch
    ("web", ("orchestrator.web",)),  # the job's web page and /metrics (read statuses, never the supervisor)
    ("report", ("orchestrator.report",)),  # live view, summary.json
    ("supervisor", ("orchestrator.supervisor",)),  # decides: success, restarts, hangs
    ("health", ("orchestrator.health",)),  # the gRPC server tasks report to
    ("render", ("orchestrator.render",)),  # Compose file, TFJob: text for other engines
    ("backends", ("orchestrator.backends",)),  # what starts processes: local, docker, image, ports
    ("plan", ("orchestrator.plan", "orchestrator.taskenv")),  # spec + backend -> plan
    ("resources", ("orchestrator.resources",)),  # what a task is given: cores, GPUs, nodes, leases
    ("shared", SHARED),  # also the bottom of the task side
)

PACKAGES = ("orchestrator", "worker", "ps", "dataservice")


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
    assert ("worker.train", "orchestrator.task.sigterm") in pairs  # from X import name
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


# -- the house rules of the code itself (docs/architecture.md, "The house rules") ------------------------------

HOUSE = ("orchestrator", "worker")
"""Where the size and class rules hold (``ps`` is one small program)."""

MAX_MODULE_LINES = 500
MAX_CLASS_METHODS = 25
LOOP_MODULE = "orchestrator.supervisor.loop"
"""The one supervisor module that holds and calls the backend: the parts decide, the loop acts."""
SUPERVISOR_PARTS = tuple(f"orchestrator.supervisor.{name}"
                         for name in ("beats", "failures", "ending", "hangs", "preemption", "rehearsal", "waves"))
"""The parts of the supervisor: each owns its state and returns actions; none imports another."""


def _sources(root: Path, packages=HOUSE) -> dict[str, tuple[str, ast.Module]]:
    """Module name -> (path relative to ``root``, its syntax tree)."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                rel = path.relative_to(root).as_posix()
                out[module_name(root, path)] = (rel, ast.parse(path.read_text(encoding="utf-8"), filename=rel))
    return out


def long_modules(root: Path) -> list[str]:
    """Modules of :data:`HOUSE` longer than :data:`MAX_MODULE_LINES` lines."""
    found = []
    for package in HOUSE:
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_MODULE_LINES:
                found.append(f"{path.relative_to(root).as_posix()}: {lines} lines (at most {MAX_MODULE_LINES}; "
                             "split it by concern)")
    return found


@dataclass(frozen=True)
class ClassInfo:
    """A class of the project: where it is, its methods, the ``self.`` attributes it assigns, its bases."""

    name: str
    module: str
    path: str
    line: int
    methods: frozenset[str]
    assigns: frozenset[str]
    bases: tuple[str, ...]
    """Its project bases, as ``module:Name`` keys of :func:`classes`."""


def _self_targets(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return [target.attr]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for t in target.elts for name in _self_targets(t)]
    if isinstance(target, ast.Starred):
        return _self_targets(target.value)
    return []


def _assigned(body: list[ast.stmt]) -> set[str]:
    """Attributes assigned through ``self.`` anywhere in the methods of a class body."""
    names: set[str] = set()
    for node in body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign):
                for target in inner.targets:
                    names.update(_self_targets(target))
            elif isinstance(inner, (ast.AugAssign, ast.AnnAssign)):
                names.update(_self_targets(inner.target))
    return names


def classes(root: Path) -> dict[str, ClassInfo]:
    """Every top-level class of :data:`HOUSE`, by ``module:Name``, its bases resolved through the
    module's own classes and its ``from X import Name`` / ``import X`` of project modules."""
    sources = _sources(root)
    raw: dict[str, tuple[str, str, ast.ClassDef, dict[str, str]]] = {}
    for module, (rel, tree) in sources.items():
        is_package = rel.endswith("__init__.py")
        names: dict[str, str] = {}  # local name -> module:Name or a module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join(package + ([node.module] if node.module else []))
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{base}:{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                        alias.name.split(".")[0]
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                names[node.name] = f"{module}:{node.name}"
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                raw[f"{module}:{node.name}"] = (module, rel, node, names)

    def resolve(expr: ast.expr, names: dict[str, str]) -> str | None:
        if isinstance(expr, ast.Subscript):  # Backend[LocalProcess]
            return resolve(expr.value, names)
        if isinstance(expr, ast.Name):
            key = names.get(expr.id)
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            module = names.get(expr.value.id, expr.value.id).replace(":", ".")
            key = f"{module}:{expr.attr}"
        else:
            return None
        if key is None:
            return None
        if key in raw:
            return key
        module, _, name = key.partition(":")  # re-exported by a package's __init__
        for candidate in raw:
            if candidate.endswith(f":{name}") and candidate.startswith(module + "."):
                return candidate
        return None

    out = {}
    for key, (module, rel, node, names) in raw.items():
        bases = tuple(b for b in (resolve(base, names) for base in node.bases) if b is not None)
        methods = frozenset(n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        out[key] = ClassInfo(node.name, module, rel, node.lineno, methods, frozenset(_assigned(node.body)), bases)
    return out


def lineage(key: str, table: dict[str, ClassInfo]) -> list[ClassInfo]:
    """The class and its project bases, transitively (each once)."""
    seen: list[str] = []
    todo = [key]
    while todo:
        k = todo.pop(0)
        if k in seen or k not in table:
            continue
        seen.append(k)
        todo += list(table[k].bases)
    return [table[k] for k in seen]


def crowded_classes(table: dict[str, ClassInfo]) -> list[str]:
    """Classes with more than :data:`MAX_CLASS_METHODS` methods, their project bases' counted."""
    found = []
    for key, info in sorted(table.items()):
        methods = set().union(*(c.methods for c in lineage(key, table)))
        if len(methods) > MAX_CLASS_METHODS:
            found.append(f"{info.path}:{info.line}: {info.name} has {len(methods)} methods with its bases "
                         f"(at most {MAX_CLASS_METHODS}): give a concern its own object")
    return found


def shared_attributes(table: dict[str, ClassInfo]) -> list[str]:
    """Attributes of one object (a class with its project bases) assigned through ``self.`` in two modules."""
    found = []
    for key, info in sorted(table.items()):
        where: dict[str, set[str]] = {}
        for c in lineage(key, table):
            for name in c.assigns:
                where.setdefault(name, set()).add(c.path)
        for name, paths in sorted(where.items()):
            if len(paths) > 1:
                found.append(f"{info.path}:{info.line}: {info.name}.{name} is assigned in {', '.join(sorted(paths))}: "
                             "one module owns it")
    return found


def class_body_type_checking(root: Path) -> list[str]:
    """``if TYPE_CHECKING:`` blocks inside a class body (hand-kept stubs of another part's state)."""
    found = []
    for _, (rel, tree) in _sources(root).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for inner in node.body:
                    if isinstance(inner, ast.If) and "TYPE_CHECKING" in ast.unparse(inner.test):
                        found.append(f"{rel}:{inner.lineno}: {node.name} declares a TYPE_CHECKING block: "
                                     "a part holds what it uses, or is given it")
    return found


def backend_touches(root: Path, loop: str = LOOP_MODULE) -> list[str]:
    """Supervisor modules other than ``loop`` that hold or call the backend: a ``backend`` name,
    attribute or parameter, or an import of the ``Backend`` contract or of ``orchestrator.backends``."""
    found = []
    for module, (rel, tree) in _sources(root, ("orchestrator",)).items():
        if not module.startswith("orchestrator.supervisor") or module == loop:
            continue
        for node in ast.walk(tree):
            what = None
            if isinstance(node, ast.Name) and node.id == "backend":
                what = "the name backend"
            elif isinstance(node, ast.Attribute) and node.attr == "backend":
                what = ".backend"
            elif isinstance(node, ast.arg) and node.arg == "backend":
                what = "a backend parameter"
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orchestrator.backends"):
                if any(alias.name in ("Backend", "get_backend") for alias in node.names) or \
                        node.module == "orchestrator.backends":
                    what = f"an import of {node.module}"
            elif isinstance(node, ast.Import) and any(a.name.startswith("orchestrator.backends") for a in node.names):
                what = "an import of orchestrator.backends"
            if what:
                found.append(f"{rel}:{node.lineno}: {module} touches the backend ({what}): only {loop} acts; "
                             "a part returns what it wants done")
    return found


def part_imports(imports: list[Import], parts=SUPERVISOR_PARTS) -> list[str]:
    """Imports of one supervisor part by another (they share the records, the rules and the task table only)."""
    return [f"{imp.where}: {imp.module} imports {imp.target}: a part never imports another; the loop "
            "passes what one part decided to the next"
            for imp in imports if imp.module in parts and imp.target in parts]


def _assert_holds(found: list[str], rule: str) -> None:
    if found:
        pytest.fail(f"{len(found)} place(s) break the rule {rule!r}:\n" + "\n".join(found), pytrace=False)


def test_modules_are_at_most_500_lines():
    _assert_holds(long_modules(REPO), "at most 500 lines per module")


def test_classes_have_at_most_25_methods_with_their_bases():
    _assert_holds(crowded_classes(classes(REPO)), "at most 25 methods per class")


def test_each_attribute_has_one_owning_module():
    _assert_holds(shared_attributes(classes(REPO)), "one module assigns an object's attribute")


def test_no_type_checking_block_in_a_class_body():
    _assert_holds(class_body_type_checking(REPO), "no TYPE_CHECKING in a class body")


def test_only_the_loop_touches_the_backend():
    assert (REPO / (LOOP_MODULE.replace(".", "/") + ".py")).is_file(), f"{LOOP_MODULE} is gone: update LOOP_MODULE"
    _assert_holds(backend_touches(REPO), "only the loop module touches the backend")


def test_no_supervisor_part_imports_another():
    assert all((REPO / (p.replace(".", "/") + ".py")).is_file() for p in SUPERVISOR_PARTS), "update SUPERVISOR_PARTS"
    _assert_holds(part_imports(collect(REPO)[1]), "parts never import each other")
    planted = [Import("orchestrator.supervisor.failures", "orchestrator.supervisor.preemption", "f.py", 3),
               Import("orchestrator.supervisor.failures", "orchestrator.supervisor.rules.decisions", "f.py", 4)]
    assert [line.split(": ")[0] for line in part_imports(planted)] == ["f.py:3"]


def test_the_house_rules_find_planted_violations(tmp_path):
    long = "\n".join(f"x{i} = {i}" for i in range(MAX_MODULE_LINES + 1)) + "\n"
    mixin_methods = "".join(f"    def m{i}(self):\n        pass\n" for i in range(20))
    files = {
        "orchestrator/__init__.py": "",
        "orchestrator/big.py": long,
        "orchestrator/supervisor/__init__.py": "",
        "orchestrator/supervisor/loop.py": "def go(backend):\n    backend.start()\n",
        "orchestrator/supervisor/part.py": (
            "from orchestrator.backends.base import Backend\n\n"
            "class Half:\n    if TYPE_CHECKING:\n        x: int\n\n"
            "    def set(self):\n        self.shared, self.own = 1, 2\n" + mixin_methods),
        "orchestrator/supervisor/whole.py": (
            "from orchestrator.supervisor.part import Half\n\nclass Whole(Half):\n"
            + "".join(f"    def w{i}(self):\n        self.shared = {i}\n" for i in range(6))),
        "worker/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert [line.split(":")[0] for line in long_modules(tmp_path)] == ["orchestrator/big.py"]
    table = classes(tmp_path)
    assert table["orchestrator.supervisor.whole:Whole"].bases == ("orchestrator.supervisor.part:Half",)
    assert [line.split(": ")[1] for line in crowded_classes(table)] == [
        f"Whole has 27 methods with its bases (at most {MAX_CLASS_METHODS})"]
    assert [line.split(": ")[1] for line in shared_attributes(table)] == [
        "Whole.shared is assigned in orchestrator/supervisor/part.py, orchestrator/supervisor/whole.py"]
    assert [line.split(": ")[0] for line in class_body_type_checking(tmp_path)] == ["orchestrator/supervisor/part.py:4"]
    assert [line.split(": ")[0] for line in backend_touches(tmp_path)] == ["orchestrator/supervisor/part.py:1"]
