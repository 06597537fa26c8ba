"""A running elastic MWMS job changes size with real TensorFlow (issue 34; docs/elastic.md).

``--workers 1:2 --epochs 12``: 2 TF processes (the global batch 32 kept at every size: 540 steps; 12
epochs, not 3, so the resize lands mid-training even when a loaded machine's heartbeat shows step 30
late (with 3 epochs, one run in five failed the one-save-step check)).

* ``resize RUN --workers 1`` once the run reports step >= 30 (a bounded wait on the run's status): every
  worker saves at one step (the preemption's coordinated save) and the group continues at 1 worker
  from that step in the same launcher: segments [2 workers, 1 worker], 0 steps lost. This one runs the
  custom loop under ``keep-per-replica``: at 1 worker 16 examples a step, so the saved step s continues
  at step 2s, 1080 steps in all.
* ``--epochs 12 --inject-fault worker:1:lose@step=60``: worker 1's slot is withdrawn (not restarted in
  place): the group continues at 1 worker from the last checkpoint (the end of epoch 1, step 45),
  the steps after it lost and trained again; once it reports step >= 60 at 1 worker, ``resize RUN
  --workers 2`` gives the slot back (``grew back``: a coordinated save, 0 steps lost), and the job
  finishes its 540 steps.
* grow-back (``--grow-back 2``): on two cores, run ``a`` (the tiny program) pins one with
  ``--threads-per-task 1``, so ``--workers 1:2 --threads-per-task 1`` starts at 1 worker; once it
  trains, ``a`` is stopped and returns its lease, and the run grows back to 2 workers by itself through
  the coordinated save (``grew back``, 0 steps lost) and finishes its steps.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import urllib.request

import pytest

from orchestrator.cli import main
from orchestrator.health.client import EndpointError
from orchestrator.report.runs import read_endpoint
from tests.conftest import assert_no_process_left, test_env, wait_until
from tests.e2e.test_recovery import Launch, launches, start  # noqa: F401 - the fixture
from tests.e2e.test_resume import _saved_step

STEPS_12_EPOCHS = 540  # 45 steps per epoch at the global batch 32, at any size (1 worker trains ~150 steps/s here)

pytestmark = pytest.mark.e2e


def _step(run_dir) -> int:
    """The run's step now (worker 0's last heartbeat, from the run's endpoint: a status query in this
    process, no CLI start); -1 while it has none."""
    endpoint = read_endpoint(run_dir)
    if endpoint is None:
        return -1
    try:
        with endpoint.client() as client:
            tasks = client.status().get("tasks") or [{}]
    except EndpointError:
        return -1
    beat = tasks[0].get("last_heartbeat") or {}
    return int(beat.get("step") or -1)


def _get(url: str) -> bytes:
    """``url``'s body; a page that does not answer (its server gone) raises."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read()


def _page(web_url: str, path: str) -> bytes:
    """``path`` (``/api/status?since=0``, ``/metrics``) at the page ``web_url``, with its token."""
    base, token = web_url.split("/?token=")
    return _get(f"{base}{path}{'&' if '?' in path else '?'}token={token}")


