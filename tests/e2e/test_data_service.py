"""The tf.data service as roles the orchestrator starts, heals and stops (issue 38), with real
TensorFlow: trainers read through a dispatcher and data workers under MWMS and PSS; a killed
data worker and a killed dispatcher come back alone, no trainer restarted; nothing is left."""

from __future__ import annotations

import signal

import psutil
import pytest

from tests.conftest import wait_until
from tests.e2e.test_recovery import Launch, start


@pytest.fixture()
def launches():
    started: list[Launch] = []
    yield started
    for launch in started:
        launch.kill()

pytestmark = pytest.mark.e2e


def _service_checks(summary: dict, run_dir) -> None:
    states = {t["task"]: t["state"] for t in summary["tasks"]}
    assert states["dispatcher:0"] == "Stopped" and states["data_worker:0"] == "Stopped"
    hb = {t["task"]: t["last_heartbeat"] for t in summary["tasks"]}
    assert hb["dispatcher:0"]["metrics"]["data_workers"] == 1.0  # the dispatcher's own count
    assert hb["data_worker:0"]["metrics"]["data_tasks"] >= 1.0  # it served the trainers' job
    assert "registered with" in (run_dir / "attempt-0" / "data_worker-0" / "stdout.log").read_text()
    assert (run_dir / "data-service" / "tf_data_dispatcher_journal").is_dir()  # the journal in the run dir
    section = summary["data_service"]
    assert (section["job_name"], section["sharding"], section["workers"]) == (summary["run_id"], "dynamic", 1)
    assert section["dispatcher"] == {"data_workers": 1} and section["data_workers"][0]["data_tasks"] >= 1
    assert section["address"].startswith("127.0.0.1:") and section["work_dir"] == str(run_dir / "data-service")


def test_mwms_reads_through_the_data_service_and_the_service_is_stopped(tmp_path, launches):
    launch = start(launches, tmp_path, "mwms-ds", "--workers", "2", "--epochs", "2", "--steps-per-epoch", "10",
                   "--spares", "0", "--data-service", "1")
    code, summary = launch.finish()  # also: no process of any attempt left
    assert code == 0, "".join(launch.lines)
    assert summary["status"] == "Succeeded" and summary["metrics"]["steps"] == 20
    _service_checks(summary, launch.run_dir)
    log = (launch.run_dir / "attempt-0" / "worker-1" / "stdout.log").read_text()
    assert "dataset read through the tf.data service" in log and "(dynamic sharding)" in log


def test_pss_reads_through_the_data_service_and_the_service_is_stopped(tmp_path, launches):
    launch = start(launches, tmp_path, "pss-ds", "--strategy", "parameter_server", "--workers", "1", "--ps", "1",
                   "--epochs", "2", "--steps-per-epoch", "10", "--spares", "0", "--data-service", "1")
    code, summary = launch.finish()
    assert code == 0, "".join(launch.lines)
    assert summary["status"] == "Succeeded"
    _service_checks(summary, launch.run_dir)
    assert "through the tf.data service" in (launch.run_dir / "attempt-0" / "chief-0" / "stdout.log").read_text()


def _epoch(launch: Launch, epoch: int) -> None:
    log = launch.run_dir / "attempt-0" / "worker-0" / "stdout.log"
    wait_until(lambda: log.exists() and f"Epoch {epoch}/" in log.read_text(), 180, what=f"worker-0 epoch {epoch}")


def test_a_killed_data_worker_and_dispatcher_come_back_alone_without_a_trainer_restart(tmp_path, launches):
    # far more epochs than needed; the test stops the job (Ctrl-C) once training went on after both heals
    launch = start(launches, tmp_path, "ds-heal", "--workers", "1", "--epochs", "500", "--steps-per-epoch", "5",
                   "--spares", "0", "--restart-backoff", "0.2", "--data-service", "1")
    dispatcher = int(launch.wait_for(r"dispatcher-0 started \(pid (\d+), attempt 0\)")[1])
    data_worker = int(launch.wait_for(r"data_worker-0 started \(pid (\d+), attempt 0\)")[1])
    _epoch(launch, 3)
    psutil.Process(data_worker).send_signal(signal.SIGKILL)
    launch.wait_for(r"data_worker-0 started \(pid \d+, attempt 1\)")
    wait_until(lambda: "registered with" in (launch.run_dir / "attempt-1" / "data_worker-0" / "stdout.log").read_text()
               if (launch.run_dir / "attempt-1" / "data_worker-0" / "stdout.log").exists() else False, 120,
               what="the restarted data worker registered")
    log = launch.run_dir / "attempt-0" / "worker-0" / "stdout.log"
    seen = log.read_text().count("Epoch ")
    # 10 epochs of 5 steps: more batches than the client and prefetch buffers hold, so read after the heal
    wait_until(lambda: log.read_text().count("Epoch ") >= seen + 10, 180, what="training going on after the heal")
    psutil.Process(dispatcher).send_signal(signal.SIGKILL)
    launch.wait_for(r"dispatcher-0 started \(pid \d+, attempt 1\)")
    seen = log.read_text().count("Epoch ")
    wait_until(lambda: log.read_text().count("Epoch ") >= seen + 10, 180, what="training going on after the dispatcher")
    launch.proc.send_signal(signal.SIGINT)
    code, summary = launch.finish()  # also: no process of any attempt left
    assert code == 130, "".join(launch.lines)
    restarts = {t["task"]: t["restarts"] for t in summary["tasks"]}
    assert restarts == {"dispatcher:0": 1, "data_worker:0": 1, "worker:0": 0}, restarts
    scopes = [(r["scope"], r["tasks"]) for r in summary["recoveries"]]
    assert scopes == [("task", ["data_worker-0"]), ("task", ["dispatcher-0"])], scopes
    hb = {t["task"]: t["last_heartbeat"] for t in summary["tasks"]}
    assert hb["dispatcher:0"]["metrics"]["data_workers"] == 1.0  # the data worker is back with the new dispatcher
    section = summary["data_service"]
    assert section["restarts"] == {"dispatcher:0": 1, "data_worker:0": 1} and "skipped" in section["note"]
