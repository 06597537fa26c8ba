"""The asyncio loop thread the health server and the web page serve on (orchestrator.health.loop)."""

import inspect

import pytest

from orchestrator.health.loop import LoopThread


async def _nothing() -> None:
    return None


async def _answer() -> int:
    return 42


def test_a_coroutine_handed_to_a_stopped_loop_is_closed_not_left_unawaited():
    """A coroutine handed to a loop already closed (as the health server's second stop did before it
    became idempotent): run raises, and the coroutine is closed there rather than left for the
    collector to warn about ("coroutine ... was never awaited", seen in CI's warnings summary)."""
    thread = LoopThread("test-loop")
    assert thread.start(_nothing, 10)
    assert thread.run(_answer(), 10) == 42
    thread.stop(10)
    late = _answer()
    with pytest.raises(RuntimeError, match="not running"):
        thread.run(late, 10)
    assert inspect.getcoroutinestate(late) == inspect.CORO_CLOSED

    never = LoopThread("never-started")
    unstarted = _answer()
    with pytest.raises(RuntimeError, match="not running"):
        never.run(unstarted, 10)
    assert inspect.getcoroutinestate(unstarted) == inspect.CORO_CLOSED
