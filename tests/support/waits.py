"""The tests' two waits for something another thread, task or process does: one for
synchronous tests (``wait``), one for the event loop (``until``, and
``until_awaited`` when the condition is itself awaited, such as a poll).

Both wait for a *condition*, never for a fixed time: the timeout only bounds a
failure, so it is generous (20 s) and a passing test never spends it. Five copies
of this loop grew in the tests, with margins from 0.2 s up; one copy each keeps
the message and the polling interval the same everywhere. A test that wants to
show that something did *not* happen does not wait here: it moves a
``tests.support.clock.FakeClock`` past the deadline, or waits for a later event
(a cycle counter passing N), and then asserts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 20.0  # bounds a failure only; never reached by a passing test


def wait(
    cond: Callable[[], T], timeout: float = TIMEOUT, what: str = "condition", every: float = 0.05
) -> T:
    """Polls ``cond`` until it returns something true, and returns that; fails the
    test when ``timeout`` seconds pass first (a controller in another thread or
    process acts when it acts)."""
    end = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"{what} not reached within {timeout:g}s")
        time.sleep(every)


async def until(
    cond: Callable[[], T], timeout: float = TIMEOUT, what: str = "condition", every: float = 0.02
) -> T:
    """``wait`` for the event loop: checks ``cond`` between turns without blocking
    the loop, and returns its first true value."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = cond()
        if value:
            return value
        if loop.time() >= end:
            raise AssertionError(f"{what} not reached within {timeout:g}s")
        await asyncio.sleep(every)


async def until_awaited(
    probe: Callable[[], Awaitable[T]],
    timeout: float = TIMEOUT,
    what: str = "condition",
    every: float = 0.02,
) -> T:
    """``until`` for a condition that must itself be awaited (a poll, a request):
    awaits ``probe()`` until it returns something true, and returns that."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() >= end:
            raise AssertionError(f"{what} not reached within {timeout:g}s")
        await asyncio.sleep(every)


__all__ = ["TIMEOUT", "until", "until_awaited", "wait"]
