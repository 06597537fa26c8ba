"""Elastic workers (issue 34, first slice): ``--workers MIN:MAX`` and its batch policies, as tables
over the pure rules of :mod:`orchestrator.spec.elastic` (parse the flag, the batch facts at a size,
the sizes keep-global allows, the one-line refusals), then through the spec loader and the resume
check (``launch --resume RUN --workers N``)."""

from __future__ import annotations

import argparse

import pytest

from orchestrator.errors import SpecError
from orchestrator.resume import resumed_spec
from orchestrator.spec.elastic import BatchFacts, ElasticSpec, batch_facts, facts_at, parse_workers, valid_sizes
from orchestrator.spec.fields import spec_fields
from orchestrator.spec.loader import build_spec, overrides_from_flags

MWMS, PSS = "multi_worker_mirrored", "parameter_server"


@pytest.mark.parametrize("text, parsed", [
    ("4", 4), (3, 3), ("2:4", {"min": 2, "max": 4}), (" 1 : 2 ", {"min": 1, "max": 2}), (None, None),
])
def test_the_workers_flag_is_a_count_or_a_range(text, parsed):
    assert parse_workers(text) == parsed


@pytest.mark.parametrize("text", ["2-4", "a:b", "1:", "-1", "2:4:6"])
def test_any_other_workers_text_is_refused_naming_the_field(text):
    with pytest.raises(SpecError) as exc:
        parse_workers(text)
    assert exc.value.field == "workers" and "MIN:MAX" in str(exc.value)


@pytest.mark.parametrize("policy, scaling, strategy, chief, workers, facts", [
    # keep-global: the global batch of MAX (16 x 2 replicas) at every size, per-replica = global / replicas
    ("keep-global", "none", MWMS, 0, 2, BatchFacts(32, 16, 1.0)),
    ("keep-global", "none", MWMS, 0, 1, BatchFacts(32, 32, 1.0)),
    # a chief holds a replica too: MAX 2 workers + chief = 3 replicas, 48 examples; at 1 worker 2 replicas
    ("keep-global", "none", MWMS, 1, 1, BatchFacts(48, 24, 1.0)),
    # keep-per-replica: the global batch follows the size; linear scales the learning rate with it
    ("keep-per-replica", "none", MWMS, 0, 1, BatchFacts(16, 16, 1.0)),
    ("keep-per-replica", "linear", MWMS, 0, 1, BatchFacts(16, 16, 0.5)),
    ("keep-per-replica", "linear", MWMS, 0, 2, BatchFacts(32, 16, 1.0)),
    # PSS: a step runs on one worker whatever their count
    ("keep-global", "none", PSS, 1, 1, BatchFacts(16, 16, 1.0)),
    ("keep-per-replica", "linear", PSS, 1, 1, BatchFacts(16, 16, 1.0)),
])
def test_the_batch_facts_at_a_size(policy, scaling, strategy, chief, workers, facts):
    assert facts_at(ElasticSpec(1, 2, policy, scaling), strategy, chief, workers, 16) == facts


@pytest.mark.parametrize("bounds, policy, strategy, chief, per_replica, sizes", [
    ((2, 4), "keep-global", MWMS, 0, 16, [2, 4]),       # 64 examples: 3 workers cannot share them
    ((2, 4), "keep-global", MWMS, 0, 12, [2, 3, 4]),    # 48 examples: every size
    ((1, 3), "keep-global", MWMS, 1, 16, [1, 3]),       # 64 over chief + n: 2 and 4 replicas
    ((2, 4), "keep-per-replica", MWMS, 0, 16, [2, 3, 4]),
    ((1, 5), "keep-global", PSS, 1, 16, [1, 2, 3, 4, 5]),
])
def test_the_sizes_keep_global_allows(bounds, policy, strategy, chief, per_replica, sizes):
    assert valid_sizes(ElasticSpec(*bounds, policy), strategy, chief, per_replica) == sizes


