"""Strict JSON (orchestrator.jsontext): what every record and ``--json`` output is written with."""

from __future__ import annotations

import json

import pytest

from orchestrator import jsontext
from orchestrator.rundir import write_json_atomic

NAN, INF = float("nan"), float("inf")


def test_python_json_writes_what_a_strict_parser_rejects():
    with pytest.raises(ValueError):
        jsontext.loads_strict(json.dumps({"loss": NAN}))


def test_non_finite_numbers_become_null_with_a_note_of_what_they_were():
    data = {"metrics": {"final_loss": NAN, "accuracy": 0.5}, "tasks": [{"loss": INF}, {"loss": -INF}], "n": 3}
    text = jsontext.dumps(data, indent=2)
    back = jsontext.loads_strict(text)
    assert back["metrics"] == {"final_loss": None, "accuracy": 0.5}
    assert back["tasks"] == [{"loss": None}, {"loss": None}]
    assert back["non_finite"] == {"metrics.final_loss": "NaN", "tasks[0].loss": "Infinity",
                                  "tasks[1].loss": "-Infinity"}
    assert data["metrics"]["final_loss"] != data["metrics"]["final_loss"]  # the caller's data is not changed


def test_finite_data_is_written_as_json_dumps_writes_it():
    data = {"a": [1, 2.5, "x", None, True], "b": {"c": (1, 2)}}
    assert jsontext.dumps(data, indent=2) == json.dumps(data, indent=2)
    assert jsontext.strict(data) is data


def test_a_top_level_list_or_number_is_cleaned_without_a_note():
    assert jsontext.loads_strict(jsontext.dumps([NAN, 1.0])) == [None, 1.0]
    assert jsontext.dumps(INF) == "null"


def test_the_run_directory_writer_is_strict(tmp_path):
    path = write_json_atomic(tmp_path / "summary.json", {"metrics": {"loss": NAN}})
    assert jsontext.loads_strict(path.read_text())["non_finite"] == {"metrics.loss": "NaN"}


def test_a_long_series_of_nan_is_noted_by_its_first_paths_and_a_count():
    back = jsontext.loads_strict(jsontext.dumps({"series": [NAN] * 100}))
    assert back["series"] == [None] * 100
    assert len(back["non_finite"]) == jsontext.NOTES_KEPT + 1 and back["non_finite"]["..."] == "80 more"
