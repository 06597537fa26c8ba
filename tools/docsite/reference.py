"""Reference pages rendered from the code, so that they cannot drift from it.

Each ``*_markdown()`` function returns the Markdown of one generated block; :mod:`tools.docsite.hooks`
puts it where a page says ``<!-- gen:NAME -->``. Each raises :class:`DocsDriftError` when the code
has something the docs cannot describe (a flag without help, a spec field without a docstring
entry, an environment variable missing from the registry table), so ``mkdocs build --strict``
fails instead of publishing a hole.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from collections.abc import Iterable
from typing import Any

from orchestrator import env as envvars
from orchestrator.cli import build_parser
from orchestrator.errors import SpecError
from orchestrator.report import summary as summary_module
from orchestrator.spec import loader
from orchestrator.spec.containers import ContainerSpec
from orchestrator.spec.model import JobSpec, TrainingSpec
from orchestrator.spec.supervision import SupervisionSpec


class DocsDriftError(RuntimeError):
    """The code has something (a flag, a field, a variable) the generated docs cannot describe."""


def cell(text: object) -> str:
    """One Markdown table cell: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: Iterable[str], rows: Iterable[Iterable[object]], align: str = "") -> str:
    """A Markdown table; ``align`` is one letter per column (``l``/``r``), default left."""
    header = list(header)
    marks = ["---:" if (align[i:i + 1] == "r") else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# -- CLI --------------------------------------------------------------------------------------------

def subcommands(parser: argparse.ArgumentParser | None = None) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Subcommand name -> (its one-line help, its parser), in the order ``--help`` lists them."""
    parser = parser or build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    return {name: (helps.get(name, ""), p) for name, p in sub.choices.items()}


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments of ``parser`` a user can give (``--help`` itself and suppressed ones left out)."""
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]


def _help_text(parser: argparse.ArgumentParser, action: argparse.Action, where: str) -> str:
    if not action.help:
        raise DocsDriftError(f"{where}: {'/'.join(action.option_strings) or action.dest} has no help text; "
                             "give it help=... in its add_argument (the CLI reference is made from it)")
    return plain(parser._get_formatter()._expand_help(action))


def plain(text: str) -> str:
    """Plain text (help strings) as Markdown that shows it as written: ``*``, ``_``, ``<`` escaped."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_").replace("<", "&lt;")


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        return " | ".join(f"`{c}`" for c in action.choices)
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    text = f"`{metavar}`"
    if action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
        text += " (repeatable)" if isinstance(action, argparse._AppendAction) else " ..."
    return text


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], ()):
        return ""
    return f"`{action.default}`"


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """Every subcommand of ``python -m orchestrator`` with every argument, from the argparse parsers.

    Args:
        parser: the top-level parser; None for :func:`orchestrator.cli.build_parser`'s.

    Raises:
        DocsDriftError: a subcommand or an argument without help text.
    """
    parser = parser or build_parser()
    out = ["Global options, before the subcommand:", ""]
    globals_ = [(f"`{'`, `'.join(a.option_strings)}`", _help_text(parser, a, "python -m orchestrator"))
                for a in documented_actions(parser) if a.option_strings]
    out.append(table(["option", "meaning"], globals_))
    for name, (summary, sub) in subcommands(parser).items():
        if not summary:
            raise DocsDriftError(f"subcommand {name} has no help=... in add_parser")
        formatter = argparse.HelpFormatter(prog=sub.prog, width=100)  # wrapped as --help wraps it, at 100 columns
        formatter.add_usage(sub.usage, sub._actions, sub._mutually_exclusive_groups, prefix="")
        usage = formatter.format_help().strip()
        out += ["", f"## `{name}`", "", plain(summary[:1].upper() + summary[1:]) + ".", ""]
        if sub.description:
            out += [plain(" ".join(sub.description.split())), ""]
        out += ["```text", usage, "```", ""]
        rows = []
        for action in documented_actions(sub):
            names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
            rows.append((names, _value(action), _default(action), _help_text(sub, action, name)))
        out.append(table(["argument", "value", "default", "meaning"], rows))
    return "\n".join(out) + "\n"


# -- spec file --------------------------------------------------------------------------------------

def docstring_attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style class docstring: name -> description."""
    doc = inspect.getdoc(cls) or ""
    match = re.search(r"^Attributes:\n((?:[ \t]+.*\n?|\n)+)", doc, re.MULTILINE)
    out: dict[str, str] = {}
    if not match:
        return out
    current = None
    for line in match.group(1).splitlines():
        entry = re.match(r"^    (\w+): (.*)$", line)
        if entry:
            current = entry.group(1)
            out[current] = entry.group(2)
        elif current and line.startswith("        "):
            out[current] += " " + line.strip()
    return out


BAD_VALUES: tuple[object, ...] = (0, -1, "x", 10**9, 0.5)
"""Values each field is tried with to read its rule off the validation (the SpecError it raises)."""


