"""Rehearsals that reach every role at a known point of training (issue 35, item 7), with real
TensorFlow: ``@step=N`` on a ps or an evaluator is the job's step N, handed over by the gate (the
chief under PSS, worker 0 under MWMS) within one step; a ``hang`` of a ps stops it serving and of
an evaluator stops its evaluating, while each keeps heartbeating. On main each of these faults
never fired (a task that reports no step) and the job exited 3, the rehearsal untested.

At most 3 TensorFlow processes run at a time in each test."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env, wait_until

pytestmark = pytest.mark.e2e

PSS = ("--strategy", "parameter_server", "--workers", "1", "--ps", "1", "--epochs", "2", "--steps-per-epoch", "30")
FIRED = re.compile(r"injecting fault: (\w+) at step=(\d+) \(unix ([\d.]+); handed over at job step (\d+)\)")
HANDED = re.compile(r"fault relay: (\S+) handed over at step (\d+): (\w+) \(unix ([\d.]+)\)")


def _launch(tmp_path: Path, run_id: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(orchestrator_cmd("launch", "--plain", "--runs-dir", str(tmp_path), "--run-id", run_id,
                                             *args),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=test_env())


def _finish(proc: subprocess.Popen, run_dir: Path, timeout_s: float = 300) -> tuple[int, dict, str]:
    out, _ = proc.communicate(timeout=timeout_s)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert_no_process_left(all_pids(summary))
    return proc.returncode, summary, out


def _log(run_dir: Path, task: str, attempt: int = 0) -> str:
    try:
        return (run_dir / f"attempt-{attempt}" / task / "stdout.log").read_text()
    except OSError:
        return ""


def _keepers(run_id: str) -> list[psutil.Process]:
    """The keeper processes of this run (a frozen task's heartbeats)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "orchestrator.task.keeper" in " ".join(proc.info["cmdline"] or ()) and \
                    proc.environ().get("ORCH_RUN_ID") == run_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def _heartbeats(run_dir: Path, task: str) -> int:
    """The live count of ``task``'s heartbeats (``status --json`` over the job's endpoint)."""
    out = subprocess.run(orchestrator_cmd("status", "--json", str(run_dir)), capture_output=True, text=True,
                         cwd=REPO, env=test_env(), timeout=30)
    status = json.loads(out.stdout)
    return next(t for t in status["tasks"] if t["task"] == task)["last_heartbeat"]["heartbeats"]


def test_a_ps_kill_at_a_step_fires_within_one_step_of_the_chiefs_step(tmp_path):
    run_dir = tmp_path / "kill"
    proc = _launch(tmp_path, "kill", *PSS, "--max-restarts", "0", "--inject-fault", "ps:0:kill@step=20")
    try:
        code, summary, out = _finish(proc, run_dir)
    finally:
        proc.kill()
    assert code == 1, out  # main: exit 3, "ps:0:kill@step=20 never fired"
    assert summary["faults"] == [{"fault": "ps:0:kill@step=20", "fired": True}]
    assert summary["root_cause"]["task"] == "ps:0" and summary["failures"][0]["signal"] == "SIGKILL"
    kind, step, fired_at, job_step = FIRED.search(_log(run_dir, "ps-0")).groups()
    fault, gate_step, outcome, taken_at = HANDED.search(_log(run_dir, "chief-0")).groups()
    assert (kind, int(step), fault, outcome) == ("kill", 20, "ps:0:kill@step=20", "taken")
    # the chief's step when it handed the fault over; the chief waited at that step until the ps took it,
    # so the ps was killed while the job's step was 20: within one step of it
    assert int(job_step) == int(gate_step) == 20
    # the ps fires once its take returns and the chief prints once its hand-over returns: the two answers
    # of one exchange, in either order (a CI run printed them 1 ms apart, the ps's later); the fault is
    # fired at once, not some time after the chief went on
    assert abs(float(fired_at) - float(taken_at)) < 5.0, (fired_at, taken_at)
    chief = next(t for t in summary["tasks"] if t["task"] == "chief:0")
    assert chief["last_heartbeat"]["step"] >= 20  # the step was sent before the hand-over


def test_a_ps_hang_stops_it_serving_while_it_heartbeats_and_the_job_is_found_hung(tmp_path):
    run_dir = tmp_path / "pshang"
    proc = _launch(tmp_path, "pshang", *PSS, "--max-restarts", "1", "--restart-backoff", "0.5",
                   "--heartbeat-timeout", "10", "--stall-timeout", "10", "--inject-fault", "ps:0:hang@step=20")
    try:
        fired = wait_until(lambda: FIRED.search(_log(run_dir, "ps-0")), 180, what="the ps's hang fired")
        assert fired[4] == "20"
        keepers = wait_until(lambda: _keepers("pshang"), 20, what="the frozen ps's keeper")
        ps = psutil.Process(keepers[0].ppid())
        # it serves no more: the whole process freezes once its keeper's first heartbeat went out
        wait_until(lambda: ps.status() == psutil.STATUS_STOPPED, 30, what="the ps frozen")
        before = _heartbeats(run_dir, "ps:0")
        time.sleep(2.5)  # heartbeats come each second: a frozen process would send none
        assert _heartbeats(run_dir, "ps:0") > before, "the frozen ps's heartbeats stopped"
        code, summary, out = _finish(proc, run_dir)
    finally:
        proc.kill()
    assert code == 0, out  # main: exit 3, the hang never fired
    assert summary["faults"] == [{"fault": "ps:0:hang@step=20", "fired": True}]
    # the chief waits on the frozen ps: it is found hung and the cluster restarts; the ps itself was never
    # taken for dead (its heartbeats went on): it was stopped for the group restart
    (failure,) = summary["failures"]
    assert failure["task"] == "chief:0" and "hung" in failure["message"], failure
    ps = next(t for t in summary["tasks"] if t["task"] == "ps:0")
    assert ps["earlier_attempts"][0]["reason"].startswith("stopped for a group restart"), ps
    assert summary["recoveries"][0]["scope"] == "group"
    wait_until(lambda: not _keepers("pshang"), 10, what="the keeper died with the frozen ps")


def test_an_evaluator_hang_stops_its_evaluating_while_it_heartbeats(tmp_path):
    run_dir = tmp_path / "evalhang"
    proc = _launch(tmp_path, "evalhang", "--workers", "1", "--evaluator", "--epochs", "3", "--steps-per-epoch", "30",
                   "--evaluator-grace", "3", "--stop-timeout", "2", "--inject-fault", "evaluator:0:hang@step=40")
    try:
        fired = wait_until(lambda: FIRED.search(_log(run_dir, "evaluator-0")), 180, what="the evaluator's hang fired")
        assert fired[4] == "40"  # worker 0's step, the job's under MWMS
        keepers = wait_until(lambda: _keepers("evalhang"), 20, what="the frozen evaluator's keeper")
        frozen = psutil.Process(keepers[0].ppid())
        wait_until(lambda: frozen.status() == psutil.STATUS_STOPPED, 30, what="the evaluator frozen")
        code, summary, out = _finish(proc, run_dir)
    finally:
        proc.kill()
    assert code == 0, out  # main: exit 3, the hang never fired
    assert summary["faults"] == [{"fault": "evaluator:0:hang@step=40", "fired": True}]
    assert not summary["failures"], summary["failures"]  # never taken for a frozen task: its heartbeats went on
    evaluator = next(t for t in summary["tasks"] if t["task"] == "evaluator:0")
    assert evaluator["last_heartbeat"]["phase"] == "evaluating"
    assert any("evaluator-0: final evaluation lost: still evaluating" in w for w in summary["warnings"])
    wait_until(lambda: not _keepers("evalhang"), 10, what="the keeper died with the frozen evaluator")
