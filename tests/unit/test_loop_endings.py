"""The built-in program's custom loops say ``finishing``, and wait until it went out, before their
traced functions are torn down: TensorFlow's teardown of them can hold the GIL, and so the
heartbeats, past the heartbeat timeout (a CI run's PSS coordinator was killed as hung there,
after its last step). Real TensorFlow in a process of its own (``tests/programs/loop_endings.py``;
TensorFlow must not load into the unit-test process: ``test_keras_callback.py``). About 8 s."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, test_env


def test_the_custom_loops_report_finishing_before_their_traced_step_is_torn_down(tmp_path):
    if importlib.util.find_spec("tf_keras") is None:  # find it without importing TensorFlow here
        pytest.skip("tf_keras is not installed")
    result = subprocess.run([sys.executable, "tests/programs/loop_endings.py", str(tmp_path)], cwd=REPO,
                            env=test_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    runs = {r["loop"]: r["events"] for r in map(json.loads, lines)}
    mirrored = runs["mirrored"]
    # the finishing heartbeat went out (flush) before the traced step's teardown, inside the loop
    assert mirrored.count("torn-down") == 1, mirrored
    finishing = mirrored.index("update:PHASE_FINISHING")
    assert mirrored[finishing + 1] == "flush", mirrored
    assert finishing < mirrored.index("torn-down") and finishing < mirrored.index("returned"), mirrored
    hogwild = runs["hogwild"]
    assert hogwild.index("update:PHASE_FINISHING") + 1 == hogwild.index("flush") < hogwild.index("returned"), hogwild