def test_a_resize_asked_continues_the_running_group_at_1_worker_from_the_step_it_saved(tmp_path, launches, capsys):  # noqa: F811
    # the custom loop under keep-per-replica: the step saved at the global batch 32 continues at 1 worker (16 a step)
    # at the step that has seen the same examples, twice the saved one (keep-global and fit: the test below)
    launch = start(launches, tmp_path, "shrink", "--workers", "1:2", "--epochs", "12", "--loop", "custom",
                   "--batch-policy", "keep-per-replica", "--web", "127.0.0.1:0", "--web-linger", "0")
    wait_until(lambda: _step(launch.run_dir) >= 30, 300, interval_s=0.05, what="step 30")
    web_url = read_endpoint(launch.run_dir).web_url  # a port 0 address: the port the first life bound
    assert main(["resize", "shrink", "--runs-dir", str(tmp_path), "--workers", "1"]) == 0  # in this process: at once
    assert "resize accepted: run shrink continues at 1 worker(s)" in capsys.readouterr().out
    # the page outlives the life: the same URL answers throughout (a URLError here: the server went away)
    # and serves the next life once it trains, its charts' history going on
    seen = {}

    def next_life_trains() -> bool:
        status = json.loads(_page(web_url, "/api/status?since=0"))
        assert status["live"] is True, status.get("reason")  # between the lives too: the run goes on
        history = status["history"]
        life = next((e for e in history["events"] if e["kind"] == "life"), None)
        if life is None or not any(s["seq"] > life["seq"] and s["step"] for s in history["samples"]):
            return False
        seen.update(status=status, life=life, metrics=_page(web_url, "/metrics").decode())
        return True

    wait_until(next_life_trains, 300, interval_s=0.2, what="a step of the next life, on the same page")
    status, life, metrics = seen["status"], seen["life"], seen["metrics"]
    assert status["elastic"]["workers"] == 1 and status["life_started_s"] > 0
    assert any(line.startswith("tfjob_workers{") and line.endswith(" 1.0") for line in metrics.splitlines()), metrics
    code, summary = launch.finish()
    assert life["text"].startswith("run shrink, life 2: continues at 1 worker(s)")
    history = status["history"]
    samples = history["samples"]
    assert [s["seq"] for s in samples] == sorted(s["seq"] for s in samples)
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)  # one time axis for both lives
    # the first life's samples stay in the history (it lasted seconds, the page samples twice a second; the custom
    # loop may train its first 30 steps between two samples, so they need not show a step)
    assert any(s["seq"] < life["seq"] for s in samples)
    before = [s["step"] for s in samples if s["seq"] < life["seq"] and s["step"]]
    after = [s["step"] for s in samples if s["seq"] > life["seq"] and s["step"]]
    saved = _saved_step(launch.run_dir)  # at 32 examples a step
    assert after and min(after) >= max(before, default=0) and min(after) >= 2 * saved
    assert code == 0, "".join(launch.lines[-40:])
    assert any("resize asked: 2 -> 1 worker(s)" in line for line in launch.lines), "".join(launch.lines[-40:])
    assert not any("not done: training has ended" in line for line in launch.lines), "".join(launch.lines[-40:])
    one, two = summary["segments"]
    assert 30 <= saved < STEPS_12_EPOCHS
    assert (one["workers"], one["global_batch_size"], one["first_step"], one["last_step"], one["cause"],
            one["steps_lost"]) == (2, 32, 0, saved, "launched", 0)
    assert (two["workers"], two["global_batch_size"], two["per_replica_batch_size"], two["first_step"],
            two["last_step"], two["cause"]) == (1, 16, 16, 2 * saved, 2 * STEPS_12_EPOCHS, "resize asked")
    assert summary["metrics"]["steps"] == 2 * STEPS_12_EPOCHS  # 90 steps per epoch at 16 examples a step
    resumed = (launch.run_dir / "attempt-1" / "worker-0" / "stdout.log").read_text()
    assert f"elastic: the checkpoint at step {saved} (global batch 32) continues at step {2 * saved}" in resumed
    assert summary["elastic"]["workers"] == 1 and [t["task"] for t in summary["tasks"]] == ["worker:0"]
    assert [life["cause"] for life in summary["lives"]] == ["resize asked", "succeeded"]


def test_a_ctrl_c_between_two_lives_stops_the_run_at_the_step_the_resize_saved(tmp_path, launches):  # noqa: F811
    # the custom loop; SIGINT once the resized life has ended (its end line), before the next one has started
    # or while it starts: the run stops there (exit 130), the next life interrupted before its first report
    launch = start(launches, tmp_path, "ctrl-c", "--workers", "1:2", "--epochs", "12", "--loop", "custom")
    wait_until(lambda: _step(launch.run_dir) >= 30, 300, interval_s=0.05, what="step 30")
    assert main(["resize", "ctrl-c", "--runs-dir", str(tmp_path), "--workers", "1"]) == 0
    ended = launch.wait_for(r"job Preempted: preempted \(resize asked: 2 -> 1 worker\(s\)\): .* at step (\d+)")
    launch.proc.send_signal(signal.SIGINT)
    code = launch.proc.wait(timeout=120)
    launch.wait_for(r"^  summary ", timeout_s=10)  # the final report's last line
    summary = json.loads((launch.run_dir / "summary.json").read_text())
    started = [int(pid) for line in launch.lines for pid in re.findall(r" started \(pid (\d+)", line)]
    assert_no_process_left(started)  # every life's tasks (the next life's may not have started one)
    assert code == 130 and summary["reason"] == "interrupted by SIGINT", "".join(launch.lines[-40:])
    saved = _saved_step(launch.run_dir)
    assert int(ended[1]) == saved  # the end line names the step saved, not an older report
    one, two = summary["lives"]
    assert (one["ended"], one["cause"], one["last_step"], one["steps_lost"]) == ("Preempted", "resize asked", saved, 0)
    assert (two["ended"], two["resumed_from_step"], two["last_step"]) == ("Interrupted", saved, saved)
    assert [(s["workers"], s["first_step"], s["last_step"]) for s in summary["segments"]] == [(2, 0, saved),
                                                                                           (1, saved, saved)]