def field_rules(dotted: str) -> list[str]:
    """The rules a spec field's validation enforces, as its SpecError messages say them."""
    *parents, leaf = dotted.split(".")
    rules: list[str] = []
    for bad in BAD_VALUES:
        raw = {leaf: bad} if not parents else {parents[0]: {leaf: bad}}
        try:
            loader.build_spec(loader.check_spec_mapping(raw))
        except SpecError as exc:
            rule = exc.problem + (f" ({exc.fix})" if exc.problem.startswith("unknown") else "")
            if exc.field == dotted and rule not in rules:
                rules.append(rule)
        except (TypeError, ValueError, AttributeError):
            continue
    return rules


def _flags_by_field() -> dict[str, str]:
    fields = dict(loader.FLAG_FIELDS)
    for name in loader.TRAINING_KEYS:
        fields.setdefault(name, f"training.{name}")
    launch = subcommands()["launch"][1]
    by_dest = {a.dest: a.option_strings[-1] for a in launch._actions if a.option_strings}
    out = {dotted: by_dest[dest] for dest, dotted in fields.items() if dest in by_dest}
    if "restart_policy" in by_dest:
        out["supervision.restart_policy"] = by_dest["restart_policy"]
    return out


def _field_default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(value):
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {getattr(v, 'value', v)}" for k, v in value.items())
    value = getattr(value, "value", value)
    return "`null`" if value is None else f"`{value}`"


SPEC_EXTRA = {
    "description": ("text", "free text, ignored", ""),
}
"""Spec-file keys that are not :class:`JobSpec` fields: key -> (type, meaning, default)."""


def spec_fields() -> list[str]:
    """Every key a spec file takes, dotted (``training.epochs``), in the file's order."""
    out = []
    for key in loader.TOP_KEYS:
        section = loader.SECTIONS.get(key)
        out += [f"{key}.{k}" for k in section] if section else [key]
    return out


def spec_markdown() -> str:
    """Every spec-file field with its type, default, flag, meaning and rules, from the spec model.

    Raises:
        DocsDriftError: a field without an entry in its class's ``Attributes:`` docstring section.
    """
    classes = {"": JobSpec, "training": TrainingSpec, "supervision": SupervisionSpec, "containers": ContainerSpec}
    docs = {prefix: docstring_attributes(cls) for prefix, cls in classes.items()}
    dcfields = {prefix: {f.name: f for f in dataclasses.fields(cls)} for prefix, cls in classes.items()}
    flags = _flags_by_field()
    rows = []
    for dotted in spec_fields():
        prefix, _, leaf = dotted.rpartition(".")
        if dotted in SPEC_EXTRA:
            kind, meaning, default = SPEC_EXTRA[dotted]
        else:
            f = dcfields[prefix].get(leaf)
            meaning = docs[prefix].get(leaf)
            if f is None or not meaning:
                raise DocsDriftError(f"spec field {dotted} has no entry in the Attributes: section of "
                                     f"{classes[prefix].__name__}'s docstring (the spec reference is made from it)")
            kind, default = str(f.type), _field_default(f)
        flag = f"`{flags[dotted]}`" if dotted in flags else ""
        rules = "; ".join(field_rules(dotted)) if dotted not in SPEC_EXTRA else ""
        rows.append((f"`{dotted}`", f"`{kind}`", default, flag, _rst_to_md(meaning), rules))
    return table(["field", "type", "default", "flag", "meaning", "rules (checked at load, exit 2)"], rows) + "\n"


# -- environment ------------------------------------------------------------------------------------

