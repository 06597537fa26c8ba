"""The Slurm backend's growth commands on the real simulated cluster, without TensorFlow
(:mod:`orchestrator.backends.slurm_extend`; tests/slurm/extend_probe.py runs inside ``salloc -N2``): a lost
node that answers again is room without an extension; an extension Slurm does not start within the bound
is cancelled, said once, and asked again; ``close`` cancels every extension (none left in ``squeue``);
a grow asked by ``resize`` two nodes short asks for both at once.
The whole grow of a TensorFlow job: test_slurm_elastic.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, wait_until
from tests.slurm.conftest import SUBNET

pytestmark = pytest.mark.slurm


def test_a_node_back_is_room_and_an_extension_not_started_in_time_is_cancelled_and_asked_again(slurm_env, tmp_path):
    def squeue(*args: str) -> str:
        return subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, env=slurm_env,
                              timeout=30).stdout

    hold = subprocess.run(["sbatch", "--parsable", "-w", "osl2", "--exclusive", "--job-name", "test-holds-osl2",
                           "--output=/dev/null", "--wrap", "sleep 300"], capture_output=True, text=True, env=slurm_env,
                          timeout=30, check=True).stdout.strip().split(";")[0]
    try:
        wait_until(lambda: squeue("-j", hold, "-o", "%T").strip() == "RUNNING", timeout_s=60, interval_s=0.1,
                   what="the test's job on osl2 running")
        probe = subprocess.run(["salloc", "-N2", "--no-kill", sys.executable, str(REPO / "tests/slurm/extend_probe.py"),
                                str(tmp_path)], capture_output=True, text=True, env=slurm_env, timeout=180, cwd=REPO)
    finally:
        subprocess.run(["scancel", hold], env=slurm_env, timeout=30)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    out = json.loads(probe.stdout.strip().splitlines()[-1])
    # 1. osl1, taken for lost, answers again and runs a step: room for 2, the extension asked meanwhile (it waits:
    # osl2 is held) cancelled, osl1 placed on again
    assert out["back_room"] == 2, out
    (back,) = out["back_asked"]
    assert out["back_news"] == [
        f"growing back needs another node: asked Slurm for extension allocation {back} (one node, partition orchci, "
        "time limit the partition default)",
        "node osl1, lost, answers again and runs a step: it is room again",
        f"extension allocation {back} cancelled: the job needs no more nodes now"], out
    assert out["back_placement"] == [SUBNET + "10:0", SUBNET + "11:0"], out
    # 2. MAX 3 needs a third node: osl2 is held, so the extension waits; cancelled at the bound and asked again
    first, second, third = out["late_asked"][1:4]
    assert out["late_room"] == 2, out
    said = out["late_news"]
    late = [s for s in said if "not started by Slurm within 2 s" in s]
    assert late == [f"extension allocation {first} not started by Slurm within 2 s (Reason=Resources): cancelled; "
                    "asking again in 0.5 s"], said  # said once, not at every try
    assert len({first, second, third}) == 3
    # close cancelled every extension of the run: none left
    assert "ext:extend" not in squeue("-o", "%i|%j|%T"), squeue("-o", "%i|%j|%T")
    assert set(out["ext_asked"]) >= {first, second, third}


def test_a_grow_asked_two_nodes_short_asks_for_both_extensions_at_once(slurm_env, tmp_path):
    probe = subprocess.run(["salloc", "-N1", "-w", "osl0", "--no-kill", sys.executable,
                            str(REPO / "tests/slurm/extend_probe.py"), str(tmp_path), "together"],
                           capture_output=True, text=True, env=slurm_env, timeout=180, cwd=REPO)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    out = json.loads(probe.stdout.strip().splitlines()[-1])
    print(f"\nasked at first {out['asked_at_first']}, all asked {out['ext_asked']}, granted {out['granted']}")
    assert out["room"] == 3, out
    assert len(out["asked_at_first"]) == 2, out  # both asked in the watch's first look, not one after the other
    assert sorted(out["granted"]) == ["osl1", "osl2"], out  # each on its own node
    said = [s for s in out["news"] if "asked Slurm for extension allocation" in s]
    assert said[:2] == [f"growing back needs another node: asked Slurm for extension allocation {job} (one node, "
                        "partition orchci, time limit the partition default)" for job in out["asked_at_first"]], out
    assert not [s for s in out["news"] if "not started by Slurm" in s or "cannot be used" in s], out
    assert out["placement"] == [SUBNET + "10:0", SUBNET + "11:0", SUBNET + "12:0"], out  # one worker a node
    squeued = subprocess.run(["squeue", "-h", "-o", "%i|%j|%T"], capture_output=True, text=True, env=slurm_env,
                             timeout=30).stdout
    assert "ext:extend" not in squeued, squeued  # close cancelled both
