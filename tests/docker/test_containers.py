"""The job in containers, on a real Docker engine: ``launch --backend docker`` and the Compose file.

Skipped, with the reason, when no engine is reachable or the Docker SDK is missing. The
project image is built (or reused: its tag is a hash of what goes into it) once per session
on ``$ORCH_DOCKER_BASE_IMAGE`` (CI: a debootstrap image, see .ci/docker-setup), else
python:3.11-slim. After every test no container or network of the job may remain, and no
task's host pid may still run.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from orchestrator import api
from orchestrator.backends.docker import LABEL_RUN, LABEL_TASK
from orchestrator.backends.engine import engine_available
from orchestrator.spec import JobSpec, TaskId, TrainingSpec
from orchestrator.spec.supervision import SupervisionSpec
from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env, wait_until
from tests.e2e.test_recovery import Launch

pytestmark = pytest.mark.docker

CHANCE = 0.1  # ten digit classes


@pytest.fixture(scope="session")
def engine():
    why = engine_available()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    import docker

    client = docker.from_env(timeout=120)
    yield client
    client.close()


@pytest.fixture(scope="session")
def image(engine):
    from orchestrator.backends.image import ensure_image

    return ensure_image(engine, progress=lambda line: print(line, file=sys.stderr))


def assert_nothing_left(engine, run_id: str) -> None:
    containers = engine.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    networks = engine.networks.list(filters={"label": f"{LABEL_RUN}={run_id}"})
    assert not containers and not networks, f"left behind: {containers} {networks}"


def by_task(summary: dict) -> dict[str, dict]:
    return {t["task"]: t for t in summary["tasks"]}


def test_mwms_two_workers_train_in_containers(tmp_path, engine, image):
    result = subprocess.run(
        orchestrator_cmd("launch", "--backend", "docker", "--image", image, "--workers", "2", "--epochs", "2",
                         "--runs-dir", str(tmp_path), "--run-id", "mwms", "--json"),
        capture_output=True, text=True, timeout=420, cwd=REPO, env=test_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "Succeeded"
    assert summary["metrics"]["test_accuracy"] >= 5 * CHANCE
    assert summary["cluster"] == {"worker": ["worker-0:2222", "worker-1:2222"]}
    run_dir = tmp_path / "mwms"
    assert (run_dir / "model" / "saved_model.pb").exists()  # the run directory is mounted in the containers
    for t in summary["tasks"]:
        assert t["state"] == "Succeeded"
        assert t["last_heartbeat"]["phase"] == "done"  # heartbeats crossed from the containers over gRPC
        assert "CollectiveAllReduceStrategy" in Path(t["stdout"]).read_text()  # logs collected
    plan = json.loads((run_dir / "plan.json").read_text())
    assert all("ORCH_ORCHESTRATOR_PID" not in t["env"] for t in plan["tasks"])
    assert_no_process_left(all_pids(summary))
    assert_nothing_left(engine, "mwms")


def test_isolate_network_runs_the_job_on_an_internal_network_and_publishes_no_port(tmp_path, engine, image):
    """--isolate-network: the job's network is --internal, no TF port is published, and the
    heartbeats and the TLS handshake cross through runs/<id>/health.sock in the mounted run dir."""
    proc = subprocess.Popen(
        orchestrator_cmd("launch", "--backend", "docker", "--image", image, "--workers", "2", "--epochs", "2",
                         "--runs-dir", str(tmp_path), "--run-id", "iso", "--json", "--isolate-network"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=test_env())
    try:
        seen: dict = {}

        def running() -> bool:
            for c in engine.containers.list(filters={"label": f"{LABEL_RUN}=iso"}):
                c.reload()
                seen[c.name] = c.attrs
            (network,) = engine.networks.list(filters={"label": f"{LABEL_RUN}=iso"}) or [None]
            if network is not None:
                network.reload()
                seen["network"] = network.attrs
            return len(seen) >= 3 or proc.poll() is not None

        wait_until(running, 300, what="the job's containers and network")
        out, err = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out + err
    assert seen["network"]["Internal"] is True
    for name, attrs in seen.items():
        if name != "network":
            assert not any((attrs["NetworkSettings"].get("Ports") or {}).values()), (name, attrs["NetworkSettings"])
    summary = json.loads(out)
    assert summary["status"] == "Succeeded" and summary["metrics"]["test_accuracy"] >= 5 * CHANCE
    assert all(t["last_heartbeat"]["phase"] == "done" for t in summary["tasks"])
    plan = json.loads((tmp_path / "iso" / "plan.json").read_text())
    assert {t["env"]["ORCH_HEALTH_ADDRESS"] for t in plan["tasks"]} == {f"unix:{tmp_path / 'iso' / 'health.sock'}"}
    assert_no_process_left(all_pids(summary))
    assert_nothing_left(engine, "iso")


def test_pss_in_containers_a_killed_worker_restarts_alone_and_the_servers_are_stopped(tmp_path, engine, image):
    # one PSS job for both: it trains (chief, worker, ps in their containers), a worker container is
    # killed from outside mid-job and restarted alone, and at the end the worker and ps are stopped
    # a heartbeat timeout far above the default 4 s: in one CI run (the other xdist worker training beside
    # it, the new worker container importing TensorFlow) the chief and the ps were SIGKILLed too, and the
    # cluster restarted; this test is about the scope of a killed worker's restart, not heartbeat timing
    spec = JobSpec.create(strategy="parameter_server", workers=1, ps=1, training=TrainingSpec(epochs=4),
                          supervision=SupervisionSpec.create(heartbeat_timeout_s=30.0))
    job = api.prepare(spec, runs_dir=tmp_path, run_id="kill", backend="docker", backend_options={"image": image})
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(zip(("result", "summary"), api.run(job))), daemon=True)
    thread.start()
    try:
        def chief_step():
            record = job.store.get(TaskId("chief", 0), 0)
            return record is not None and record.heartbeat.HasField("step") and record.heartbeat.step >= 30

        wait_until(chief_step, 240, 0.1, "the chief to train 30 steps")
        (victim,) = engine.containers.list(
            filters={"label": [f"{LABEL_RUN}=kill", "io.tf-cluster-orchestrator.task=worker-0"]})
        victim.kill()  # SIGKILL from outside: docker kill
    finally:
        thread.join(420)
    assert not thread.is_alive(), "the job did not end"
    summary = outcome["summary"]
    assert summary["status"] == "Succeeded", summary["reason"]
    assert len(summary["failures"]) == 1, json.dumps({k: summary[k] for k in ("failures", "recoveries")}, indent=1)
    (failure,) = summary["failures"]
    assert (failure["task"], failure["attempt"], failure["signal"]) == ("worker:0", 0, "SIGKILL")  # not exit 137
    (recovery,) = summary["recoveries"]
    assert (recovery["scope"], recovery["tasks"]) == ("task", ["worker-0"])
    assert {name: t["restarts"] for name, t in by_task(summary).items()} == {"chief:0": 0, "worker:0": 1, "ps:0": 0}
    assert summary["metrics"]["test_accuracy"] >= 5 * CHANCE
    assert (tmp_path / "kill" / "attempt-1" / "worker-0" / "stdout.log").read_text()
    states = {name: (t["state"], t["signal"]) for name, t in by_task(summary).items()}
    assert states == {"chief:0": ("Succeeded", None), "worker:0": ("Stopped", "SIGTERM"),
                      "ps:0": ("Stopped", "SIGTERM")}
    assert by_task(summary)["ps:0"]["last_heartbeat"]["phase"] == "serving"
    assert "tf.distribute.Server serving" in Path(by_task(summary)["ps:0"]["stdout"]).read_text()
    assert_no_process_left(all_pids(summary))
    assert_nothing_left(engine, "kill")


def test_pss_in_containers_grows_past_its_cluster_with_the_ps_and_worker_0_kept_running(tmp_path, engine, image):
    # issue 34 item 4 on docker: started at 1 of 1..2, worker 1 is planned (its address worker-1:2222, the alias its
    # container gets when it starts) but in no TF_CONFIG yet; `resize --workers 2` has the coordinator save and
    # restart alone with a TF_CONFIG naming worker 1, whose container starts beside the ps's and worker 0's, which
    # keep running: the same containers, one life, 0 steps lost (on main: a next life, every container restarted)
    spec = tmp_path / "pss.yaml"
    spec.write_text("strategy: parameter_server\nps: 1\nworkers: {min: 1, max: 2, start: 1}\n"
                    "training: {epochs: 20, steps_per_epoch: 30, loop: custom}\n")
    launch = Launch(tmp_path, "grow", "--backend", "docker", "--image", image, "--spec", str(spec))
    try:
        chief = launch.run_dir / "attempt-0" / "chief-0" / "stdout.log"
        wait_until(lambda: chief.exists() and "epoch 1/20: mean loss" in chief.read_text(), 240, what="epoch 1")

        def containers() -> dict[str, str]:
            return {c.labels[LABEL_TASK]: c.id for c in engine.containers.list(filters={"label": f"{LABEL_RUN}=grow"})}

        before = containers()
        assert set(before) == {"chief-0", "worker-0", "ps-0"}  # worker 1 held: no container
        resize = subprocess.run(orchestrator_cmd("resize", "--runs-dir", str(tmp_path), "grow", "--workers", "2"),
                                capture_output=True, text=True, cwd=REPO, env=test_env(), timeout=60)
        assert resize.returncode == 0, (resize.stdout, resize.stderr)
        launch.wait_for(r"past the 1 worker\(s\) .*: the coordinator saves at its next step", timeout_s=60)
        launch.wait_for(r"chief-0 restarted from its save with a TF_CONFIG naming 2 worker\(s\)", timeout_s=120)
        after: dict[str, str] = {}
        def grown() -> bool:
            after.clear()
            after.update(containers())
            return "worker-1" in after and after.get("chief-0", before["chief-0"]) != before["chief-0"]

        wait_until(grown, 60, what="the containers of worker 1 and the coordinator's next attempt")
        assert {name: after.get(name) for name in ("ps-0", "worker-0")} == {n: before[n] for n in ("ps-0", "worker-0")}
        code, summary = launch.finish(timeout_s=240)
    finally:
        launch.kill()
    assert code == 0, "".join(launch.lines[-40:])
    saved = int(re.search(r"checkpoint saved after step (\d+); exiting with code 143", chief.read_text())[1])
    assert 30 <= saved < 600
    assert summary["metrics"]["steps"] == 600 and summary["restarts"] == 0 and summary["recoveries"] == []
    assert summary["failures"] == [] and len(summary["lives"]) == 1  # nothing but the coordinator restarted
    tasks = by_task(summary)
    assert {name: t["attempts"] for name, t in tasks.items()} == {"chief:0": 2, "worker:0": 1, "worker:1": 1,
                                                                  "ps:0": 1}
    segments = [(s["workers"], s["cause"], s["first_step"], s["steps_lost"]) for s in summary["segments"]]
    assert segments == [(1, "launched", 0, 0), (2, "resize asked", saved, None)]
    assert "tf.distribute.Server serving" in (launch.run_dir / "attempt-0" / "worker-1" / "stdout.log").read_text()
    assert_nothing_left(engine, "grow")


def compose_tool() -> list[str] | None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


@pytest.mark.parametrize(
    ("flags", "coordinator"),
    [(("--workers", "2"), "worker-0"), (("--strategy", "parameter_server", "--workers", "1", "--ps", "1"), "chief-0")],
    ids=["mwms", "pss"],
)
def test_compose_up_runs_the_job_and_ends_with_the_coordinator(tmp_path, engine, image, flags, coordinator):
    tool = compose_tool()
    if tool is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    out = tmp_path / "docker-compose.yml"
    rendered = subprocess.run(orchestrator_cmd("compose", *flags, "--epochs", "2", "--image", image, "-o", str(out)),
                              capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert rendered.returncode == 0, rendered.stderr
    document = yaml.safe_load(out.read_text())
    run_id = document["services"][coordinator]["labels"][LABEL_RUN]
    project = ["-p", f"tfjob{tmp_path.name.replace('_', '').replace('-', '').lower()}", "-f", str(out)]
    try:
        up = subprocess.run([*tool, *project, "up", "--abort-on-container-exit", "--exit-code-from", coordinator],
                            capture_output=True, text=True, timeout=420, cwd=tmp_path)
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        assert "test accuracy" in up.stdout
    finally:
        down = subprocess.run([*tool, *project, "down", "--volumes", "--timeout", "5"], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(engine, run_id)


def test_tasks_stop_when_the_orchestrator_is_sigkilled_and_the_next_run_removes_them(tmp_path, engine, image):
    launch = subprocess.Popen(
        orchestrator_cmd("launch", "--backend", "docker", "--image", image, "--workers", "2", "--epochs", "50",
                         "--orphan-timeout-s", "5", "--runs-dir", str(tmp_path), "--run-id", "orphans", "--quiet"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=test_env(), start_new_session=True,
    )
    label = {"label": f"{LABEL_RUN}=orphans"}
    try:
        log = tmp_path / "orphans" / "attempt-0" / "worker-1" / "stdout.log"
        wait_until(lambda: log.exists() and "Epoch 1/" in log.read_text(), 240, 0.2, "training in the containers")
        pids = [c.attrs["State"]["Pid"] for c in engine.containers.list(filters=label)]
        assert len(pids) == 2
        launch.send_signal(signal.SIGKILL)
        assert launch.wait(10) == -signal.SIGKILL
        # no parent-death signal in a container: the heartbeat watchdog ends each task, --orphan-timeout-s after
        # the orchestrator went silent
        wait_until(lambda: all(c.status == "exited" for c in engine.containers.list(all=True, filters=label)), 120, 0.5,
                   "the orphaned containers to stop")
        assert_no_process_left(pids)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait(10)
    from orchestrator.backends.docker import remove_orphans

    remove_orphans(engine)  # what the next --backend docker run does first
    assert_nothing_left(engine, "orphans")


def test_mwms_reads_through_the_data_service_in_containers(tmp_path, engine, image):
    """Issue 38: the dispatcher and a data worker as containers, outside TF_CONFIG's cluster,
    stopped at the end (written without an engine to run it on: run by the lead)."""
    result = subprocess.run(
        orchestrator_cmd("launch", "--backend", "docker", "--image", image, "--workers", "2", "--epochs", "2",
                         "--steps-per-epoch", "10", "--data-service", "1", "--runs-dir", str(tmp_path),
                         "--run-id", "ds", "--json"),
        capture_output=True, text=True, timeout=420, cwd=REPO, env=test_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "Succeeded"
    assert summary["cluster"] == {"worker": ["worker-0:2222", "worker-1:2222"]}
    tasks = by_task(summary)
    assert tasks["dispatcher:0"]["state"] == tasks["data_worker:0"]["state"] == "Stopped"
    assert summary["data_service"]["address"] == "dispatcher-0:2222"
    assert summary["data_service"]["data_workers"][0]["data_tasks"] >= 1
    assert "through the tf.data service" in Path(tasks["worker:0"]["stdout"]).read_text()
    assert_no_process_left(all_pids(summary))
    assert_nothing_left(engine, "ds")


def test_compose_up_with_the_data_service_ends_with_the_coordinator(tmp_path, engine, image):
    tool = compose_tool()
    if tool is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    out = tmp_path / "docker-compose.yml"
    rendered = subprocess.run(orchestrator_cmd("compose", "--workers", "2", "--epochs", "2", "--data-service", "1",
                                               "--image", image, "-o", str(out)),
                              capture_output=True, text=True, timeout=60, cwd=REPO, env=test_env())
    assert rendered.returncode == 0, rendered.stderr
    document = yaml.safe_load(out.read_text())
    run_id = document["services"]["worker-0"]["labels"][LABEL_RUN]
    project = ["-p", f"tfjobds{tmp_path.name.replace('_', '').replace('-', '').lower()}", "-f", str(out)]
    try:
        up = subprocess.run([*tool, *project, "up", "--abort-on-container-exit", "--exit-code-from", "worker-0"],
                            capture_output=True, text=True, timeout=420, cwd=tmp_path)
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        assert "through the tf.data service" in up.stdout and "registered with" in up.stdout
    finally:
        down = subprocess.run([*tool, *project, "down", "--volumes", "--timeout", "5"], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(engine, run_id)
