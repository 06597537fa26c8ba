"""The health endpoint in-process on port 0: token, heartbeats, standard Health, ports."""

from __future__ import annotations

import os
import socket
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator import env
from orchestrator.health.endpoint import HealthEndpoint
from orchestrator.health.server import SERVICE_NAME, HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
from orchestrator.spec import TaskId
from orchestrator.task.reporter import HeartbeatReporter
from tests.conftest import wait_until

TOKEN = "test-token"


@pytest.fixture()
def server():
    store = HeartbeatStore()
    released = []

    def release(task, attempt):
        released.append((task, attempt))
        return 23456

    srv = HealthServer(TOKEN, store, release).start()
    srv.released = released
    yield srv, store
    srv.stop()


def heartbeat(seq: int, step: int) -> pb.Heartbeat:
    return pb.Heartbeat(task=pb.TaskKey(task_type="worker", task_index=1, attempt=0), sequence=seq, pid=1,
                        phase=pb.PHASE_TRAINING, step=step, loss=0.5)


def test_heartbeats_with_the_token_are_recorded(server):
    srv, store = server
    with grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.SupervisorStub(channel)
        reply = stub.StreamHeartbeats(iter([heartbeat(0, 1), heartbeat(1, 7)]),
                                      metadata=((env.TOKEN_METADATA_KEY, TOKEN),), timeout=5)
    assert reply.received == 2
    record = store.get(TaskId("worker", 1), 0)
    assert record.count == 2 and record.heartbeat.step == 7
    assert store.get(TaskId("worker", 0), 0) is None


@pytest.mark.parametrize("metadata", [(), ((env.TOKEN_METADATA_KEY, "wrong"),)])
def test_calls_without_the_right_token_are_rejected(server, metadata):
    srv, store = server
    with grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.SupervisorStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.StreamHeartbeats(iter([heartbeat(0, 1)]), metadata=metadata, timeout=5)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as info:
            stub.ReleasePort(pb.PortRequest(task=pb.TaskKey(task_type="worker")), metadata=metadata, timeout=5)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert store.total == 0 and srv.released == []


def test_standard_health_service_answers_without_a_token(server):
    srv, _ = server
    with grpc.insecure_channel(srv.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reporter_streams_every_interval_and_sends_a_final_phase(server):
    srv, store = server
    reporter = HeartbeatReporter(srv.address, TOKEN, "ps", 0, attempt=2, interval_s=0.05).start()
    reporter.update(step=3, loss=1.25, examples_per_second=100.0, test_accuracy=0.75)
    assert reporter.release_port() == 23456
    assert srv.released == [(TaskId("ps", 0), 2)]
    record = wait_until(lambda: (r := store.get(TaskId("ps", 0), 2)) and r.count >= 5 and r, 10, what="5 heartbeats")
    hb = record.heartbeat
    assert (hb.step, hb.loss, hb.examples_per_second, hb.metrics["test_accuracy"]) == (3, 1.25, 100.0, 0.75)
    assert hb.rss_bytes > 10_000_000 and hb.pid > 0
    reporter.close(pb.PHASE_DONE)
    assert store.get(TaskId("ps", 0), 2).heartbeat.phase == pb.PHASE_DONE


def test_what_the_strategy_formed_travels_in_typed_fields_not_in_the_metrics(server):
    srv, store = server
    reporter = HeartbeatReporter(srv.address, TOKEN, "worker", 0, interval_s=0.05).start()
    reporter.update(replicas_in_sync=1, cluster_workers=3, global_batch_size=64, now=True)
    record = wait_until(lambda: (r := store.get(TaskId("worker", 0), 0)) and r.heartbeat.HasField("formed") and r,
                        10, what="a heartbeat with what the strategy formed")
    hb = record.heartbeat
    assert (hb.formed.replicas_in_sync, hb.formed.cluster_workers) == (1, 3)
    assert dict(hb.metrics) == {"global_batch_size": 64.0}  # the program's own numbers only
    reporter.close(pb.PHASE_DONE)


def test_control_facts_travel_in_typed_fields_and_never_among_the_metrics(tmp_path):
    """issue 33 item 3: where training resumed, which checkpoint an evaluator evaluated and the PSS
    workers back in the coordinator's rotation are typed fields of the heartbeat, from the task's
    reporter through a real server to the supervisor, and the metrics users see are their own."""
    from orchestrator.report.status import status_dict
    from tests.decisions.test_supervisor_loop import Harness, spec_of

    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1, evaluator=1))
    srv = HealthServer(TOKEN, h.store).start()
    chief = HeartbeatReporter(srv.address, TOKEN, "chief", 0, interval_s=0.05).start()
    evaluator = HeartbeatReporter(srv.address, TOKEN, "evaluator", 0, interval_s=0.05).start()
    try:
        chief.update(pb.PHASE_TRAINING, step=41, resumed_from_step=40, rejoined={"worker-1": 1}, test_accuracy=0.5)
        evaluator.update(pb.PHASE_TRAINING, step=40, evaluated_step=40, eval_accuracy=0.75)
        beats = wait_until(lambda: (c := h.store.get(TaskId("chief", 0), 0)) and (e := h.store.get(
            TaskId("evaluator", 0), 0)) and c.heartbeat.step == 41 and e.heartbeat.step == 40 and (c, e), 10,
            what="both tasks' heartbeats")
        sent, evaluated = (record.heartbeat for record in beats)
        assert (sent.resumed_from_step, dict(sent.rejoined), dict(sent.metrics)) == (40, {"worker-1": 1},
                                                                                      {"test_accuracy": 0.5})
        assert (evaluated.evaluated_step, dict(evaluated.metrics)) == (40, {"eval_accuracy": 0.75})
        h.tick()
        status = status_dict(h.sup.snapshot())
    finally:
        chief.close(pb.PHASE_DONE)
        evaluator.close(pb.PHASE_DONE)
        srv.stop()
    tasks = {t["name"]: t for t in status["tasks"]}
    assert tasks["chief-0"]["last_heartbeat"]["metrics"] == {"test_accuracy": 0.5}  # the program's own only
    assert tasks["evaluator-0"]["last_heartbeat"]["metrics"] == {"eval_accuracy": 0.75}
    assert status["metrics"]["resumed_from_step"] == 40 and status["metrics"]["test_accuracy"] == 0.5
    assert status["evaluation"] == {"evaluated_step": 40, "eval_accuracy": 0.75}


