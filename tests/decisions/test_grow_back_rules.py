"""Grow-back (issue 34 item 3: "grow back when capacity returns, after a cooldown so a flapping node
does not restart the group over and over"), as tables over the pure rules:

* :func:`orchestrator.supervisor.rules.resize.grow_back_to`: the size a job below MAX grows to now;
* :func:`orchestrator.supervisor.growback.withdrawn_slots`: the slots lost and not given back;
* :func:`orchestrator.resources.growroom.room`: the largest size the lease ledger would grant the
  run beside the other runs (its own lease counted as free), with a fake inventory and ledger;
* ``--grow-back on|off|SECONDS`` (spec ``workers.grow_back``) and its one-line refusals.
"""

from __future__ import annotations

import pytest

from orchestrator.errors import SpecError
from orchestrator.resources.gpus import Gpu, Inventory
from orchestrator.resources.growroom import room
from orchestrator.resources.leases import Holder
from orchestrator.spec.loader import build_spec
from orchestrator.supervisor.growback import asked_ceiling, withdrawn_slots
from orchestrator.supervisor.rules.resize import grow_back_to

ALL = [1, 2, 3, 4]


@pytest.mark.parametrize("size, bounds, valid, room_, cooldown, since, withdrawn, losses, target", [
    # room for MAX after the cooldown: MAX
    (2, (1, 4), ALL, 4, 30.0, 30.0, 0, [], 4),
    (2, (1, 4), ALL, 4, 30.0, 120.0, 0, [], 4),
    # the cooldown since the last size change not passed: not now
    (2, (1, 4), ALL, 4, 30.0, 29.9, 0, [], None),
    # --grow-back off; at MAX already
    (2, (1, 4), ALL, 4, None, 1e6, 0, [], None),
    (4, (1, 4), ALL, 4, 30.0, 1e6, 0, [], None),
    # room for part of it: the largest size up to the room; none above the size now: not now
    (1, (1, 4), ALL, 3, 30.0, 60.0, 0, [], 3),
    (2, (1, 4), ALL, 2, 30.0, 60.0, 0, [], None),
    (2, (1, 4), ALL, 1, 30.0, 60.0, 0, [], None),
    (2, (1, 4), ALL, None, 30.0, 60.0, 0, [], None),  # the ledger could not be read: not known
    # the batch policy's sizes only (keep-global 64 at 1..4: 3 does not divide it)
    (2, (1, 4), [1, 2, 4], 3, 30.0, 60.0, 0, [], None),
    (1, (1, 4), [1, 2, 4], 3, 30.0, 60.0, 0, [], 2),
    # room never counts past MAX
    (2, (2, 3), [2, 3], 8, 30.0, 60.0, 0, [], 3),
    # a slot lost and not given back: not grown into
    (1, (1, 2), [1, 2], 2, 30.0, 1e6, 1, [], None),
    # a slot lost once, then given back: the cooldown since the loss (the life since is longer)
    (2, (1, 4), ALL, 4, 30.0, 30.0, 0, [100.0], 4),
    # lost 3 times in the window: 4 cooldowns after the last loss (flapping), even past this life's cooldown
    (2, (1, 4), ALL, 4, 30.0, 60.0, 0, [60.0, 200.0, 300.0], None),
    (2, (1, 4), ALL, 4, 30.0, 120.0, 0, [120.0, 200.0, 300.0], 4),
    # losses older than the window before the last one are forgiven
    (2, (1, 4), ALL, 4, 30.0, 30.0, 0, [30.0, 5000.0, 6000.0], 4),
])
def test_grow_back_to(size, bounds, valid, room_, cooldown, since, withdrawn, losses, target):
    assert grow_back_to(size, bounds, valid, room_, cooldown_s=cooldown, since_change_s=since, withdrawn=withdrawn,
                        losses_ago_s=losses) == target


@pytest.mark.parametrize("changes, withdrawn", [
    ([], 0),
    ([("slot lost", 2, 1)], 1),
    ([("slot lost", 3, 2), ("slot lost", 2, 1)], 2),
    ([("slot lost", 2, 1), ("grew back", 1, 2)], 0),  # `resize` gave it back
    ([("slot lost", 2, 1), ("resize asked", 1, 2)], 0),
    ([("slot lost", 3, 2), ("resize asked", 2, 1)], 1),  # a shrink asked gives nothing back
    ([("slot lost", 2, 1), ("grew back", 1, 2), ("slot lost", 2, 1)], 1),
    ([("preempted", 2, 2), ("resumed at another size", 2, 1)], 0),
    ([("node lost", 2, 1)], 1),  # a Slurm node lost withdraws its slot as a lost slot does
    ([("node lost", 3, 2), ("grew back", 2, 3)], 0),
])
def test_withdrawn_slots(changes, withdrawn):
    assert withdrawn_slots(changes) == withdrawn


