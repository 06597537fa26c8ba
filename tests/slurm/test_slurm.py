"""``launch --backend slurm`` on a real Slurm cluster of 3 simulated nodes (see conftest.py).

Every job runs the way a user runs it: ``salloc -N 3 --no-kill python -m orchestrator launch
--backend slurm ...`` from this machine (the login node; the health endpoint binds the bridge
address 10.250.79.1). Right after ``launch`` returns, still inside the allocation, ``squeue -s``
records the job's steps: none of the run's may be left (but on a lost node, until Slurm itself
declares it down).
"""

from __future__ import annotations

import ipaddress
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, wait_until
from tests.slurm.conftest import NODES, SLURM_DIR, SUBNET

pytestmark = pytest.mark.slurm

_STEPS_AFTER = ('python -m orchestrator "$@"; rc=$?; squeue -h -s -j "$SLURM_JOB_ID" -o "%i|%j|%N" > "$STEPS_FILE"; '
                'exit $rc')


def run_job(slurm_env, tmp_path: Path, run_id: str, *args: str, nodes: int = 3, on_line=None,
            timeout_s: float = 240) -> tuple[int, list[tuple[float, str]], dict, list[str]]:
    """Run ``launch --backend slurm`` under ``salloc``; returns (exit code, output lines with their
    monotonic arrival time, summary.json, this run's steps left in the allocation)."""
    steps_file = tmp_path / f"{run_id}.steps"
    cmd = ["salloc", f"-N{nodes}", "--no-kill", "bash", "-c", _STEPS_AFTER.replace("python", sys.executable, 1), "job",
           "launch", "--backend", "slurm", "--plain", "--runs-dir", str(tmp_path), "--run-id", run_id, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**slurm_env, "STEPS_FILE": str(steps_file)})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout] + [lines.put(None)], daemon=True).start()
    seen: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                break
            seen.append((time.monotonic(), line.rstrip("\n")))
            if on_line is not None:
                on_line(line)
        code = proc.wait(timeout=30)
    except (queue.Empty, subprocess.TimeoutExpired):
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        pytest.fail(f"{run_id} did not end within {timeout_s} s:\n" + "\n".join(t for _, t in seen[-40:]))
    (tmp_path / f"{run_id}.out").write_text("".join(f"{t:.2f} {ln}\n" for t, ln in seen))
    summary = json.loads((tmp_path / run_id / "summary.json").read_text())
    left = [ln for ln in steps_file.read_text().splitlines() if f"|{run_id}:" in ln] if steps_file.exists() else []
    return code, seen, summary, left


def seen_at(seen, text: str) -> float:
    """Arrival time of the first output line containing ``text``."""
    return next(t for t, ln in seen if text in ln)


def output(seen) -> str:
    return "\n".join(text for _, text in seen)


def cluster_addresses(tmp_path: Path, run_id: str) -> dict[str, str]:
    return json.loads((tmp_path / run_id / "cluster.json").read_text())["addresses"]


def assert_node_addresses(addresses: dict[str, str]) -> None:
    """Every TF_CONFIG address is a node's own address (10.250.79.1x), none loopback, each task
    on its own node."""
    hosts = [a.rsplit(":", 1)[0] for a in addresses.values()]
    for host in hosts:
        assert not ipaddress.ip_address(host).is_loopback and host.startswith(SUBNET + "1"), addresses
    assert len(set(hosts)) == len(hosts), addresses


def test_mwms_two_workers_across_two_nodes_recover_a_sigkilled_worker_by_a_group_restart(slurm_env, tmp_path):
    # one MWMS job for both: 2 workers on 2 nodes train, worker-1 is SIGKILLed at step 60 and the group restarts
    code, seen, summary, left = run_job(slurm_env, tmp_path, "kill", "--workers", "2", "--epochs", "3",
                                        "--inject-fault", "worker:1:kill@step=60")
    assert code == 0, output(seen)
    assert summary["status"] == "Succeeded"
    assert summary["metrics"]["test_accuracy"] >= 0.85
    assert summary["restarts"] == 1
    first = summary["failures"][0]
    assert first["task"] == "worker:1" and first["signal"] == "SIGKILL", first
    assert summary["recoveries"][0]["scope"] == "group"
    addresses = cluster_addresses(tmp_path, "kill")  # the cluster of the last attempt (attempt 1)
    assert set(addresses) == {"worker-0", "worker-1"}
    assert_node_addresses(addresses)
    worker_1_log = tmp_path / "kill" / "attempt-1" / "worker-1" / "stdout.log"
    tf_config_lines = [ln for ln in worker_1_log.read_text().splitlines()
                       if "registered" in ln]
    assert tf_config_lines and addresses["worker-1"] in tf_config_lines[0]
    plan = (tmp_path / "kill" / "plan.json").read_text()
    token_free = plan + output(seen)
    assert '"ORCH_JOB_TOKEN": "***"' in plan and "x-job-token" not in token_free
    assert (tmp_path / "kill" / "model" / "saved_model.pb").exists()
    assert left == [], left


def _slurmd_pid(node: str) -> int:
    return int(Path(SLURM_DIR, f"slurmd-{node}.pid").read_text())


def _restore_node(slurm_env, node: str) -> None:
    """Bring a node back: its link up, a new slurmd; wait until Slurm has it idle again."""
    index = NODES.index(node)
    subprocess.run(["ip", "link", "set", f"oslv{index}", "up"], check=True)
    try:
        os.kill(_slurmd_pid(node), 0)
    except (ProcessLookupError, FileNotFoundError, ValueError):
        conf = slurm_env["SLURM_CONF"]
        subprocess.run(["nsenter", f"--net=/var/run/netns/{node}", "unshare", "--uts", "sh", "-c",
                        f"hostname {node}; exec slurmd -f {conf} -N {node}"], check=True, timeout=30)

    def usable() -> bool:  # back in service (a step of the ended job may still be completing there)
        out = subprocess.run(["sinfo", "-h", "-p", "orchci", "-n", node, "-o", "%T"], capture_output=True, text=True,
                             env=slurm_env)  # -p: a node is in several partitions (low, high)
        return out.stdout.strip() in ("idle", "mixed", "completing")

    wait_until(usable, timeout_s=90, interval_s=0.25, what=f"{node} back in service")


