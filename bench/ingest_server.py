"""The real :class:`orchestrator.health.server.HealthServer` alone, for the ingest benchmark.

``python -m bench.ingest_server TOKEN [--profile FILE] [--tls DIR]``: prints ``address HOST:PORT``, then
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
from typing import Any

from orchestrator.health.server import HealthServer
from orchestrator.health.store import HeartbeatStore
from orchestrator.tls import RunPki


class ProfiledHealthServer(HealthServer):
    """The same server, its event-loop thread under cProfile (instrumentation only)."""

    profile = cProfile.Profile()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        loop_main = self._loop._main

        def profiled(setup: Any) -> None:
            self.profile.enable()
            try:
                loop_main(setup)
            finally:
                self.profile.disable()

        self._loop._main = profiled  # type: ignore[method-assign]


def main() -> None:
    flags = dict(zip(sys.argv[2::2], sys.argv[3::2]))
    profile = flags.get("--profile")
    pki = RunPki(Path(flags["--tls"])) if "--tls" in flags else None
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
