"""Backends declare their options and capabilities; the CLI, the API and the docs read the declarations."""

from __future__ import annotations

import argparse
import json
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pytest

from orchestrator import api, backends
from orchestrator.backends import BACKENDS, capability_table, get_backend, held_slots
from orchestrator.backends.base import Backend, Capability, LaunchRequest, TaskHandle
from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.local import LocalBackend
from orchestrator.backends.options import DECLARED, DockerOptions, LocalOptions, SlurmOptions, describe, option
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.cli.backend import add_backend_arguments, backend_options
from orchestrator.cli.checks import check_program
from orchestrator.errors import SpecError
from orchestrator.plan import attempt_env
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import JobSpec, TaskId


class _Minimal(Backend[TaskHandle]):
    """Only the required methods."""

    def allocate(self, spec: JobSpec) -> dict[TaskId, str]:
        return {t: "127.0.0.1:0" for t in spec.tasks()}

    def start(self, request: LaunchRequest) -> TaskHandle:
        raise NotImplementedError

    def poll(self, handle: TaskHandle) -> int | None:
        return None

    def wait(self, handle: TaskHandle, timeout_s: float) -> int | None:
        return None

    def signal(self, handle: TaskHandle, signum: int) -> None:
        pass

    def stop(self, handles: Iterable[TaskHandle], timeout_s: float, abort: threading.Event | None = None) -> None:
        pass


def test_the_table_lists_every_backend_with_the_hooks_that_implement_each_capability():
    table = {info.name: info for info in capability_table()}
    assert list(table) == ["local", "docker", "slurm"]
    local, docker, slurm = table["local"], table["docker"], table["slurm"]
    assert local.capabilities == {
        Capability.LIFECYCLE: ("open", "close"), Capability.PORTS: ("release_port", "reserve_again"),
        Capability.DIAGNOSTICS: ("sample", "dump_stacks", "oom_killed", "memory_total_bytes"),
        Capability.SPARES: ("keep_spares", "spares"), Capability.EXIT_EVENTS: ("exit_fd",),
        Capability.HOST_PROCESSES: (), Capability.HOST_FILES: (), Capability.HOST_GPUS: (), Capability.HOST_CPUS: (),
        Capability.HOST_PORTS: ()}
    assert docker.capabilities == {Capability.LIFECYCLE: ("open", "close"),
                                   Capability.DIAGNOSTICS: ("dump_stacks", "oom_killed"), Capability.HOST_GPUS: (),
                                   Capability.HOST_CPUS: (), Capability.NAMED_ADDRESSES: ()}
    assert slurm.capabilities == {
        Capability.LIFECYCLE: ("open", "close"), Capability.PORTS: ("reserve_again",),
        Capability.DIAGNOSTICS: ("dump_stacks", "job_preempted"),
        Capability.REMOTE: ("register_address", "prepare_restart"), Capability.EXIT_EVENTS: ("exit_fd",),
        Capability.HOST_FILES: ()}
    assert slurm.supports(Capability.REMOTE) and not docker.supports(Capability.HOST_FILES)
    assert [o.flag for o in docker.options] == ["--image", "--base-image", None, None, "--orphan-timeout-s",
                                                "--shm-size", "--memory", "--isolate-network"]
    assert [(o.name, o.type, o.default) for o in slurm.options][:2] == [("tasks_per_node", int, None),
                                                                        ("health_host", str, None)]
    assert [o.name for o in local.options] == ["isolate_network"] and all(info.summary for info in table.values())
    assert capability_table.__doc__ and "What each backend supports" in capability_table.__doc__