@pytest.mark.parametrize("raw, field, says", [
    ({"workers": {"min": 2, "max": 4}}, "workers", "valid sizes: 2, 4"),
    ({"workers": {"min": 3, "max": 2}}, "workers", "MIN is larger than MAX"),
    ({"workers": {"min": 0, "max": 2}}, "workers.min", ">= 1"),
    ({"workers": {"max": 2}}, "workers.min", "both bounds"),
    ({"workers": {"min": 1, "max": 2, "start": 3}}, "workers", "outside the job's elastic range 1..2"),
    ({"workers": {"min": 1, "max": 2, "batch_policy": "keep-all"}}, "workers.batch_policy", "unknown batch policy"),
    ({"workers": {"min": 1, "max": 2, "lr_scaling": "sqrt", "batch_policy": "keep-per-replica"}},
     "workers.lr_scaling", "unknown"),
    ({"workers": {"min": 1, "max": 2, "lr_scaling": "linear"}}, "workers.lr_scaling", "keep-global keeps"),
    ({"workers": {"min": 1, "max": 2, "maximum": 3}}, "workers.maximum", "unknown key"),
    ({"strategy": "mirrored", "workers": {"min": 1, "max": 1}}, "workers", "no elastic workers"),
    ({"workers": {"min": 1, "max": 2}, "addresses": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}}, "workers",
     "fixed addresses"),
    # a wide range: the sizes named are cut short, the line stays readable
    ({"workers": {"min": 1, "max": 1000}}, "workers", "3, 6, 7, 9, 11, 12, 13, 14, 15, 17, 18, 19 and "),
    # a cooldown under PSS would be ignored: its jobs do not grow back by themselves
    ({"strategy": "parameter_server", "workers": {"min": 1, "max": 2, "grow_back": 10}}, "workers.grow_back",
     "parameter_server jobs do not grow back by themselves"),
])
def test_bad_elastic_specs_are_refused_in_one_line_naming_the_field(raw, field, says):
    with pytest.raises(SpecError) as exc:
        build_spec(raw)
    assert exc.value.field == field, str(exc.value)
    assert says in str(exc.value) and "\n" not in str(exc.value) and len(str(exc.value)) < 500


def test_a_range_starts_at_max_and_keeps_its_fields_through_plan_json():
    spec = build_spec({"workers": {"min": 1, "max": 2}})
    assert (spec.workers, spec.elastic, spec.global_batch_size) == (2, ElasticSpec(1, 2), 32)
    assert build_spec(spec_fields(spec)) == spec
    plain = build_spec({"workers": 2})
    assert plain.elastic is None and "start" not in str(spec_fields(plain)["workers"])


def _flags(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"workers": None, "batch_policy": None, "lr_scaling": None, **given})


@pytest.mark.parametrize("flags, workers", [
    ({"workers": "1:2"}, {"min": 1, "max": 2}),
    ({"workers": "3"}, 3),
    ({"workers": "1:2", "batch_policy": "keep-per-replica", "lr_scaling": "linear"},
     {"min": 1, "max": 2, "batch_policy": "keep-per-replica", "lr_scaling": "linear"}),
    ({"batch_policy": "keep-per-replica"}, {"batch_policy": "keep-per-replica"}),  # onto a spec file's range
])
def test_the_flags_become_the_workers_field(flags, workers):
    assert overrides_from_flags(_flags(**flags)).get("workers") == workers


def test_a_batch_policy_with_a_plain_count_is_refused():
    with pytest.raises(SpecError) as exc:
        overrides_from_flags(_flags(workers="3", batch_policy="keep-global"))
    assert exc.value.field == "batch-policy"


@pytest.mark.parametrize("raw, flags, field, says", [
    ({}, {"grow_back": "5"}, "grow-back", "plain count: the default"),  # no --workers: the default 4
    ({"workers": 2}, {"batch_policy": "keep-per-replica"}, "batch-policy", "plain count: the spec file's 2"),
])
def test_an_elastic_flag_over_a_plain_count_from_the_file_or_the_default_names_the_flag(raw, flags, field, says):
    with pytest.raises(SpecError) as exc:  # was: workers.min=None, a field the user never wrote
        build_spec(raw, overrides_from_flags(_flags(**flags)))
    assert exc.value.field == field and says in str(exc.value), str(exc.value)


