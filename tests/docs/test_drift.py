"""The built site describes everything the code has: a flag, a spec field, a task variable, a
``summary.json`` field or a backend hook that exists in the code and not in the site fails here.

The reference pages are generated from the code when the site is built, so these tests check the
generators and the build together: an argument added without ``help=`` makes the build fail
(:class:`tools.docsite.reference.DocsDriftError`), one the generator skipped fails the row checks.
"""

from __future__ import annotations

import html
import re

from tests.docs.conftest import page
from tools.docsite import reference


def _sections(text: str) -> dict[str, str]:
    """``<h2 id=...>`` id -> the HTML up to the next ``<h2``."""
    parts = re.split(r'<h2 id="([^"]+)"', text)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _rows(section: str) -> list[list[str]]:
    """Each table row of ``section`` as its cells' text (tags stripped)."""
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", section, re.DOTALL):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        rows.append([html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells])
    return [r for r in rows if r]


def test_every_flag_of_every_subcommand_is_in_the_cli_reference_with_its_help(site):
    sections = _sections(page(site, "reference/cli"))
    checked = 0
    for name, (_, parser) in reference.subcommands().items():
        assert name in sections, f"subcommand {name} has no section in the CLI reference"
        rows = _rows(sections[name])
        for action in reference.documented_actions(parser):
            names = action.option_strings or [action.metavar or action.dest]
            row = next((r for r in rows if all(n in r[0].split(", ") for n in names)), None)
            assert row is not None, f"{name} {'/'.join(names)} is in the parser but not in the CLI reference"
            assert row[-1], f"{name} {'/'.join(names)} has no meaning in the CLI reference"
            checked += 1
    assert checked > 100  # launch alone has 44 arguments: a page that lost its tables cannot pass


def test_every_spec_field_is_in_the_spec_reference_with_type_default_and_meaning(site):
    rows = {r[0]: r for r in _rows(page(site, "reference/spec"))}
    fields = reference.spec_fields()
    assert {"workers", "training.epochs", "supervision.restart_policy", "addresses"} <= set(fields)
    for field in fields:
        assert field in rows, f"spec field {field} is in the model but not in the spec reference"
        assert rows[field][1] and rows[field][4], f"spec field {field} lacks its type or meaning"


def test_every_task_variable_of_env_py_is_in_the_environment_reference(site):
    names = {r[0] for r in _rows(page(site, "reference/env"))}
    variables = reference.env_variables()
    assert {"ORCH_RUN_DIR", "ORCH_JOB_TOKEN", "JOB_COMPLETION_INDEX"} <= set(variables)
    missing = [v for v in variables if v not in names]
    assert not missing, f"declared in orchestrator/env.py but not in the environment reference: {missing}"
    assert "TF_CONFIG" in names


def test_every_summary_field_is_in_the_summary_reference(site):
    from orchestrator.report import summary

    names = {r[0] for r in _rows(page(site, "reference/summary"))}
    for fields in (summary.SUMMARY_FIELDS, summary.TASK_FIELDS, summary.HEARTBEAT_FIELDS):
        missing = [f for f in fields if f not in names]
        assert not missing, f"summary.json fields missing from the reference: {missing}"


def test_every_backend_capability_and_option_is_in_the_backend_page(site):
    all_rows = _rows(page(site, "reference/backends"))
    rows = {r[0]: r for r in all_rows}
    capabilities = reference.backend_capabilities()
    assert {"lifecycle", "remote", "host-files"} <= set(capabilities)
    for capability in capabilities:
        assert capability in rows, f"backend capability {capability} is not in the backend table"
    assert rows["remote"][1:4] == ["-", "-", "yes (register_address, prepare_restart)"]  # Slurm's tasks register
    options = [(info.name, option.name) for info in reference.backend_infos() for option in info.options]
    assert ("docker", "image") in options
    for backend, option in options:
        assert any(r[:2] == [backend, option] for r in all_rows), f"{backend} option {option} missing from the page"


def test_every_module_is_in_the_architecture_page(site):
    rows = {r[0] for r in _rows(page(site, "architecture"))}
    for module in ("orchestrator.api", "orchestrator.supervisor.rules.decisions", "orchestrator.backends.slurm",
                   "worker"):
        assert module in rows, f"{module} is not in the architecture page's module table"