def test_a_capability_declared_without_its_hooks_or_a_hook_without_its_capability_is_refused():
    with pytest.raises(TypeError,
                       match=r"_Spares declares Capability.SPARES but overrides none of keep_spares, spares"):
        type("_Spares", (_Minimal,), {"capabilities": frozenset({Capability.SPARES})})
    with pytest.raises(TypeError, match=r"overrides sample but does not declare Capability.DIAGNOSTICS"):
        type("_Sampler", (_Minimal,), {"capabilities": frozenset(), "sample": lambda self, handle: None})
    with pytest.raises(TypeError,
                       match="_Sub overrides release_port, reserve_again but does not declare Capability.PORTS"):
        type("_Sub", (LocalBackend,), {"capabilities": frozenset({Capability.LIFECYCLE, Capability.DIAGNOSTICS,
                                                                  Capability.SPARES})})
    # undeclared (a test's fake backend): derived from what it overrides; facts without hooks are absent
    fake = type("_Fake", (_Minimal,), {"close": lambda self: None, "dump_stacks": lambda self, h, t: ""})
    assert fake.declared_capabilities() == {Capability.LIFECYCLE, Capability.DIAGNOSTICS}
    assert not fake.supports(Capability.HOST_PROCESSES)
    # a subclass of a declared backend inherits both its declaration and its hooks
    assert type("_Local2", (LocalBackend,), {}).declared_capabilities() == LocalBackend.capabilities


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_backend_arguments(parser)
    return parser.parse_args(argv)


def test_the_cli_flags_are_the_declared_options():
    parser = argparse.ArgumentParser()
    add_backend_arguments(parser)
    flags = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    declared: dict[str, tuple[list[str], object]] = {}
    for name, cls in BACKENDS.items():
        for o in describe(cls.options_type):
            if o.flag:
                declared.setdefault(o.flag, ([], o))[0].append(name)
    assert set(declared) | {"--backend", "-h"} == set(flags)
    for flag, (owners, info) in declared.items():  # an option two backends declare is one flag naming both
        assert flags[flag].help == f"{', '.join(owners)}: {info.help}" and flags[flag].default is None
    assert declared["--orphan-timeout-s"][0] == ["docker", "slurm"] and flags["--orphan-timeout-s"].type is float
    assert declared["--isolate-network"][0] == ["local", "docker"]
    assert flags["--tasks-per-node"].type is int and flags["--tasks-per-node"].metavar == "N"
    assert flags["--backend"].choices == sorted(BACKENDS)
    slurm = backend_options(_parse(["--backend", "slurm", "--tasks-per-node", "3", "--image", "ignored"]))
    assert slurm == SlurmOptions(tasks_per_node=3)
    docker = backend_options(_parse(["--backend", "docker", "--image", "tf:1"]))
    assert isinstance(docker, DockerOptions) and docker.image == "tf:1" and docker.progress is not None
    assert backend_options(_parse([])) == LocalOptions()
    assert backend_options(_parse(["--isolate-network"])) == LocalOptions(isolate_network=True)


def test_the_orphan_timeout_reaches_the_tasks_and_must_be_positive(capsys):
    assert DockerOptions().orphan_timeout_s == SlurmOptions().orphan_timeout_s == 30.0
    assert backend_options(_parse(["--backend", "docker", "--orphan-timeout-s", "5"])).orphan_timeout_s == 5.0
    assert DockerBackend(DockerOptions(orphan_timeout_s=5)).orphan_timeout_s == 5.0
    assert SlurmBackend(SlurmOptions(orphan_timeout_s=7.5, environ={})).orphan_timeout_s == 7.5
    for bad in (0, -1, True, "5"):
        for options in (DockerOptions, SlurmOptions):
            with pytest.raises(SpecError, match="orphan_timeout_s=.*must be a number of seconds > 0"):
                options(orphan_timeout_s=bad)


@dataclass(frozen=True)
class _ToyOptions:
    nodes: int = field(default=1, metadata=option("nodes to ask for"))
    queue: str | None = field(default=None, metadata=option("the queue", metavar="NAME"))
    secret: str = field(default="", metadata=option(None))


class _Toy(_Minimal):
    name = "toy"
    summary = "a toy"
    options_type = _ToyOptions

    def __init__(self, options: _ToyOptions | None = None) -> None:
        self.options = options or _ToyOptions()