def _plan(**workers) -> dict:
    return {"spec": spec_fields(build_spec({"workers": {"min": 1, "max": 2, **workers}, "training": {"epochs": 3}}))}


@pytest.mark.parametrize("given, workers, global_batch, per_replica", [
    ({"workers": 1}, 1, 32, 32),
    ({"workers": 2}, 2, 32, 16),
    ({}, 2, 32, 16),
])
def test_a_resumed_elastic_run_may_continue_at_another_size_in_its_range(given, workers, global_batch, per_replica):
    spec = resumed_spec(_plan(), given)
    facts = batch_facts(spec)
    assert (spec.workers, facts.global_batch_size, facts.per_replica_batch_size) == (workers, global_batch, per_replica)


@pytest.mark.parametrize("plan, given, field, says", [
    (_plan(), {"workers": 3}, "workers", "outside the job's elastic range 1..2"),
    (_plan(), {"workers": {"min": 1, "max": 3}}, "workers.max", "differs from the resumed run's 2"),
    (_plan(), {"training": {"epochs": 4}}, "training.epochs", "differs"),
    ({"spec": spec_fields(build_spec({"workers": 2}))}, {"workers": 1}, "workers", "differs from the resumed run's 2"),
])
def test_a_resume_at_another_size_is_refused_outside_the_range_or_with_other_flags(plan, given, field, says):
    with pytest.raises(SpecError) as exc:
        resumed_spec(plan, given)
    assert exc.value.field == field and says in str(exc.value), str(exc.value)


@pytest.mark.parametrize("workers, want", [
    ("1:2", {"ORCH_WORKERS_MIN": "1", "ORCH_WORKERS_MAX": "2", "ORCH_BATCH_POLICY": "keep-global",
             "ORCH_GLOBAL_BATCH_SIZE": "32", "ORCH_PER_REPLICA_BATCH_SIZE": "16", "ORCH_LEARNING_RATE_FACTOR": "1.0"}),
    ("2", {}),
])
def test_every_task_of_an_elastic_job_gets_its_batch_facts_a_plain_job_none(workers, want):
    from orchestrator.taskenv import common_env

    spec = build_spec({}, overrides_from_flags(_flags(workers=workers)))
    for training_json in ('{"epochs": 1}', None):  # the built-in program's, a user's program's
        got = common_env(spec, run_id="r", run_dir="/tmp/r", training_json=training_json, threads=None)
        assert {k: v for k, v in got.items() if k in want or "BATCH" in k or "WORKERS_M" in k} == want


def test_a_resumed_elastic_job_at_one_worker_gets_the_same_global_batch_twice_the_per_replica_one():
    from orchestrator.taskenv import elastic_env

    got = elastic_env(resumed_spec(_plan(), {"workers": 1}))
    assert (got["ORCH_GLOBAL_BATCH_SIZE"], got["ORCH_PER_REPLICA_BATCH_SIZE"]) == ("32", "32")


@pytest.mark.parametrize("environ, replicas, per_replica, learning_rate", [
    ({}, 2, 16, 0.005),                                                            # not elastic: as given
    ({"ORCH_GLOBAL_BATCH_SIZE": "32", "ORCH_PER_REPLICA_BATCH_SIZE": "32"}, 1, 32, 0.005),
    ({"ORCH_GLOBAL_BATCH_SIZE": "32", "ORCH_PER_REPLICA_BATCH_SIZE": "16"}, 2, 16, 0.005),
    ({"ORCH_GLOBAL_BATCH_SIZE": "16", "ORCH_LEARNING_RATE_FACTOR": "0.5"}, 1, 16, 0.0025),
    ({"ORCH_GLOBAL_BATCH_SIZE": "32", "ORCH_PER_REPLICA_BATCH_SIZE": "16"}, 3, 16, 0.005),  # cannot split: planned
])
def test_the_built_in_program_trains_with_the_sizes_batch(environ, replicas, per_replica, learning_rate):
    from orchestrator.spec.model import TrainingSpec
    from worker.elastic import elastic_options

    got = elastic_options(TrainingSpec(batch_size_per_replica=16), replicas, environ)
    assert (got.batch_size_per_replica, got.learning_rate) == (per_replica, pytest.approx(learning_rate))


