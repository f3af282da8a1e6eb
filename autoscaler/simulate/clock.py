"""Simulated time: one heap of timed events, and the loop that runs them.

Why a module of its own: every other part of the simulated fleet (machines, jobs,
faults) schedules its reactions here and reads the time from here, and the
production actions sleep here (``ActionContext.sleep``) without knowing that time
is simulated. Events at the same time run in the order they were added, so a run
is a pure function of the scenario and its seed.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from typing import Any

# Simulated time starts at 2026-01-01T00:00:00Z, so that every timestamp the
# actions write and read is a plausible one.
EPOCH = 1_767_225_600.0


class SimClock:
    """The event heap from ``EPOCH`` to ``end``; ``now`` is the current event's time."""

    def __init__(self, end: float) -> None:
        self.now = EPOCH
        self.end = end
        self._heap: list[tuple[float, int, Callable[[], Any]]] = []
        self._seq = 0
        # Set when a coroutine may have work to do: after an evaluation tick, and
        # when an action's simulated sleep ends.
        self.wake = False

    def clock(self) -> float:
        return self.now

    def at(self, t: float, fn: Callable[[], Any]) -> None:
        """Runs ``fn`` at simulated time ``t`` (events at the same time run in the
        order they were added)."""
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn))

    def every(self, interval: float, fn: Callable[[], Any], start: float | None = None) -> None:
        """Runs ``fn`` every ``interval`` seconds from ``start`` (default: now)."""

        def tick(t: float) -> Callable[[], Any]:
            def run() -> Any:
                if t + interval <= self.end:
                    self.at(t + interval, tick(t + interval))
                return fn()

            return run

        first = self.now if start is None else start
        self.at(first, tick(first))

    async def sleep(self, seconds: float) -> None:
        """``ActionContext.sleep``: wait in simulated time while events go on."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)
            self.wake = True

        self.at(self.now + max(0.0, seconds), wake)
        await future

    async def settle(self) -> None:
        """Lets every other task (the executor's actions) run until each finishes or
        waits: on ``sleep`` in simulated time, or on another task. The event loop's
        ready queue is empty exactly then. An action that waited on real time would
        never settle: that is a wiring bug, reported rather than spun on."""
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)
        if ready is None:  # an event loop without one: a bounded number of passes
            for _ in range(100):
                await asyncio.sleep(0)
            return
        for _ in range(1_000_000):
            await asyncio.sleep(0)
            if not ready:
                return
        raise RuntimeError("an action waited on something other than ctx.sleep")

    async def run(self, advance: Callable[[float], None], after: Callable[[], None]) -> None:
        """Processes every event up to ``end``. ``advance(t)`` runs before the clock
        moves to ``t`` (the accounting integrates up to it), ``after()`` once each
        event and the actions it woke are done (the scheduler's pass)."""
        heap = self._heap
        while heap and heap[0][0] <= self.end:
            t, _, fn = heapq.heappop(heap)
            advance(t)
            self.now = t
            result = fn()
            if asyncio.iscoroutine(result):
                await result
                self.wake = True
            if self.wake:
                self.wake = False
                await self.settle()
            after()
        advance(self.end)
        self.now = self.end


__all__ = ["EPOCH", "SimClock"]