def _rst_tables(doc: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The simple reStructuredText tables of ``env.py``'s docstring: (text before, [(name, meaning)])."""
    out = []
    blocks = re.split(r"^(=+ +=+)\n", doc, flags=re.MULTILINE)
    # blocks: text, rule, header, rule, body, rule, text, ...
    i = 0
    while i + 6 < len(blocks) + 1 and i + 5 < len(blocks):
        intro, header_body, body = blocks[i], blocks[i + 2], blocks[i + 4]
        rows: list[tuple[str, str]] = []
        for line in body.splitlines():
            m = re.match(r"^``([^`]+)``\s+(.*)$", line)
            if m:
                rows.append((m.group(1), m.group(2).strip()))
            elif line.strip() and rows:
                rows[-1] = (rows[-1][0], rows[-1][1] + " " + line.strip())
        del header_body
        out.append((intro.strip(), rows))
        i += 6
    return out


def _rst_to_md(text: str) -> str:
    text = re.sub(r":(?:func|data|mod|class|meth|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def env_variables() -> list[str]:
    """Every environment-variable name ``orchestrator/env.py`` declares (its upper-case constants)."""
    names = []
    for name, value in vars(envvars).items():
        if name.isupper() and isinstance(value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", value):
            names.append(value)
    return names


def env_markdown() -> str:
    """The variables every task gets (and those of JobSet pods), from the registry in ``env.py``.

    Raises:
        DocsDriftError: ``env.py`` declares a variable its docstring table does not describe.
    """
    tables = _rst_tables(envvars.__doc__ or "")
    listed = {name for _, rows in tables for name, _ in rows}
    missing = [n for n in env_variables() if n not in listed]
    if missing:
        raise DocsDriftError(f"orchestrator/env.py declares {', '.join(missing)} but its docstring table "
                             "does not describe them (the environment reference is made from that table)")
    out = []
    for intro, rows in tables:
        if intro and not intro.startswith("Every environment variable"):
            out += [_rst_to_md(intro), ""]
        header = ["file" if rows and not rows[0][0].isupper() else "variable", "meaning"]
        out += [table(header, [(f"`{n}`", _rst_to_md(m)) for n, m in rows]), ""]
    tail = (envvars.__doc__ or "").rsplit("=\n", 1)[-1].strip()
    if tail:
        out += [_rst_to_md(tail), ""]
    return "\n".join(out)


# -- summary.json -----------------------------------------------------------------------------------

def summary_markdown() -> str:
    """The fields of ``summary.json`` and of each task entry, from :mod:`orchestrator.report.summary`."""
    out = []
    sections = (("Top level", summary_module.SUMMARY_FIELDS), ("Each entry of `tasks`", summary_module.TASK_FIELDS),
                ("`last_heartbeat` of a task", summary_module.HEARTBEAT_FIELDS))
    for title, fields in sections:
        out += [f"### {title}", "", table(["field", "meaning"], [(f"`{k}`", v) for k, v in fields.items()]), ""]
    return "\n".join(out)


# -- backends ---------------------------------------------------------------------------------------

def backend_infos() -> list[Any]:
    """What each backend declares (:func:`orchestrator.backends.capability_table`): the one source of
    the backend tables. Re-point this one function if the declarations move."""
    from orchestrator.backends import capability_table

    return capability_table()


def capability_docs() -> dict[str, str]:
    """:class:`~orchestrator.backends.base.Capability` value -> its member's docstring (read from the
    source with ``ast``: enum members keep no docstring of their own at runtime)."""
    import ast
    from pathlib import Path

    from orchestrator.backends import base

    tree = ast.parse(Path(base.__file__).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Capability")
    out: dict[str, str] = {}
    for node, after in zip(cls.body, cls.body[1:]):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            out[node.value.value] = _rst_to_md(" ".join(after.value.value.split()))
    return out


def backend_capabilities() -> list[str]:
    """Every capability value (``lifecycle``, ``remote``, ...), in declaration order."""
    from orchestrator.backends.base import Capability

    return [c.value for c in Capability]


def backends_markdown() -> str:
    """Each backend's summary, what it supports (capability x backend, with the hooks that implement
    it) and its options, from the backends' own declarations.

    Raises:
        DocsDriftError: a capability without a docstring.
    """
    from orchestrator.backends.base import Capability

    infos = backend_infos()
    docs = capability_docs()
    out = [table(["backend", "where its tasks run"], [(f"`{b.name}`", b.summary) for b in infos]), ""]
    rows = []
    for capability in Capability:
        if capability.value not in docs:
            raise DocsDriftError(f"Capability.{capability.name} has no docstring (the backend table is made from it)")
        cells = []
        for b in infos:
            hooks = b.capabilities.get(capability)
            cells.append("-" if hooks is None else "yes" + (f" ({', '.join(hooks)})" if hooks else ""))
        rows.append([f"`{capability.value}`", *cells, docs[capability.value]])
    out += ["### Capabilities", "", table(["capability", *[f"`{b.name}`" for b in infos], "what it means"], rows), ""]
    out += ["### Options", "", "Each backend's options: its flags of `launch` / `sbatch`, and the "
            "`backend_options` of the [Python API](api.md).", ""]
    option_rows = [(f"`{b.name}`", f"`{o.name}`", f"`{o.flag}`" if o.flag else "", getattr(o.type, "__name__", o.type),
                    "" if o.default is None else f"`{o.default}`", plain(o.help or "Python API only (no flag)"))
                   for b in infos for o in b.options]
    out.append(table(["backend", "option", "flag", "type", "default", "meaning"], option_rows) if option_rows
               else "No backend takes options.")
    return "\n".join(out) + "\n"


# -- modules ----------------------------------------------------------------------------------------

def modules_markdown(packages: tuple[str, ...] = ("orchestrator", "worker", "ps")) -> str:
    """Every module of the project's packages with the first line of its docstring (read with ``ast``:
    nothing is imported).

    Raises:
        DocsDriftError: a module without a docstring.
    """
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rows = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
            if not doc:
                if path.name == "__init__.py" and path.stat().st_size == 0:
                    continue
                raise DocsDriftError(f"{path.relative_to(root)} has no module docstring "
                                     "(the module table is made from it)")
            rows.append((f"`{module}`", _rst_to_md(doc.strip().split("\n\n")[0])))
    return table(["module", "what it is"], rows) + "\n"
