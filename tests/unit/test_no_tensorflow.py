"""The orchestrator process never imports TensorFlow."""

from __future__ import annotations

import subprocess
import sys


def _imports_no_tensorflow(modules: str) -> None:
    code = (
        f"import sys, {modules};"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras', 'keras')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cli_and_supervisor_do_not_import_tensorflow():
    # every subcommand's module: orchestrator.cli imports only the one it runs
    subcommands = ", ".join(f"orchestrator.cli.{m}" for m in (
        "launch", "validate", "render", "doctor", "compose", "sbatch", "status", "stop", "logs", "list_runs"))
    _imports_no_tensorflow(f"orchestrator.cli, {subcommands}, orchestrator.supervisor, orchestrator.report.live, "
                           "orchestrator.backends, orchestrator.render.compose, orchestrator.render.kubernetes")


def test_the_client_module_imports_tensorflow_only_for_the_keras_callback():
    _imports_no_tensorflow("orchestrator.client")
