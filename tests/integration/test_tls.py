"""Mutual TLS on the health endpoint (issue 37, item 1): a real gRPC server with a run's own
certificates, real clients with and without them."""

from __future__ import annotations

import stat
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator import env, tls
from orchestrator.health.client import EndpointClient, EndpointError
from orchestrator.health.endpoint import HealthEndpoint
from orchestrator.health.store import HeartbeatStore
from orchestrator.pkimaker import CertificateMaker, run_pki
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
from orchestrator.spec import TaskId
from orchestrator.task.reporter import HeartbeatReporter
from tests.conftest import wait_until

TOKEN = "test-token"
METADATA = ((env.TOKEN_METADATA_KEY, TOKEN),)
STATUS = pb.StatusReply(job=pb.JobStatus(run_id="run-a", status="Running", live=True))


@pytest.fixture()
def served(tmp_path):
    """A run's certificates and a health endpoint that requires them."""
    pki = tls.make_run_pki(tmp_path / "run", "run-a", tls.server_hosts("127.0.0.1"), ["worker-0", "worker-1"])
    store = HeartbeatStore()
    endpoint = HealthEndpoint("127.0.0.1", token=TOKEN, store=store, status=lambda history, since: STATUS)
    endpoint.tls = pki
    endpoint.start()
    yield endpoint, store, pki
    endpoint.stop()


def _health(channel: grpc.Channel) -> health_pb2.HealthCheckResponse:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=3)


def _status(channel: grpc.Channel) -> pb.StatusReply:
    return pb_grpc.SupervisorStub(channel).GetStatus(pb.StatusRequest(), metadata=METADATA, timeout=3)


