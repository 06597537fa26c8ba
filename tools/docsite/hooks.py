"""MkDocs hooks (``mkdocs.yml`` ``hooks:``): fill each ``<!-- gen:NAME -->`` marker of a page with
the block generated from the code (:data:`GENERATORS`).

An unknown marker, or a generator that finds the code and the docs out of step
(:class:`tools.docsite.reference.DocsDriftError`), fails the build.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # mkdocs loads this file by path; the generators import the project
    sys.path.insert(0, str(REPO))

from mkdocs.exceptions import PluginError  # noqa: E402

from tools.docsite import bench, reference  # noqa: E402

GENERATORS: dict[str, Callable[[], str]] = {
    "cli": reference.cli_markdown,
    "spec-fields": reference.spec_markdown,
    "env": reference.env_markdown,
    "summary": reference.summary_markdown,
    "backends": reference.backends_markdown,
    "modules": reference.modules_markdown,
    "bench": bench.bench_markdown,
    "recovery-timeline": bench.timeline_svg,
}
"""Marker name -> the function that renders its block."""

MARKER = re.compile(r"^<!-- gen:([a-z-]+) -->$", re.MULTILINE)


def expand(markdown: str, where: str = "") -> str:
    """``markdown`` with every marker replaced by its generated block.

    Raises:
        PluginError: an unknown marker, or the code has what the docs cannot describe.
    """
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise PluginError(f"{where}: unknown marker gen:{name}; known: {', '.join(GENERATORS)}")
        try:
            return GENERATORS[name]()
        except reference.DocsDriftError as exc:
            raise PluginError(f"{where}: gen:{name}: {exc}") from None

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs event: expand the page's markers."""
    return expand(markdown, page.file.src_uri)


SPHINX_ROLE = re.compile(r":(?:class|func|mod|meth|attr|data|exc):(?=<code>)")
"""A Sphinx role (``:class:`JobSpec```) as mkdocstrings renders it from a docstring: the role's name
before the code span. The docstrings keep Sphinx roles (they are read in editors too); the site shows
the name alone."""


def on_page_content(html: str, **_: Any) -> str:
    """MkDocs event: drop the Sphinx role names mkdocstrings leaves before code spans."""
    return SPHINX_ROLE.sub("", html)
