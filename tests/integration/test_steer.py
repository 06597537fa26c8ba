"""Watch and steer a real running job from outside: ``status``, ``list``, ``logs -f``, ``stop``,
``/metrics`` and the Python API (real launcher process, real gRPC, real HTTP, tiny task programs)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import api, tls
from orchestrator.errors import SpecError
from orchestrator.health.client import EndpointClient, EndpointError
from orchestrator.report.status import COLUMNS
from tests.conftest import REPO, all_pids, assert_no_process_left, orchestrator_cmd, test_env, wait_until

PROGRAM = [sys.executable, "-m", "tests.programs.task"]


def cli(*args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run(orchestrator_cmd(*args), env=test_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)


class Launched:
    """A launcher process running a 2-worker job of the tiny program that trains forever."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir
        self.run_dir = runs_dir / "steer"
        env = test_env()
        env["TEST_BEHAVIOR"] = "train:0:0.1"
        self.out = open(runs_dir / "launcher.out", "w+")
        self.proc = subprocess.Popen(
            orchestrator_cmd("launch", "--workers", "2", "--runs-dir", str(runs_dir), "--run-id", "steer", "--plain",
                             "--web", "127.0.0.1:0", "--web-linger", "0", "--heartbeat-interval", "0.2",
                             "--stop-timeout", "5", "--deadline", "120", "--", *PROGRAM),
            env=env, cwd=REPO, stdout=self.out, stderr=subprocess.STDOUT, text=True)
        wait_until(lambda: (self.run_dir / "endpoint.json").is_file() or self.proc.poll() is not None, 30,
                   what="endpoint.json")
        assert self.proc.poll() is None, self.output()
        self.endpoint = json.loads((self.run_dir / "endpoint.json").read_text())

    def output(self) -> str:
        self.out.flush()
        return (self.runs_dir / "launcher.out").read_text()

    def client(self, token: str | None = None) -> EndpointClient:
        """A client with the user's certificate of the run (``endpoint.json``'s ``tls_dir``)."""
        files = tls.files_for(self.endpoint["tls_dir"], tls.USER)
        return EndpointClient(self.endpoint["address"], token or self.endpoint["token"], tls=files)

    def steps(self) -> list[int]:
        with self.client() as client:
            status = client.status()
        return [(t["last_heartbeat"] or {}).get("step") or 0 for t in status["tasks"]]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.out.close()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    launched = Launched(tmp_path_factory.mktemp("runs"))
    try:
        wait_until(lambda: min(launched.steps()) >= 3, 30, what="both workers training")
        yield launched
    finally:
        launched.close()


def test_endpoint_json_is_private_and_the_token_is_nowhere_else(job):
    path = job.run_dir / "endpoint.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = job.endpoint["token"]
    assert len(token) >= 24 and job.endpoint["pid"] == job.proc.pid
    assert token not in (job.run_dir / "plan.json").read_text()
    assert token not in job.output()  # the printed URL carries the web token, not the job token
    for log in job.run_dir.glob("attempt-*/*/*.log"):
        assert token not in log.read_text(errors="replace"), log
    launcher = psutil.Process(job.proc.pid)
    for proc in [launcher, *launcher.children(recursive=True)]:
        assert token not in " ".join(proc.cmdline()), proc.cmdline()
    web_url = job.endpoint["web_url"]
    assert web_url.startswith("http://127.0.0.1:") and f"web page and /metrics: {web_url}" in job.output()


def test_the_job_serves_mutual_tls_only_and_keys_reach_tasks_by_path(job):
    """Launch's default: the run's certificates, keys 0600, found by tasks through ORCH_TLS_DIR
    (never on a command line); a plaintext client with the token gets no answer."""
    folder = Path(job.endpoint["tls_dir"])
    assert folder == tls.tls_dir(job.run_dir)
    keys = sorted(p.name for p in folder.glob("*.key"))
    assert keys == ["server.key", "tasks.key", "user.key", "worker-0.key", "worker-1.key"]
    assert all(stat.S_IMODE((folder / k).stat().st_mode) == 0o600 for k in keys)
    secrets = [(folder / k).read_text().splitlines()[1] for k in keys]
    launcher = psutil.Process(job.proc.pid)
    for proc in [launcher, *launcher.children(recursive=True)]:
        line = " ".join(proc.cmdline())
        assert ".key" not in line and not any(s in line for s in secrets), proc.cmdline()
    plan = json.loads((job.run_dir / "plan.json").read_text())
    assert {t["env"]["ORCH_TLS_DIR"] for t in plan["tasks"]} == {str(folder)}
    with EndpointClient(job.endpoint["address"], job.endpoint["token"], timeout_s=2.0) as plain:
        with pytest.raises(EndpointError) as err:
            plain.status()
    assert err.value.code == "UNAVAILABLE"


