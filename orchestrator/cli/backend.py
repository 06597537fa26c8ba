"""``--backend`` and the backends' options, shared by ``launch`` (and ``compose``).

Every flag here is built from the backends' declarations (their options dataclasses:
:mod:`orchestrator.backends.options`): adding an option to a backend adds its flag. Building
them imports no backend's module (a launch imports its own backend only, when it plans).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orchestrator.backends import BACKENDS, declaration
from orchestrator.backends.options import OptionInfo, describe


def option_flags(backends: tuple[str, ...] | None = None) -> dict[str, tuple[OptionInfo, tuple[str, ...]]]:
    """Every backend option that is a flag: ``--flag -> (its declaration, the backends taking it)``.

    Args:
        backends: the backends whose options count (default: all of them).

    Raises:
        TypeError: two backends declare one flag with different types (a declaration to fix).
    """
    flags: dict[str, tuple[OptionInfo, tuple[str, ...]]] = {}
    for name in backends or tuple(BACKENDS):
        for info in describe(BACKENDS.declaration(name).options_type):
            if info.flag is None:
                continue
            if info.flag in flags:
                first, owners = flags[info.flag]
                if first.type is not info.type:
                    raise TypeError(f"{info.flag}: declared as {first.type.__name__} by {owners[0]} and as "
                                    f"{info.type.__name__} by {name}")
                flags[info.flag] = (first, owners + (name,))
            else:
                flags[info.flag] = (info, (name,))
    return flags


def add_backend_arguments(parser: argparse.ArgumentParser, *, with_backend: bool = True) -> None:
    """Add ``--backend`` (optional) and every backend's option flags, from their declarations."""
    group = parser.add_argument_group("backend")
    if with_backend:
        group.add_argument("--backend", default="local", choices=sorted(BACKENDS),
                           help="; ".join(f"{name}: {BACKENDS.declaration(name).summary}" for name in BACKENDS))
    for flag, (info, owners) in option_flags().items():
        help_text = f"{', '.join(owners)}: {info.help}"
        kwargs: dict[str, Any] = {"default": None, "help": help_text, "dest": info.name}
        if info.metavar:
            kwargs["metavar"] = info.metavar
        if info.type is bool:
            kwargs["action"] = "store_true"
        elif info.type in (int, float):
            kwargs["type"] = info.type
        group.add_argument(flag, **kwargs)


def _print_progress(line: str) -> None:
    print(f"[image] {line}", file=sys.stderr, flush=True)


def backend_options(args: argparse.Namespace) -> Any:
    """The chosen backend's options object (its declared ``options_type``) from the parsed
    flags; flags of other backends are left out. A backend with a ``progress`` option gets
    one that prints each line as ``[image] ...`` on stderr."""
    options_type = declaration(getattr(args, "backend", "local")).options_type
    values: dict[str, Any] = {}
    for info in describe(options_type):
        if info.flag is not None and getattr(args, info.name, None) is not None:
            values[info.name] = getattr(args, info.name)
        elif info.name == "progress":
            values["progress"] = _print_progress
    return options_type(**values)
