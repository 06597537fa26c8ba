"""Elastic ParameterServerStrategy workers with real TensorFlow (issue 34 item 4; docs/elastic.md).

A ``--workers 1:2`` PSS job (chief, 2 workers, 1 ps: 4 TF processes, at most one of them training)
whose worker 1 keeps dying: killed at the job's step 10 (handed over by the chief, the gate), restarted
(the one restart of ``--max-restarts 1``), killed again at its first hand-over. Its restarts are spent, so
it is parked, not restarted and not failed: the chief trains on with worker 0 (TF's ClusterCoordinator
carries on without a lost worker), the job succeeds, and the records name it. On main the job fails:
``restarts exhausted: worker-1 failed on attempt 2 of 2``.
"""

from __future__ import annotations

import re
import signal
import subprocess

import pytest

from tests.conftest import REPO, orchestrator_cmd, test_env, wait_until
from tests.e2e.test_recovery import launches, start  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e

PSS_1_2 = ("--strategy", "parameter_server", "--ps", "1", "--workers", "1:2", "--epochs", "3")
STEPS = 270  # 3 epochs of 90 steps: the global batch of 16 (PSS: one worker a step)


def test_a_pss_worker_whose_restarts_are_spent_is_parked_and_the_job_succeeds_without_it(tmp_path, launches):  # noqa: F811
    launch = start(launches, tmp_path, "parked", *PSS_1_2, "--max-restarts", "1", "--restart-backoff", "0.2",
                   "--inject-fault", "worker:1:kill@step=10", "--inject-fault", "worker:1:kill@step=10,attempt=1")
    launch.wait_for(r"worker-1 parked \(restarts spent\): training goes on with 1 worker\(s\), MIN 1", timeout_s=240)
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-40:])
    assert summary["status"] == "Succeeded" and summary["reason"] == "chief-0 exited 0"
    assert summary["metrics"]["steps"] == STEPS  # every step trained, the last ones by worker 0 alone
    # no coordinator (group) restart; the one restart of worker 1 before it was parked, nothing after
    assert [(r["scope"], r["tasks"]) for r in summary["recoveries"]] == [("task", ["worker-1"])]
    assert summary["restarts"] == 1
    restarts = {t["task"]: (t["restarts"], t["attempts"]) for t in summary["tasks"]}
    assert restarts == {"chief:0": (0, 1), "worker:0": (0, 1), "worker:1": (1, 2), "ps:0": (0, 1)}
    assert summary["elastic"]["workers"] == 1 and summary["elastic"]["parked"] == ["worker-1"]
    launched, parked = summary["segments"]
    assert (launched["workers"], launched["cause"], launched["first_step"], launched["steps_lost"]) == \
        (2, "launched", 0, 0)  # parking loses no step
    assert (parked["workers"], parked["cause"], parked["tasks"], parked["last_step"]) == \
        (1, "parked worker", ["worker-1"], STEPS)
    assert 10 <= parked["first_step"] == launched["last_step"] < STEPS
    assert any(w.startswith("worker-1 parked (restarts spent)") for w in summary["warnings"])
    out = "".join(launch.lines)
    assert "sizes       2 worker(s) from step 0 to" in out and "(global batch 16, 16 per replica, parked worker)" in out
    status = subprocess.run(orchestrator_cmd("status", "--runs-dir", str(tmp_path), "parked"), capture_output=True,
                            text=True, cwd=REPO, env=test_env(), timeout=60)
    assert "· workers 1 of 1..2 (worker-1 parked)" in status.stdout.splitlines()[0]
    assert re.search(r"^worker-1\s+Parked \(signal SIGKILL\)", status.stdout, re.M), status.stdout



def test_a_crash_looping_pss_worker_is_parked_before_its_restarts_are_spent(tmp_path, launches):  # noqa: F811
    # the same exception on attempts 0 and 1 (--crash-loop-limit 2): a crash loop, with 4 restarts left
    launch = start(launches, tmp_path, "loop", *PSS_1_2, "--restart-policy", "worker=on-failure", "--crash-loop-limit",
                   "2", "--restart-backoff", "0.2", "--inject-fault", "worker:1:raise@step=10",
                   "--inject-fault", "worker:1:raise@step=10,attempt=1")
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-40:])
    assert summary["metrics"]["steps"] == STEPS and summary["restarts"] == 1
    assert summary["elastic"]["parked"] == ["worker-1"]
    assert [(s["workers"], s["cause"]) for s in summary["segments"]] == [(2, "launched"), (1, "parked worker")]
    assert any(w.startswith("worker-1 parked (crash loop)") for w in summary["warnings"]), summary["warnings"]