def _life(number, workers, per_replica, *, resumed=None, last=None, lost=None, reported=None, global_batch=32):
    from orchestrator.supervisor.records.lives import Life

    size = {"workers": workers, "global_batch_size": global_batch, "per_replica_batch_size": per_replica,
            "learning_rate_factor": 1.0}
    return Life(number, 0.0, resumed_from_step=resumed, last_step=last, steps_lost=lost, global_batch_size=reported,
                size=size)


@pytest.mark.parametrize("lives, want", [
    # one size, one life
    ((_life(1, 2, 16, last=135),), [(2, 16, 0, 135, "launched", None, [1])]),
    # preempted at 70 (saved: 0 lost), resumed at 1 worker: two segments, the second from the saved step
    ((_life(1, 2, 16, last=70, lost=0), _life(2, 1, 32, resumed=70, last=135)),
     [(2, 16, 0, 70, "launched", 0, [1]), (1, 32, 70, 135, "resumed at another size", None, [2])]),
    # the last steps saved before they were reported: the segment ends at the step the next resumed from
    ((_life(1, 2, 16, last=45, lost=0), _life(2, 1, 32, resumed=47, last=135)),
     [(2, 16, 0, 47, "launched", 0, [1]), (1, 32, 47, 135, "resumed at another size", None, [2])]),
    # keep-per-replica: saved at 85 at 32 examples a step, resumed at 1 worker (16 a step) at step 170: the first
    # segment ends at 85 (its own steps), not at 170
    ((_life(1, 2, 16, last=84, lost=0), _life(2, 1, 16, resumed=170, last=1080, global_batch=16)),
     [(2, 16, 0, 85, "launched", 0, [1]), (1, 16, 170, 1080, "resumed at another size", None, [2])]),
    # killed at 75, resumed at the same size from 70: one segment of two lives, 5 steps lost
    ((_life(1, 2, 16, last=75, lost=5), _life(2, 2, 16, resumed=70, last=135)),
     [(2, 16, 0, 135, "launched", 5, [1, 2])]),
    # a slot lost at 60 (checkpoint 45), then resized twice before either new group trained a step:
    # those two segments trained nothing, from the checkpoint the last one resumed from
    ((_life(1, 2, 16, last=60, lost=15), _life(2, 1, 32), _life(3, 2, 16), _life(4, 1, 32, resumed=45, last=270)),
     [(2, 16, 0, 60, "launched", 15, [1]), (1, 32, 45, 45, "resumed at another size", 0, [2]),
      (2, 16, 45, 45, "resumed at another size", 0, [3]), (1, 32, 45, 270, "resumed at another size", None, [4])]),
    # resized at 180 (saved at 199), resized again before the new group's first step
    ((_life(1, 2, 16, last=180, lost=0), _life(2, 1, 32), _life(3, 2, 16, resumed=199, last=900)),
     [(2, 16, 0, 199, "launched", 0, [1]), (1, 32, 199, 199, "resumed at another size", 0, [2]),
      (2, 16, 199, 900, "resumed at another size", None, [3])]),
    # resized at 135 (saved at 152), stopped before the new group's first step, resumed at that size:
    # one segment of lives 2 and 3, from the step life 3 resumed from
    ((_life(1, 2, 16, last=135, lost=0), _life(2, 1, 32), _life(3, 1, 32, resumed=152, last=900)),
     [(2, 16, 0, 152, "launched", 0, [1]), (1, 32, 152, 900, "resumed at another size", None, [2, 3])]),
])
def test_segments_are_one_per_size_the_run_trained_at(lives, want):
    from orchestrator.supervisor.records.lives import segments

    got = [(g["workers"], g["per_replica_batch_size"], g["first_step"], g["last_step"], g["cause"], g["steps_lost"],
            g["lives"]) for g in segments(lives)]
    assert got == want


