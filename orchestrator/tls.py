"""Mutual TLS for the orchestrator's gRPC endpoint: one ephemeral certificate authority per run.

At launch :func:`make_run_pki` creates, in ``runs/<run-id>/tls/`` (mode 0700, every key 0600):

* ``ca.crt``: the run's own CA (EC P-256, valid for :data:`VALID_S`); its key is never written:
  once the certificates below are signed nobody can sign another one for this run.
* ``server.crt`` / ``server.key``: the endpoint's certificate; its subject alternative names are
  the endpoint's address, this machine's host names and :data:`SERVER_NAME`.
* ``<task>.crt`` / ``<task>.key`` per task (``worker-1``): each task's client certificate; a
  task finds its own through ``ORCH_TLS_DIR`` and ``ORCH_TASK`` (:mod:`orchestrator.env`),
  never through its command line. A job of more than :data:`PER_TASK_LIMIT` tasks gives them
  one shared ``tasks.crt`` instead (the certificates' cost grows with the tasks).
* ``user.crt`` / ``user.key``: the user's own commands (``status``, ``stop``, ``logs -f``);
  ``endpoint.json`` names the folder.

The server requires a client certificate signed by this CA on every call, ``grpc.health.v1``
included (``require_client_auth``): a client without one, or with another run's, fails the TLS
handshake and gets no answer at all; the job token is still checked on top. Past the handshake
the certificate's name decides what the call may do (:func:`report_refusal`,
:func:`control_refusal`): a task's certificate reports for that task only, the user's calls
``GetStatus`` and ``StopJob`` only; others get ``PERMISSION_DENIED``. Clients check the
server against the run's CA and the name :data:`SERVER_NAME` (``grpc.ssl_target_name_override``),
so the same certificate holds whatever address a task reaches the endpoint by (a Docker
container's ``host.docker.internal``, a Slurm node's name). The folder is removed when the run
ends (:func:`remove`).

This module imports neither ``grpc`` nor ``cryptography`` at its top: a launch's first tasks start
before the CLI imports either (:mod:`orchestrator.health.endpoint`), and a launch's certificates are
made by a process of their own while those tasks' interpreters start (:mod:`orchestrator.pkimaker`;
``import cryptography`` is about 25-40 ms here, then about 0.25 ms per certificate: EC P-256 keys
and ECDSA signatures). ``ca.crt`` is written last, by a rename, and a client waits for it
(:func:`files_for`, at most :data:`PKI_WAIT_S`): once it is there every other file is complete.
"""

from __future__ import annotations

import base64
import datetime
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TLS_DIR = "tls"
"""The folder of a run's certificates, inside its run directory."""
SERVER_NAME = "tfcluster-orchestrator"
"""The DNS name in every server certificate that clients check (whatever address they dial)."""
USER = "user"
"""The client certificate of the user's own commands."""
SHARED = "tasks"
"""The one client certificate every task of a job past :data:`PER_TASK_LIMIT` tasks presents."""
PER_TASK_LIMIT = 512
"""Largest job whose tasks each get a certificate of their own (about 0.7 ms each here: 512 add
0.35 s to a launch; 10,000 would add 7 s); a larger job's tasks share :data:`SHARED`."""
CA_FILE = "ca.crt"
PKI_WAIT_S = 30.0
"""Most seconds a client waits for a run's ``ca.crt`` (:func:`files_for`): a launch's first tasks start
before their certificates are made, which takes milliseconds."""
VALID_S = 30 * 86400
"""How long a run's certificates are valid, seconds (a run longer than that re-launches with ``--resume``)."""


