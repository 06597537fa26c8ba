"""The docker backend's cleanup races with its exit watcher removing containers (issue 11, item 16).

No engine here: a tiny fake client of our own stands in for the SDK's, raising the SDK's real
``docker.errors.NotFound`` where the engine would ("No such container").
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

docker_errors = pytest.importorskip("docker.errors")

from orchestrator.backends.docker import LABEL_RUN, Container, DockerBackend, DockerOptions  # noqa: E402
from orchestrator.spec.model import TaskId  # noqa: E402


class FakeContainer:
    def __init__(self, engine: "FakeEngine", cid: str) -> None:
        self.engine, self.id, self.name = engine, cid, f"tfjob-r1-{cid}"

    def remove(self, force: bool = False) -> None:
        if self.id not in self.engine.present:
            raise docker_errors.NotFound(f"No such container: {self.id}")
        self.engine.present.discard(self.id)
        self.engine.removed.append(self.id)


class FakeContainers:
    """``client.containers`` as the SDK does it: list the ids, then inspect each one."""

    def __init__(self, engine: "FakeEngine", honour_ignore_removed: bool) -> None:
        self.engine, self.honour = engine, honour_ignore_removed

    def list(self, all=False, filters=None, ignore_removed=False):
        self.engine.list_calls += 1
        ids = sorted(self.engine.present)
        self.engine.present -= self.engine.vanish_on_list  # the exit watcher removes it meanwhile
        out = []
        for cid in ids:
            if cid not in self.engine.present:
                if ignore_removed and self.honour:
                    continue
                raise docker_errors.NotFound(f"No such container: {cid}")
            out.append(FakeContainer(self.engine, cid))
        return out


class FakeNetwork:
    name = "tfjob-r1"

    def __init__(self, error: Exception | None = None) -> None:
        self.removed, self.error = False, error

    def remove(self) -> None:
        if self.error is not None:
            raise self.error
        self.removed = True


class FakeEngine:
    def __init__(self, ids, vanish_on_list=(), honour_ignore_removed=True) -> None:
        self.present, self.vanish_on_list = set(ids), set(vanish_on_list)
        self.removed: list[str] = []
        self.list_calls = 0
        self.closed = False
        self.containers = FakeContainers(self, honour_ignore_removed)

    def close(self) -> None:
        self.closed = True


def backend_with(engine: FakeEngine, network: FakeNetwork, started=("worker-0", "worker-1")) -> DockerBackend:
    backend = DockerBackend(DockerOptions(image="unused"))
    backend.client, backend.network, backend.run_id = engine, network, "r1"
    for i, cid in enumerate(started):
        handle = Container(TaskId("worker", i), 0, 100 + i, Path("/dev/null"), Path("/dev/null"),
                           container=FakeContainer(engine, cid), name=f"tfjob-r1-{cid}", exited=threading.Event())
        handle.exited.set()
        backend._containers.append(handle)
    return backend


@pytest.mark.parametrize("honour", [True, False], ids=["sdk-ignore-removed", "notfound-escapes-every-listing"])
def test_close_survives_a_container_removed_while_listing_and_still_removes_the_network(honour):
    engine = FakeEngine({"worker-0", "worker-1"}, vanish_on_list={"worker-0"}, honour_ignore_removed=honour)
    network = FakeNetwork()
    backend = backend_with(engine, network)
    backend.close()  # must not raise
    assert network.removed and backend.network is None
    assert engine.closed and backend.client is None
    assert engine.present == set() and engine.removed == ["worker-1"]


def test_close_never_raises_on_an_unexpected_engine_error(caplog):
    engine = FakeEngine({"worker-0"})
    backend = backend_with(engine, FakeNetwork(error=ConnectionError("engine went away")), started=("worker-0",))
    with caplog.at_level(logging.WARNING, logger="orchestrator.backends.docker"):
        backend.close()
    assert engine.closed and backend.client is None
    assert "engine went away" in caplog.text


def test_listing_skips_containers_removed_meanwhile():
    from orchestrator.backends.docker import list_containers

    engine = FakeEngine({"a", "b", "c"}, vanish_on_list={"b"})
    assert [c.id for c in list_containers(engine, {"label": f"{LABEL_RUN}=r1"})] == ["a", "c"]
