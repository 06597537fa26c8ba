"""Who may report as which task, and who may query and stop the job (orchestrator/tls.py), as tables."""

from __future__ import annotations

import pytest

from orchestrator.tls import SHARED, USER, control_refusal, peer_identity, report_refusal


@pytest.mark.parametrize("identity, task, own, allowed", [
    (None, "worker-0", True, True),            # plaintext (--insecure): the token alone decides
    ("worker-0", "worker-0", True, True),      # a task as itself (any attempt: the name has none)
    ("worker-1", "worker-0", True, False),     # a task as another
    ("dispatcher-0", "dispatcher-0", True, True),
    ("data_worker-0", "data_worker-0", True, True),
    ("data_worker-0", "data_worker-1", True, False),
    ("worker-1", "worker-10", True, False),    # not a prefix match
    (SHARED, "worker-7", False, True),         # a task the plan did not name / a job past 512 tasks
    (SHARED, "worker-0", True, False),         # the shared certificate never stands in for one of its own
    (USER, "worker-0", True, False),           # the user's commands never report as a task
    (USER, "worker-7", False, False),
])
def test_report_refusal(identity, task, own, allowed):
    refusal = report_refusal(identity, task, own)
    assert (refusal is None) is allowed
    if refusal is not None:
        assert task in refusal and identity in refusal


@pytest.mark.parametrize("identity, allowed", [(None, True), (USER, True), ("worker-0", False), (SHARED, False)])
@pytest.mark.parametrize("method", ["GetStatus", "StopJob", "ResizeJob"])
def test_control_refusal(identity, allowed, method):
    refusal = control_refusal(identity, method)
    assert (refusal is None) is allowed
    if refusal is not None:
        assert method in refusal and identity in refusal


@pytest.mark.parametrize("context, name", [
    ({}, None),
    ({"transport_security_type": [b"insecure"]}, None),
    ({"x509_common_name": [b"worker-1"], "x509_subject": [b"CN=worker-1"]}, "worker-1"),
    ({"x509_subject_alternative_name": [b"worker-2"]}, "worker-2"),
    ({"x509_common_name": [b"user"], "x509_subject_alternative_name": [b"other"]}, "user"),
])
def test_peer_identity(context, name):
    assert peer_identity(context) == name