def test_a_lost_pss_worker_is_parked_and_a_resize_takes_it_back_at_its_address(tmp_path, launches):  # noqa: F811
    # far more epochs than the test needs: it stops the job (Ctrl-C) once the coordinator has worker 1 back
    launch = start(launches, tmp_path, "lose", "--strategy", "parameter_server", "--ps", "1", "--workers", "1:2",
                   "--epochs", "200", "--inject-fault", "worker:1:lose@step=10")
    launch.wait_for(r"worker-1 parked \(lost\): training goes on with 1 worker\(s\), MIN 1", timeout_s=240)
    chief = launch.run_dir / "attempt-0" / "chief-0" / "stdout.log"  # lost at step 10 of epoch 1 (90 steps)
    wait_until(lambda: "Epoch 3/200" in chief.read_text(), 240, what="the chief training on without worker-1")
    resize = subprocess.run(orchestrator_cmd("resize", "--runs-dir", str(tmp_path), "lose", "--workers", "2"),
                            capture_output=True, text=True, cwd=REPO, env=test_env(), timeout=60)
    assert resize.returncode == 0, (resize.stdout, resize.stderr)
    launch.wait_for(r"worker-1 taken back \(grew back\): training goes on with 2 worker\(s\); restarted at the same "
                    r"address", timeout_s=60)
    launch.wait_for(r"worker-1 started \(pid \d+, attempt 1\)", timeout_s=60)
    # TF's ClusterCoordinator reconnects to a worker restarted at its address (its log line, worker/rotation.py)
    launch.wait_for(r"worker-1 back in chief-0's rotation", timeout_s=240)
    launch.proc.send_signal(signal.SIGINT)
    code, summary = launch.finish()
    assert code == 130, "".join(launch.lines[-40:])
    assert summary["restarts"] == 0  # neither the loss nor the grow spent the budget
    assert [(r["scope"], r["tasks"]) for r in summary["recoveries"]] == [("task", ["worker-1"])]
    (recovery,) = summary["recoveries"]
    assert recovery["resumed_at_s"] > recovery["restarted_at_s"] >= recovery["detected_at_s"]
    attempts = {t["task"]: t["attempts"] for t in summary["tasks"]}
    assert attempts == {"chief:0": 1, "worker:0": 1, "worker:1": 2, "ps:0": 1}  # no coordinator restart
    causes = [(s["workers"], s["cause"], s.get("tasks")) for s in summary["segments"]]
    assert causes == [(2, "launched", None), (1, "slot lost", ["worker-1"]), (2, "grew back", ["worker-1"])]
    lost, back = summary["segments"][1:]
    # the chief trained on while worker-1 was parked (its heartbeats, once a second, said a later step)
    assert lost["last_step"] == back["first_step"] > lost["first_step"] >= 10
    assert summary["elastic"]["workers"] == 2 and summary["elastic"]["parked"] == []
    print(f"grow at the same address: resize asked -> back in the coordinator's rotation "
          f"{recovery['detection_to_resumed_training_s']:.1f} s")


def test_a_pss_job_started_below_max_grows_past_its_cluster_through_the_coordinators_save(tmp_path, launches):  # noqa: F811
    # started at 1 of 1..2 (`start: 1`): worker 1 is planned (its address held) but in no TF_CONFIG yet, so the
    # coordinator saves (the custom loop's save on the notice) and restarts alone with a TF_CONFIG naming worker 1,
    # started beside the ps and worker 0, which keep running: the same processes, 0 steps lost
    spec = tmp_path / "pss.yaml"
    spec.write_text("strategy: parameter_server\nps: 1\nworkers: {min: 1, max: 2, start: 1}\n"
                    "training: {epochs: 20, steps_per_epoch: 30, loop: custom}\n")  # 600 steps: the resize lands
    # after the first 30, long before the end (~6 s of steps on a quiet machine after it is sent)
    launch = start(launches, tmp_path, "grow", "--spec", str(spec), "--spares", "0")
    chief = launch.run_dir / "attempt-0" / "chief-0" / "stdout.log"
    wait_until(lambda: chief.exists() and "epoch 1/20: mean loss" in chief.read_text(), 240, what="epoch 1 at 1 worker")
    assert not (launch.run_dir / "attempt-0" / "worker-1").exists()  # held: not started
    resize = subprocess.run(orchestrator_cmd("resize", "--runs-dir", str(tmp_path), "grow", "--workers", "2"),
                            capture_output=True, text=True, cwd=REPO, env=test_env(), timeout=60)
    assert resize.returncode == 0, (resize.stdout, resize.stderr)
    launch.wait_for(r"past the 1 worker\(s\) .*: the coordinator saves at its next step", timeout_s=60)
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines[-40:])
    saved = int(re.search(r"checkpoint saved after step (\d+); exiting with code 143", chief.read_text())[1])
    assert 30 <= saved < 600
    assert summary["metrics"]["steps"] == 600 and summary["restarts"] == 0 and summary["recoveries"] == []
    assert summary["failures"] == []  # the coordinator's save on its notice is no failure
    tasks = {t["task"]: t for t in summary["tasks"]}
    started = {m[1]: int(m[2]) for m in re.finditer(r"(ps-0|worker-0) started \(pid (\d+), attempt 0\)",
                                                       "".join(launch.lines))}
    for name in ("ps-0", "worker-0"):  # the same processes before and after the grow
        entry = tasks[name.replace("-", ":")]
        assert (entry["attempts"], entry["pid"]) == (1, started[name]), entry
    assert tasks["chief:0"]["attempts"] == 2 and tasks["worker:1"]["attempts"] == 1
    assert len(summary["lives"]) == 1  # one life: nothing but the coordinator restarted
    segments = [(s["workers"], s["cause"], s["first_step"], s["steps_lost"]) for s in summary["segments"]]
    assert segments == [(1, "launched", 0, 0), (2, "resize asked", saved, None)]  # None: the last, nothing after
    assert summary["elastic"]["workers"] == 2
    # the coordinator's next attempt (its TF_CONFIG naming both workers: tests/decisions/test_parking_loop.py) trained
    # on from the step it saved at; both workers served it
    resumed = (launch.run_dir / "attempt-1" / "chief-0" / "stdout.log").read_text()
    assert "epoch 20/20: mean loss" in resumed and f"epoch {saved // 30}/20" not in resumed
    for name in ("worker-0", "worker-1"):
        log = next(launch.run_dir.glob(f"attempt-*/{name}/stdout.log"))
        assert "tf.distribute.Server serving" in log.read_text()
