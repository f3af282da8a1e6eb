"""A poll that outlives its timeout still has an outcome, and the poller collects it.

On a loaded machine a backend's discovery (the oneapi backend's SYCL listing runs a
subprocess) can take longer than ``--poll-timeout``. The poller then reports the
backend down and moves on, but the thread keeps running: when it ends, its outcome
must be taken in, or (issue 29) asyncio logs "Future exception was never retrieved"
for every such poll, and a "backend unavailable" answer never sets the rediscovery
back-off, so the discovery restarts on every poll. A discovery that succeeds late is
kept, so that the next poll only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from typing import Any, ClassVar

import pytest

from exporter.backends.base import Backend, BackendOptions
from exporter.model import BackendUnavailableError, DeviceInfo, Reading
from exporter.poller import REDISCOVER_SECONDS, Poller
from tests.support.clock import FakeClock

pytestmark = pytest.mark.timeout(30)

# The poll timeout: long enough that a loaded test machine answers a poll that is
# not held, short enough to keep the test quick.
TIMEOUT = 1.0


class SlowDiscovery(Backend):
    """A backend whose discovery waits until the test releases it, then either fails
    as a missing library does or finds one device."""

    name: ClassVar[str] = "slow"

    def __init__(self, fails: bool) -> None:
        super().__init__(BackendOptions())
        self.fails = fails
        self.release = threading.Event()
        self.ended = threading.Event()
        self.discoveries = 0
        self.reads = 0

    def discover(self) -> list[DeviceInfo]:
        self.discoveries += 1
        try:
            self.release.wait(20)
            if self.fails:
                raise BackendUnavailableError("the SYCL runtime is not installed")
            return [DeviceInfo("gpu0", "sim", "uuid-gpu0")]
        finally:
            self.ended.set()

    def read(self, device: DeviceInfo) -> Reading:
        self.reads += 1
        return Reading(utilization=0.5)


class LoopErrors:
    """What the event loop's exception handler is handed (asyncio's "Future exception
    was never retrieved" goes there when the future is collected)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.seen.append(str(context.get("message")))


async def time_out_then_end(poller: Poller, backend: SlowDiscovery) -> None:
    """The first poll times out while discovery is held; then discovery ends, and the
    loop runs until the poller has been told. The poller's own callback on the
    thread's future was registered first, so it has run when ours returns."""
    await poller.poll_backend(poller._states[0])
    assert not poller.backend_up["slow"]
    running = poller._states[0].in_flight
    assert running is not None and not running.done()
    backend.release.set()
    with contextlib.suppress(BackendUnavailableError):
        await asyncio.wait_for(asyncio.wrap_future(running), 10)
    assert backend.ended.is_set()


async def test_a_late_unavailable_answer_is_collected_and_backs_off() -> None:
    errors = LoopErrors()
    asyncio.get_running_loop().set_exception_handler(errors)
    clock = FakeClock(1_700_000_000.0)
    backend = SlowDiscovery(fails=True)
    poller = Poller([backend], interval=1, timeout=TIMEOUT, clock=clock)
    try:
        await time_out_then_end(poller, backend)
        # The next polls within the back-off do not start the discovery again.
        clock.advance(2)
        await poller.poll_backend(poller._states[0])
        clock.advance(2)
        await poller.poll_backend(poller._states[0])
        assert backend.discoveries == 1
        assert not poller.backend_up["slow"]
        # After the back-off it is asked again.
        clock.advance(REDISCOVER_SECONDS)
        backend.fails = False
        await poller.poll_backend(poller._states[0])
        assert backend.discoveries == 2 and poller.backend_up["slow"]
        # The timed-out poll's future is garbage now: asyncio would log its
        # exception here if nobody had taken it.
        gc.collect()
        await asyncio.sleep(0)
        assert errors.seen == []
    finally:
        await poller.stop()


async def test_a_late_discovery_is_kept_and_the_next_poll_only_reads() -> None:
    errors = LoopErrors()
    asyncio.get_running_loop().set_exception_handler(errors)
    backend = SlowDiscovery(fails=False)
    poller = Poller([backend], interval=1, timeout=TIMEOUT, clock=FakeClock(1_700_000_000.0))
    try:
        await time_out_then_end(poller, backend)
        await poller.poll_backend(poller._states[0])
        assert backend.discoveries == 1
        assert poller.backend_up["slow"]
        assert b'accel_up{device="gpu0"' in (await poller.publish()).text
        gc.collect()
        await asyncio.sleep(0)
        assert errors.seen == []
    finally:
        await poller.stop()