def test_reporter_with_a_wrong_token_is_not_recorded(server):
    srv, store = server
    reporter = HeartbeatReporter(srv.address, "wrong", "worker", 0, interval_s=0.05).start()
    assert reporter.release_port() == 0
    reporter.close(pb.PHASE_DONE, timeout_s=1.0)
    assert store.total == 0


def test_flush_returns_once_the_latest_state_went_out_and_not_before(server):
    """``flush`` (the end of ``fit``, before TF's teardown may hold the GIL for seconds): True
    once a heartbeat with what was recorded went out; False while none can go out (a listener
    that never speaks HTTP/2: gRPC never takes a message) and without a stream."""
    srv, store = server
    assert HeartbeatReporter(srv.address, TOKEN, "worker", 0).flush(0.1) is False  # not started
    reporter = HeartbeatReporter(srv.address, TOKEN, "worker", 0, interval_s=60.0).start()  # phase changes only
    try:
        wait_until(lambda: store.get(TaskId("worker", 0), 0), 10, what="the first heartbeat")
        reporter.update(phase=pb.PHASE_FINISHING, step=7)
        assert reporter.flush(10.0) is True
        record = wait_until(lambda: (r := store.get(TaskId("worker", 0), 0)) and r.heartbeat.phase == pb.PHASE_FINISHING
                            and r, 10, what="the finishing heartbeat")
        assert record.heartbeat.step == 7
    finally:
        reporter.close(timeout_s=2.0)
    with socket.socket() as mute:  # accepts connections, never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        silent = HeartbeatReporter(f"127.0.0.1:{mute.getsockname()[1]}", TOKEN, "worker", 1, interval_s=60.0).start()
        try:
            silent.update(phase=pb.PHASE_FINISHING)
            assert silent.flush(0.5) is False
        finally:
            silent.close(timeout_s=0.5)


def test_time_the_server_loop_is_held_up_counts_as_deaf_and_beats_on_time_do_not(server):
    """The real server's pulse (every ``PULSE_S``): a loop held up 1.5 s (a blocking call on it,
    as a thread holding the GIL would) is ~1.5 s in which no task could be heard; before it, none."""
    srv, store = server
    wait_until(lambda: store._pulse_at is not None, 10, what="the server's first pulse")
    start = time.monotonic()
    assert store.deaf_s(start) == 0.0
    asyncio_loop = srv._loop.loop
    blocked = threading.Event()

    def hold_up() -> None:
        time.sleep(1.5)
        blocked.set()

    asyncio_loop.call_soon_threadsafe(hold_up)
    wait_until(blocked.is_set, 10, what="the loop's hold-up")
    # the pulse due during the hold-up runs once it ends; until then it counts as overdue
    deaf = wait_until(lambda: store._late and store.deaf_s(start), 10, what="the late pulse")
    assert 1.3 <= deaf <= 1.5 + 5.0  # what it was held up, less at most one period


