"""What a size change of an elastic job means (orchestrator/supervisor/rules/resize.py), as tables:
which slots go and come, the cause, a group restart (MWMS) or park/unpark (PSS), the refusals,
a lost slot, and the grow-back cooldown."""

from __future__ import annotations

import pytest

from orchestrator.supervisor.rules.resize import (
    GREW_BACK,
    RESIZE_ASKED,
    SLOT_LOST,
    SizeChange,
    grow_back_at,
    size_change,
    slot_lost,
)

MWMS, PSS = "multi_worker_mirrored", "parameter_server"


@pytest.mark.parametrize("strategy, active, bounds, target, parked, cause, change", [
    # MWMS shrink: the highest slots go, worker 0 (the chief, the checkpoint writer) stays; the group restarts
    (MWMS, [0, 1], (1, 2), 1, [], RESIZE_ASKED, SizeChange(1, going=(1,), restart_group=True)),
    (MWMS, [0, 1, 2, 3], (2, 4), 2, [], RESIZE_ASKED, SizeChange(2, going=(2, 3), restart_group=True)),
    # MWMS grow: new slots above the highest (the group renumbers anyway)
    (MWMS, [0], (1, 2), 2, [], RESIZE_ASKED, SizeChange(2, coming=(1,), restart_group=True)),
    (MWMS, [0], (1, 3), 2, [], GREW_BACK, SizeChange(2, coming=(1,), cause=GREW_BACK, restart_group=True)),
    # PSS shrink parks the highest; grow unparks the parked ones first, lowest first
    (PSS, [0, 1, 2], (1, 3), 1, [], RESIZE_ASKED, SizeChange(1, going=(1, 2), park=(1, 2))),
    (PSS, [0, 2], (1, 3), 3, [1], RESIZE_ASKED, SizeChange(3, coming=(1,), unpark=(1,))),
    # past the parked ones: a new slot above the highest, which the coordinator's TF_CONFIG lacks: a coordinator
    # with a new TF_CONFIG (a next life at the new size, every slot started), nothing unparked in this life
    (PSS, [0], (1, 4), 3, [2], RESIZE_ASKED, SizeChange(3, coming=(2, 3), restart_group=True)),
    (PSS, [0], (1, 3), 2, [2, 1], GREW_BACK, SizeChange(2, coming=(1,), cause=GREW_BACK, unpark=(1,))),
])
def test_a_resize_asked(strategy, active, bounds, target, parked, cause, change):
    assert size_change(strategy, active, bounds, target=target, parked=parked, cause=cause) == change


@pytest.mark.parametrize("active, parked, started, bounds, target, change", [
    # started below MAX (beside other runs' leases, or `start`): a slot past the started cluster
    ([0], [], 1, (1, 2), 2, SizeChange(2, coming=(1,), restart_group=True)),
    ([0, 1], [], 2, (1, 4), 4, SizeChange(4, coming=(2, 3), restart_group=True)),
    # parked slots are the started cluster's: taken back at their addresses, this life goes on
    ([0], [1], 2, (1, 3), 2, SizeChange(2, coming=(1,), unpark=(1,))),
    ([0, 2], [1], 3, (1, 4), 3, SizeChange(3, coming=(1,), unpark=(1,))),
    # a parked slot and a new one: the new one needs the new coordinator, which starts both
    ([0], [1], 2, (1, 3), 3, SizeChange(3, coming=(1, 2), restart_group=True)),
    # a shrink never needs one
    ([0, 1, 2], [], 3, (1, 3), 2, SizeChange(2, going=(2,), park=(2,))),
])
def test_a_pss_grow_past_the_started_cluster_restarts_the_coordinator(active, parked, started, bounds, target,
                                                                     change):
    assert size_change(PSS, active, bounds, target=target, parked=parked, started=started) == change


