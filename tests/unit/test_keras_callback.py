"""The tf-keras callback, driven directly: the cases are in ``keras_callback_cases.py`` and run in a
fresh process, because TensorFlow (imported by tf_keras) must not load into the unit-test process
(grpc_tools' protoc, used by the stale-stubs test, segfaults beside it). About 5 s."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO, test_env


def test_the_keras_callback_cases_pass_in_a_process_of_their_own():
    if importlib.util.find_spec("tf_keras") is None:  # find it without importing TensorFlow here
        pytest.skip("tf_keras is not installed")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/keras_callback_cases.py"],
        cwd=REPO, env=test_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