def test_the_title_shows_the_size_now_against_the_range():
    from orchestrator.report.status import title

    status = {"run_id": "r", "strategy": MWMS, "status": "Running", "elapsed_s": 1.0, "global_batch_size": 32,
              "elastic": {"min": 1, "max": 2, "workers": 1, "batch_policy": "keep-global", "lr_scaling": "none"}}
    assert title(status).endswith("global batch 32 · workers 1 of 1..2")


@pytest.mark.parametrize("workers, gpus, placed, warned", [
    ("1:4", 4, 4, False),    # MAX fits: the job starts there
    ("1:4", 2, 2, True),     # 2 GPUs, 1 per worker: the largest size that can be placed
    ("2:4", 3, 3, True),
    ("3:4", 2, None, None),  # not even MIN fits: refused as a fixed count would be
    ("2", 1, None, None),    # a fixed count is never shrunk
])
def test_elastic_workers_start_at_the_largest_size_the_gpus_asked_allow(workers, gpus, placed, warned):
    from orchestrator.resources.gpus import Gpu, Inventory
    from orchestrator.resources.placement import place_elastic

    inventory = Inventory(tuple(Gpu(i, f"GPU-{i}", "Fake L4", 24 << 30) for i in range(gpus)), "fake", "fake:test")
    spec = build_spec({"training": {"batch_size_per_replica": 12}},  # global 48: every size in 1..4 divides it
                      {**overrides_from_flags(_flags(workers=workers)), "gpus_per_task": 1})
    if placed is None:
        with pytest.raises(SpecError) as exc:
            place_elastic(spec, inventory)
        assert exc.value.field == "gpus-per-task"
        return
    got, placement = place_elastic(spec, inventory)
    assert got.workers == placed and len(got.tasks()) == placed
    assert any("the job starts at" in w for w in placement.warnings) == warned


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_keep_per_replica_run_may_resume_at_another_size_its_step_converted_by_the_program(loop):
    plan = {"spec": spec_fields(build_spec({"workers": {"min": 1, "max": 2, "batch_policy": "keep-per-replica"},
                                            "training": {"epochs": 3, "loop": loop}}))}
    spec = resumed_spec(plan, {"workers": 1})
    assert (spec.workers, spec.global_batch_size, spec.training.loop) == (1, 16, loop)


@pytest.mark.parametrize("epoch, batch, before, now, want", [
    (1, 1, (32, 45), (16, 90), (1, 3)),     # step 47 at 32 = 1504 examples = step 94 at 16: epoch 1, batch 3 done
    (1, 3, (16, 90), (32, 45), (1, 1)),     # and back: step 94 at 16 = step 47 at 32
    (1, 4, (16, 90), (32, 45), (1, 1)),     # step 95 at 16: half a step at 32, trained again
    (0, 44, (32, 45), (16, 90), (0, 89)),   # an epoch's end stays an epoch's end
    (0, 0, (16, 90), (32, 45), (0, -1)),    # half a step at the bigger batch: none done, from the start
    (2, 10, (32, 45), (32, 45), (2, 10)),   # the same batch: the same index
])
def test_a_checkpoint_index_converts_through_the_examples_seen(epoch, batch, before, now, want):
    from worker.elastic import converted_position

    assert converted_position(epoch, batch, before, now) == want


@pytest.mark.parametrize("step, saved, now, want", [
    (47, 32, 16, 94),    # 1504 examples: step 94 at 16
    (95, 16, 32, 47),    # half a step at 32: trained again
    (1, 16, 32, 0),      # less than a step at the bigger batch: from the start
    (47, 32, 32, 47),    # the same batch (keep-global): the same step
    (47, 0, 16, 47),     # a checkpoint that does not say its batch: as restored
])
def test_the_custom_loops_step_converts_through_the_examples_seen(step, saved, now, want):
    from worker.elastic import converted_step

    assert converted_step(step, saved, now) == want


