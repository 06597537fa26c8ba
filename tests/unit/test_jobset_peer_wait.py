"""A JobSet pod waits, before TensorFlow starts, for its peers' DNS names, saying which one and for
how long, bounded by ORCH_JOBSET_PEER_WAIT_S (issue 21 item 9). Real name resolution: ``localhost``
resolves, names under ``.invalid`` never do (RFC 6761); the clock and the resolver are faked only
through our own interface (``wait_for_peers``' ``resolve`` / ``clock`` / ``sleep``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator import env
from orchestrator.task.jobset import (
    PEER_WAIT_S,
    PeersUnresolved,
    peer_wait_s,
    peers_of,
    resolves,
    tf_config_from_jobset,
    wait_for_jobset_peers,
    wait_for_peers,
)
from tests.conftest import REPO, test_env


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def pod_env(subdomain: str, **extra: str) -> dict[str, str]:
    return {env.JOBSET_NAME: "demo", env.JOBSET_REPLICATED_JOB: "worker", env.JOBSET_JOB_INDEX: "0",
            env.JOB_COMPLETION_INDEX: "0", env.JOBSET_CLUSTER: json.dumps({"worker": 2}),
            env.JOBSET_SUBDOMAIN: subdomain, **extra}


def test_real_names_localhost_resolves_and_invalid_never_does():
    assert resolves("localhost")
    assert not resolves("demo-worker-0-1.demo.invalid")
    assert not resolves("")


def test_peers_that_resolve_are_not_waited_for_and_nothing_is_said():
    said: list[str] = []
    assert wait_for_peers([("worker-1", "localhost"), ("ps-0", "127.0.0.1")], 5.0, say=said.append) < 5.0
    assert said == []


def test_a_peer_that_never_resolves_fails_after_the_bound_naming_it():
    said: list[str] = []
    peers = [("worker-0", "localhost"), ("worker-1", "demo-worker-0-1.demo.invalid")]
    with pytest.raises(PeersUnresolved) as info:
        wait_for_peers(peers, 0.3, say=said.append, poll_s=0.05)
    assert said[0].startswith("waiting for peer worker-1 (demo-worker-0-1.demo.invalid) to resolve in DNS")
    assert "at most 0.3 s (ORCH_JOBSET_PEER_WAIT_S)" in said[0]
    message = str(info.value)
    assert "did not resolve within 0.3 s (ORCH_JOBSET_PEER_WAIT_S): worker-1 (demo-worker-0-1.demo.invalid)" in message
    assert "localhost" not in message  # worker-0 resolved
    assert "network.enableDNSHostnames" in message


def test_the_wait_says_which_peer_and_how_long_until_its_name_appears():
    clock = FakeClock()
    appears_at = {"demo-worker-0-1.demo": 12.0, "demo-ps-0-0.demo": 3.0}

    def resolve(host: str) -> bool:  # names Kubernetes creates as pods start
        return clock.now >= appears_at.get(host, 0.0)

    said: list[str] = []
    peers = [("chief-0", "demo-chief-0-0.demo"), ("worker-1", "demo-worker-0-1.demo"), ("ps-0", "demo-ps-0-0.demo")]
    waited = wait_for_peers(peers, 60.0, resolve=resolve, say=said.append, clock=clock, sleep=clock.sleep,
                            poll_s=0.5, report_every_s=5.0)
    assert waited == pytest.approx(12.0)
    assert said[0].startswith("waiting for peer worker-1 (demo-worker-0-1.demo) and 1 more peer(s) to resolve")
    assert said[1] == "still waiting for peer worker-1 (demo-worker-0-1.demo) after 5 s of at most 60 s"
    assert said[2] == "still waiting for peer worker-1 (demo-worker-0-1.demo) after 10 s of at most 60 s"
    assert said[3] == "every peer's name resolves, after 12.0 s"
    assert len(said) == 4


def test_the_bound_is_exact_on_the_fake_clock():
    clock = FakeClock()
    with pytest.raises(PeersUnresolved):
        wait_for_peers([("worker-1", "x")], 2.0, resolve=lambda _h: False, say=lambda _l: None, clock=clock,
                       sleep=clock.sleep, poll_s=0.5)
    assert 2.0 < clock.now <= 2.6


def test_peers_are_every_other_task_of_the_cluster_and_none_for_the_evaluator():
    config = tf_config_from_jobset({**pod_env("demo"), env.JOBSET_CLUSTER: json.dumps(
        {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1})})
    assert peers_of(config) == [("chief-0", "demo-chief-0-0.demo"), ("worker-1", "demo-worker-0-1.demo"),
                                ("ps-0", "demo-ps-0-0.demo")]
    assert peers_of({**config, "task": {"type": "evaluator", "index": 0}}) == []


@pytest.mark.parametrize("raw, expected", [("", PEER_WAIT_S), ("0", 0.0), ("12.5", 12.5)])
def test_the_bound_comes_from_its_variable(raw, expected):
    assert peer_wait_s({env.JOBSET_PEER_WAIT_S: raw}) == expected


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf"])
def test_a_bad_bound_is_an_error_naming_the_variable(raw):
    with pytest.raises(ValueError, match=r"^ORCH_JOBSET_PEER_WAIT_S=.* is not a number of seconds >= 0"):
        peer_wait_s({env.JOBSET_PEER_WAIT_S: raw})


def test_outside_a_jobset_pod_nothing_is_waited_for():
    config = json.dumps({"cluster": {"worker": ["nowhere.invalid:1", "x.invalid:1"]},
                         "task": {"type": "worker", "index": 0}})
    assert wait_for_jobset_peers({"TF_CONFIG": config, env.JOBSET_PEER_WAIT_S: "soon"}) == 0.0


def _run(argv: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in test_env().items() if k != "TF_CONFIG" and not k.startswith(("ORCH_", "JOB"))}
    return subprocess.run(argv, env={**base, **environ}, cwd=REPO, capture_output=True, text=True, timeout=60)


PROGRAM = [sys.executable, "-c", "print('the program started')"]
EXECWRAP = [sys.executable, "-m", "orchestrator.task.execwrap", "--", *PROGRAM]
RUN_TASK = [sys.executable, "-c", "import sys; from orchestrator.task.runtime import run_task; "
            "sys.exit(run_task(lambda c, r: print('the program started')))"]


@pytest.mark.parametrize("argv", [EXECWRAP, RUN_TASK], ids=["execwrap", "run_task"])
def test_a_pod_whose_peers_never_resolve_says_so_and_fails_before_the_program_starts(argv):
    result = _run(argv, pod_env("demo.invalid", **{env.JOBSET_PEER_WAIT_S: "1"}))
    assert result.returncode == 1, result.stderr
    assert "the program started" not in result.stdout
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("waiting for peer worker-1 (demo-worker-0-1.demo.invalid) to resolve in DNS")
    assert lines[-1].startswith("error: peer name(s) did not resolve within 1 s (ORCH_JOBSET_PEER_WAIT_S): "
                                "worker-1 (demo-worker-0-1.demo.invalid)")


@pytest.mark.parametrize("argv", [EXECWRAP, RUN_TASK], ids=["execwrap", "run_task"])
def test_a_pod_whose_peers_resolve_starts_its_program_at_once(argv):
    config = json.dumps({"cluster": {"worker": ["localhost:2222", "127.0.0.1:2223"]},
                         "task": {"type": "worker", "index": 0}})
    result = _run(argv, pod_env("demo.invalid", TF_CONFIG=config, **{env.JOBSET_PEER_WAIT_S: "1"}))
    assert result.returncode == 0, result.stderr
    assert "the program started" in result.stdout and "waiting for peer" not in result.stderr


def test_a_bad_bound_in_a_pod_exits_2_with_one_line():
    result = _run(EXECWRAP, pod_env("demo.invalid", **{env.JOBSET_PEER_WAIT_S: "soon"}))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: ORCH_JOBSET_PEER_WAIT_S='soon' is not a number of seconds >= 0 (0: no wait), e.g. 300"]