@pytest.mark.parametrize("active, parked, started, planned, bounds, target, change", [
    # started below MAX with every slot up to MAX planned (held above the start): the coordinator alone restarts
    ([0], [], 1, 2, (1, 2), 2, SizeChange(2, coming=(1,), restart_coordinator=True)),
    ([0, 1], [], 2, 4, (1, 4), 4, SizeChange(4, coming=(2, 3), restart_coordinator=True)),
    ([0, 1], [], 2, 4, (1, 4), 3, SizeChange(3, coming=(2,), restart_coordinator=True)),
    # a parked slot of the started cluster comes back with a held one: both start, the coordinator restarts
    ([0], [1], 2, 3, (1, 3), 3, SizeChange(3, coming=(1, 2), restart_coordinator=True)),
    # within the started cluster: taken back at its address, no coordinator restart
    ([0], [1], 2, 3, (1, 3), 2, SizeChange(2, coming=(1,), unpark=(1,))),
    # a slot this life did not plan: a next life (every task restarts with the new TF_CONFIG)
    ([0], [], 1, 1, (1, 2), 2, SizeChange(2, coming=(1,), restart_group=True)),
    ([0], [], 1, 2, (1, 3), 3, SizeChange(3, coming=(1, 2), restart_group=True)),
    # a shrink never restarts it
    ([0, 1], [], 2, 3, (1, 3), 1, SizeChange(1, going=(1,), park=(1,))),
])
def test_a_pss_grow_into_slots_held_in_this_life_restarts_the_coordinator_alone(active, parked, started, planned,
                                                                                  bounds, target, change):
    assert size_change(PSS, active, bounds, target=target, parked=parked, started=started, planned=planned) == change


@pytest.mark.parametrize("active, parked, moved, target, change", [
    # a worker parked for its lost node (Slurm) comes back at a new address: a new coordinator
    ([0], [1], [1], 2, SizeChange(2, coming=(1,), restart_group=True)),
    ([0, 2], [1], [1], 3, SizeChange(3, coming=(1,), restart_group=True)),
    # one parked at its address (a lost slot, restarts spent) still comes back in this life
    ([0], [1, 2], [2], 2, SizeChange(2, coming=(1,), unpark=(1,))),
    ([0], [1, 2], [2], 3, SizeChange(3, coming=(1, 2), restart_group=True)),
])
def test_a_pss_worker_parked_for_its_lost_node_comes_back_through_a_new_coordinator(active, parked, moved, target,
                                                                                   change):
    assert size_change(PSS, active, (1, 3), target=target, parked=parked, started=3, moved=moved) == change


def test_a_worker_parked_for_its_lost_node_never_comes_back_into_a_held_slots_coordinator_restart():
    # slot 1 parked for its lost node and slot 2 held: taking both back needs a new address, so a next life
    assert size_change(PSS, [0], (1, 3), target=3, parked=[1], started=2, planned=3, moved=[1]) == \
        SizeChange(3, coming=(1, 2), restart_group=True)


@pytest.mark.parametrize("active, bounds, target, words", [
    ([0, 1], (1, 2), 3, "outside the job's elastic range 1..2"),
    ([0, 1], (2, 4), 1, "outside the job's elastic range 2..4"),
    ([0, 1], (1, 2), 2, "runs at 2 already"),
])
@pytest.mark.parametrize("strategy", [MWMS, PSS])
def test_a_resize_refused_keeps_the_size(strategy, active, bounds, target, words):
    change = size_change(strategy, active, bounds, target=target)
    assert words in change.refusal and change.workers == len(active) and not change.going and not change.coming


@pytest.mark.parametrize("strategy, active, bounds, lost, change", [
    # MWMS: the group restarts one smaller from the last checkpoint; worker 0 stays where it is not the one lost
    (MWMS, [0, 1], (1, 2), 1, SizeChange(1, going=(1,), cause=SLOT_LOST, restart_group=True)),
    (MWMS, [0, 1, 2], (2, 3), 1, SizeChange(2, going=(1,), cause=SLOT_LOST, restart_group=True)),
    # PSS: the lost worker is parked; the others go on
    (PSS, [0, 1, 2], (1, 3), 2, SizeChange(2, going=(2,), cause=SLOT_LOST, park=(2,))),
])
def test_a_slot_lost(strategy, active, bounds, lost, change):
    assert size_change(strategy, active, bounds, lost=lost) == change


@pytest.mark.parametrize("strategy", [MWMS, PSS])
def test_a_loss_below_min_is_refused(strategy):
    change = size_change(strategy, [0, 1], (2, 2), lost=1)
    assert "1 worker(s) remain, fewer than MIN 2" in change.refusal and change.workers == 2