def cut_node_in_epoch_2(run_dir: Path, node: str, epochs: int, watch: str = "worker-1", dies: bool = False,
                        ) -> tuple[dict[str, float], Callable[[str], None]]:
    """An ``on_line`` for :func:`run_job` that cuts ``node`` (its slurmd SIGKILLed, its link down; with
    ``dies``, every process of the node SIGKILLed instead, slurmd, slurmstepd and the tasks, its link
    left up: its peers' connections are reset, as when a node's processes die) once ``watch`` (a task
    that runs ``fit``: an MWMS worker, a PSS chief) is in its 2nd epoch of ``epochs``, and the dict it
    records the cut's ``time.monotonic()`` in (``"at"``). A known point of training, not a status line
    (epochs can fit between two): tf-keras prints "Epoch 2/N" as it begins; under MWMS worker-0 then
    waits in the all-reduce, so the job cannot end before the loss is seen."""
    cut: dict[str, float] = {}
    log = run_dir / "attempt-0" / watch / "stdout.log"

    def on_line(line: str) -> None:
        if not cut and "job Running" in line:
            wait_until(lambda: log.exists() and f"Epoch 2/{epochs}" in log.read_text(), timeout_s=180,
                       interval_s=0.05, what=f"{watch} in its 2nd epoch")
            if dies:  # by pid, every process of the node's namespace (this test's cluster's own)
                pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True, check=True,
                                      timeout=30).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            else:
                os.kill(_slurmd_pid(node), signal.SIGKILL)
                subprocess.run(["ip", "link", "set", f"oslv{NODES.index(node)}", "down"], check=True)
            cut["at"] = time.monotonic()

    return cut, on_line


def run_with_a_lost_node(slurm_env, tmp_path: Path, run_id: str, node: str, epochs: int, *args: str, nodes: int = 3,
                         also: Callable[[str], None] | None = None, watch: str = "worker-1", dies: bool = False,
                         ) -> tuple[dict[str, float], list[tuple[float, str]], dict, str]:
    """:func:`run_job` of ``run_id`` (``--epochs epochs`` and ``args``, in an allocation of ``nodes``)
    with ``node`` cut (or its processes killed: ``dies``) in ``watch``'s 2nd epoch
    (:func:`cut_node_in_epoch_2`; ``also``: another
    ``on_line`` after it), the node brought back after; asserts the cut came, the job exited 0 and only
    a step on the lost node is left (Slurm lists it until it declares the node down). Returns ``(cut,
    seen, summary, text)``: the cut's time (``"at"``), the launch's lines with their times,
    ``summary.json`` and the output as text."""
    cut, cut_on_line = cut_node_in_epoch_2(tmp_path / run_id, node, epochs, watch, dies)

    def on_line(line: str) -> None:
        cut_on_line(line)
        if also is not None:
            also(line)

    try:
        code, seen, summary, left = run_job(slurm_env, tmp_path, run_id, "--epochs", str(epochs), *args,
                                            nodes=nodes, on_line=on_line)
    finally:
        _restore_node(slurm_env, node)
    text = output(seen)
    assert cut, "training never showed up in the output:\n" + text
    assert code == 0, text
    assert all(ln.endswith(f"|{node}") for ln in left), left
    return cut, seen, summary, text



def test_a_lost_node_is_detected_within_the_heartbeat_timeout_and_its_task_moves(slurm_env, tmp_path):
    """slurmd of worker-1's node SIGKILLed and the node's link cut mid-training: worker-1 stops
    heartbeating, is declared hung within the heartbeat timeout (Slurm alone waits SlurmdTimeout),
    and the group restarts with worker-1 on the spare node; the job succeeds."""
    heartbeat_timeout_s = 4.0
    lost_node = "osl1"  # placement: worker-0 on osl0, worker-1 on osl1, osl2 spare
    cut, seen, summary, text = run_with_a_lost_node(
        slurm_env, tmp_path, "lost", lost_node, 6, "--workers", "2", "--heartbeat-timeout", str(heartbeat_timeout_s),
        "--restart-backoff", "0.5")
    hung = [(t, ln) for t, ln in seen if "worker-1 is hung: no heartbeat" in ln]
    assert hung, text
    detected_s = hung[0][0] - cut["at"]
    print(f"\nnode cut -> worker-1 declared hung: {detected_s:.1f} s (heartbeat timeout {heartbeat_timeout_s:g} s)")
    assert detected_s <= heartbeat_timeout_s + 2.0, text
    assert f"worker-1 {lost_node} -> osl2" in text, text
    assert summary["status"] == "Succeeded"
    assert summary["metrics"]["test_accuracy"] >= 0.85
    addresses = cluster_addresses(tmp_path, "lost")
    assert addresses["worker-1"].startswith(SUBNET + "12:"), addresses  # on osl2 now
    recovery = summary["recoveries"][0]
    before = [int(m.group(1)) for t, ln in seen if t <= cut["at"]
              for m in [re.search(r"worker-1 Running/training step (\d+)", ln)] if m]
    print(f"node cut at step >= {before[-1] if before else 45}, training resumed from step "
          f"{recovery['resumed_from_step']}; "
          f"cut -> training again {seen_at(seen, 'training again') - cut['at']:.1f} s")
