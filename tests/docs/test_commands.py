"""The commands the getting-started and spec pages show run as shown: every fenced
``python -m orchestrator ...`` line that is a dry run, a validation or a render (nothing trains)
is run from a checkout's layout and must exit 0, so a renamed flag breaks CI, not a user."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, test_env

PAGES = ("docs/getting-started.md", "docs/reference/spec.md")
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$', re.MULTILINE)
TF_CONFIG = '{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 0}}'
"""The ``$TF_CONFIG`` of the shell for ``validate`` without arguments (the page says it checks that)."""


def expand_snippets(text: str) -> str:
    """Inline ``--8<-- "FILE[:SECTION]"`` includes as pymdownx.snippets does (mkdocs.yml base_path: the repo)."""
    def include(match: re.Match[str]) -> str:
        body = (REPO / match.group(1)).read_text(encoding="utf-8")
        if match.group(2):
            name = match.group(2)
            section = re.search(rf"--8<-- \[start:{name}\][^\n]*\n(.*?)\n[^\n]*--8<-- \[end:{name}\]", body, re.DOTALL)
            assert section, f"{match.group(1)} has no snippet section {match.group(2)}"
            body = section.group(1)
        return body

    return SNIPPET.sub(include, text)


def fenced_commands(path: str) -> list[str]:
    """``python -m orchestrator`` lines of the page's fenced code blocks (continuations joined)."""
    text = expand_snippets((REPO / path).read_text(encoding="utf-8"))
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        block = block.replace("\\\n", " ")
        commands += [line.strip() for line in block.splitlines() if line.strip().startswith("python -m orchestrator ")]
    return commands


def runnable(command: str) -> bool:
    """Dry runs, validations and renders: they start nothing."""
    words = command.split("#")[0].split()
    return "--dry-run" in words or words[3] in ("validate", "render")


CASES = [(path, command) for path in PAGES for command in fenced_commands(path) if runnable(command)]


def test_the_pages_show_commands_to_run():
    assert len([c for p, c in CASES if p == PAGES[0]]) >= 3
    assert len([c for p, c in CASES if p == PAGES[1]]) >= 4


@pytest.mark.parametrize(("path", "command"), CASES, ids=[f"{Path(p).stem}: {c[23:70]}" for p, c in CASES])
def test_a_documented_command_runs(path: str, command: str, tmp_path: Path):
    (tmp_path / "cluster_specs").symlink_to(REPO / "cluster_specs")  # the pages run from a clone's root
    env = test_env() | {"TF_CONFIG": TF_CONFIG}
    done = subprocess.run(["bash", "-c", command], check=False, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{path}: `{command}` exited {done.returncode}:\n{done.stderr[-2000:]}"
