"""Backend options, declared once: a frozen dataclass per backend whose fields are its options.

The shape is TorchX's ``runopts`` (name, type, default, help per option) and Ray's config
dataclasses: a backend names its options class in
:attr:`orchestrator.backends.base.Backend.options_type`, each field carries its help in its
metadata (:func:`option`), and everything else reads the declaration: the CLI builds its
flags from it (:mod:`orchestrator.cli.backend`), the Python API turns a mapping into it
(:func:`options_from_mapping`), and the docs list it
(:func:`orchestrator.backends.capability_table`). Adding an option is one field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Mapping, Union

from orchestrator.errors import SpecError

FLAG = "orchestrator.flag"
"""Metadata key of a field: the option's help when it is a command-line flag, None when it is
not (a callback, an environment for tests: the Python API only)."""
METAVAR = "orchestrator.metavar"


def option(help: str | None, *, metavar: str | None = None) -> dict[str, Any]:
    """Field metadata declaring an option: ``field(default=None, metadata=option("..."))``.

    Args:
        help: the flag's help (without the backend's name: the CLI prefixes it); None for an
            option of the Python API only, with no flag.
        metavar: the flag's metavar (default: argparse's).
    """
    return {FLAG: help, METAVAR: metavar}


def check_orphan_timeout(value: Any) -> None:
    """The ``orphan_timeout_s`` option of the backends whose tasks run where no parent-death
    signal reaches them (containers, other nodes): a number of seconds > 0.

    Raises:
        SpecError: naming the option and the fix.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise SpecError("orphan_timeout_s", value, "must be a number of seconds > 0", "e.g. --orphan-timeout-s 30")


@dataclass(frozen=True)
class NoOptions:
    """The options of a backend that takes none."""


@dataclass(frozen=True)
class LocalOptions:
    """The local backend's options."""

    isolate_network: bool = dataclasses.field(default=False, metadata=option(
        "every task of the run in one network namespace of its own with only loopback: TensorFlow's ports "
        "unreachable from outside the run (docs/security.md)"))


@dataclass(frozen=True)
class OptionInfo:
    """One declared option, as the CLI and the docs see it.

    Attributes:
        name: the field name (``base_image``).
        type: the value's type without ``None`` (``str``, ``int``, ...).
        default: its default.
        help: the flag's help; None for an option without a flag.
        metavar: the flag's metavar, or None.
    """

    name: str
    type: type
    default: Any
    help: str | None
    metavar: str | None = None

    @property
    def flag(self) -> str | None:
        """``--base-image``, or None for an option without a flag."""
        return None if self.help is None else "--" + self.name.replace("_", "-")


def _value_type(hint: Any) -> type:
    """``str | None`` -> ``str``; any other hint is taken as it is (``object`` when not a class)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    origin = typing.get_origin(hint) or hint
    return origin if isinstance(origin, type) else object


def describe(options_type: type[Any]) -> tuple[OptionInfo, ...]:
    """Every option an options dataclass declares, in field order.

    Raises:
        TypeError: ``options_type`` is not a frozen dataclass.
    """
    if not dataclasses.is_dataclass(options_type) or not options_type.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{options_type.__qualname__}: backend options must be a frozen dataclass")
    hints = typing.get_type_hints(options_type)
    found = []
    for f in dataclasses.fields(options_type):
        default = f.default if f.default is not dataclasses.MISSING else None
        found.append(OptionInfo(f.name, _value_type(hints[f.name]), default, f.metadata.get(FLAG),
                                f.metadata.get(METAVAR)))
    return tuple(found)


def options_from_mapping(backend: str, options_type: type[Any], values: Mapping[str, Any]) -> Any:
    """An options object of ``options_type`` from a mapping of its field names (the Python
    API's ``backend_options={"image": ...}``).

    Raises:
        SpecError: naming the key that is not an option of ``backend``, and the ones that are.
    """
    names = [info.name for info in describe(options_type)]
    for key in values:
        if key not in names:
            raise SpecError("backend_options", key, f"is not an option of the {backend} backend",
                            "use one of: " + ", ".join(names) if names else f"the {backend} backend takes no options")
    return options_type(**values)
