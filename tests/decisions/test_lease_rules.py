"""What a run may lease beside the other runs of its machine (issue 36): a table over the pure rule
:func:`orchestrator.resources.leases.decide` (cores, GPUs idle first, busy ones warned, all or
nothing, ps / evaluator / PSS chief leasing none, MIG instances), then the fake inventory read
from its file (two busy GPUs, a GPU in MIG mode)."""

from __future__ import annotations

import json

import pytest

from orchestrator.resources import gpus
from orchestrator.resources.gpus import Gpu, GpuUsage, Inventory
from orchestrator.resources.leases import Holder, decide
from orchestrator.spec.model import JobSpec

GIB = 2**30


def node(n: int) -> Inventory:
    return Inventory(tuple(Gpu(i, f"GPU-{i}", "Fake L4", 24 * GIB) for i in range(n)), "fake", "fake:test")


def mig_node() -> Inventory:  # GPU 0 in MIG mode (three 1g.10gb instances), GPU 1 whole
    return Inventory((*(Gpu(0, f"MIG-0-{j}", "Fake A100 MIG 1g.10gb", 10 * GIB, "GPU-0") for j in range(3)),
                      Gpu(1, "GPU-1", "Fake A100", 40 * GIB)), "fake", "fake:test")


def usage(uuid: str, percent: float = 0.0, used_gib: float = 0.0) -> GpuUsage:
    return GpuUsage(uuid, int(uuid.split("-")[1]), percent, int(used_gib * GIB), 24 * GIB)


BUSY = {u.uuid: u for u in (usage("GPU-1", 99.0, 23.0), usage("GPU-2", 0.0, 20.0), usage("GPU-0"), usage("GPU-3"))}


def run(name: str, pid: int, cores=(), gpus=(), waiting: str = "") -> Holder:
    return Holder(name, pid, 1.0, tuple(cores), tuple(gpus), waiting)


def devices(decision) -> dict[str, list[str]]:
    return {t.name: [g.uuid for g in p.devices] for t, p in decision.placement.tasks.items()} if decision.placement \
        else {}


@pytest.mark.parametrize("fields, allowed, others, granted, cores, leased", [
    # alone: --threads-per-task N takes N cores per training task; without, every free core
    ({"workers": 1, "threads_per_task": 1}, [0, 1], [], True, (0,), (0,)),
    ({"workers": 1}, [0, 1], [], True, (0, 1), (0, 1)),
    ({"workers": 2}, [0, 1, 2, 3], [], True, (0, 1, 2, 3), (0, 1, 2, 3)),
    # beside a run holding core 0: the other one
    ({"workers": 1, "threads_per_task": 1}, [0, 1], [run("a", 7, [0])], True, (1,), (1,)),
    ({"workers": 1}, [0, 1, 2, 3], [run("a", 7, [0, 1])], True, (2, 3), (2, 3)),
    # a waiting run holds nothing
    ({"workers": 1, "threads_per_task": 1}, [0, 1], [run("w", 9, waiting="cores 0-1")], True, (0,), (0,)),
    # too few free: wait, naming what is held and by whom
    ({"workers": 1}, [0, 1], [run("a", 7, [0]), run("b", 8, [1])], False,
     "cores 0-1, held by run a (pid 7), run b (pid 8)", ()),
    ({"workers": 2}, [0, 1, 2], [run("a", 7, [1, 2])], False, "cores 1-2, held by run a (pid 7)", ()),
    # --no-pin, or fewer cores than training tasks (nothing is pinned): no core is leased, none waited for
    ({"workers": 1, "pin_cpus": False}, [0, 1], [run("a", 7, [0, 1])], True, None, ()),
    ({"workers": 4}, [0, 1], [run("a", 7, [0, 1])], True, None, ()),
    # PSS: the chief and the ps are kept one core (the service core), leased with the workers'
    ({"strategy": "parameter_server", "workers": 2, "ps": 1, "threads_per_task": 1}, [0, 1, 2, 3, 4], [], True,
     (0, 1, 2), (0, 1, 2)),
])
def test_cores(fields, allowed, others, granted, cores, leased):
    d = decide(JobSpec.create(**fields), allowed, None, {}, others)
    assert d.granted is granted
    if granted:
        assert (d.cores, d.leased_cores) == (cores, leased)
    else:
        assert d.waiting == cores and d.cores is None


