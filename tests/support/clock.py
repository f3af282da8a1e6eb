"""One fake clock for every test that would otherwise wait on the wall clock.

Tests that slept real seconds to let a lease expire, or to "prove" that nothing
happened, were slow and flaked on a busy machine: a 0.2 s margin is nothing to a
CI runner under load. kopf's tests run on ``looptime``, where time only moves when
the test moves it; this is the same idea, small enough to read, and shaped to fit
every injection point our components have:

- ``clock()`` / ``clock.now()``: a ``Callable[[], float]``, for ``ActionContext.clock``,
  ``LeaderElector(clock=..., monotonic=...)`` and the exporter backends' clocks;
- ``await clock.sleep(seconds)``: for ``ActionContext.sleep`` and
  ``LeaderElector(sleep=...)``. A *manual* clock (the default) parks the sleeper until
  ``advance`` moves time past its deadline, so a test steps a component through
  time and looks at it between steps; an *auto* clock (``auto=True``) jumps time
  forward at once, for an action whose waits are not what the test is about;
- ``await clock.sleeping(n)`` / ``await clock.parked(done)``: wait until ``n``
  sleepers are parked (or the work is done), the event that says "every party has
  done what this instant asks of it". After ``advance``, that is how a test knows
  the components have caught up, instead of sleeping a guessed real margin;
- ``clock.wake_next()`` / ``await clock.run_out(done)``: jump to the next
  sleeper's deadline, or keep doing so until the work is done, as looptime
  moves time whenever every task waits on it.

``advance`` may be called from another thread than the sleepers' loop (it wakes
them through ``call_soon_threadsafe``); a manual clock only ever moves when the
test moves it, so asserting "nothing happened yet" right before a deadline is
exact rather than a race.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.waits import until


@dataclass(order=True, frozen=True)
class _Sleeper:
    """One parked ``sleep``: woken when the clock reaches ``deadline``."""

    deadline: float
    seq: int
    future: asyncio.Future[None] = field(compare=False)


class FakeClock:
    """Virtual seconds, moved only by ``advance``/``set`` (or, with ``auto=True``,
    by ``sleep`` itself). Callable, so it drops in wherever a clock function goes."""

    def __init__(self, start: float = 1_000.0, *, auto: bool = False) -> None:
        self._t = float(start)
        self.auto = auto
        self._lock = threading.Lock()
        self._sleepers: list[_Sleeper] = []
        self._seq = itertools.count()
        # Futures of ``sleeping`` calls, woken whenever a new sleeper parks.
        self._watchers: list[asyncio.Future[None]] = []
        self.slept: list[float] = []  # every ``sleep`` asked for, in order

    def now(self) -> float:
        return self._t

    def __call__(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and wake every sleeper now due."""
        if seconds < 0:
            raise ValueError(f"a fake clock only advances: got {seconds} s; use set() to step it")
        self.set(self._t + seconds)

    def set(self, t: float) -> None:
        """Put the clock at ``t`` (a step back is allowed, as a wall clock may step);
        wakes every sleeper whose deadline is now reached."""
        with self._lock:
            self._t = float(t)
            due = []
            while self._sleepers and self._sleepers[0].deadline <= self._t:
                due.append(heapq.heappop(self._sleepers).future)
        for future in due:
            _resolve(future)

    @property
    def sleepers(self) -> int:
        """How many ``sleep`` calls are parked now."""
        with self._lock:
            return sum(1 for s in self._sleepers if not s.future.done())

    def next_deadline(self) -> float | None:
        """When the earliest parked sleeper wakes; None when none is parked."""
        with self._lock:
            due = [s.deadline for s in self._sleepers if not s.future.done()]
        return min(due) if due else None

    def wake_next(self) -> float:
        """Jump to the earliest parked sleeper's deadline, waking it (and any other
        sleeper due by then), as looptime does when every task waits on time. The
        new time; fails when nothing sleeps."""
        deadline = self.next_deadline()
        if deadline is None:
            raise AssertionError("wake_next: no sleeper is parked on the fake clock")
        self.set(max(deadline, self._t))
        return self._t

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of fake time: at once on an auto clock, else parked
        until ``advance`` reaches the deadline. Always yields to the loop once."""
        self.slept.append(seconds)
        if self.auto or seconds <= 0:
            if self.auto:  # at least a millisecond: a loop that sleeps 0 still ends
                self.advance(max(seconds, 0.001))
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            heapq.heappush(self._sleepers, _Sleeper(self._t + seconds, next(self._seq), future))
            watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            _resolve(watcher)
        try:
            await future
        finally:
            if not future.done():
                future.cancel()
            with self._lock:  # a cancelled sleep leaves the queue at once
                self._sleepers = [s for s in self._sleepers if not s.future.done()]
                heapq.heapify(self._sleepers)

    async def sleeping(self, count: int = 1, timeout: float = 20.0) -> None:
        """Wait (real time, bounded by ``timeout`` only to fail a broken test)
        until at least ``count`` sleepers are parked."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.sleepers < count:
            watcher: asyncio.Future[None] = loop.create_future()
            with self._lock:
                self._watchers.append(watcher)
            if self.sleepers >= count:  # parked between the check and the watch
                break
            left = end - loop.time()
            if left <= 0:
                raise AssertionError(
                    f"{self.sleepers} of {count} sleepers parked within {timeout:g}s"
                )
            try:
                await asyncio.wait_for(watcher, left)
            except TimeoutError:
                raise AssertionError(
                    f"{self.sleepers} of {count} sleepers parked within {timeout:g}s"
                ) from None

    async def parked(self, finished: Callable[[], object], count: int = 1) -> None:
        """Wait until ``finished()`` or ``count`` sleepers are parked: whoever the
        test steps has done all it can at this instant."""
        await until(
            lambda: finished() or self.sleepers >= count,
            what=f"done, or {count} sleeper(s) parked on the fake clock",
        )

    async def run_out(self, finished: Callable[[], object], steps: int = 1_000) -> None:
        """Move time from one wake-up to the next until ``finished()``: a component
        left to run its course on fake time (its own deadlines bound it; ``steps``
        bounds a broken one)."""
        for _ in range(steps):
            await self.parked(finished)
            if finished():
                return
            self.wake_next()
        raise AssertionError(f"not finished after {steps} wake-ups of the fake clock")


def _resolve(future: asyncio.Future[None]) -> None:
    """Complete ``future`` from any thread, on its own loop."""

    def done() -> None:
        if not future.done():
            future.set_result(None)

    loop = future.get_loop()
    if loop.is_closed():
        return
    loop.call_soon_threadsafe(done)


__all__ = ["FakeClock"]
