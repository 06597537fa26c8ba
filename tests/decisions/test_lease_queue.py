"""Blocks of ports and first come, first served (issue 36): tables over the pure rules
:func:`orchestrator.resources.portblocks.block_size` / :func:`~orchestrator.resources.portblocks.free_block`
and :func:`orchestrator.resources.leases.decide` with waiting runs in line, then a run of the
ledger's transactions with the waiters' polls in the worst order."""

from __future__ import annotations

import pytest

from orchestrator.resources.gpus import Gpu, Inventory
from orchestrator.resources.leases import Holder, ahead, decide
from orchestrator.resources.portblocks import block_size, format_block, free_block
from orchestrator.spec.model import JobSpec

SPAN = (20000, 20064)  # four blocks of 16
ONE = {"workers": 1, "threads_per_task": 1}  # one core
ALL = {"workers": 1}  # every free core


def held(name: str, pid: int, cores=(), gpus=(), ports=None) -> Holder:
    return Holder(name, pid, 1.0, tuple(cores), tuple(gpus), ports=ports)


def waits(name: str, pid: int, since: float, cores=(), gpus=(), ports=None) -> Holder:
    return Holder(name, pid, 1.0, tuple(cores), tuple(gpus), f"something {name} waits for", ports=ports, since=since)


@pytest.mark.parametrize("tasks, size", [(0, 16), (1, 16), (3, 16), (8, 16), (9, 32), (16, 32), (17, 48), (100, 208)])
def test_block_size(tasks, size):
    assert block_size(tasks) == size


@pytest.mark.parametrize("span, size, taken, start, block", [
    (SPAN, 16, [], 0, (20000, 20016)),
    (SPAN, 16, [(20000, 20016)], 0, (20016, 20032)),  # beside another run's
    (SPAN, 16, [], 2, (20032, 20048)),  # from the start drawn
    (SPAN, 16, [(20048, 20064)], 3, (20000, 20016)),  # wrapping around
    (SPAN, 16, [(20010, 20030)], 0, (20032, 20048)),  # overlapping none, even an unaligned one
    (SPAN, 32, [(20016, 20032)], 0, (20032, 20064)),  # a bigger block: aligned, inside the span
    (SPAN, 16, [(20000, 20064)], 1, None),  # all held
    ((20000, 20010), 16, [], 0, None),  # a span smaller than a block
    ((20001, 20040), 16, [], 0, (20016, 20032)),  # aligned starts only
])
def test_free_block(span, size, taken, start, block):
    assert free_block(span, size, taken, start) == block


def test_a_run_leases_a_block_disjoint_from_every_other_runs_and_is_named_with_it():
    d = decide(JobSpec.create(workers=2), [0, 1], None, {}, [held("a", 7, ports=(20000, 20016))], host_cpus=False,
               ports=3, port_span=SPAN)
    assert d.granted and d.ports == (20016, 20032) and format_block(d.ports) == "20016-20031"
    full = [held("a", 7, ports=(20000, 20032)), held("b", 8, ports=(20032, 20064))]
    d = decide(JobSpec.create(workers=2), [0, 1], None, {}, full, host_cpus=False, ports=3, port_span=SPAN)
    assert not d.granted and d.waiting == ("ports 20000-20063 (a block of 16), held by run a (pid 7, ports "
                                           "20000-20031), run b (pid 8, ports 20032-20063)")
    assert d.claims == ((), (), SPAN)  # waiting for ports: it claims them all
    # fixed addresses, docker, slurm: no port of this machine to lease
    assert decide(JobSpec.create(workers=2), [0, 1], None, {}, full, host_cpus=False, port_span=SPAN).ports is None


GPUS = Inventory(tuple(Gpu(i, f"GPU-{i}", "Fake L4", 24 * 2**30) for i in range(2)), "fake", "fake:test")