def test_status_of_a_running_job_over_grpc(job):
    first = cli("status", "steer", "--runs-dir", str(job.runs_dir), "--json")
    assert first.returncode == 0, first.stderr
    status = json.loads(first.stdout)
    assert (status["status"], status["live"], status["run_id"]) == ("Running", True, "steer")
    assert [t["name"] for t in status["tasks"]] == ["worker-0", "worker-1"]
    assert all(t["state"] == "Running" and t["last_heartbeat"]["phase"] == "training" for t in status["tasks"])
    assert all(0 <= t["heartbeat_age_s"] < 5 for t in status["tasks"])
    before = min(t["last_heartbeat"]["step"] for t in status["tasks"])
    wait_until(lambda: min(job.steps()) > before, 10, what="steps advancing")
    table = cli("status", str(job.run_dir))  # a run directory works as RUN too; not a terminal: plain table
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("run steer · multi_worker_mirrored · Running")
    assert lines[1].split() == ["task", "state", "phase", "pid", "step", "epoch", "loss", "ex/s", "cpu%", "rss",
                                "MB", "restarts", "beat"] and len(COLUMNS) == 12
    assert lines[2].split()[:3] == ["worker-0", "Running", "training"]


def test_a_wrong_token_is_refused_over_grpc(job):
    with job.client("not-the-token") as client:
        with pytest.raises(EndpointError) as err:
            client.status()
        assert err.value.code == "UNAUTHENTICATED"
        with pytest.raises(EndpointError):
            client.stop("should not stop")
    assert job.proc.poll() is None


def test_list_shows_the_running_job(job):
    done = cli("list", "--runs-dir", str(job.runs_dir), "--json")
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)
    assert (entry["run_id"], entry["status"], entry["live"], entry["tasks"]) == ("steer", "Running", True,
                                                                                 {"worker": 2})
    plain = cli("list", "--runs-dir", str(job.runs_dir))
    header = ["run", "status", "strategy", "tasks", "ports", "started", "wall", "accuracy"]
    assert plain.stdout.splitlines()[0].split() == header
    assert plain.stdout.splitlines()[1].split()[:4] == ["steer", "Running", "multi_worker_mirrored", "worker:2"]