@pytest.mark.parametrize("fields, inventory, use, others, expected, warned", [
    # two busy GPUs (1: 99 % used; 2: 20 of 24 GiB used by someone else): the idle ones are dealt first
    ({"workers": 2, "gpus_per_task": {"worker": 1}}, node(4), BUSY, [],
     {"worker-0": ["GPU-0"], "worker-1": ["GPU-3"]}, []),
    # more than the idle ones: the least busy of the busy ones too, with a warning naming it
    ({"workers": 3, "gpus_per_task": {"worker": 1}}, node(4), BUSY, [],
     {"worker-0": ["GPU-0"], "worker-1": ["GPU-3"], "worker-2": ["GPU-2"]},
     ["GPU 2 (GPU-2) is busy: 0 % utilised, 20.0"]),
    # the default even split over the devices no other run leases
    ({"workers": 2}, node(4), {}, [run("a", 7, gpus=["GPU-0", "GPU-1"])],
     {"worker-0": ["GPU-2"], "worker-1": ["GPU-3"]}, []),
    # ps, evaluator and a PSS chief lease none
    ({"strategy": "parameter_server", "workers": 2, "ps": 1, "evaluator": 1}, node(2), {}, [],
     {"chief-0": [], "worker-0": ["GPU-0"], "worker-1": ["GPU-1"], "ps-0": [], "evaluator-0": []}, []),
    # MIG: the instances are dealt by their MIG- UUIDs, not the parent GPU
    ({"workers": 2, "gpus_per_task": {"worker": 1}}, mig_node(), {}, [],
     {"worker-0": ["MIG-0-0"], "worker-1": ["MIG-0-1"]}, []),
    ({"workers": 2, "gpus_per_task": {"worker": 1}}, mig_node(), {}, [run("a", 7, gpus=["MIG-0-0", "MIG-0-1"])],
     {"worker-0": ["MIG-0-2"], "worker-1": ["GPU-1"]}, []),
])
def test_gpus(fields, inventory, use, others, expected, warned):
    d = decide(JobSpec.create(**fields), [0, 1], inventory, use, others, host_cpus=False)
    assert d.granted and devices(d) == expected
    assert d.leased_gpus == tuple(u for us in expected.values() for u in us)
    assert len(d.warnings) == len(warned) and all(w.startswith(p) for w, p in zip(d.warnings, warned))
    assert d.placement.warnings[-len(warned):] == d.warnings if warned else True


@pytest.mark.parametrize("fields, others, waiting", [
    # an MWMS group is leased all or nothing: 2 asked, 1 free -> none held, it waits
    ({"workers": 2, "gpus_per_task": {"worker": 1}}, [run("a", 7, gpus=["GPU-0", "GPU-1", "GPU-2"])],
     "GPUs 0 (GPU-0), 1 (GPU-1), 2 (GPU-2), held by run a (pid 7)"),
    # the even split that would give each worker a GPU alone waits for one rather than run without
    ({"workers": 2}, [run("a", 7, gpus=["GPU-0", "GPU-1", "GPU-2", "GPU-3"])],
     "GPUs 0 (GPU-0), 1 (GPU-1), 2 (GPU-2), 3 (GPU-3), held by run a (pid 7)"),
    # both at once: cores and GPUs
    ({"workers": 1, "gpus_per_task": {"worker": 1}},
     [run("a", 7, cores=[0, 1], gpus=["GPU-0", "GPU-1", "GPU-2", "GPU-3"])],
     "cores 0-1, held by run a (pid 7); GPUs 0 (GPU-0), 1 (GPU-1), 2 (GPU-2), 3 (GPU-3), held by run a (pid 7)"),
])
def test_waits_all_or_nothing(fields, others, waiting):
    d = decide(JobSpec.create(**fields), [0, 1], node(4), {}, others)
    assert not d.granted and d.waiting == waiting and d.leased_gpus == () and d.leased_cores == ()


def test_the_fake_inventory_with_two_busy_gpus_and_with_mig(tmp_path, monkeypatch):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps([
        {"uuid": "GPU-a", "name": "Fake L4", "memory_total_bytes": 24 * GIB},
        {"uuid": "GPU-b", "name": "Fake L4", "memory_total_bytes": 24 * GIB, "utilization_percent": 97.0,
         "memory_used_bytes": 23 * GIB},
        {"uuid": "GPU-c", "name": "Fake L4", "memory_total_bytes": 24 * GIB, "utilization_percent": 61.0},
        {"uuid": "GPU-d", "name": "Fake A100", "memory_total_bytes": 40 * GIB, "mig": [
            {"uuid": "MIG-d0", "name": "Fake A100 MIG 3g.20gb", "memory_total_bytes": 20 * GIB},
            {"uuid": "MIG-d1", "memory_total_bytes": 20 * GIB, "memory_used_bytes": 19 * GIB}]},
    ]))
    monkeypatch.setenv(gpus.FAKE_ENV, str(path))
    inventory = gpus.discover()
    assert [(g.index, g.uuid, g.parent) for g in inventory.gpus] == [
        (0, "GPU-a", ""), (1, "GPU-b", ""), (2, "GPU-c", ""), (3, "MIG-d0", "GPU-d"), (3, "MIG-d1", "GPU-d")]
    use = {u.uuid: u for u in gpus.sample(g.uuid for g in inventory.gpus)}
    assert use["MIG-d1"].memory_used_bytes == 19 * GIB and use["GPU-b"].utilization_percent == 97.0
    d = decide(JobSpec.create(workers=3, gpus_per_task={"worker": 1}), [0], inventory, use, [], host_cpus=False)
    assert devices(d) == {"worker-0": ["GPU-a"], "worker-1": ["MIG-d0"], "worker-2": ["MIG-d1"]}  # the least busy next
    assert len(d.warnings) == 1 and d.warnings[0].startswith("GPU 3 (MIG-d1) is busy: 0 % utilised, 19.0 of 20.0 GiB")
    env = d.placement.env(next(iter(d.placement.tasks)))
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a"
    assert gpus.uuids_in("MIG-d0,GPU-a") == ("MIG-d0", "GPU-a")
    assert [g.uuid for g in gpus.visible("MIG-d1", inventory)] == ["MIG-d1"]
