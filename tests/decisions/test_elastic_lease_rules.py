"""Elastic workers beside the other runs of the machine (issue 34 item 1: "the job starts at MAX where
the backend can place MAX, else at what it can place if that is at least MIN"): a table over the pure
rule :func:`orchestrator.resources.leases.decide_sized` with a fake inventory and ledger (no GPU, no
file): the largest size in MIN..MAX that the free cores and GPUs hold, with the warning line the
GPU-placement path prints; waiting only when not even MIN fits; a fixed count waits as before."""

from __future__ import annotations

import pytest

from orchestrator.resources.elastic import sizes_to_try
from orchestrator.resources.gpus import Gpu, Inventory
from orchestrator.resources.leases import Holder, decide_sized
from orchestrator.spec.loader import build_spec

GIB = 2**30


def node(n: int) -> Inventory:
    return Inventory(tuple(Gpu(i, f"GPU-{i}", "Fake L4", 24 * GIB) for i in range(n)), "fake", "fake:test")


def run(name: str, pid: int, cores=(), gpus=(), waiting: str = "", since: float = 0.0) -> Holder:
    return Holder(name, pid, 1.0, tuple(cores), tuple(gpus), waiting, since=since)


def spec(workers, **fields):
    return build_spec({"training": {"batch_size_per_replica": 12}, "workers": workers, **fields}, {})  # global 48


GPU_EACH = {"gpus_per_task": {"worker": 1}}
NOTE = ("elastic workers: 4 cannot be placed (GPUs {held}, held by run a (pid 7)); the job starts at {n} "
        "(its range 2..4)")


@pytest.mark.parametrize("workers, fields, allowed, others, granted, size, warning", [
    # GPUs (one per worker, 4 on the node, --no-pin: GPUs only): MAX when free ...
    ({"min": 2, "max": 4}, {**GPU_EACH, "pin_cpus": False}, [0, 1], [], True, 4, None),
    # ... else the largest size the free ones hold, the warning naming both sizes and who holds the rest
    ({"min": 2, "max": 4}, {**GPU_EACH, "pin_cpus": False}, [0, 1], [run("a", 7, gpus=["GPU-0"])], True, 3,
     NOTE.format(held="0 (GPU-0)", n=3)),
    ({"min": 2, "max": 4}, {**GPU_EACH, "pin_cpus": False}, [0, 1], [run("a", 7, gpus=["GPU-0", "GPU-1"])], True, 2,
     NOTE.format(held="0 (GPU-0), 1 (GPU-1)", n=2)),
    # not even MIN: it waits (what blocks MIN), as a fixed count does at its size
    ({"min": 2, "max": 4}, {**GPU_EACH, "pin_cpus": False}, [0, 1], [run("a", 7, gpus=["GPU-0", "GPU-1", "GPU-2"])],
     False, 2, "GPUs 0 (GPU-0), 1 (GPU-1), 2 (GPU-2), held by run a (pid 7)"),
    (4, {**GPU_EACH, "pin_cpus": False}, [0, 1], [run("a", 7, gpus=["GPU-0"])], False, 4,
     "GPUs 0 (GPU-0), held by run a (pid 7)"),
    # an earlier waiter's claim is held for it (first come, first served): no overtaking at a smaller size
    ({"min": 2, "max": 4}, {**GPU_EACH, "pin_cpus": False}, [0, 1],
     [run("a", 7, gpus=["GPU-0"]), run("w", 9, gpus=["GPU-0", "GPU-1", "GPU-2", "GPU-3"], waiting="GPUs", since=5.0)],
     False, 2, "GPUs 0 (GPU-0), 1 (GPU-1), 2 (GPU-2), 3 (GPU-3), held by run a (pid 7), first in line: run w (pid 9)"),
    # cores (pinned, no GPU): one core per training task, so beside a run holding 2 of 4 cores, 2 workers
    ({"min": 1, "max": 4}, {}, [0, 1, 2, 3], [run("a", 7, cores=[0, 1])], True, 2,
     "elastic workers: 4 cannot be placed (cores 0-1, held by run a (pid 7)); the job starts at 2 (its range 1..4)"),
    ({"min": 3, "max": 4}, {}, [0, 1, 2, 3], [run("a", 7, cores=[0, 1])], False, 3, "cores 0-1, held by run a (pid 7)"),
])
def test_an_elastic_run_starts_at_the_largest_size_the_free_lease_holds(workers, fields, allowed, others, granted,
                                                                       size, warning):
    asked = spec(workers, **fields)
    inventory = node(4) if "gpus_per_task" in fields else None
    sized, d = decide_sized(asked, allowed, inventory, {}, others, since=10.0)
    assert (d.granted, sized.workers, len(sized.tasks())) == (granted, size, size)
    if not granted:
        assert d.waiting == warning and not d.warnings
        return
    assert [w for w in d.warnings if w.startswith("elastic")] == ([warning] if warning else [])
    if d.placement is not None:  # the devices dealt are the free ones, one per worker of the size started
        assert [g.uuid for t in d.placement.tasks.values() for g in t.devices] == \
            [f"GPU-{i}" for i in range(4) if not any(f"GPU-{i}" in h.gpus for h in others)][:size]
        assert (warning in d.placement.warnings) if warning else not d.placement.warnings  # the plan shows it
    if sized is not asked:
        assert sized.elastic == asked.elastic and sized.global_batch_size == asked.global_batch_size == 48


@pytest.mark.parametrize("workers, tried", [
    ({"min": 2, "max": 4}, [4, 3, 2]),          # keep-global: 48 divides by 2, 3 and 4
    ({"min": 1, "max": 3, "start": 2}, [2, 1]),  # a resumed run's start, then down
    (3, [3]),                                   # a fixed count: its size only
])
def test_the_sizes_tried_are_the_job_s_size_then_down_to_min(workers, tried):
    assert sizes_to_try(spec(workers)) == tried