def test_adding_an_option_is_one_field(monkeypatch):
    monkeypatch.setitem(BACKENDS, "toy", _Toy)
    args = _parse(["--backend", "toy", "--nodes", "4", "--queue", "gpu"])
    options = backend_options(args)
    assert options == _ToyOptions(nodes=4, queue="gpu")
    assert get_backend("toy", options).options == options
    assert get_backend("toy", {"queue": "cpu"}).options == _ToyOptions(queue="cpu")
    with pytest.raises(SystemExit):
        _parse(["--secret", "x"])  # a Python-API-only option has no flag


def test_get_backend_takes_the_declared_options_object_or_a_mapping_of_its_fields():
    assert get_backend("docker", {"image": "tf:1"}).image == "tf:1"
    assert get_backend("slurm", SlurmOptions(health_host="10.0.0.1")).health_host == "10.0.0.1"
    assert isinstance(get_backend("local"), LocalBackend)
    with pytest.raises(SpecError, match=r"backend_options='imag': is not an option of the docker backend; "
                                        r"use one of: image, base_image, ca_bundle, progress"):
        get_backend("docker", {"imag": "tf:1"})
    with pytest.raises(SpecError, match="'image': is not an option of the local backend; use one of: isolate_network"):
        get_backend("local", {"image": "x"})
    with pytest.raises(SpecError, match="'DockerOptions': are not options of the slurm backend"):
        get_backend("slurm", DockerOptions())
    with pytest.raises(SpecError, match="backend='k8s': unknown backend; use one of: docker, local, slurm"):
        get_backend("k8s")


class _HostToy(_Toy):
    name = "host-toy"
    capabilities = frozenset({Capability.HOST_PROCESSES, Capability.HOST_FILES})


def test_backend_rules_are_capability_queries_not_names(monkeypatch):
    monkeypatch.setitem(BACKENDS, "toy", _Toy)
    monkeypatch.setitem(BACKENDS, "host-toy", _HostToy)
    # a backend whose tasks do not see this machine's files: the program is not looked for here
    check_program(["/opt/in-the-image/train"], backend="toy")
    for sees_files in ("slurm", "host-toy"):
        with pytest.raises(SpecError, match="no such file"):
            check_program(["/opt/in-the-image/train"], backend=sees_files)
    # the memory check runs where the tasks are this machine's processes, whatever the backend's name
    huge = JobSpec.create(workers=1000)
    for elsewhere in ("toy", "slurm", "docker"):
        api.check_job(huge, backend=elsewhere)
    for here in ("local", "host-toy"):
        with pytest.raises(SpecError, match="TensorFlow processes need"):
            api.check_job(huge, backend=here)


def test_dry_run_addresses_hold_nothing_and_skip_only_the_busy_port_check():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = build_spec({"addresses": {"worker": [f"localhost:{port}"]}})
        backend = LocalBackend()
        assert backend.preview_addresses(spec) == {TaskId("worker", 0): f"127.0.0.1:{port}"}
        assert backend.ports.port(TaskId("worker", 0)) == 0  # nothing held
        with pytest.raises(SpecError, match=f"port {port} is in use"):
            backend.allocate(spec)  # the launch checks it
    with pytest.raises(SpecError, match="loopback"):
        LocalBackend().preview_addresses(build_spec({"addresses": {"worker": ["10.0.0.7:2222"]}}))
    drawn = LocalBackend()
    assert set(drawn.preview_addresses(JobSpec.create(workers=2)).values()) == {"127.0.0.1:0"}
    assert all(drawn.ports.port(t) == 0 for t in JobSpec.create(workers=2).tasks())


def test_the_api_dry_run_starts_binds_and_creates_nothing(tmp_path):
    plan = api.dry_run(JobSpec.create(workers=2), runs_dir=tmp_path / "runs", run_id="d1")
    assert [t.address for t in plan.tasks] == ["127.0.0.1:0", "127.0.0.1:0"]
    assert not (tmp_path / "runs").exists()
    docker = api.dry_run(JobSpec.create(workers=2), runs_dir=tmp_path, backend="docker",
                         backend_options={"image": "tf:1"})
    assert [t.address for t in docker.tasks] == ["worker-0:2222", "worker-1:2222"]


PSS_1_OF_2 = {"strategy": "parameter_server", "ps": 1, "workers": 1, "elastic": ElasticSpec(1, 2)}