@dataclass(frozen=True)
class ClientFiles:
    """The three files a client of the endpoint presents and checks (paths).

    Attributes:
        ca: the run's CA certificate (PEM): the server must be signed by it.
        cert: this client's certificate (PEM).
        key: this client's private key (PEM, mode 0600).
    """

    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(ca, cert, key) bytes. Raises OSError when a file is missing or unreadable."""
        return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()


def tls_dir(run_dir: str | Path) -> Path:
    """``runs/<run-id>/tls``."""
    return Path(run_dir) / TLS_DIR


def client_files(folder: str | Path, name: str) -> ClientFiles:
    """The files of client ``name`` (a task's name such as ``worker-1``, or :data:`USER`) in ``folder``."""
    folder = Path(folder)
    return ClientFiles(folder / CA_FILE, folder / f"{name}.crt", folder / f"{name}.key")


def files_for(folder: str | Path | None, name: str) -> ClientFiles | None:
    """Client ``name``'s files in ``folder`` (a task's ``ORCH_TLS_DIR``); the job's shared task
    certificate (:data:`SHARED`) when it has none of its own (jobs past :data:`PER_TASK_LIMIT`
    tasks); None when ``folder`` is empty (an ``--insecure`` run: plaintext). While the folder
    exists without its ``ca.crt`` (a launch is making the certificates: :func:`expect_pki`), waits for
    it, at most :data:`PKI_WAIT_S` seconds; the files are complete once it is there. Reading a missing
    file raises ``OSError``."""
    if not folder:
        return None
    _wait_for_ca(Path(folder) / CA_FILE, PKI_WAIT_S)
    own = client_files(folder, name or SHARED)
    return own if own.cert.exists() else client_files(folder, SHARED)


def token_urlsafe(nbytes: int) -> str:
    """``secrets.token_urlsafe(nbytes)`` (the same: ``os.urandom``, URL-safe base64 without padding; the job token,
    the page's) without importing ``secrets``, whose ``hmac`` a launch's first tasks need not wait for."""
    return base64.urlsafe_b64encode(os.urandom(nbytes)).rstrip(b"=").decode("ascii")


def _wait_for_ca(ca: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while ca.parent.is_dir() and not ca.exists() and time.monotonic() < deadline:
        time.sleep(0.005)  # the launch writes it milliseconds after its first tasks start


def expect_pki(run_dir: str | Path) -> Path:
    """Get ``runs/<run-id>/tls`` ready for :func:`make_run_pki` while tasks may already start: the folder made
    (mode 0700) and a previous life's ``ca.crt`` removed, so that a task waits for this life's certificates
    (:func:`files_for`). Returns the folder.

    Raises:
        OSError: the folder cannot be made.
    """
    folder = tls_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    (folder / CA_FILE).unlink(missing_ok=True)
    return folder


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _names(hosts: Iterable[str]) -> list[Any]:
    from ipaddress import ip_address

    from cryptography import x509

    out: list[Any] = [x509.DNSName(SERVER_NAME)]
    seen = {SERVER_NAME}
    for host in hosts:
        host = host.strip("[]")
        if not host or host in seen or host in ("0.0.0.0", "::"):
            continue
        seen.add(host)
        try:
            out.append(x509.IPAddress(ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def server_hosts(health_host: str) -> list[str]:
    """The names a server certificate lists for an endpoint bound on ``health_host``: the host
    itself, loopback, and this machine's host names (``socket.gethostname``, its FQDN)."""
    hosts = [health_host, "127.0.0.1", "localhost", socket.gethostname()]
    try:
        hosts.append(socket.getfqdn())
    except OSError:
        pass
    return hosts


class _Signer:
    """The run's CA, in memory only."""

    def __init__(self, run_id: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ec, self._oid = x509, hashes, ec, NameOID
        self.now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
        self.until = self.now + datetime.timedelta(seconds=VALID_S)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"tfcluster run {run_id} CA")])
        self.cert = (self._builder(self.name, self.key.public_key())
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                                  key_encipherment=False, data_encipherment=False, key_agreement=False,
                                                  key_cert_sign=True, crl_sign=True, encipher_only=False,
                                                  decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def _builder(self, subject: Any, public_key: Any) -> Any:
        x509 = self._x509
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name).public_key(public_key)
                .serial_number(x509.random_serial_number()).not_valid_before(self.now).not_valid_after(self.until))

    def issue(self, common_name: str, *, server_names: list[Any] | None = None) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) for ``common_name``; a server certificate with ``server_names``."""
        from cryptography.hazmat.primitives import serialization

        x509 = self._x509
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(self._oid.COMMON_NAME, common_name)])
        usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if server_names else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (self._builder(subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(server_names), critical=False)
        cert = builder.sign(self.key, self._hashes.SHA256())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    def ca_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        pem: bytes = self.cert.public_bytes(serialization.Encoding.PEM)
        return pem


@dataclass(frozen=True)
class RunPki:
    """A run's certificates on disk (:func:`make_run_pki`).

    Attributes:
        folder: ``runs/<run-id>/tls``.
    """

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / CA_FILE

    def server_files(self) -> tuple[bytes, bytes, bytes]:
        """(ca, server cert, server key) bytes, for :func:`server_credentials`."""
        folder = self.folder
        return self.ca.read_bytes(), (folder / "server.crt").read_bytes(), (folder / "server.key").read_bytes()

    def client(self, name: str) -> ClientFiles:
        return client_files(self.folder, name)

    def has_own(self, name: str) -> bool:
        """Task ``name`` has a certificate of its own here (not only :data:`SHARED`)."""
        return name not in (USER, SHARED) and (self.folder / f"{name}.crt").exists()


def make_run_pki(run_dir: str | Path, run_id: str, hosts: Iterable[str], clients: Iterable[str]) -> RunPki:
    """Create the run's CA and its server and client certificates in ``runs/<run-id>/tls``.

    Args:
        run_dir: the run directory (created when missing).
        run_id: named in the CA's subject.
        hosts: the endpoint's addresses and host names (:func:`server_hosts`): the server
            certificate's subject alternative names, with :data:`SERVER_NAME`.
        clients: one client certificate per name (the tasks' names) up to :data:`PER_TASK_LIMIT`
            names; :data:`USER` and :data:`SHARED` (for any other task) are always made.

    Returns:
        The folder's :class:`RunPki`.

    Raises:
        OSError: the folder cannot be written.
    """
    folder = expect_pki(run_dir)
    signer = _Signer(run_id)
    cert, key = signer.issue(SERVER_NAME, server_names=_names(hosts))
    _write(folder / "server.crt", cert, 0o644)
    _write(folder / "server.key", key, 0o600)
    _write_clients(signer, folder, [USER, *_task_names(clients)])
    _write(folder / f"{CA_FILE}.new", signer.ca_pem(), 0o644)
    os.replace(folder / f"{CA_FILE}.new", folder / CA_FILE)  # last: a client waiting for it finds every file
    return RunPki(folder)


def _task_names(clients: Iterable[str]) -> list[str]:
    """:data:`SHARED` (also for a task the plan did not name), then each task up to :data:`PER_TASK_LIMIT`."""
    names = list(dict.fromkeys(clients))
    return [SHARED, *(names if len(names) <= PER_TASK_LIMIT else [])]


def _write_clients(signer: _Signer, folder: Path, names: Iterable[str]) -> None:
    for name in dict.fromkeys(names):
        cert, key = signer.issue(name)
        _write(folder / f"{name}.crt", cert, 0o644)
        _write(folder / f"{name}.key", key, 0o600)


ENDPOINT_DIR = "endpoint"
"""The subfolder of a Kubernetes rendering's certificates that stays out of its Secret."""


def make_secret_files(folder: str | Path, job: str, tasks: Iterable[str]) -> Path:
    """The certificates of a Kubernetes rendering (``render --format jobset|tfjob --tls-out``).

    ``folder`` (created, mode 0700) gets what every pod of the job mounts from the job's Secret
    and nothing else, since ``kubectl create secret generic NAME --from-file=FOLDER`` takes every
    regular file of a folder (and skips its subfolders): ``ca.crt`` and each task's
    ``<task>.crt`` / ``<task>.key`` (:data:`SHARED` for the rest, as :func:`make_run_pki`). The
    endpoint's side, ``server.crt`` / ``server.key`` (naming :data:`SERVER_NAME` only) and
    ``user.crt`` / ``user.key``, goes to ``folder/endpoint/``, which no pod gets. The CA's key
    is never written.

    Args:
        folder: where to write; it must not exist or be empty.
        job: the job's name (in the CA's subject).
        tasks: the job's task names (``worker-1``, ``data_worker-0``).

    Returns:
        ``folder``.

    Raises:
        FileExistsError: ``folder`` has files already (they would join the Secret).
        OSError: it cannot be written.
    """
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty")
    endpoint = folder / ENDPOINT_DIR
    endpoint.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    signer = _Signer(job)
    for where in (folder, endpoint):
        _write(where / CA_FILE, signer.ca_pem(), 0o644)
    _write_clients(signer, folder, _task_names(tasks))
    _write_clients(signer, endpoint, [USER])
    cert, key = signer.issue(SERVER_NAME, server_names=_names([]))
    _write(endpoint / "server.crt", cert, 0o644)
    _write(endpoint / "server.key", key, 0o600)
    return folder


def remove(run_dir: str | Path) -> None:
    """Delete the run's certificates and keys (the end of a run). Idempotent."""
    import shutil

    shutil.rmtree(tls_dir(run_dir), ignore_errors=True)


def peer_identity(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The name a gRPC peer proved: its client certificate's common name (``worker-1``,
    :data:`USER`, :data:`SHARED`), else its first subject alternative name; None without a
    certificate (a plaintext ``--insecure`` endpoint).

    Args:
        auth_context: ``grpc.ServicerContext.auth_context()`` (``x509_common_name``,
            ``x509_subject_alternative_name``: lists of bytes, set by gRPC's SSL transport).
    """
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth_context.get(key) or ():
            return bytes(value).decode("utf-8", "replace")
    return None


def report_refusal(identity: str | None, task: str, own_certificate: bool) -> str | None:
    """Why the peer ``identity`` may not report as ``task`` (heartbeats, ``RegisterAddress``,
    ``ReleasePort``): None when it may.

    The rule: a task's certificate (common name ``worker-1``) reports for that task only, in
    any attempt (a restart, or a warm spare that became it, presents the same certificate);
    :data:`SHARED` for a task without a certificate of its own (a job past
    :data:`PER_TASK_LIMIT` tasks, a task the plan did not name: :func:`files_for`); the user's
    certificate (:data:`USER`) never. Without a certificate (plaintext) only the job token counts.

    Args:
        identity: :func:`peer_identity`.
        task: the task the call reports for (``worker-0``).
        own_certificate: ``task`` has a certificate of its own in the run's folder.

    Returns:
        One line naming the certificate, the task and the rule; None when allowed.
    """
    if identity is None or identity == task or (identity == SHARED and not own_certificate):
        return None
    if identity == USER:
        return (f"the user's certificate ({USER!r}) may call GetStatus and StopJob, not report as task {task}")
    if identity == SHARED:
        return f"the shared task certificate ({SHARED!r}) may not report as {task}, which has a certificate of its own"
    return f"certificate {identity!r} may only report as task {identity}, not as {task}"


def control_refusal(identity: str | None, method: str) -> str | None:
    """Why the peer ``identity`` may not call ``method`` (``GetStatus``, ``StopJob``, ``ResizeJob``: the
    user's own commands): None when it may (the user's certificate, or plaintext: the token only)."""
    if identity is None or identity == USER:
        return None
    return f"{method} is for the user's certificate ({USER!r}), not a task's ({identity!r})"


CHANNEL_NAME_OPTION = ("grpc.ssl_target_name_override", SERVER_NAME)
"""The channel option every client of a TLS endpoint sets: it checks :data:`SERVER_NAME`."""


def server_credentials(pki: RunPki) -> Any:
    """``grpc.ServerCredentials`` that require a client certificate signed by the run's CA."""
    import grpc

    ca, cert, key = pki.server_files()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


def channel_credentials(files: ClientFiles) -> Any:
    """``grpc.ChannelCredentials`` presenting ``files``' certificate and trusting only the run's CA.

    Raises:
        OSError: a file is missing or unreadable.
    """
    import grpc

    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def channel(address: str, files: ClientFiles | None, options: Iterable[tuple[str, Any]] = (), aio: bool = False) -> Any:
    """A gRPC channel to ``address``: TLS with ``files``, plaintext when ``files`` is None (``--insecure``)."""
    import grpc

    module: Any = grpc.aio if aio else grpc
    opts = list(options)
    if files is None:
        return module.insecure_channel(address, options=opts)
    return module.secure_channel(address, channel_credentials(files), options=[*opts, CHANNEL_NAME_OPTION])
