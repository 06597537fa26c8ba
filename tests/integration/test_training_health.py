"""Training health through the CLI, as a user runs it (``launch -- python PROGRAM``): a loss that
turns NaN is named (task, first step) in the live status and the summary, ``--on-nan fail`` fails
the job without a restart, and every record and ``--json`` output is strict JSON (issue 35, item 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.jsontext import loads_strict
from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env, wait_until

PROGRAM = str(REPO / "tests" / "programs" / "user_nan.py")


def cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(orchestrator_cmd(*args), capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
                          env=test_env())


def test_a_nan_loss_is_a_warning_with_task_and_step_and_every_record_is_strict_json(tmp_path: Path):
    runs, hold = tmp_path / "runs", tmp_path / "go"
    launch = subprocess.Popen(
        orchestrator_cmd("launch", "--workers", "1", "--runs-dir", str(runs), "--run-id", "nan", "--json",
                         "--heartbeat-interval", "0.2", "--nan-metrics", "grad_norm", "--",
                         sys.executable, PROGRAM, "30", "10", str(hold)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=test_env())
    try:
        def live_warning():  # the status over gRPC while the job runs (what the web page polls too)
            out = cli("status", "--runs-dir", str(runs), "nan", "--json")
            status = loads_strict(out.stdout) if out.stdout.strip() else {}
            return status if status.get("live") and status.get("warnings") else None
        status = wait_until(live_warning, 30, 0.2, "the live status to carry the NaN warning")
        assert "worker-0 reported a non-finite loss (nan), grad_norm (inf) first at step 10" in status["warnings"][0]
        hold.touch()
        stdout, stderr = launch.communicate(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.communicate()
    assert launch.returncode == 0, stderr
    summary = loads_strict(stdout)  # launch --json
    assert summary["status"] == "Succeeded" and summary["restarts"] == 0
    assert summary["warnings"] == status["warnings"]
    assert summary["metrics"]["final_loss"] is None and summary["non_finite"]["metrics.final_loss"] == "NaN"
    assert summary["non_finite"]["metrics.grad_norm"] == "Infinity"
    assert "non_finite_step" not in summary["metrics"]  # a typed field of the heartbeat, not the program's metric
    assert_no_process_left(all_pids(summary))
    run_dir = runs / "nan"
    for name in ("summary.json", "run.json", "history.json", "plan.json"):
        loads_strict((run_dir / name).read_text())  # raises on a bare NaN / Infinity
    assert loads_strict((run_dir / "summary.json").read_text())["warnings"] == summary["warnings"]
    history = json.dumps(loads_strict((run_dir / "history.json").read_text()))
    assert "null" in history  # the NaN losses of the series, as gaps
    for args in (("status", "--runs-dir", str(runs), "nan", "--json"), ("list", "--runs-dir", str(runs), "--json"),
                 ("logs", "--runs-dir", str(runs), "nan", "--json")):
        out = cli(*args)
        assert out.returncode in (0, 1), out.stderr
        for line in ([out.stdout] if args[0] != "logs" else out.stdout.splitlines()):
            loads_strict(line)


def test_on_nan_fail_fails_the_job_at_once_without_a_restart(tmp_path: Path):
    runs = tmp_path / "runs"
    out = cli("launch", "--workers", "1", "--runs-dir", str(runs), "--run-id", "nan", "--json",
              "--heartbeat-interval", "0.2", "--on-nan", "fail", "--max-restarts", "3", "--",
              sys.executable, PROGRAM, "400", "10")
    assert out.returncode == 1, out.stderr
    summary = loads_strict(out.stdout)
    assert summary["status"] == "Failed" and summary["restarts"] == 0
    assert "worker-0 reported a non-finite loss (nan) first at step 10" in summary["reason"]
    assert "--on-nan fail" in summary["reason"]
    assert summary["tasks"][0]["last_heartbeat"]["step"] < 400  # stopped, not trained to the end
    assert_no_process_left(all_pids(summary))


def test_on_nan_is_checked_as_bad_input(tmp_path: Path):
    out = cli("launch", "--workers", "1", "--runs-dir", str(tmp_path / "runs"), "--on-nan", "maybe")
    assert out.returncode == 2 and "--on-nan" in out.stderr and not (tmp_path / "runs").exists()
    out = cli("launch", "--workers", "1", "--runs-dir", str(tmp_path / "runs"), "--nan-metrics", ",")
    assert out.returncode == 2 and "nan_metrics" in out.stderr.splitlines()[0]


# -- item 3: a slow first step -----------------------------------------------------------------


def test_a_first_step_longer_than_the_stall_timeout_is_not_a_stall_and_the_status_says_so(tmp_path: Path):
    runs, hold = tmp_path / "runs", tmp_path / "go"
    launch = subprocess.Popen(
        orchestrator_cmd("launch", "--workers", "1", "--runs-dir", str(runs), "--run-id", "slow", "--json",
                         "--heartbeat-interval", "0.2", "--stall-timeout", "1.5", "--startup-timeout", "40",
                         "--restart-policy", "never", "--", sys.executable,
                         str(REPO / "tests" / "programs" / "slow_first_step.py"), "20", str(hold)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=test_env())
    try:
        def in_first_step_past_the_stall_timeout():
            out = cli("status", "--runs-dir", str(runs), "slow", "--json")
            status = loads_strict(out.stdout) if out.stdout.strip() else {}
            beat = (status.get("tasks") or [{}])[0].get("last_heartbeat") or {}
            return status if status.get("live") and (beat.get("first_step_s") or 0) > 3.0 else None
        status = wait_until(in_first_step_past_the_stall_timeout, 30, 0.2, "3 s in the first step, still running")
        assert status["tasks"][0]["state"] == "Running"
        table = cli("status", "--runs-dir", str(runs), "slow").stdout
        assert "training (first step" in table, table
        hold.touch()
        stdout, stderr = launch.communicate(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.communicate()
    assert launch.returncode == 0, stderr
    summary = loads_strict(stdout)
    assert summary["status"] == "Succeeded" and summary["restarts"] == 0
    assert summary["tasks"][0]["last_heartbeat"]["step"] == 20
    assert "first_step_s" not in summary["tasks"][0]["last_heartbeat"]


def test_a_first_step_past_the_startup_allowance_is_hung_and_named(tmp_path: Path):
    out = cli("launch", "--workers", "1", "--runs-dir", str(tmp_path / "runs"), "--json", "--heartbeat-interval",
              "0.2", "--stall-timeout", "1", "--startup-timeout", "3", "--restart-policy", "never", "--",
              sys.executable, str(REPO / "tests" / "programs" / "slow_first_step.py"), "5", str(tmp_path / "never"))
    assert out.returncode == 1, out.stderr
    summary = loads_strict(out.stdout)
    assert "no first step" in summary["root_cause"]["message"] and "startup timeout 3 s" in summary["root_cause"][
        "message"], summary["reason"]


# -- item 2: uneven data under MWMS ------------------------------------------------------------


def test_uneven_data_under_mwms_names_the_worker_that_left_and_fails_without_a_restart(tmp_path: Path):
    out = cli("launch", "--workers", "2", "--strategy", "multi_worker_mirrored", "--runs-dir", str(tmp_path / "r"),
              "--json", "--heartbeat-interval", "0.2", "--stall-timeout", "1.5", "--max-restarts", "3", "--",
              sys.executable, str(REPO / "tests" / "programs" / "uneven_data.py"), "44,40", timeout_s=120)
    assert out.returncode == 1, out.stderr
    summary = loads_strict(out.stdout)
    assert summary["restarts"] == 0, summary["reason"]  # a restart replays it: none is tried
    assert "worker-1 finished at local step 40 while worker-0 was at step 44: uneven data across workers" in \
        summary["reason"], summary["reason"]
    assert "steps_per_epoch" in summary["reason"] and "repeat()" in summary["reason"]
    assert summary["root_cause"]["task"] == "worker:0"
    assert_no_process_left(all_pids(summary))


# -- item 5: a log flood -----------------------------------------------------------------------


def test_a_log_flood_is_cut_to_its_head_and_tail_and_the_root_cause_is_still_found(tmp_path: Path):
    runs = tmp_path / "runs"
    out = cli("launch", "--workers", "1", "--runs-dir", str(runs), "--run-id", "flood", "--heartbeat-interval", "0.2",
              "--max-log-size", "1M", "--restart-policy", "never", "--",
              sys.executable, str(REPO / "tests" / "programs" / "log_flood.py"), "12", timeout_s=120)
    assert out.returncode == 1, out.stderr
    assert "stderr.log passed --max-log-size 1.0 MiB" in out.stdout  # said live, while it floods
    summary = loads_strict((runs / "flood" / "summary.json").read_text())
    log = runs / "flood" / "attempt-0" / "worker-0" / "stderr.log"
    assert log.stat().st_size <= 1024 * 1024
    text = log.read_text()
    assert text.startswith("flood: the first line of the log")  # the head
    assert "cut from the middle of this log by the orchestrator" in text
    assert text.rstrip().endswith("RuntimeError: the input pipeline broke after the flood")  # the tail
    (warning,) = [w for w in summary["warnings"] if "stderr.log" in w]
    dropped = float(warning.split("was cut: ")[1].split(" MiB")[0])
    assert "worker-0's stderr.log (attempt 0) was cut" in warning and 10.0 < dropped < 12.0, warning
    assert "the input pipeline broke after the flood" in summary["root_cause"]["message"]


# -- item 4: a SIGBUS of a full /dev/shm ---------------------------------------------------------


def test_a_sigbus_is_a_permanent_error_that_names_shared_memory_and_the_option(tmp_path: Path):
    out = cli("launch", "--workers", "1", "--runs-dir", str(tmp_path / "runs"), "--json", "--heartbeat-interval",
              "0.2", "--max-restarts", "3", "--", sys.executable, str(REPO / "tests" / "programs" / "fill_shm.py"),
              "8", "--sigbus")
    assert out.returncode == 1, out.stderr
    summary = loads_strict(out.stdout)
    assert summary["restarts"] == 0, summary["reason"]  # main: retried until 'restarts exhausted'
    assert "SIGBUS" in summary["reason"] and "/dev/shm" in summary["reason"] and "--shm-size" in summary["reason"]


# -- item 6: where a hang is ---------------------------------------------------------------------


def test_a_collective_hang_names_the_worker_stuck_in_its_input_and_its_frame(tmp_path: Path):
    out = cli("launch", "--workers", "2", "--strategy", "multi_worker_mirrored", "--runs-dir", str(tmp_path / "r"),
              "--json", "--heartbeat-interval", "0.2", "--stall-timeout", "2", "--restart-policy", "never", "--",
              sys.executable, str(REPO / "tests" / "programs" / "stuck_input.py"), "20", "1", "1.0", timeout_s=120)
    assert out.returncode == 1, out.stderr
    summary = loads_strict(out.stdout)
    assert summary["root_cause"]["task"] == "worker:1", summary["reason"]  # main: worker-0, the one that waited
    assert "worker-1 is stuck in read_shard_record (stuck_input.py:" in summary["root_cause"]["message"]
    assert "worker-0 waits in a collective for it" in summary["root_cause"]["message"]
    waiter = next(f for f in summary["failures"] if f["task"] == "worker:0")
    assert "worker-0 is stuck in collective_all_reduce" in waiter["message"]
    assert_no_process_left(all_pids(summary))


# -- item 7: rehearsals reach every role; what cannot test anything is said at launch -------------


def test_launch_hands_stepless_step_faults_to_the_gate_and_says_what_cannot_test_anything(tmp_path: Path):
    out = cli("launch", "--strategy", "parameter_server", "--workers", "2", "--evaluator", "--dry-run",
              "--runs-dir", str(tmp_path / "runs"), "--inject-fault", "ps:0:kill@step=5",
              "--inject-fault", "worker:1:hang@time=3", "--inject-fault", "evaluator:0:hang@step=7",
              "--inject-fault", "chief:0:kill@step=5")
    assert out.returncode == 0, out.stderr
    plan = loads_strict(out.stdout)
    # main: "ps:0:kill@step=5 never fires" and "worker:1:hang@time=3 tests nothing"; now every one can fire
    assert plan["warnings"] == [], plan["warnings"]
    faults = {t["task"]: json.loads(t["env"].get("ORCH_FAULTS", "[]")) for t in plan["tasks"]}
    # the chief, whose step is the job's under PSS, holds the ps's and the evaluator's step faults to hand over
    assert {(f["task"], f["relay"]) for f in faults["chief:0"] if f["relay"]} == {("ps:0", "chief:0"),
                                                                               ("evaluator:0", "chief:0")}
    assert [f["relay"] for f in faults["ps:0"]] == ["chief:0"]
    program = cli("launch", "--strategy", "parameter_server", "--workers", "1", "--dry-run",
                  "--runs-dir", str(tmp_path / "runs"), "--inject-fault", "ps:0:hang@step=5",
                  "--", sys.executable, "-c", "pass")
    warnings = [line for line in program.stderr.splitlines() if line.startswith("warning:")]
    assert any("ps:0:hang@step=5 tests nothing" in w and "cannot hang the program" in w for w in warnings), \
        program.stderr


def test_stop_json_of_a_job_with_a_nan_loss_is_strict_json(tmp_path: Path):
    runs, hold = tmp_path / "runs", tmp_path / "never"
    launch = subprocess.Popen(
        orchestrator_cmd("launch", "--workers", "1", "--runs-dir", str(runs), "--run-id", "nan", "--quiet",
                         "--heartbeat-interval", "0.2", "--", sys.executable, PROGRAM, "30", "10", str(hold)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=test_env())
    try:
        def live_warning():
            out = cli("status", "--runs-dir", str(runs), "nan", "--json")
            return out.stdout.strip() and loads_strict(out.stdout).get("warnings")
        wait_until(live_warning, 30, 0.2, "the NaN warning")
        out = cli("stop", "--runs-dir", str(runs), "nan", "--json")
        summary = loads_strict(out.stdout)
        assert summary["status"] == "Interrupted" and summary["non_finite"], out.stdout
        launch.communicate(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.communicate()
    assert_no_process_left(all_pids(summary))
