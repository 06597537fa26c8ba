"""Rehearsals that reach every role (issue 35, item 7): what a fault as asked can test, said at
launch (faults.untestable), which faults the gate hands over (faults.relayed, gate_of), and what
a hand-over answers (faultbox.handover_outcome)."""

from __future__ import annotations

import pytest

from orchestrator.health.faultbox import EARLY, MISSED, TAKEN, WAIT, handover_outcome
from orchestrator.spec.faults import Fault, gate_of, relayed, untestable
from orchestrator.spec.model import TaskId

CHIEF, W0 = TaskId("chief", 0), TaskId("worker", 0)


@pytest.mark.parametrize("text, stepless, user, gate, said", [
    ("worker:1:kill@step=20", False, False, W0, None),           # a trainer reports steps: it fires
    ("ps:0:kill@step=20", True, False, CHIEF, None),             # handed over at the chief's step 20
    ("worker:1:kill@step=20", True, False, CHIEF, None),         # a PSS worker: likewise
    ("evaluator:0:exit=3@step=5", True, False, W0, None),        # the evaluator: from worker 0's step
    ("evaluator:0:hang@step=5", True, False, None, "the job has no trainer"),
    ("ps:0:kill@step=20", True, True, CHIEF, None),             # its wrapper takes it and kills the program
    ("ps:0:hang@step=20", True, True, CHIEF, "cannot hang the program from outside"),
    ("ps:0:kill@time=20", True, False, CHIEF, None),             # time triggers reach every task
    ("ps:0:hang@time=20", True, False, CHIEF, None),             # freezes the ps; a keeper heartbeats
    ("worker:0:hang@time=20", False, False, W0, None),           # freezes the trainer: a stall
    ("ps:0:raise@time=20", True, False, CHIEF, None),            # error file, exit 1
    ("worker:0:hang@time=20", False, True, W0, "cannot hang it"),
    ("worker:0:raise@time=20", False, True, W0, "cannot raise it"),
    ("worker:0:hang@step=20", False, False, W0, None),           # a step hang blocks the training loop itself
    ("worker:0:stop@time=20", False, True, W0, None),
])
def test_untestable(text, stepless, user, gate, said):
    why = untestable(Fault.parse(text), stepless, user, gate)
    if said is None:
        assert why is None
    else:
        assert why is not None and said in why and why.startswith(text.split(",")[0])


@pytest.mark.parametrize("trainers, gate", [
    ([CHIEF], CHIEF),                    # PSS: the chief's step is the job's
    ([CHIEF, W0], CHIEF),                # MWMS with a chief
    ([W0, TaskId("worker", 1)], W0),     # MWMS without one: the first worker
    ([], None),
])
def test_the_gate_is_the_first_trainer(trainers, gate):
    assert gate_of(trainers) == gate


@pytest.mark.parametrize("text, stepless, gate, relay", [
    ("ps:0:kill@step=5", True, CHIEF, "chief:0"),
    ("evaluator:0:hang@step=5,attempt=1", True, W0, "worker:0"),
    ("ps:0:kill@time=5", True, CHIEF, ""),        # a time fault fires on the task itself
    ("worker:1:kill@step=5", False, W0, ""),      # a trainer fires on its own steps
    ("ps:0:kill@step=5", True, None, ""),         # no gate: said at launch
])
def test_step_faults_of_stepless_tasks_are_handed_over_by_the_gate(text, stepless, gate, relay):
    fault = relayed(Fault.parse(text), stepless, gate)
    assert fault.relay == relay
    assert Fault.from_json(fault.to_json()) == fault  # it travels in ORCH_FAULTS


@pytest.mark.parametrize("taken, polled, attempt, outcome", [
    (True, 0, 0, TAKEN),      # a gate past the step again (after its restart): already taken
    (False, None, 0, WAIT),   # the task has not polled yet: wait (bounded) for it
    (False, 0, 0, WAIT),      # the attempt it hits polls: wait until it took it
    (False, 0, 1, EARLY),     # it hits attempt 1 and attempt 0 runs: again at a later step
    (False, 2, 1, MISSED),    # attempt 1 is over
])
def test_handover_outcome(taken, polled, attempt, outcome):
    assert handover_outcome(taken, polled, attempt) == outcome


def test_raise_takes_a_time_trigger():
    assert Fault.parse("ps:0:raise@time=3").trigger == "time"
