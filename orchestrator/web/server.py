"""The web page and ``/metrics`` of a job, served by aiohttp on a thread of its own.

Why aiohttp: a well-kept (aio-libs, releases every few weeks), widely used asyncio HTTP
server with no framework on top, so it runs on its own small event loop beside the gRPC
server's without a second concurrency model; the standard library's ``http.server`` is not
meant for production and hand-writing HTTP is what the issue rules out.

Routes (every one but ``/static/`` needs the web token: ``?token=`` or
``Authorization: Bearer``; a wrong or missing one gets 401):

* ``/``: the page (``static/index.html``): job state, task table, loss and examples/s charts,
  the timeline of restarts and recoveries, the root cause. It polls ``/api/status`` once a
  second and keeps the last state it saw when the server goes away.
* ``/api/status?since=N``: the status (:func:`orchestrator.report.status.status_dict`) and the
  history samples and events after sequence number ``N``.
* ``/metrics``: Prometheus text format (:mod:`orchestrator.web.metrics`).
* ``/static/...``: the page's script, style and the vendored uPlot (no job data).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable, Mapping

from orchestrator import jsontext
from orchestrator.errors import SpecError
from orchestrator.health.loop import LoopThread

if TYPE_CHECKING:  # aiohttp and prometheus-client load with the first WebServer: a launch without --web never pays them
    from aiohttp import web

log = logging.getLogger(__name__)

StatusSource = Callable[[bool, int], Mapping[str, Any]]
"""``(history, since) -> status``: the status dict, with ``history`` when asked."""

POLL_INTERVAL_S = 1.0
"""How often the page asks for the status (seconds); written into the page."""

_STATIC = ("index.html", "app.js", "app.css",
           "vendor/uPlot.iife.min.js", "vendor/uPlot.min.css", "vendor/uPlot.LICENSE")
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".LICENSE": "text/plain"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the page's URL carries the token
    "Cache-Control": "no-store",
}


class WebServer:
    """The page, ``/api/status`` and ``/metrics`` of one job.

    Args:
        source: the status, with history when asked (see :data:`StatusSource`).
        token: the web token (``?token=`` or ``Authorization: Bearer``).
        host, port: where to listen (port 0: any free port).
        process_metrics: also export this process's ``process_*`` metrics (the launcher).
    """

    def __init__(self, source: StatusSource, token: str, host: str = "127.0.0.1", port: int = 0,
                 process_metrics: bool = True) -> None:
        self._source = source
        self._token = token.encode()
        self.host = host
        self.port = port
        from orchestrator.web import metrics

        self._metrics_module = metrics
        self._registry = metrics.registry_for(lambda: self._source(False, 0), process=process_metrics)
        self._loop = LoopThread("web-server")
        self._runner: web.AppRunner | None = None
        self._served = threading.Condition()
        self._last_poll_at = 0.0
        self._final_served = False
        self._assets = {name: resources.files("orchestrator.web").joinpath("static", name).read_bytes()
                        for name in _STATIC}

    @property
    def url(self) -> str:
        """The page's URL with its token (what the launcher prints)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={self._token.decode()}"

    def start(self, timeout_s: float = 10.0) -> "WebServer":
        """Start serving; returns once the port is bound.

        Raises:
            SpecError: naming ``web`` when the address cannot be bound (in use, not ours).
        """
        if not self._loop.start(self._serve, timeout_s):
            raise SpecError("web", f"{self.host}:{self.port}", f"the web server did not start within {timeout_s:g} s",
                            "try another port")
        if self._loop.error is not None:
            reason = getattr(self._loop.error, "strerror", None) or str(self._loop.error)
            raise SpecError("web", f"{self.host}:{self.port}", f"cannot listen there ({reason})",
                            "pick a free port, e.g. --web 127.0.0.1:0 for any")
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving (open requests get at most ``timeout_s`` seconds). Idempotent."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            self._loop.run(runner.cleanup(), timeout_s)
        except Exception:  # noqa: BLE001 - best effort on shutdown
            log.debug("web server stop did not finish cleanly", exc_info=True)
        self._loop.stop(timeout_s)

    def wait_final_served(self, timeout_s: float, idle_s: float = 3 * POLL_INTERVAL_S) -> bool:
        """After the job ended: wait until an open page has fetched the final status (so it shows
        how the job ended), or no page asked for the status in the last ``idle_s`` seconds,
        at most ``timeout_s`` seconds. Returns True when a final status was served."""
        deadline = time.monotonic() + timeout_s
        with self._served:
            while not self._final_served:
                now = time.monotonic()
                if now >= deadline or now - self._last_poll_at > idle_s:
                    break
                self._served.wait(min(deadline - now, 0.5))
            return self._final_served

    # -- serving --------------------------------------------------------------------------
    async def _serve(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.on_response_prepare.append(self._headers)
        app.router.add_get("/", self._page)
        app.router.add_get("/index.html", self._page)
        app.router.add_get("/api/status", self._status)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/static/{name:.+}", self._static)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or ()
        if sockets:
            self.port = sockets[0].getsockname()[1]

    @staticmethod
    async def _headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(_HEADERS)

    def _authorized(self, request: web.Request) -> bool:
        given = request.query.get("token", "")
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = auth[len("Bearer "):]
        return hmac.compare_digest(given.encode(), self._token)

    @staticmethod
    def _refuse() -> web.Response:
        from aiohttp import web

        return web.Response(status=401, text="401: missing or wrong token: open the URL the launcher printed "
                            "(or runs/<run-id>/endpoint.json's web_url)\n", headers={"WWW-Authenticate": "Bearer"})

    async def _page(self, request: web.Request) -> web.Response:
        from aiohttp import web

        if not self._authorized(request):
            return self._refuse()
        return web.Response(body=self._assets["index.html"], content_type="text/html", charset="utf-8")

    async def _static(self, request: web.Request) -> web.Response:
        from aiohttp import web

        name = request.match_info["name"]
        if name not in _STATIC or name == "index.html":
            raise web.HTTPNotFound()
        suffix = "." + name.rsplit(".", 1)[-1]
        return web.Response(body=self._assets[name], content_type=_TYPES.get(suffix, "application/octet-stream"),
                            charset="utf-8")

    async def _status(self, request: web.Request) -> web.Response:
        from aiohttp import web

        if not self._authorized(request):
            return self._refuse()
        try:
            since = max(0, int(request.query.get("since", "0")))
        except ValueError:
            return web.Response(status=400, text="400: since must be an integer\n")
        status = await asyncio.get_running_loop().run_in_executor(None, self._source, True, since)
        with self._served:
            self._last_poll_at = time.monotonic()
            if status:  # a run that continues in a next life reads live again (orchestrator.api.run)
                self._final_served = not status.get("live", True)
            self._served.notify_all()
        return web.json_response(dict(status, poll_interval_s=POLL_INTERVAL_S), dumps=jsontext.dumps)

    async def _metrics(self, request: web.Request) -> web.Response:
        from aiohttp import web

        if not self._authorized(request):
            return self._refuse()
        metrics = self._metrics_module
        body = await asyncio.get_running_loop().run_in_executor(None, metrics.render, self._registry)
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})
