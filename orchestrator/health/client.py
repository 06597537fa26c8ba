"""Queries to a running orchestrator's endpoint: ``status``, ``stop`` and ``status --web`` use them.

Every call carries the job token (``x-job-token`` metadata) and a deadline; the address and
token come from ``runs/<run-id>/endpoint.json`` (see :mod:`orchestrator.report.runs`).
"""

from __future__ import annotations

from typing import Any

import grpc

from orchestrator import env
from orchestrator.errors import OrchestratorError
from orchestrator.health.status_wire import status_of
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.proto import supervisor_pb2_grpc as pb_grpc
from orchestrator.tls import ClientFiles, channel


class EndpointError(OrchestratorError):
    """The orchestrator's endpoint did not answer (gone, or the token is wrong).

    Attributes:
        code: the gRPC status code name (``UNAVAILABLE``, ``UNAUTHENTICATED``, ``DEADLINE_EXCEEDED``, ...).
    """

    def __init__(self, address: str, code: str, details: str) -> None:
        super().__init__(f"the orchestrator at {address} did not answer: {code} ({details})")
        self.code = code


MAX_STATUS_BYTES = 256 * 2**20
"""Largest ``GetStatus`` reply a client takes (gRPC's default is 4 MiB; a few hundred bytes per task)."""


class EndpointClient:
    """A token-carrying client of one orchestrator's ``tfcluster.v1.Supervisor`` service.

    Args:
        address: ``host:port`` of the orchestrator's endpoint.
        token: the job token.
        timeout_s: deadline of each call, seconds.
        tls: the client certificate to present (:func:`orchestrator.tls.files_for`): mutual TLS
            with the run's CA; None: plaintext (an ``--insecure`` run).

    Raises:
        OSError: a certificate file of ``tls`` cannot be read.
    """

    def __init__(self, address: str, token: str, timeout_s: float = 3.0, tls: ClientFiles | None = None) -> None:
        self.address = address
        self._metadata = ((env.TOKEN_METADATA_KEY, token),)
        self._timeout_s = timeout_s
        # a status of 10,000 tasks is several MB: past gRPC's default 4 MiB a client may receive
        self._channel = channel(address, tls, [("grpc.max_receive_message_length", MAX_STATUS_BYTES)])
        self._stub = pb_grpc.SupervisorStub(self._channel)

    def status(self, history: bool = False, history_since: int = 0) -> dict[str, Any]:
        """The job's status: the shape of ``summary.json`` plus live fields; with ``history``
        also the charted series and the events (``history.series``, ``history.events``).

        Raises:
            EndpointError: the endpoint did not answer within the deadline, or refused the token.
        """
        try:
            reply = self._stub.GetStatus(pb.StatusRequest(history=history, history_since=history_since),
                                         metadata=self._metadata, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise EndpointError(self.address, exc.code().name, exc.details() or "") from None
        return status_of(reply)

    def stop(self, reason: str) -> tuple[bool, str]:
        """Ask the job to stop (two-phase, as Ctrl-C). Returns (accepted, job state when asked);
        not accepted when the job had already ended.

        Raises:
            EndpointError: the endpoint did not answer within the deadline, or refused the token.
        """
        try:
            reply = self._stub.StopJob(pb.StopRequest(reason=reason), metadata=self._metadata, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise EndpointError(self.address, exc.code().name, exc.details() or "") from None
        return reply.accepted, reply.state

    def resize(self, workers: int, reason: str) -> tuple[bool, str, str]:
        """Ask an elastic job to change size to ``workers``. Returns (accepted, job state when
        asked, why it was refused: "" when accepted).

        Raises:
            EndpointError: the endpoint did not answer within the deadline, or refused the token.
        """
        try:
            reply = self._stub.ResizeJob(pb.ResizeRequest(workers=workers, reason=reason), metadata=self._metadata,
                                         timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise EndpointError(self.address, exc.code().name, exc.details() or "") from None
        return reply.accepted, reply.state, reply.refusal

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "EndpointClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
