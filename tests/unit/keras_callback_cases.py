"""The tf-keras callback of ``orchestrator.client``, driven directly (imports tf_keras, no strategy,
no orchestrator: what it reports is captured).

Run in a process of its own by ``test_keras_callback.py``: TensorFlow loaded into the unit-test
process breaks later tests (grpc_tools' protoc segfaults beside TensorFlow's protobuf).
"""

from __future__ import annotations

import pytest

pytest.importorskip("tf_keras")

from orchestrator.task import reporting  # noqa: E402


@pytest.fixture
def reports(monkeypatch):
    """Every report of the callback, as (kind, fields)."""
    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(reporting, "report", lambda **kw: calls.append(("report", kw)))
    monkeypatch.setattr(reporting, "training_finished", lambda **kw: calls.append(("finished", kw)))
    return calls


def callback(params: dict, **options):
    from orchestrator.client import keras_callback

    cb = keras_callback(interval_s=0.0, **options)
    cb.set_params(params)
    return cb


def run_fit(cb, epochs: int, batches: list[int], logs=None) -> None:
    """What ``Model.fit`` calls: ``batches`` are the indices passed to on_train_batch_end per epoch
    (the last batch of each execution); on_train_batch_begin gets the first one."""
    cb.on_train_begin()
    for epoch in range(epochs):
        cb.on_epoch_begin(epoch)
        first = 0
        for batch in batches:
            cb.on_train_batch_begin(first)
            cb.on_train_batch_end(batch, {"loss": 0.5})
            first = batch + 1
        cb.on_epoch_end(epoch, {"loss": 0.4, "accuracy": 0.8})
    cb.on_train_end(logs or {"loss": 0.3, "accuracy": 0.9})


def test_steps_are_counted_without_steps_per_epoch(reports):
    cb = callback({"epochs": 2, "steps": None, "verbose": 0})  # a dataset of unknown cardinality
    run_fit(cb, 2, list(range(87)))
    epoch_ends = [kw for kind, kw in reports if kind == "report" and kw.get("epoch")]
    assert [(kw["epoch"], kw["step"]) for kw in epoch_ends] == [(1, 87), (2, 174)]
    kind, final = reports[-1]
    assert kind == "finished" and final["step"] == 174


def test_steps_per_execution_jumps_are_counted(reports):
    # steps_per_execution=4: fit passes the index of the last batch of each execution, 10 per epoch
    cb = callback({"epochs": 2, "steps": 10, "verbose": 0})
    run_fit(cb, 2, [3, 7, 9])
    steps = [kw["step"] for kind, kw in reports if kind == "report"]
    assert steps == [0, 4, 8, 10, 10, 14, 18, 20, 20]
    assert reports[-1] == ("finished", {"step": 20, "loss": 0.3, "accuracy": 0.9})


def test_training_begins_at_step_0_at_once_and_ends_finishing(reports):
    cb = callback({"epochs": 1, "steps": 5, "verbose": 0})
    cb.on_train_begin()
    assert reports == [("report", {"step": 0})]  # phase training, before the first step
    cb.on_epoch_begin(0)
    cb.on_train_batch_end(4, {"loss": 0.5})
    cb.on_epoch_end(0, {"loss": 0.5})
    cb.on_train_end({"loss": 0.5})
    assert reports[-1][0] == "finished" and reports[-1][1]["step"] == 5


def test_a_resumed_fit_counts_from_its_initial_epoch(reports):
    cb = callback({"epochs": 3, "steps": 10, "verbose": 0})
    cb.on_train_begin()
    cb.on_epoch_begin(2)  # BackupAndRestore resumed after 2 epochs
    cb.on_train_batch_begin(0)
    cb.on_train_batch_end(0, {"loss": 0.5})
    assert reports[1] == ("report", {"step": 20, "resumed_from_step": 20})
    assert reports[-1][1]["step"] == 21