@pytest.mark.parametrize("backend, fields, planned", [
    (LocalBackend, PSS_1_OF_2, 2),  # its leased ports: the held worker's address reserved
    (DockerBackend, PSS_1_OF_2, 2),  # named addresses: worker-1:2222 before its container exists
    (SlurmBackend, PSS_1_OF_2, None),  # its scheduler places the tasks: a grow is a next life
    (_Minimal, PSS_1_OF_2, None),  # neither fact declared
    (DockerBackend, {**PSS_1_OF_2, "gpus_per_task": {"worker": 1}}, None),  # a held worker has no device dealt
    (DockerBackend, {**PSS_1_OF_2, "workers": 2}, None),  # started at MAX: nothing held
    (DockerBackend, {"strategy": "multi_worker_mirrored", "workers": 1, "elastic": ElasticSpec(1, 2)}, None),
])
def test_held_slots_are_planned_where_a_held_task_has_its_address_before_it_starts(backend, fields, planned):
    at_max = held_slots(JobSpec.create(**fields), backend)
    assert (at_max.workers if at_max is not None else None) == planned


def test_a_docker_dry_run_of_a_pss_job_below_max_names_its_held_worker(tmp_path):
    plan = api.dry_run(JobSpec.create(**PSS_1_OF_2), runs_dir=tmp_path, backend="docker",
                       backend_options={"image": "tf:1"})
    assert (plan.started_workers, plan.held) == (1, ("worker-1",))
    assert plan.task_plan(TaskId("worker", 1)).address == "worker-1:2222"
    chief = json.loads(attempt_env(plan, TaskId("chief", 0), 0)["TF_CONFIG"])
    assert chief["cluster"]["worker"] == ["worker-0:2222"]  # the held one in no started task's cluster


@pytest.mark.parametrize("bad", ["", "a/b", ".hidden", "../x"])
def test_the_run_id_rule_is_checked_once_for_every_path(tmp_path, bad):
    with pytest.raises(SpecError, match=r"run_id=.*must be a plain directory name; e\.g\. run_id='digits-1'"):
        api.check_job(JobSpec.create(workers=1), backend="local", run_id=bad)
    with pytest.raises(SpecError, match=r"^run-id=.*: must be a plain directory name; e\.g\. --run-id digits-1$"):
        api.check_run_id(bad, "run-id")
    with pytest.raises(SpecError, match="run_id"):
        api.prepare(JobSpec.create(workers=1), runs_dir=tmp_path, run_id=bad)  # prepare checks it too now
    assert list(Path(tmp_path).iterdir()) == []
    api.check_run_id(None)
    api.check_run_id("digits-1")


def test_every_backend_module_declares_through_the_registry():
    assert {cls.name for cls in BACKENDS.values()} == set(BACKENDS)
    assert DockerBackend.options_type is DockerOptions and SlurmBackend.options_type is SlurmOptions
    assert LocalBackend.options_type is LocalOptions
    assert backends.backend_class("slurm") is SlurmBackend


def test_each_declaration_is_its_backends_own_and_names_its_class():
    """The CLI's flags and ``--backend`` help come from the declarations without importing the
    backends' modules (:class:`orchestrator.backends.Registry`): each says what its class says."""
    assert [d.name for d in DECLARED] == list(BACKENDS) == ["local", "docker", "slurm"]
    for d in DECLARED:
        cls = BACKENDS[d.name]
        assert (cls.name, cls.summary, cls.options_type) == (d.name, d.summary, d.options_type)
        assert f"{cls.__module__}:{cls.__qualname__}" == d.where
        assert BACKENDS.declaration(d.name) == d


def test_a_class_set_into_the_registry_is_its_own_declaration(monkeypatch):
    monkeypatch.setitem(BACKENDS, "toy", _Toy)
    toy = BACKENDS.declaration("toy")
    assert (toy.name, toy.summary, toy.options_type) == ("toy", "a toy", _ToyOptions)
    assert BACKENDS["toy"] is _Toy and "toy" in BACKENDS
    with pytest.raises(SpecError, match="backend='k8s': unknown backend"):
        backends.declaration("k8s")
