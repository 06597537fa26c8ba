"""One Recorder for every life of a run in one process (docs/elastic.md: the web page between lives):
the history the page charts goes on across lives, and between two lives the page's status reads live."""

from __future__ import annotations

from orchestrator.report.history import Recorder, event_kind
from tests.decisions.test_supervisor_loop import Harness, spec_of


def test_the_history_goes_on_across_lives_and_the_page_reads_live_between_them(tmp_path):
    recorder = Recorder(sample_interval_s=0.0)
    one = Harness(tmp_path / "one", spec_of(workers=2))
    one.all_beat(step=30)
    one.tick(0.3)
    recorder.update(one.sup.snapshot())
    recorder.event(0.3, "resize asked: 2 -> 1 worker(s)")
    seen = recorder.history()["seq"]
    first = recorder.page_status(history=True)
    assert first["life_started_s"] == 0 and {s["t"] for s in first["history"]["samples"]} == {0.3}
    one.exit("worker-0", 0)
    one.exit("worker-1", 0)
    ended = one.finish()
    recorder.update(ended)
    assert recorder.page_status()["live"] is False  # the life ended
    recorder.next_life()
    assert recorder.page_status()["live"] is True  # ... and the run goes on: an open page keeps polling
    assert recorder.status()["live"] is False  # what the ended life's health endpoint said
    two = Harness(tmp_path / "two", spec_of(workers=1))
    recorder.prime(two.sup.snapshot())
    recorder.event(0.0, "run t, life 2: continues at 1 worker(s) from its last checkpoint (resize asked)")
    two.all_beat(step=31)
    two.tick(0.5)
    recorder.update(two.sup.snapshot())
    later = recorder.page_status(history=True, since=seen)
    assert later["live"] is True and later["life_started_s"] >= ended.elapsed_s
    new = later["history"]
    assert [s["step"] for s in new["samples"]] == [31] and new["seq"] > seen  # the sequence goes on
    assert new["samples"][0]["t"] >= later["life_started_s"] + 0.5 > 0.3  # after the first life's, on one axis
    assert [e["kind"] for e in new["events"]] == ["life"]
    assert [s["step"] for s in recorder.history()["samples"]] == [30, 30, 31]  # the whole run's, in one history


def test_event_kinds():
    assert event_kind("run big, life 2: continues at 1 worker(s) from its last checkpoint (resize asked)") == "life"
    assert event_kind("run big: preempted") == "task"
