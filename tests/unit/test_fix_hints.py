"""Every flag an error message suggests is a real ``launch`` flag (issue 11, item 17c)."""

from __future__ import annotations

import re

import pytest

from orchestrator.cli import build_parser
from orchestrator.errors import SpecError
from orchestrator.spec.loader import build_spec, check_spec_mapping

BAD_FIELDS = [
    {"strategy": "horovod"},
    {"workers": -1},
    {"ps": -1},
    {"chief": 2},
    {"evaluator": 2},
    {"heartbeat_interval_s": 0},
    {"threads_per_task": 0},
    {"training": {"epochs": 0}},
    {"training": {"batch_size_per_replica": 0}},
    {"training": {"steps_per_epoch": 0}},
    {"training": {"learning_rate": 0}},
    {"training": {"seed": -1}},
    {"training": {"loop": "scan"}},
    {"training": {"data": "/nonexistent.npz"}},
    {"training": {"replicas": 0}},
    {"supervision": {"max_restarts": -1}},
    {"supervision": {"backoff_s": -1}},
    {"supervision": {"backoff_max_s": -1}},
    {"supervision": {"heartbeat_timeout_s": 0}},
    {"supervision": {"stall_timeout_s": 0}},
    {"supervision": {"startup_timeout_s": 0}},
    {"supervision": {"deadline_s": 0}},
    {"supervision": {"restart_policy": {"worker": "always"}}},
]


def launch_flags() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {s for action in sub.choices["launch"]._actions for s in action.option_strings}


@pytest.mark.parametrize("document", BAD_FIELDS, ids=lambda d: str(d))
def test_every_suggested_flag_exists_in_launch_help(document):
    with pytest.raises(SpecError) as info:
        build_spec(check_spec_mapping(document, "spec.yaml"))
    suggested = set(re.findall(r"--[a-z][a-z0-9-]*", info.value.fix))
    assert suggested <= launch_flags(), f"{info.value} suggests {suggested - launch_flags()}"


def test_backoff_fields_suggest_the_real_flag_or_the_spec_field():
    with pytest.raises(SpecError) as info:
        build_spec({"supervision": {"backoff_s": -1}})
    assert info.value.field == "supervision.backoff_s" and "--restart-backoff" in info.value.fix
    with pytest.raises(SpecError) as info:
        build_spec({"supervision": {"backoff_max_s": -1}})
    assert "--" not in info.value.fix and "backoff_max_s" in info.value.fix
