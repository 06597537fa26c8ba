"""Mutual TLS on the health endpoint (issue 37, item 1): a real gRPC server with a run's own
certificates, real clients with and without them."""

from __future__ import annotations

import stat

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator import env, tls
from orchestrator.health.client import EndpointClient, EndpointError
from orchestrator.health.endpoint import HealthEndpoint
from orchestrator.health.store import HeartbeatStore
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
