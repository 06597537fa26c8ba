"""The built-in model's ``fit`` step under MWMS all-reduces its gradients and nothing else
(``worker.model.local_logs_model``): counted in the traced ``train_function`` of a real
two-worker MultiWorkerMirroredStrategy (``tests/programs/fit_collectives.py``), in processes
of their own (TensorFlow must not load into the unit-test process: ``test_keras_callback.py``).
About 10 s."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, test_env


def test_the_built_in_fit_step_all_reduces_only_the_gradients_under_mwms():
    if importlib.util.find_spec("tf_keras") is None:  # find it without importing TensorFlow here
        pytest.skip("tf_keras is not installed")
    result = subprocess.run([sys.executable, "tests/programs/fit_collectives.py"], cwd=REPO,
                            env=test_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    # tf-keras's own step: the gradients' pack, then loss and accuracy results (total and count
    # each) and the logs; ours: the gradients' pack alone
    assert counts["standard"] >= 3, counts
    assert counts["local_logs"] == 1, counts
    # the epoch's logs are still tf-keras's global ones: same seed, same data, same figures
    assert set(counts["local_logs_logs"]) == {"loss", "accuracy"}, counts
    assert counts["local_logs_logs"] == pytest.approx(counts["standard_logs"], rel=1e-5), counts
