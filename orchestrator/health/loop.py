"""An asyncio event loop on a thread of its own: how the health server (gRPC aio) and the web
page (aiohttp) serve beside the supervisor's synchronous loop."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class LoopThread:
    """A daemon thread running one asyncio event loop.

    Args:
        name: the thread's name (``health-server``, ``web-server``).
        quiet: log the loop's unhandled-exception reports at debug level instead of error (a
            stream whose peer vanished fails its last write after a stop: not an error).
    """

    def __init__(self, name: str, quiet: bool = False) -> None:
        self.name = name
        self._quiet = quiet
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None

    def start(self, setup: Callable[[], Awaitable[Any]], timeout_s: float) -> bool:
        """Start the thread, run ``setup()`` on its loop, then keep the loop running.

        Returns:
            True once ``setup`` finished within ``timeout_s`` seconds; False when it did not
            (still running). When it raised, its exception is in :attr:`error` and the thread
            has ended.
        """
        self._thread = threading.Thread(target=self._main, args=(setup,), name=self.name, daemon=True)
        self._thread.start()
        return self._ready.wait(timeout_s)

    def run(self, coroutine: Awaitable[T], timeout_s: float) -> T:
        """Run ``coroutine`` on the loop from another thread and wait at most ``timeout_s`` s.

        Raises:
            RuntimeError: when the loop is not running; else whatever the coroutine raised, or
                ``TimeoutError``.
        """
        if self.loop is None or self.loop.is_closed():
            if asyncio.iscoroutine(coroutine):
                coroutine.close()  # never to run: no "never awaited" warning at its collection
            raise RuntimeError(f"{self.name}: the loop is not running")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)  # type: ignore[arg-type]

    def stop(self, join_s: float = 5.0) -> None:
        """Stop the loop and wait at most ``join_s`` seconds for the thread."""
        if self.loop is not None and self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(join_s)

    def _main(self, setup: Callable[[], Awaitable[Any]]) -> None:
        loop = asyncio.new_event_loop()
        if self._quiet:
            loop.set_exception_handler(lambda _loop, ctx: log.debug("%s: %s", self.name, ctx.get("message")))
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(setup())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self.error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()
        loop.close()