@pytest.mark.parametrize("changes, ceiling", [
    ([], 4),
    ([("resize asked", 4, 2)], 2),  # a user shrank it: it stays at 2
    ([("resize asked", 4, 2), ("resize asked", 2, 3)], 3),
    ([("resize asked", 4, 1), ("slot lost", 1, 1), ("grew back", 1, 3)], 3),  # `resize` after a loss: grew back
    ([("slot lost", 4, 3)], 4),
    ([("node lost", 4, 3)], 4),  # a lost node is not a size asked: the ceiling stays MAX
    ([("preempted", 2, 2)], 4),  # preempted, resumed at its size: grows back as before
    ([("preempted", 2, 1)], 1),  # resumed with --workers 1: stays at 1
    ([("orchestrator killed", 4, 2), ("resize asked", 2, 4)], 4),
])
def test_asked_ceiling(changes, ceiling):
    assert asked_ceiling(changes, 4) == ceiling


GIB = 2**30
NODE = Inventory(tuple(Gpu(i, f"GPU-{i}", "Fake L4", 24 * GIB) for i in range(4)), "fake", "fake:test")


def _run(name: str, pid: int, cores=(), gpus=(), waiting: str = "", since: float = 0.0) -> Holder:
    return Holder(name, pid, 1.0, tuple(cores), tuple(gpus), waiting, since=since)


def _spec(workers, **fields):
    return build_spec({"training": {"batch_size_per_replica": 12}, "workers": workers, **fields}, {})  # global 48


GPUS = {"gpus_per_task": {"worker": 1}, "pin_cpus": False}


@pytest.mark.parametrize("workers, fields, allowed, inventory, others, expected", [
    # GPUs: the other run holds 2 of 4: room for 2; it ended: room for MAX; it holds 1: 3
    ({"min": 2, "max": 4, "start": 2}, GPUS, [0, 1], NODE, [_run("a", 7, gpus=["GPU-0", "GPU-1"])], 2),
    ({"min": 2, "max": 4, "start": 2}, GPUS, [0, 1], NODE, [], 4),
    ({"min": 2, "max": 4, "start": 2}, GPUS, [0, 1], NODE, [_run("a", 7, gpus=["GPU-0"])], 3),
    # not even MIN: None
    ({"min": 2, "max": 4, "start": 2}, GPUS, [0, 1], NODE, [_run("a", 7, gpus=["GPU-0", "GPU-1", "GPU-2"])], None),
    # a waiting run is ahead of a grow: what it claims is not grown into
    ({"min": 2, "max": 4, "start": 2}, GPUS, [0, 1], NODE,
     [_run("w", 9, gpus=["GPU-0", "GPU-1"], waiting="GPUs", since=5.0)], 2),
    # cores (pinned, no GPU): one per training task
    ({"min": 1, "max": 4, "start": 1}, {}, [0, 1, 2, 3], None, [_run("a", 7, cores=[0, 1, 2])], 1),
    ({"min": 1, "max": 4, "start": 1}, {}, [0, 1, 2, 3], None, [_run("a", 7, cores=[0])], 3),
    ({"min": 1, "max": 4, "start": 1}, {}, [0, 1, 2, 3], None, [], 4),
    # more GPUs per task than the node has at MAX: that size never fits, the largest that does
    ({"min": 1, "max": 4, "start": 1}, {"gpus_per_task": {"worker": 2}, "pin_cpus": False}, [0], NODE, [], 2),
    # a fixed count: no room to grow into
    (2, GPUS, [0, 1], NODE, [], None),
])
def test_room_is_the_largest_size_the_ledger_would_grant(workers, fields, allowed, inventory, others, expected):
    assert room(_spec(workers, **fields), others, allowed=allowed, inventory=inventory, host_cpus=True) == expected


@pytest.mark.parametrize("given, seconds", [(None, 30.0), ("on", 30.0), ("off", None), (False, None), ("2", 2.0),
                                            (0, 0.0), (12.5, 12.5)])
def test_grow_back_field(given, seconds):
    workers = {"min": 1, "max": 2} if given is None else {"min": 1, "max": 2, "grow_back": given}
    spec = _spec(workers)
    assert spec.elastic is not None and spec.elastic.grow_back_s == seconds
    assert build_spec({"training": {"batch_size_per_replica": 12}, "workers": spec.elastic.to_fields(2)},
                      {}).elastic == spec.elastic  # the plan's spec reads back the same


@pytest.mark.parametrize("given", ["sometimes", "-1", "inf", "nan", ""])
def test_grow_back_refusals_name_the_field_and_the_fix(given):
    with pytest.raises(SpecError) as refused:
        _spec({"min": 1, "max": 2, "grow_back": given})
    assert str(refused.value).startswith(f"workers.grow_back={given!r}: must be on, off or a cooldown in seconds")
    assert "e.g. --grow-back 60, --grow-back off" in str(refused.value)
    assert "\n" not in str(refused.value)
