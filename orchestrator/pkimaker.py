"""The run's certificates made in a process of their own (``python -m orchestrator.pkimaker``), started
with ``launch`` itself, so that the orchestrator process never imports ``cryptography``.

A launch spends about 0.2 s of CPU before its tasks' first step, and on a machine whose cores its
tasks keep busy (two TensorFlow imports on two cores) every millisecond of it delays them. The
certificates were about 40 ms of it (``import cryptography`` ~25 ms, the signing and the host names
~15 ms), made in the supervisor's making while the first tasks start. Here
:meth:`CertificateMaker.start` starts the maker before ``launch`` imports its own modules: its
interpreter and ``import cryptography`` run beside the CLI's imports (on the core the first tasks
do not use yet), then it waits on its stdin. :meth:`~CertificateMaker.ask` hands it the run
(``api.prepare``, once the plan is written, before the first wave starts); it writes
:func:`orchestrator.tls.make_run_pki`'s files, ``ca.crt`` last (a task waits for that one:
:func:`orchestrator.tls.files_for`), and exits 0. :meth:`~CertificateMaker.wait` returns them
before the health server needs them. The host names (:func:`orchestrator.tls.server_hosts`,
whose ``getfqdn`` asks the resolver) are looked up there too.

The maker ends with its stdin: a launch that never asks (bad input, ``--dry-run``, a failure
before the plan) closes it and the maker exits 0 having written nothing; so does one whose
orchestrator was killed. It runs in its own session, so a Ctrl-C at the terminal reaches the
orchestrator only. Where it cannot start, or fails, the orchestrator makes the certificates
itself, as before (:func:`orchestrator.tls.make_run_pki`).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from orchestrator import tls

log = logging.getLogger("orchestrator.pkimaker")

ASK_WAIT_S = tls.PKI_WAIT_S
"""Most seconds :meth:`CertificateMaker.wait` waits for the maker (its tasks wait as long for ``ca.crt``)."""

END_WAIT_S = 10.0
"""Most seconds :meth:`CertificateMaker.close` waits for the maker to end before it kills it."""


class CertificateMaker:
    """One run's certificates, made by a process of their own (module docstring).

    Args:
        popen: the maker process (``python -m orchestrator.pkimaker``), its stdin a pipe.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self._folder: Path | None = None

    @classmethod
    def start(cls) -> CertificateMaker | None:
        """Start the maker (this interpreter, ``-m orchestrator.pkimaker``, this environment and
        directory, its own session). None where it cannot be started (the caller makes the
        certificates itself)."""
        try:
            popen = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        except OSError:
            return None
        return cls(popen)

    @property
    def asked(self) -> bool:
        """The run was handed over (:meth:`ask`); the maker may be writing its files."""
        return self._folder is not None

    def ask(self, run_dir: str | Path, run_id: str, health_host: str, clients: Iterable[str]) -> bool:
        """Hand the maker the run (what :func:`orchestrator.tls.make_run_pki` takes; the server's host
        names from ``health_host``, :func:`orchestrator.tls.server_hosts`). Returns at once: False when
        the maker is gone (the caller makes the certificates itself)."""
        stdin = self._popen.stdin
        if stdin is None or stdin.closed or self._popen.poll() is not None:
            return False
        line = json.dumps({"run_dir": str(run_dir), "run_id": run_id, "health_host": health_host,
                           "clients": list(clients)})
        try:
            stdin.write((line + "\n").encode())
            stdin.close()
        except OSError:
            return False
        finally:
            self._popen.stdin = None  # closed: communicate() must not flush it
        self._folder = tls.tls_dir(run_dir)
        return True

    def wait(self, timeout_s: float = ASK_WAIT_S) -> tls.RunPki:
        """The run's certificates once the maker has made them.

        Raises:
            RuntimeError: never asked, or the maker failed, was killed or took more than ``timeout_s``
                seconds (then killed); the message is its last line on stderr.
        """
        if self._folder is None:
            raise RuntimeError("the certificate maker was not asked")
        try:
            _, err = self._popen.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.communicate()
            raise RuntimeError(f"the certificate maker took more than {timeout_s:.0f} s") from None
        code = self._popen.returncode
        made = tls.RunPki(self._folder)
        if code != 0 or not made.ca.exists():
            lines = err.decode(errors="replace").strip().splitlines()
            raise RuntimeError(f"the certificate maker exited {code}: {lines[-1] if lines else 'no message'}")
        return made

    def close(self) -> None:
        """End the maker: its stdin closed (unasked, it exits having written nothing), then waited for,
        at most :data:`END_WAIT_S` seconds, then killed. Idempotent; what it wrote stays."""
        if self._popen.stdin is not None:
            try:
                self._popen.stdin.close()
            except OSError:
                pass
            self._popen.stdin = None
        if self._popen.returncode is not None:
            return
        try:
            self._popen.communicate(timeout=END_WAIT_S)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.communicate()


def run_pki(maker: CertificateMaker | None, run_dir: str | Path, run_id: str, health_host: str,
            clients: Iterable[str]) -> tls.RunPki:
    """The run's certificates: ``maker``'s, once it has made them (it was asked: :meth:`CertificateMaker.ask`), or
    made here (:func:`orchestrator.tls.make_run_pki`) without one or when it failed (a warning says why).

    Raises:
        OSError: the folder cannot be written.
    """
    if maker is not None and maker.asked:
        try:
            return maker.wait()
        except RuntimeError as exc:
            log.warning("%s; making them in this process", exc)
    return tls.make_run_pki(run_dir, run_id, tls.server_hosts(health_host), clients)


def main() -> int:
    """The maker: ``cryptography`` imported first (while the launch imports its own modules), then
    one JSON line on stdin (:meth:`CertificateMaker.ask`) made into the run's certificates. Returns 0
    (also when stdin ends unasked), 1 when they cannot be made (one line on stderr)."""
    from cryptography import x509  # noqa: F401  # what tls._Signer uses, imported before the run is known
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: F401
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: F401

    line = sys.stdin.readline()
    if not line.strip():
        return 0
    try:
        asked = json.loads(line)
        tls.make_run_pki(asked["run_dir"], asked["run_id"], tls.server_hosts(asked["health_host"]), asked["clients"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot make the run's certificates: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