@pytest.mark.parametrize("elastic, want", [
    ({"min": 1, "max": 2, "workers": 1, "batch_policy": "keep-global", "lr_scaling": "none"},
     {"tfjob_workers": 1.0, "tfjob_workers_min": 1.0, "tfjob_workers_max": 2.0}),
    (None, {}),
])
def test_metrics_show_the_size_now_against_the_range(elastic, want):
    from orchestrator.web.metrics import job_metrics

    status = {"run_id": "r", "strategy": MWMS, "status": "Running", "live": True, "elastic": elastic, "tasks": []}
    got = {s.name: s.value for m in job_metrics(status) for s in m.samples if s.name.startswith("tfjob_workers")}
    assert got == want


@pytest.mark.parametrize("before, now, warned", [
    ((2, 32, 32), (1, 16, 16), False),  # keep-per-replica at another size: planned
    ((2, 32, 32), (2, 48, 32), True),   # the same size, another batch than planned (a user's program)
    ((2, 32, 32), (1, 24, 16), True),   # reported 24 where 16 was planned
])
def test_a_global_batch_change_warns_unless_a_size_change_planned_it(before, now, warned):
    from orchestrator.supervisor.records.lives import Carried, Life, LifeBook

    def life(number, workers, reported, planned):
        return Life(number, 0.0, global_batch_size=reported, size={"workers": workers, "global_batch_size": planned})

    book = LifeBook(Carried(lives=(life(1, *before),)), 0.0, 1)
    book.life = life(2, now[0], None, now[2])
    book.coordinator_beat(1, None, 0.0, global_batch_size=now[1])
    assert bool(book.take_warnings()) == warned


def _ended(cause, last):
    from orchestrator.supervisor.records.lives import Life

    return Life(1, 0.0, ended="Preempted", cause=cause, last_step=last)


@pytest.mark.parametrize("earlier, continued", [
    ((), None),  # a fresh start
    ((_ended("resize asked", 53),), 53),  # the coordinated save of a resize: every trainer saved at 53
    ((_ended("grew back", 90),), 90),
    ((_ended("slot lost", 60),), None),  # the last checkpoint: only the tasks know which
    ((_ended("node lost", 60),), None),
    ((_ended("preempted", 60),), None),  # from outside: launch --resume reads what the tasks saved
    ((_ended("resize asked", None),), None),  # it never reported a step
])
def test_the_step_a_life_continues_from_is_known_after_a_planned_size_change(earlier, continued):
    from orchestrator.supervisor.records.lives import continued_from

    assert continued_from(earlier) == continued


@pytest.mark.parametrize("reported, reached, continued, last", [
    (None, None, None, None),  # nothing known
    (None, None, 53, 53),  # stopped (a Ctrl-C between two lives) before its first report: where it continued from
    (0, None, 53, 53),  # still saying a step from before its restore
    (120, None, 53, 120),  # it trained on
    (55, 60, None, 60),  # a lose fault fired at 60, reported up to 55
    (70, 60, None, 70),
])
def test_a_lifes_last_step_is_the_largest_it_is_known_to_have_reached(reported, reached, continued, last):
    from orchestrator.supervisor.records.lives import life_last_step

    assert life_last_step(reported, reached, continued) == last


def test_a_life_stopped_before_its_first_report_records_the_step_it_continued_from():
    from orchestrator.supervisor.records.lives import Carried, LifeBook

    book = LifeBook(Carried(lives=(_ended("resize asked", 53),)), 0.0, 1)
    book.close("Interrupted", None, ended_at=1.0)
    life = book.lives()[-1]
    assert (life.ended, life.resumed_from_step, life.last_step) == ("Interrupted", 53, 53)
    assert book.lives()[0].steps_lost == 0  # the resize's save covered every step