@pytest.mark.parametrize("kinds, stop_requested, lost", [
    (["lose"], False, True),
    (["lose"], True, False),         # the orchestrator stopped it itself first (a group restart, a stop)
    (["kill"], False, False),        # a crash, not a withdrawn slot: restarted in place as before
    ([], False, False),
    (["kill", "lose"], False, True),
])
def test_slot_lost(kinds, stop_requested, lost):
    assert slot_lost(kinds, stop_requested) is lost


@pytest.mark.parametrize("losses, at", [
    ([], None),
    ([100.0], 130.0),                    # one loss: one cooldown
    ([100.0, 140.0], 200.0),             # lost again within the window: two cooldowns
    ([100.0, 140.0, 150.0], 270.0),      # a flapping slot: 4 cooldowns, not a group restart every 30 s
    ([0.0, 1000.0], 1030.0),             # the old loss is outside the window: forgiven
])
def test_grow_back_waits_longer_for_a_flapping_slot(losses, at):
    assert grow_back_at(losses, cooldown_s=30.0, window_s=600.0) == at


def _life(number, workers, cause, last, resumed=None, lost=None):
    from orchestrator.supervisor.records.lives import Life

    size = {"workers": workers, "global_batch_size": 32, "per_replica_batch_size": 32 // workers,
            "learning_rate_factor": 1.0}
    return Life(number, 0.0, cause=cause, last_step=last, resumed_from_step=resumed, steps_lost=lost, size=size)


@pytest.mark.parametrize("lives, causes", [
    # a size change of the running job names the segment the next life begins
    ([_life(1, 2, "resize asked", 60, lost=0), _life(2, 1, "succeeded", 135, 60)], ["launched", "resize asked"]),
    ([_life(1, 2, "slot lost", 60, lost=15), _life(2, 1, "resize asked", 90, 45), _life(3, 2, "succeeded", 135, 90)],
     ["launched", "slot lost", "resize asked"]),
    # a preemption, then launch --resume RUN --workers 1: as before
    ([_life(1, 2, "preempted", 60, lost=0), _life(2, 1, "succeeded", 135, 60)],
     ["launched", "resumed at another size"]),
])
def test_each_segment_names_the_size_change_that_began_it(lives, causes):
    from orchestrator.supervisor.records.lives import segments

    assert [s["cause"] for s in segments(tuple(lives))] == causes


def test_a_lost_slot_life_ends_at_least_at_the_faults_step():
    from orchestrator.supervisor.records.lives import Carried, LifeBook

    book = LifeBook(Carried(), 0.0, 1)
    book.coordinator_beat(0, None, 0.0)  # heartbeats said step 0; the fault fired after step 60
    book.close("Preempted", "slot lost", 1.0, cause=SLOT_LOST, reached=60)
    assert (book.lives()[-1].last_step, book.lives()[-1].cause) == (60, SLOT_LOST)


@pytest.mark.parametrize("workers, elastic, spares", [
    (2, None, 2),          # MWMS: one per trainer, as before
    (1, None, 1),
    (1, (1, 2), 2),        # elastic, running at 1 of 1..2: a grow back to 2 starts in warm spares too
    (2, (1, 2), 2),
    (2, (2, 3), 3),
])
def test_an_elastic_mwms_job_keeps_spares_for_its_group_at_max(tmp_path, workers, elastic, spares):
    from orchestrator.plan import make_plan
    from orchestrator.spec import JobSpec
    from orchestrator.spec.elastic import ElasticSpec
    from orchestrator.spec.model import TrainingSpec
    from orchestrator.supervisor.rules.spares import spare_request

    spec = JobSpec.create(workers=workers, elastic=ElasticSpec(*elastic) if elastic else None,
                          training=TrainingSpec(batch_size_per_replica=12))  # a global batch every size divides
    addresses = {t: f"127.0.0.1:{30000 + i}" for i, t in enumerate(spec.tasks())}
    plan = make_plan(spec, addresses, run_id="t", run_dir=tmp_path, health_address="127.0.0.1:1", token="x", cores=2)
    request = spare_request(plan)
    assert request is not None and request.count == spares
