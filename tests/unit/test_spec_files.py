"""Cluster spec files: loading YAML / JSON, key suggestions, flags overriding file fields, rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.cli.launch import spec_from_args
from orchestrator.cli.render import addresses_for, render
from orchestrator.errors import SpecError
from orchestrator.spec.loader import load_spec, read_spec_file
from orchestrator.spec.model import Strategy, TaskId
from orchestrator.spec.supervision import RestartPolicy
from orchestrator.spec.validate import check_consistent, check_tf_config
from tests.conftest import REPO

SPEC_FILES = sorted((REPO / "cluster_specs").glob("*.*"))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def launch_spec(*argv: str):
    return spec_from_args(build_parser().parse_args(["launch", *argv]))


def test_the_examples_cover_yaml_json_pss_fixed_ports_and_an_evaluator():
    assert {p.suffix for p in SPEC_FILES} == {".yaml", ".json"}
    specs = [load_spec(p) for p in SPEC_FILES]
    assert any(s.strategy is Strategy.PARAMETER_SERVER for s in specs)
    assert any(s.addresses for s in specs) and any(not s.addresses for s in specs)
    assert any(s.evaluator for s in specs)


@pytest.mark.parametrize("path", SPEC_FILES, ids=[p.name for p in SPEC_FILES])
def test_every_example_renders_tf_configs_of_one_cluster(path):
    spec = load_spec(path)
    addresses = addresses_for(spec, None, None)
    lines = render(spec, addresses, "tf-config").splitlines()
    assert len(lines) == len(spec.tasks())
    reports = {str(t): check_tf_config(line, spec.strategy) for t, line in zip(spec.tasks(), lines)}
    check_consistent(reports)
    assert [r.task for r in reports.values()] == spec.tasks()
    for report in reports.values():
        assert "evaluator" not in report.cluster  # tensorflow#46169
    assert read_spec_file(path)["description"]


def test_yaml_and_json_give_the_same_spec(tmp_path):
    fields = {"strategy": "parameter_server", "addresses": {"chief": ["127.0.0.1:5001"], "worker": ["127.0.0.1:5002"],
                                                            "ps": ["127.0.0.1:5003"]},
              "training": {"epochs": 2, "learning_rate": 0.01}, "supervision": {"restart_policy": "on-failure"}}
    a = load_spec(write(tmp_path, "a.json", json.dumps(fields)))
    b = load_spec(write(tmp_path, "b.yaml", """
strategy: parameter_server
addresses: {chief: 127.0.0.1:5001, worker: [127.0.0.1:5002], ps: ["127.0.0.1:5003"]}
training: {epochs: 2, learning_rate: 1e-2}   # YAML 1.1 would read 1e-2 as a string
supervision: {restart_policy: on-failure}
"""))
    assert a == b
    assert (a.chief, a.workers, a.ps) == (1, 1, 1)  # counts come from addresses
    assert a.addresses[TaskId("worker", 0)] == "127.0.0.1:5002"
    assert a.supervision.policy("ps") is RestartPolicy.ON_FAILURE


def test_flags_given_explicitly_override_the_file_and_the_rest_is_kept(tmp_path):
    path = write(tmp_path, "s.yaml", """
strategy: multi_worker_mirrored
workers: 3
training: {epochs: 7, seed: 4, batch_size_per_replica: 8}
supervision: {restart_policy: {worker: never, chief: on-failure}, max_restarts: 5, deadline_s: 100}
""")
    spec = launch_spec("--spec", str(path))
    assert (spec.workers, spec.training.epochs, spec.training.seed, spec.supervision.max_restarts) == (3, 7, 4, 5)
    spec = launch_spec("--spec", str(path), "--workers", "2", "--epochs", "1", "--restart-policy", "worker=exit-code",
                       "--deadline", "50")
    assert (spec.workers, spec.training.epochs, spec.training.seed) == (2, 1, 4)
    assert spec.training.batch_size_per_replica == 8 and spec.supervision.max_restarts == 5
    assert spec.supervision.deadline_s == 50
    assert spec.supervision.policy("worker") is RestartPolicy.EXIT_CODE
    assert spec.supervision.policy("chief") is RestartPolicy.ON_FAILURE  # per role: the file's other roles stay


def test_without_a_file_the_flag_defaults_are_launchs_defaults():
    spec = launch_spec()
    assert (spec.strategy, spec.workers, spec.training.epochs, spec.supervision.max_restarts) == (
        Strategy.MULTI_WORKER_MIRRORED, 4, 10, 3)
    spec = launch_spec("--strategy", "pss")
    assert (spec.chief, spec.workers, spec.ps) == (1, 2, 1)


def test_flags_that_contradict_fixed_addresses_are_rejected(tmp_path):
    path = write(tmp_path, "s.yaml", "addresses: {worker: ['127.0.0.1:5001', '127.0.0.1:5002']}\n")
    with pytest.raises(SpecError, match=r"addresses.worker=2: 2 address\(es\) listed but the job has workers=3"):
        launch_spec("--spec", str(path), "--workers", "3")


@pytest.mark.parametrize(
    "text, suffix, fragment",
    [
        ("workers: 2\nworkers: 3\n", ".yaml", "duplicate key 'workers'"),
        ("workers: [2\n", ".yaml", "not valid YAML: line 2"),
        ('{"workers": 2,}', ".json", "not valid JSON: line 1"),
        ("- workers\n", ".yaml", "holds a list, not a mapping"),
        ("trainig: {epochs: 2}\n", ".yaml", "trainig={'epochs': 2}: unknown key in s.yaml; did you mean training?"),
        ("training: {epochs: 0}\n", ".yaml", "training.epochs=0: must be a whole number >= 1"),
        ("addresses: {worker: [10.0.0.1:2222, 10.0.0.1:2222]}\n", ".yaml", "addresses.worker[0] already uses"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, text, suffix, fragment):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, "s" + suffix, text))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_missing_file():
    with pytest.raises(SpecError, match="spec='/no/such.yaml': no such file"):
        load_spec("/no/such.yaml")


def test_render_addresses_from_hosts_and_base_port():
    spec = launch_spec("--workers", "2", "--chief")
    one = addresses_for(spec, ["10.1.1.1"], 3000)
    assert list(one.values()) == ["10.1.1.1:3000", "10.1.1.1:3001", "10.1.1.1:3002"]
    each = addresses_for(spec, ["a", "b", "fe80::1"], None)
    assert list(each.values()) == ["a:2222", "b:2222", "[fe80::1]:2222"]
    with pytest.raises(SpecError, match="2 hosts for 3 tasks"):
        addresses_for(spec, ["a", "b"], None)
    with pytest.raises(SpecError, match="base-port=65535"):
        addresses_for(spec, None, 65535)
    with pytest.raises(SpecError, match="loopback address in a cluster that also has other hosts"):
        addresses_for(spec, ["localhost", "b", "c"], None)


def test_render_env_lines_are_shell_exports_of_compact_json():
    spec = launch_spec("--strategy", "pss", "--workers", "1")
    text = render(spec, addresses_for(spec, None, None), "env", TaskId("ps", 0))
    assert text.startswith("export TF_CONFIG='") and text.endswith("'") and "\n" not in text
    config = json.loads(text[len("export TF_CONFIG='"):-1])
    assert config["task"] == {"type": "ps", "index": 0}
    assert config["cluster"]["chief"] == ["127.0.0.1:2222"]