def test_a_fit_resumed_inside_an_epoch_reports_the_step_it_really_resumed_at(reports):
    # BackupAndRestore(save_freq=10), 25 steps per epoch: the backup after step 30 resumes fit in
    # epoch 1 at batch index 5 (fit passes it to on_train_batch_begin), not at the boundary, 25
    cb = callback({"epochs": 4, "steps": 25, "verbose": 0})
    cb.on_train_begin()
    cb.on_epoch_begin(1)
    cb.on_train_batch_begin(5)
    cb.on_train_batch_end(5, {"loss": 0.5})
    resumed = [kw for kind, kw in reports if kind == "report" and "resumed_from_step" in kw]
    assert resumed == [{"step": 30, "resumed_from_step": 30}]
    assert reports[-1][1]["step"] == 31
    for batch in range(6, 25):
        cb.on_train_batch_begin(batch)
        cb.on_train_batch_end(batch, {"loss": 0.5})
    cb.on_epoch_end(1, {"loss": 0.4})
    assert reports[-1][1]["step"] == 50 and reports[-1][1]["epoch"] == 2


def test_training_begins_with_what_the_strategy_formed_and_the_global_batch(reports):
    import tensorflow as tf
    import tf_keras as keras

    model = keras.Sequential([keras.layers.Input((2,)), keras.layers.Dense(1)])  # the default strategy
    cb = callback({"epochs": 1, "steps": 4, "verbose": 0}, batch_size=64)
    cb.set_model(model)
    cb.on_train_begin()
    # no cluster resolver: replicas only (under MWMS, 1 replica of 2 planned workers is a mismatch)
    assert reports[0] == ("report", {"step": 0, "replicas_in_sync": 1, "global_batch_size": 64})
    from orchestrator.task.formed import strategy_facts

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # no TF_CONFIG: a cluster of this process alone
    assert strategy_facts(strategy) == {"replicas_in_sync": 1, "cluster_workers": 1}

    class Resolver:  # what ParameterServerStrategy keeps on itself, not on ``extended``
        def cluster_spec(self):
            return tf.train.ClusterSpec({"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]})

    class PssLike:
        num_replicas_in_sync = 1
        cluster_resolver = None
        _cluster_resolver = Resolver()

    assert strategy_facts(PssLike()) == {"replicas_in_sync": 1, "cluster_workers": 3}


def test_throughput_is_examples_per_second_with_a_batch_size_else_steps_per_second(reports):
    cb = callback({"epochs": 1, "steps": None, "verbose": 0}, batch_size=64)
    run_fit(cb, 1, list(range(5)))
    assert any(kw.get("examples_per_second", 0) > 0 for _, kw in reports)
    reports.clear()
    cb = callback({"epochs": 1, "steps": None, "verbose": 0, "batch_size": 32})  # fit with NumPy arrays
    run_fit(cb, 1, list(range(5)))
    assert any(kw.get("examples_per_second", 0) > 0 for _, kw in reports)
    reports.clear()
    cb = callback({"epochs": 1, "steps": None, "verbose": 0})  # a dataset: fit does not know the batch size
    run_fit(cb, 1, list(range(5)))
    rated = [kw for _, kw in reports if "steps_per_second" in kw]
    assert rated and all(kw["steps_per_second"] > 0 and "examples_per_second" not in kw for kw in rated)


def test_injected_step_faults_fire_at_their_step_even_between_reports(monkeypatch):
    monkeypatch.setattr(reporting, "report", lambda **kw: reporting._on_step(kw.get("step")))
    monkeypatch.setattr(reporting, "_faults", None)
    monkeypatch.setenv("ORCH_FAULTS", '[{"task": "worker:0", "kind": "raise", "trigger": "step", "at": 3, '
                                      '"exit_code": 0, "attempt": 0}]')
    monkeypatch.setenv("ORCH_ATTEMPT", "0")
    from orchestrator.client import InjectedFault, keras_callback

    cb = keras_callback(interval_s=3600.0)  # no report is due: the fault still fires at step 3
    cb.set_params({"epochs": 1, "steps": None})
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    cb.on_train_batch_end(0, {})
    cb.on_train_batch_end(1, {})
    with pytest.raises(InjectedFault, match="step=3"):
        cb.on_train_batch_end(2, {})
    monkeypatch.setattr(reporting, "_faults", None)