@pytest.mark.parametrize("fields, allowed, others, since, granted, waiting", [
    # a new run (since inf) is behind a run that waits for the cores it wants
    (ONE, [0, 1], [waits("w", 9, 5.0, cores=[0, 1])], float("inf"), False, "cores 0-1, first in line: run w (pid 9)"),
    # ... and behind it with a holder too: both named
    (ONE, [0, 1], [held("a", 7, [0]), waits("w", 9, 5.0, cores=[0, 1])], 10.0, False,
     "cores 0-1, held by run a (pid 7), first in line: run w (pid 9)"),
    # a run that waited first is not behind a later one
    (ONE, [0, 1], [waits("w", 9, 5.0, cores=[0, 1])], 3.0, True, ""),
    # an equal place is not ahead (no two runs wait for each other)
    (ONE, [0, 1], [waits("w", 9, 5.0, cores=[0, 1])], 5.0, True, ""),
    # what no earlier waiter wants is dealt at once: other cores, or a run that pins none
    (ONE, [0, 1], [waits("w", 9, 5.0, cores=[2, 3])], 10.0, True, ""),
    ({"workers": 1, "pin_cpus": False}, [0, 1], [waits("w", 9, 5.0, cores=[0, 1])], 10.0, True, ""),
    # an earlier waiter's claim of one core (what it is dealt once its GPUs free): the other one
    (ONE, [0, 1], [waits("w", 9, 5.0, cores=[0])], 10.0, True, ""),
    # every free core, without --threads-per-task: those the earlier waiter does not claim
    (ALL, [0, 1, 2, 3], [waits("w", 9, 5.0, cores=[0, 1])], 10.0, True, ""),
    # GPUs claimed by an earlier waiter
    ({"workers": 1, "gpus_per_task": {"worker": 1}}, [0], [waits("w", 9, 5.0, gpus=["GPU-0", "GPU-1"])], 10.0, False,
     "GPUs 0 (GPU-0), 1 (GPU-1), first in line: run w (pid 9)"),
    ({"workers": 1, "gpus_per_task": {"worker": 1}}, [0], [waits("w", 9, 5.0, gpus=["GPU-0"])], 10.0, True, ""),
])
def test_first_come_first_served(fields, allowed, others, since, granted, waiting):
    d = decide(JobSpec.create(**fields), allowed, GPUS, {}, others, host_cpus=True, since=since)
    assert (d.granted, d.waiting) == (granted, waiting)
    if granted and fields.get("pin_cpus", True):
        claimed = {c for h in ahead(others, since) for c in h.cores}
        assert d.leased_cores and not set(d.leased_cores) & claimed  # never what an earlier waiter claims


@pytest.mark.parametrize("fields, others, claims", [
    # waiting for cores: it claims every core it may run on, the GPUs (the even split: both) and the
    # block of ports it would be dealt
    (ONE, [held("a", 7, [0, 1], ports=(20000, 20016))], ((0, 1), ("GPU-0", "GPU-1"), (20016, 20032))),
    # waiting for GPUs: every GPU, and the core it would be dealt
    ({"workers": 1, "threads_per_task": 1, "gpus_per_task": {"worker": 1}}, [held("a", 7, gpus=["GPU-0", "GPU-1"])],
     ((0,), ("GPU-0", "GPU-1"), (20000, 20016))),
])
def test_what_a_waiting_run_claims(fields, others, claims):
    d = decide(JobSpec.create(**fields), [0, 1], GPUS, {}, others, ports=1, port_span=SPAN)
    assert not d.granted and d.claims == claims


def _poll(entries: list[Holder], name: str, pid: int, since: float, fields=ALL) -> bool:
    """One transaction of :func:`orchestrator.resources.leases.acquire`, on a list for the ledger."""
    others = [h for h in entries if h.run_id != name]
    d = decide(JobSpec.create(**fields), [0, 1], None, {}, others, since=since, ports=1, port_span=SPAN)
    if d.granted:
        entries[:] = others + [held(name, pid, d.leased_cores, ports=d.ports)]
    else:
        entries[:] = others + [Holder(name, pid, 1.0, d.claims[0], d.claims[1], d.waiting, ports=d.claims[2],
                                      since=since)]
    return d.granted


def test_the_waiter_that_came_first_starts_first_however_their_polls_interleave():
    entries: list[Holder] = []
    assert _poll(entries, "a", 7, 1.0)  # a takes both cores
    assert not _poll(entries, "w1", 8, 2.0)  # w1 waits first
    assert not _poll(entries, "w2", 9, 3.0)  # then w2
    entries[:] = [h for h in entries if h.run_id != "a"]  # a ends
    assert not _poll(entries, "w2", 9, 3.0)  # w2 polls first: still behind w1
    assert not _poll(entries, "new", 10, 4.0)  # so is a run that just came
    assert _poll(entries, "w1", 8, 2.0)  # w1 gets the cores
    assert not _poll(entries, "w2", 9, 3.0)
    entries[:] = [h for h in entries if h.run_id != "w1"]  # w1 ends
    assert not _poll(entries, "new", 10, 4.0) and _poll(entries, "w2", 9, 3.0)  # w2 next, then the new one
    blocks = [h.ports for h in entries if h.ports and not h.waiting]
    assert len(blocks) == 1
