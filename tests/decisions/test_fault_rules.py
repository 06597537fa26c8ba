"""Rehearsals that cannot test anything, said at launch (issue 35, item 7, in part): faults.untestable."""

from __future__ import annotations

import pytest

from orchestrator.spec.faults import Fault, untestable


@pytest.mark.parametrize("text, serves, user, said", [
    ("worker:1:kill@step=20", False, False, None),             # a trainer reports steps: it fires
    ("ps:0:kill@step=20", True, False, "a serving ps reports no training step"),
    ("worker:1:kill@step=20", True, False, "a serving worker reports no training step"),  # a PSS worker
    ("evaluator:0:exit=3@step=5", False, False, "an evaluator reports no training step"),
    ("ps:0:kill@time=20", True, False, None),                  # time triggers reach every task
    ("ps:0:hang@time=20", True, False, "blocks only the timer thread"),
    ("worker:0:hang@time=20", False, False, "blocks only the timer thread"),
    ("worker:0:hang@time=20", False, True, "its wrapper cannot hang the program"),
    ("worker:0:hang@step=20", False, False, None),             # a step hang blocks the training loop itself
    ("worker:0:stop@time=20", False, True, None),
])
def test_untestable(text, serves, user, said):
    why = untestable(Fault.parse(text), serves, user)
    if said is None:
        assert why is None
    else:
        assert why is not None and said in why and why.startswith(text.split(",")[0])
