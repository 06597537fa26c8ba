"""The benchmark suite's verdict (``bench/run.py``): a section that raises, or that leaves a
figure without any value, fails the run; figures go to the results directory it was given."""

from __future__ import annotations

import json

from bench.run import Suite


class _Sections(Suite):
    def good(self) -> None:
        self.add("0", "good_figure", "a measure", "s", [1.0, 2.0])

    def raises(self) -> None:
        raise RuntimeError("the section broke")

    def empty(self) -> None:
        self.add("0", "empty_figure", "a measure that got no value", "s", [None, None])

    def nothing(self) -> None:
        pass


def test_a_section_that_raises_or_gives_no_value_fails_and_the_others_pass(tmp_path):
    suite = _Sections(True, tmp_path / "work", tmp_path / "results")
    (tmp_path / "results").mkdir()
    assert suite.run_section("good") is True
    assert suite.errors == []
    assert suite.run_section("raises") is False
    assert "section raises raised" in suite.errors[-1] and "the section broke" in suite.errors[-1]
    assert suite.run_section("empty") is False
    assert "empty_figure" in suite.errors[-1]
    assert suite.run_section("nothing") is False
    assert len(suite.errors) == 3


def test_figures_go_to_the_results_dir_given(tmp_path):
    suite = _Sections(True, tmp_path / "work", tmp_path)
    suite.run_section("good")
    figure = json.loads((tmp_path / "good_figure.json").read_text())
    assert figure["runs"] == 2 and figure["median"] == 1.5