def test_a_task_that_asks_for_its_port_before_the_launchs_health_server_listens_waits_for_it_and_gets_it():
    """A launch holds the health port, starts its tasks, then the server (HealthEndpoint): a
    task of this machine that asks for its port first waits for the server (within the call's
    deadline) instead of failing, and its heartbeats follow. Without the wait the early call
    fails at once and the task gets port 0: its tf.distribute server would then find its port
    still held."""
    store = HeartbeatStore()
    endpoint = HealthEndpoint("127.0.0.1", token=TOKEN, store=store, release_port=lambda task, attempt: 23456)
    reporter = None
    try:
        with socket.socket() as other:  # held: nobody else gets the port meanwhile
            with pytest.raises(OSError):
                other.bind(("127.0.0.1", endpoint.port))
        with pytest.raises(ConnectionRefusedError):  # ...and nothing answers on it yet
            socket.create_connection(("127.0.0.1", endpoint.port), timeout=5).close()
        reporter = HeartbeatReporter(endpoint.address, TOKEN, "worker", 0, interval_s=0.05,
                                     orchestrator_pid=os.getppid()).start()  # its parent: as a launch's task
        asking, got = threading.Event(), []

        def ask() -> None:
            asking.set()
            got.append(reporter.release_port())

        asker = threading.Thread(target=ask)
        asker.start()
        assert asking.wait(10)
        server = endpoint.start()  # the server's own start takes milliseconds: the call came first
        asker.join(10)
        assert got == [23456]
        assert endpoint.address == server.address  # the address the tasks were given
        wait_until(lambda: store.get(TaskId("worker", 0), 0), 10, what="the first heartbeat")
    finally:
        if reporter is not None:
            reporter.close(pb.PHASE_DONE, timeout_s=2.0)
        endpoint.stop()
        endpoint.stop()  # idempotent
    with socket.socket() as again:  # let go
        again.bind(("127.0.0.1", endpoint.port))


def test_a_health_endpoint_that_never_started_lets_its_port_go():
    endpoint = HealthEndpoint("127.0.0.1", token=TOKEN, store=HeartbeatStore())
    endpoint.stop()
    with socket.socket() as again:
        again.bind(("127.0.0.1", endpoint.port))


def _status_of_a_job(tmp_path, code: int):
    """A Recorder holding a parameter-server job's snapshot after worker-1 exited ``code`` (-9: it
    is restarted; 1: the job failed), the chief's loss NaN, an evaluation, what a strategy formed,
    and the history the page charts."""
    from orchestrator.report.history import Recorder
    from tests.decisions.test_supervisor_loop import Harness, spec_of

    h = Harness(tmp_path, spec_of(strategy="parameter_server", workers=2, ps=1, evaluator=1,
                                  supervision={"max_restarts": 3}))
    recorder = Recorder(sample_interval_s=0.0)
    h.all_beat(step=3)
    h.tick(0.1)
    recorder.update(h.sup.snapshot())
    h.beat("chief-0", step=4, test_accuracy=0.9, replicas_in_sync=2, cluster_workers=2)
    chief = h.task("chief-0")
    h.store.get(chief.task, chief.attempt).heartbeat.loss = float("nan")
    h.beat("evaluator-0", step=4, eval_accuracy=0.5)
    h.tick(0.1)
    h.exit("worker-1", code)
    h.tick(0.1)
    h.tick(2.0)
    if code == -9:
        h.beat("worker-1", step=5)
        h.tick(0.1)
    recorder.event(1.5, "worker-1 failed")
    recorder.update(h.sup.snapshot())
    return recorder


@pytest.mark.parametrize("code", [-9, 1])
def test_the_status_reply_is_typed_and_the_client_reads_back_the_status_dictionary(tmp_path, monkeypatch, code):
    """issue 33 item 3: GetStatus answers typed messages (no JSON text), built from the snapshot,
    and the client turns them into the very dictionary ``status --json`` printed from JSON."""
    import json

    from orchestrator import jsontext
    from orchestrator.health.client import EndpointClient
    from orchestrator.report import summary

    assert "status_json" not in pb.StatusReply.DESCRIPTOR.fields_by_name
    monkeypatch.setattr(summary, "peak_rss_bytes", lambda: 1234)
    from types import SimpleNamespace

    from orchestrator.report import status, status_reply

    clock = SimpleNamespace(time=lambda: 1_700_000_000.25)  # updated_at, the same in both
    monkeypatch.setattr(status, "time", clock)
    monkeypatch.setattr(status_reply, "time", clock)
    recorder = _status_of_a_job(tmp_path, code)
    srv = HealthServer(TOKEN, HeartbeatStore(), status=recorder.status_reply).start()
    try:
        with EndpointClient(srv.address, TOKEN) as client:
            live, charted = client.status(), client.status(history=True, history_since=0)
    finally:
        srv.stop()
    want = json.loads(jsontext.dumps(recorder.status()))  # what the JSON text of the reply was
    assert live["failures"] and live["tasks"][0]["last_heartbeat"]["formed"] and live["evaluation"]
    assert bool(live["recoveries"]) is (code == -9) and bool(live["root_cause"]) is (code == 1)
    assert live["non_finite"] == {"metrics.final_loss": "NaN", "tasks[0].last_heartbeat.loss": "NaN"}
    assert live == want
    assert json.dumps(live) == json.dumps(want)  # the same text: every field in its place
    assert charted == json.loads(jsontext.dumps(recorder.status(history=True)))
    assert charted["history"]["samples"] and charted["history"]["events"][0]["text"] == "worker-1 failed"


def test_a_status_before_the_job_started_is_empty(tmp_path):
    from orchestrator.health.client import EndpointClient
    from orchestrator.report.history import Recorder

    srv = HealthServer(TOKEN, HeartbeatStore(), status=Recorder().status_reply).start()
    try:
        with EndpointClient(srv.address, TOKEN) as client:
            assert client.status() == {} and client.status(history=True) == {}
    finally:
        srv.stop()