def _get(url: str, headers: dict | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_are_scraped_and_parsed(job):
    base, token = job.endpoint["web_url"].split("/?token=")
    assert _get(base + "/metrics")[0] == 401
    assert _get(base + "/metrics?token=wrong")[0] == 401
    assert _get(base + "/metrics", {"Authorization": "Bearer wrong"})[0] == 401
    code, text = _get(base + "/metrics", {"Authorization": f"Bearer {token}"})
    assert code == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    expected = {
        "tfjob_state": "gauge", "tfjob_restarts": "counter", "tfjob_elapsed_seconds": "gauge",
        "tfjob_task_state": "gauge", "tfjob_task_step": "gauge", "tfjob_task_loss": "gauge",
        "tfjob_task_examples_per_second": "gauge", "tfjob_task_cpu_usage_ratio": "gauge",
        "tfjob_task_resident_memory_bytes": "gauge", "tfjob_task_restarts": "counter",
        "tfjob_task_heartbeat_age_seconds": "gauge", "process_resident_memory_bytes": "gauge",
    }
    for name, kind in expected.items():
        assert families[name].type == kind, name
    running = [s for s in families["tfjob_state"].samples if s.labels["state"] == "Running"]
    assert [s.value for s in running] == [1.0] and running[0].labels["run_id"] == "steer"
    assert {s.name for s in families["tfjob_restarts"].samples} == {"tfjob_restarts_total"}
    steps = {(s.labels["task_type"], s.labels["task_index"]): s.value for s in families["tfjob_task_step"].samples}
    assert set(steps) == {("worker", "0"), ("worker", "1")} and min(steps.values()) >= 3
    rss = [s.value for s in families["tfjob_task_resident_memory_bytes"].samples]
    assert len(rss) == 2 and all(v > 1e6 for v in rss)
    eps = [s.value for s in families["tfjob_task_examples_per_second"].samples]
    assert eps == [pytest.approx(320.0), pytest.approx(320.0)]  # 32 examples per 0.1 s step


def test_stop_from_another_terminal_ends_the_job_like_ctrl_c_and_logs_follow_to_the_end(job):
    follow = subprocess.Popen(orchestrator_cmd("logs", "steer", "--runs-dir", str(job.runs_dir), "-f"),
                              env=test_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = follow.stdout.readline()  # -f has printed what was there and is following
    assert first.startswith("[worker-0] worker-0 behavior=train:0:0.1"), first
    pids = [p.pid for p in psutil.Process(job.proc.pid).children()]
    done = cli("stop", "steer", "--runs-dir", str(job.runs_dir))
    assert done.returncode == 0, done.stderr
    assert "run steer: Interrupted" in done.stdout
    assert job.proc.wait(30) == 130
    summary = json.loads((job.run_dir / "summary.json").read_text())
    assert (summary["status"], summary["exit_code"]) == ("Interrupted", 130)
    assert summary["reason"].startswith("stopped by `orchestrator stop`")
    assert [t["signal"] for t in summary["tasks"]] == ["SIGTERM", "SIGTERM"]
    assert_no_process_left(pids + all_pids(summary))
    assert not (job.run_dir / "endpoint.json").exists()
    assert not tls.tls_dir(job.run_dir).exists()  # the run's keys go with it
    # -f ends by itself once the summary is written (a few KB of output)
    assert follow.wait(30) == 0, follow.stderr.read()
    # not communicate(): it skips what readline buffered
    lines = [first.rstrip("\n")] + follow.stdout.read().splitlines()
    assert any(ln.startswith("[worker-1] worker-1 step 1 loss") for ln in lines)
    everything = cli("logs", "steer", "--runs-dir", str(job.runs_dir))  # what the files hold now the job has ended
    assert everything.returncode == 0
    assert sorted(lines) == sorted(everything.stdout.splitlines())  # -f printed every line, to the very last
    last = max(int(ln.split()[3]) for ln in lines if ln.startswith("[worker-0] worker-0 step"))
    assert last >= summary["tasks"][0]["last_heartbeat"]["step"]

    # the finished run: status from summary.json (the job's exit code), stop has nothing to do
    after = cli("status", "steer", "--runs-dir", str(job.runs_dir), "--json")
    assert after.returncode == 130 and json.loads(after.stdout)["live"] is False
    again = cli("stop", "steer", "--runs-dir", str(job.runs_dir))
    assert again.returncode == 1 and "not running (Interrupted)" in again.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    from orchestrator.cli import main

    for args, field in ((("status", "nope", "--runs-dir", str(tmp_path)), "RUN='nope'"),
                        (("stop", "--runs-dir", str(tmp_path)), "runs-dir="),
                        (("logs", "--runs-dir", str(tmp_path / "x")), "runs-dir="),
                        (("status", "--runs-dir", str(tmp_path), "--web", "10.1.2.3:80"), "runs-dir="),
                        (("launch", "--web", "0.0.0.0:8080", "--dry-run"), "web='0.0.0.0:8080'"),
                        (("launch", "--web", "127.0.0.1:http", "--dry-run"), "web='127.0.0.1:http'")):
        assert main(list(args)) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(f"error: {field}") and err.count("\n") == 1, err
    assert main(["list", "--runs-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no runs under {tmp_path}\n"


def test_python_api_launch_poll_and_logs_follow_across_a_restart(tmp_path, monkeypatch):
    """api.launch with keyword fields; worker-1's first attempt dies (exit 137), the group restarts
    and succeeds; ``logs -f`` started at the launch follows into attempt 1."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TEST_BEHAVIOR", "train:30:0.05")
    monkeypatch.setenv("TEST_BEHAVIOR_worker_1_0", "train:8:0.05:137")
    with pytest.raises(SpecError, match="epoch=3: is not a spec field; did you mean epochs"):
        api.launch(runs_dir=tmp_path, program=PROGRAM, workers=2, epoch=3)
    handle = api.launch(runs_dir=tmp_path, run_id="py", program=PROGRAM, workers=2, heartbeat_interval_s=0.2,
                        backoff_s=0.1, deadline_s=60)
    with handle:
        follow = subprocess.Popen(orchestrator_cmd("logs", "py", "--runs-dir", str(tmp_path), "-f", "--json"),
                                  env=test_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: (handle.status().get("restarts") or 0) >= 1, 30, what="a group restart")
        outcome = handle.wait(60)
    assert (outcome.status, outcome.exit_code, outcome.succeeded) == ("Succeeded", 0, True)
    assert outcome.summary["restarts"] == 1 and handle.snapshot().ended
    assert [t["attempts"] for t in outcome.summary["tasks"]] == [2, 2]
    out, err = follow.communicate(timeout=30)
    assert follow.returncode == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert {(r["task"], r["attempt"]) for r in records} == {("worker-0", 0), ("worker-1", 0), ("worker-0", 1),
                                                           ("worker-1", 1)}
    assert {"task": "worker-1", "attempt": 0, "stream": "stderr", "line": "about to exit 137"} in records
    assert [r["line"] for r in records if (r["task"], r["attempt"], r["stream"]) == ("worker-1", 1, "stdout")][-1] \
        .startswith("worker-1 step 30 loss")
    history = json.loads((tmp_path / "py" / "history.json").read_text())
    assert any(e["kind"] == "restart" for e in history["events"]) and len(history["samples"]) > 4
    plain = cli("logs", "py", "worker-1", "--runs-dir", str(tmp_path), "--attempt", "1", "--stream", "stdout")
    assert plain.returncode == 0 and plain.stdout.splitlines()[-1].startswith("[worker-1] worker-1 step 30 loss")
    assert os.stat(tmp_path / "py" / "summary.json").st_size > 0
