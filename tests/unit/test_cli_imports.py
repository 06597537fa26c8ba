"""A subcommand imports only what it runs: ``launch`` waits for its CLI's imports before the
first task starts (docs/architecture.md, "What a launch spends")."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import pytest

from orchestrator.cli import SUBCOMMANDS, build_parser


def _modules_after(argv: list[str]) -> list[str]:
    code = ("import json, sys; from orchestrator.cli import main; rc = main(sys.argv[1:]);"
            "print(json.dumps(sorted(sys.modules)), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stderr.strip().splitlines()[-1])


def test_a_launch_imports_no_other_subcommand_and_no_yaml():
    modules = _modules_after(["launch", "--workers", "2", "--dry-run"])
    others = [f"orchestrator.cli.{m}" for n, m in SUBCOMMANDS.items() if n != "launch"]
    assert "orchestrator.cli.launch" in modules
    assert [m for m in others if m in modules] == []
    assert "yaml" not in modules  # a spec from flags: no YAML file to read


SUPERVISING = tuple(f"orchestrator.supervisor.{m}" for m in (
    "loop", "actions", "beats", "ending", "exits", "failures", "forensics", "growback", "hangs", "logcap", "options",
    "pictures", "preemption", "record", "rehearsal", "resizing", "table", "waves", "records.recovery",
    "rules.decisions", "rules.exitrules", "rules.hang_rules", "rules.parking", "rules.resize", "rules.spares",
    "rules.stack_rules", "rules.training_rules",
)) + ("orchestrator.web.server", "orchestrator.web.metrics", "prometheus_client")
"""What only supervising needs (the loop, its parts and their rules), and the page's server: a launch
imports them once its first tasks have started (their interpreters and TensorFlow's import meanwhile)."""


def test_the_api_imports_none_of_what_only_supervising_needs():
    code = "import json, sys; import orchestrator.api; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert [m for m in SUPERVISING if m in json.loads(result.stdout)] == []


NOT_BEFORE_THE_TASKS = (
    "grpc", "grpc_health", "asyncio", "aiohttp",  # the health server's and the web page's: after the tasks start
    "google.protobuf", "orchestrator.proto.supervisor_pb2",  # with the health server: the supervisor reads phases
    "orchestrator.backends.docker", "orchestrator.backends.docker_container", "orchestrator.backends.engine",
    "orchestrator.backends.image", "orchestrator.backends.slurm", "orchestrator.backends.slurm_step",
    "orchestrator.backends.slurm_commands", "orchestrator.backends.slurm_job", "orchestrator.backends.addresses",
    "orchestrator.report.status", "orchestrator.report.summary", "orchestrator.report.schema",  # a status, the end
    "zipfile",  # the data's count reads a .npz only when there is one
    "difflib",  # a suggestion for a misspelt key: bad input only
    "cryptography",  # the run's certificates: made while the first tasks start (api.prepare, tls.files_for)
    *SUPERVISING,
)
"""Modules a local launch has not imported when each of its tasks starts (the path to the first
task start is what planning and starting need: docs/architecture.md, "What a launch spends")."""


def test_a_launchs_tasks_start_before_the_servers_protobuf_and_other_backends_are_imported(tmp_path):
    """The health server's imports (grpc, grpc_health, asyncio, protobuf) come after the tasks have
    started (orchestrator.health.endpoint), and a local launch never imports the docker or slurm
    backend: seen by the local backend at each task's start, in a real launch."""
    code = ("import json, sys; from orchestrator.backends.local import LocalBackend\n"
            f"watched = {NOT_BEFORE_THE_TASKS!r}\n"
            "seen = []; start = LocalBackend.start\n"
            "def recording(self, request):\n"
            "    seen.append(sorted(m for m in watched if m in sys.modules))\n"
            "    return start(self, request)\n"
            "LocalBackend.start = recording; from orchestrator.cli import main; rc = main(sys.argv[1:])\n"
            "import psutil; left = [p.cmdline() for p in psutil.Process().children(recursive=True)]\n"
            "print(json.dumps([rc, seen, 'grpc' in sys.modules, 'cryptography' in sys.modules, left]),"
            " file=sys.stderr)")
    argv = ["launch", "--workers", "2", "--plain", "--runs-dir", str(tmp_path), "--", sys.executable, "-c", "pass"]
    result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    rc, seen, served, signed, left = json.loads(result.stderr.strip().splitlines()[-1])
    # the run's certificates were made by the launch's certificate maker (orchestrator.pkimaker), never here
    assert (rc, seen, served, signed, left) == (0, [[], []], True, False, []), result.stderr


def test_the_supervisors_phases_are_the_protos():
    """:mod:`orchestrator.proto.phases` mirrors ``Phase`` of supervisor.proto without protobuf."""
    from orchestrator.proto import phases
    from orchestrator.proto import supervisor_pb2 as pb

    declared = {name: getattr(phases, name) for name in dir(phases) if name.startswith("PHASE_")}
    assert declared == dict(pb.Phase.items())
    assert phases.NAMES == {v: n.removeprefix("PHASE_").lower() for n, v in pb.Phase.items()}
    assert [phases.phase_name(v) for v in pb.Phase.values()] == [phases.NAMES[v] for v in pb.Phase.values()]
    with pytest.raises(ValueError, match="no name defined for value 99"):
        phases.phase_name(99)


def _has_nvml() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux") or _has_nvml(), reason="a node with a GPU driver")
def test_a_node_without_a_gpu_driver_never_imports_pynvml():
    modules = _modules_after(["launch", "--workers", "2", "--dry-run"])  # the dry run places GPUs too
    assert "pynvml" not in modules


def test_a_yaml_spec_file_is_still_read(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("workers: 3\ntraining:\n  learning_rate: 5e-3\n")
    modules = _modules_after(["launch", "--spec", str(spec), "--dry-run"])
    assert "yaml" in modules


def test_the_full_parser_still_has_every_subcommand():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == list(SUBCOMMANDS)
    only = next(a for a in build_parser("status")._actions if a.dest == "command")
    assert list(only.choices) == ["status"]


def test_a_launch_with_bad_input_ends_its_certificate_maker_having_made_nothing(tmp_path):
    """The launch's certificate maker (orchestrator.pkimaker) starts before the spec is read; a bad spec ends the
    launch with exit 2 and the maker with it: no process left, nothing written."""
    code = ("import json, sys, psutil; from orchestrator.cli import main; rc = main(sys.argv[1:])\n"
            "left = [p.cmdline() for p in psutil.Process().children(recursive=True)]\n"
            "print(json.dumps([rc, left]), file=sys.stderr)")
    argv = ["launch", "--workers", "0", "--plain", "--runs-dir", str(tmp_path / "runs")]
    result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert json.loads(result.stderr.strip().splitlines()[-1]) == [2, []], result.stderr
    assert "workers" in result.stderr.splitlines()[0] and list(tmp_path.iterdir()) == []


def test_a_launchs_start_collects_less_and_then_as_before():
    """While a launch starts (cli.main until cli.launch's prepare returned) the collector's first threshold is
    START_GC_THRESHOLD, past what the imports allocate; then what they made is frozen and the thresholds are back."""
    code = ("import gc, json, sys; from orchestrator import cli\n"
            "gc.set_threshold(900, 11, 12); cli._collect_less(); before = gc.get_stats()[0]['collections']\n"
            "during = gc.get_threshold(); import orchestrator.api\n"
            "collected = gc.get_stats()[0]['collections'] - before; cli.started(); cli.started()\n"
            "print(json.dumps([during, collected, gc.get_threshold(), gc.get_freeze_count() > 0]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    during, collected, after, frozen = json.loads(result.stdout)
    from orchestrator.cli import START_GC_THRESHOLD

    assert (during, collected, after, frozen) == ([START_GC_THRESHOLD, 11, 12], 0, [900, 11, 12], True)
