"""The documentation site, built once per session with ``mkdocs build --strict`` (the build CI runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, test_env


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site's directory; skipped, with the reason, without the ``docs`` extra."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    pytest.importorskip("material", reason="the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = test_env() | {"NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(command, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def page(site: Path, name: str) -> str:
    """The HTML of a built page (``reference/cli`` -> ``reference/cli/index.html``)."""
    return (site / name / "index.html").read_text(encoding="utf-8")


os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