def test_the_run_s_files_are_private_and_name_the_endpoint(served):
    _, _, pki = served
    assert stat.S_IMODE(pki.folder.stat().st_mode) == 0o700
    for name in ("server", "user", "tasks", "worker-0", "worker-1"):
        assert stat.S_IMODE((pki.folder / f"{name}.key").stat().st_mode) == 0o600, name
    assert not list(pki.folder.glob("ca.key"))  # the CA's key never touches the disk
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((pki.folder / "server.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tls.SERVER_NAME in names.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


def test_a_client_of_the_run_is_answered_on_every_service(served):
    endpoint, _, pki = served
    with tls.channel(endpoint.address, pki.client(tls.USER)) as channel:
        assert _health(channel).status == health_pb2.HealthCheckResponse.SERVING
        assert _status(channel) == STATUS
    with EndpointClient(endpoint.address, TOKEN, tls=pki.client(tls.USER)) as client:
        status = client.status()
    assert (status["run_id"], status["status"], status["live"]) == ("run-a", "Running", True)


def test_a_task_streams_its_heartbeats_with_its_own_certificate(served):
    endpoint, store, pki = served
    reporter = HeartbeatReporter(endpoint.address, TOKEN, "worker", 1, interval_s=0.05,
                                 tls_dir=str(pki.folder)).start()
    try:
        wait_until(lambda: store.get(TaskId("worker", 1), 0), 10, what="a heartbeat over TLS")
    finally:
        reporter.close(pb.PHASE_DONE, timeout_s=2.0)


def test_a_task_started_before_its_runs_certificates_waits_for_them_not_for_a_previous_lifes(tmp_path, monkeypatch):
    """A launch starts its first tasks while its certificate maker makes the certificates (api.prepare's
    start_early, orchestrator.pkimaker): ``files_for`` waits for the folder's ``ca.crt``, written last; a resumed
    run's previous CA is removed first (expect_pki). The maker's certificates serve a real TLS stream."""
    maker = CertificateMaker.start()  # as the CLI does: it imports cryptography while the rest happens
    assert maker is not None
    run = tmp_path / "run"
    old = tls.make_run_pki(run, "life-0", ["127.0.0.1"], ["worker-0"])
    stale = old.ca.read_bytes()
    assert tls.expect_pki(run) == old.folder and not old.ca.exists()
    monkeypatch.setattr(tls, "PKI_WAIT_S", 0.3)
    began = time.monotonic()
    files = tls.files_for(old.folder, "worker-0")
    assert time.monotonic() - began >= 0.3 and files is not None and not files.ca.exists()  # waited its bound
    monkeypatch.setattr(tls, "PKI_WAIT_S", 30.0)
    started: list[HeartbeatReporter] = []
    reporter = threading.Thread(target=lambda: started.append(
        HeartbeatReporter(endpoint.address, TOKEN, "worker", 0, interval_s=0.05, tls_dir=str(old.folder)).start()))
    store = HeartbeatStore()
    endpoint = HealthEndpoint("127.0.0.1", token=TOKEN, store=store, status=lambda history, since: STATUS)
    reporter.start()  # it waits in files_for until the maker's last file
    assert maker.ask(run, "life-1", "127.0.0.1", ["worker-0"])
    endpoint.tls = pki = run_pki(maker, run, "life-1", "127.0.0.1", ["worker-0"])
    endpoint.start()
    try:
        reporter.join(10)
        assert pki.ca.read_bytes() != stale and len(started) == 1 and pki.has_own("worker-0")
        wait_until(lambda: store.get(TaskId("worker", 0), 0), 10, what="a heartbeat with this life's certificate")
    finally:
        for each in started:
            each.close(pb.PHASE_DONE, timeout_s=2.0)
        endpoint.stop()


def test_a_certificate_maker_never_asked_writes_nothing_and_one_that_fails_leaves_them_to_this_process(tmp_path,
                                                                                                     caplog):
    """A launch that ends before it asks (bad input) closes its maker: the process ends, nothing written. A maker
    that cannot make them exits 1 with one line; ``run_pki`` then makes them in the orchestrator and says so."""
    unasked = CertificateMaker.start()
    assert unasked is not None and not unasked.asked
    unasked.close()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="was not asked"):
        unasked.wait()
    failing = CertificateMaker.start()
    assert failing is not None
    (tmp_path / "a-file").write_text("")
    assert failing.ask(tmp_path / "a-file" / "run", "run-a", "127.0.0.1", ["worker-0"])  # its folder cannot be made
    pki = run_pki(failing, tmp_path / "run", "run-a", "127.0.0.1", ["worker-0"])
    assert pki.ca.exists() and pki.has_own("worker-0") and pki.folder == tls.tls_dir(tmp_path / "run")
    assert "exited 1: cannot make the run's certificates" in caplog.text
    assert "making them in this process" in caplog.text


def test_the_token_without_a_certificate_gets_no_answer(served):
    """Plaintext with the right token, and TLS that trusts the run's CA but presents no client
    certificate: neither our service nor grpc.health.v1 answers."""
    endpoint, _, pki = served
    no_cert = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    channels = [grpc.insecure_channel(endpoint.address),
                grpc.secure_channel(endpoint.address, no_cert, options=[tls.CHANNEL_NAME_OPTION])]
    for channel in channels:
        with channel:
            for call in (_health, _status):
                with pytest.raises(grpc.RpcError) as err:
                    call(channel)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE, call


def test_another_run_s_certificate_is_refused(served, tmp_path):
    endpoint, store, _ = served
    other = tls.make_run_pki(tmp_path / "other", "run-b", tls.server_hosts("127.0.0.1"), ["worker-1"])
    # the other run's client certificate, trusting this run's server: the server refuses it
    with tls.channel(endpoint.address, tls.ClientFiles(served[2].ca, other.client("worker-1").cert,
                                                       other.client("worker-1").key)) as channel:
        for call in (_health, _status):
            with pytest.raises(grpc.RpcError) as err:
                call(channel)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    # a task of the other run as it is (its own CA): nothing of it is recorded
    with pytest.raises(EndpointError) as refused:
        with EndpointClient(endpoint.address, TOKEN, tls=other.client(tls.USER)) as client:
            client.status()
    assert refused.value.code == "UNAVAILABLE"
    assert store.get(TaskId("worker", 1), 0) is None


def test_the_right_certificate_with_a_wrong_token_is_refused(served):
    endpoint, _, pki = served
    with EndpointClient(endpoint.address, "wrong", tls=pki.client(tls.USER)) as client:
        with pytest.raises(EndpointError) as err:
            client.status()
    assert err.value.code == "UNAUTHENTICATED"


def test_a_task_the_plan_did_not_name_uses_the_shared_certificate_and_the_folder_goes_at_the_end(served):
    _, _, pki = served
    files = tls.files_for(pki.folder, "worker-7")
    assert files is not None and files.cert.name == "tasks.crt"
    assert tls.files_for("", "worker-0") is None  # --insecure: plaintext
    tls.remove(pki.folder.parent)
    assert not pki.folder.exists()
    tls.remove(pki.folder.parent)  # idempotent


def _beat(channel: grpc.Channel, task_type: str, task_index: int, count: int = 2) -> pb.StreamSummary:
    beats = [pb.Heartbeat(task=pb.TaskKey(task_type=task_type, task_index=task_index), sequence=i + 1)
             for i in range(count)]
    return pb_grpc.SupervisorStub(channel).StreamHeartbeats(iter(beats), metadata=METADATA, timeout=5)


def _denied(call) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value
    return str(err.value.details())


def test_a_task_s_certificate_reports_for_that_task_only(served, caplog):
    """worker-1's certificate sending heartbeats, a port release or a registration as worker-0 is
    refused (PERMISSION_DENIED, logged once) and nothing of it is recorded; as itself it is taken."""
    endpoint, store, pki = served
    key0 = pb.TaskKey(task_type="worker", task_index=0)
    with tls.channel(endpoint.address, pki.client("worker-1")) as channel:
        stub = pb_grpc.SupervisorStub(channel)
        details = _denied(lambda: _beat(channel, "worker", 0))
        assert "'worker-1' may only report as task worker-1, not as worker-0" in details
        _denied(lambda: _beat(channel, "worker", 0))
        _denied(lambda: stub.ReleasePort(pb.PortRequest(task=key0), metadata=METADATA, timeout=3))
        _denied(lambda: stub.RegisterAddress(pb.AddressRequest(task=key0, host="127.0.0.1", port=1),
                                             metadata=METADATA, timeout=3))
        switch = [pb.Heartbeat(task=pb.TaskKey(task_type="worker", task_index=i), sequence=1) for i in (1, 0)]
        _denied(lambda: stub.StreamHeartbeats(iter(switch), metadata=METADATA, timeout=5))  # itself, then another
        assert store.get(TaskId("worker", 0), 0) is None
        assert _beat(channel, "worker", 1).received == 2
        assert stub.ReleasePort(pb.PortRequest(task=pb.TaskKey(task_type="worker", task_index=1)),
                                metadata=METADATA, timeout=3).port == 0
    assert store.get(TaskId("worker", 1), 0) is not None
    refusals = [r for r in caplog.records if "not as worker-0" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]


def test_the_user_s_certificate_queries_and_stops_but_never_reports(served):
    endpoint, store, pki = served
    with tls.channel(endpoint.address, pki.client(tls.USER)) as channel:
        assert "user's certificate" in _denied(lambda: _beat(channel, "worker", 0))
        assert _status(channel) == STATUS
    with tls.channel(endpoint.address, pki.client("worker-0")) as channel:
        stub = pb_grpc.SupervisorStub(channel)
        assert "GetStatus is for the user's certificate" in _denied(lambda: _status(channel))
        _denied(lambda: stub.StopJob(pb.StopRequest(reason="x"), metadata=METADATA, timeout=3))
    assert store.get(TaskId("worker", 0), 0) is None


def test_the_shared_certificate_reports_only_for_tasks_without_their_own(served):
    """A task the plan did not name (worker-7) reports with tasks.crt; tasks.crt cannot stand in
    for worker-0, which has its own; a restarted attempt keeps its task's certificate."""
    endpoint, store, pki = served
    with tls.channel(endpoint.address, pki.client(tls.SHARED)) as channel:
        assert _beat(channel, "worker", 7).received == 2
        assert "certificate of its own" in _denied(lambda: _beat(channel, "worker", 0))
    with tls.channel(endpoint.address, pki.client("worker-0")) as channel:
        beat = pb.Heartbeat(task=pb.TaskKey(task_type="worker", task_index=0, attempt=3), sequence=1)
        assert pb_grpc.SupervisorStub(channel).StreamHeartbeats(iter([beat]), metadata=METADATA,
                                                                timeout=5).received == 1
    assert store.get(TaskId("worker", 7), 0) is not None and store.get(TaskId("worker", 0), 3) is not None


def test_the_data_service_roles_report_with_their_own_certificates(tmp_path):
    pki = tls.make_run_pki(tmp_path / "run", "run-d", tls.server_hosts("127.0.0.1"),
                           ["worker-0", "dispatcher-0", "data_worker-0"])
    store = HeartbeatStore()
    endpoint = HealthEndpoint("127.0.0.1", token=TOKEN, store=store)
    endpoint.tls = pki
    endpoint.start()
    try:
        for task_type in ("dispatcher", "data_worker"):
            with tls.channel(endpoint.address, tls.files_for(pki.folder, f"{task_type}-0")) as channel:
                assert _beat(channel, task_type, 0).received == 2
                _denied(lambda channel=channel: _beat(channel, "worker", 0))
    finally:
        endpoint.stop()
    assert store.get(TaskId("dispatcher", 0), 0) is not None and store.get(TaskId("data_worker", 0), 0) is not None


def test_a_task_presenting_another_task_s_certificate_is_refused_and_says_so(served, tmp_path, caplog):
    """worker-1 whose folder holds worker-0's certificate under its own name: its heartbeats are
    refused, the task logs the refusal once, and nothing of it is stored."""
    import shutil

    endpoint, store, pki = served
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(pki.ca, mixed / "ca.crt")
    for ext in ("crt", "key"):
        shutil.copy(pki.folder / f"worker-0.{ext}", mixed / f"worker-1.{ext}")
    reporter = HeartbeatReporter(endpoint.address, TOKEN, "worker", 1, interval_s=0.05, tls_dir=str(mixed)).start()
    try:
        wait_until(lambda: any("refuses this task's heartbeats" in r.getMessage() for r in caplog.records), 10,
                   what="the task's refusal line")
    finally:
        reporter.close(timeout_s=0.5)
    said = [r.getMessage() for r in caplog.records if "refuses this task's heartbeats" in r.getMessage()]
    assert len(said) == 1 and "'worker-0' may only report as task worker-0, not as worker-1" in said[0]
    assert store.get(TaskId("worker", 1), 0) is None
