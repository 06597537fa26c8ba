"""The real :class:`orchestrator.health.server.HealthServer` alone, for the ingest benchmark.

``python -m bench.ingest_server TOKEN [--profile FILE | --tls DIR]``: prints ``address HOST:PORT``, then
answers each line on stdin with ``total N monotonic T`` (heartbeats stored so far); ends at
EOF. With ``--tls`` it requires the client certificates of the run whose ``tls`` folder DIR is
(:mod:`orchestrator.tls`). With ``--profile`` the server's event-loop thread runs under cProfile and the top
functions are written to FILE at the end.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.tls import RunPki


class ProfiledHealthServer(HealthServer):
    """The same server, its thread under cProfile (instrumentation only)."""

    profile = cProfile.Profile()

    def _thread_main(self) -> None:
        self.profile.enable()
        try:
            super()._thread_main()
        finally:
            self.profile.disable()


def main() -> None:
    profile = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--profile" else None
    pki = RunPki(Path(sys.argv[3])) if len(sys.argv) > 3 and sys.argv[2] == "--tls" else None
    store = HeartbeatStore()
    server = (ProfiledHealthServer if profile else HealthServer)(sys.argv[1], store, tls=pki).start()
    print(f"address {server.address}", flush=True)
    for _ in sys.stdin:
        print(f"total {store.total} monotonic {time.monotonic():.6f}", flush=True)
    server.stop()
    if profile:
        text = io.StringIO()
        pstats.Stats(ProfiledHealthServer.profile, stream=text).sort_stats("tottime").print_stats(20)
        open(profile, "w").write(text.getvalue())


if __name__ == "__main__":
    main()