def test_a_lost_slot_shrinks_the_group_to_1_worker_and_resize_gives_it_back(tmp_path, launches, capsys):  # noqa: F811
    launch = start(launches, tmp_path, "lose", "--workers", "1:2", "--epochs", "12",
                   "--inject-fault", "worker:1:lose@step=60")
    launch.wait_for(r"worker-1's slot is lost: the group continues at 1 worker\(s\) from the last checkpoint")
    wait_until(lambda: _step(launch.run_dir) >= 60, 300, interval_s=0.05, what="step 60 at 1 worker")
    assert main(["resize", "lose", "--runs-dir", str(tmp_path), "--workers", "2"]) == 0  # the slot given back
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-40:])
    one, two, three = summary["segments"]
    assert (one["workers"], one["cause"], two["workers"], two["cause"], three["workers"], three["cause"]) == \
        (2, "launched", 1, "slot lost", 2, "grew back")
    assert two["first_step"] == 45  # the last checkpoint: the end of epoch 1
    assert one["last_step"] >= 60 and one["steps_lost"] == one["last_step"] - 45  # at least the fault's step
    assert two["steps_lost"] == 0 and 60 <= three["first_step"] < STEPS_12_EPOCHS  # the grow: a coordinated save
    assert three["last_step"] == summary["metrics"]["steps"] == STEPS_12_EPOCHS
    assert summary["restarts"] == 0  # a lost slot is not a restart in place
    assert [t["task"] for t in summary["tasks"]] == ["worker:0", "worker:1"]


TWO = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []


def on_two_cores(started: list[Launch], tmp_path, run_id: str, *args: str, behavior: str = "") -> Launch:
    """A launch whose orchestrator (and so its tasks) may run on :data:`TWO` only."""
    env = {**test_env(), **({"TEST_BEHAVIOR": behavior} if behavior else {})}
    launch = Launch(tmp_path, run_id, *args, env=env, preexec_fn=lambda: os.sched_setaffinity(0, TWO))
    started.append(launch)  # the fixture kills it at the end
    return launch


@pytest.mark.skipif(len(TWO) < 2, reason="two runs pinned apart need two cores")
def test_a_run_started_at_1_worker_beside_another_grows_back_to_2_when_it_ends(tmp_path, launches):  # noqa: F811
    steps = 45 * 40  # 40 epochs: still training when the grow lands on a fast machine
    other = on_two_cores(launches, tmp_path, "a", "--workers", "1", "--threads-per-task", "1", "--spares", "0", "--",
                         sys.executable, "-m", "tests.programs.task", behavior="serve")
    other.wait_for(r"worker-0 started")
    launch = on_two_cores(launches, tmp_path, "b", "--workers", "1:2", "--threads-per-task", "1", "--epochs", "40",
                          "--grow-back", "2", "--wait-for-resources", "60")
    wait_until(lambda: _step(launch.run_dir) >= 30, 300, interval_s=0.05, what="step 30 at 1 worker")
    assert main(["stop", "a", "--runs-dir", str(tmp_path)]) == 0  # a ends: its core is free again
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-40:])
    assert any("elastic workers: 2 cannot be placed (cores" in line for line in launch.lines), "".join(launch.lines)
    assert any("grew back: 1 -> 2 worker(s) (the machine has room for 2 again" in line for line in launch.lines), \
        "".join(launch.lines[-40:])
    one, two = summary["segments"]
    assert (one["workers"], one["cause"], one["steps_lost"], two["workers"], two["cause"]) == \
        (1, "launched", 0, 2, "grew back")  # the coordinated save: 0 steps lost
    assert 30 <= two["first_step"] == one["last_step"] < steps
    assert two["last_step"] == summary["metrics"]["steps"] == steps
    assert summary["restarts"] == 0 and [t["task"] for t in summary["tasks"]] == ["worker:0", "worker:1"]
    assert [life["cause"] for life in summary["lives"]] == ["grew back", "succeeded"]
    other.finish()
