"""The poller logs each change of a device's or backend's state once: down with its
reason, up again with how long it was down (issue 20, point 4)."""

from __future__ import annotations

import logging
from typing import ClassVar

import pytest

from exporter.backends.base import Backend, BackendOptions
from exporter.model import DeviceInfo, DeviceLostError, FaultEvent, Reading
from exporter.poller import Poller
from tests.support.clock import FakeClock

pytestmark = pytest.mark.timeout(30)


class Scripted(Backend):
    """Two GPUs whose state a test sets: ``"up"``, ``"xid"`` (the down reading that
    carries the fault, as a GPU falling off the bus gives), ``"lost"`` (the raise
    of every later read); and a backend that can fail as a whole."""

    name: ClassVar[str] = "scripted"

    def __init__(self) -> None:
        super().__init__(BackendOptions())
        self.state = {"gpu0": "up", "gpu1": "up"}
        self.broken = ""

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo(name, "sim", f"uuid-{name}") for name in self.state]

    def read(self, device: DeviceInfo) -> Reading:
        if self.broken:
            raise RuntimeError(self.broken)  # outside a device: the backend is down
        state = self.state[device.device]
        if state == "xid":
            return Reading(
                up=False, down_reason="GPU has fallen off the bus", fault_events=[FaultEvent("79")]
            )
        if state == "lost":
            raise DeviceLostError("GPU is lost")
        return Reading(utilization=0.5)

    def pods(self) -> list[object]:  # type: ignore[override]
        if self.broken:
            raise RuntimeError(self.broken)
        return []


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "accel_exporter.poller"]


async def test_a_lost_device_is_down_once_and_up_once_with_how_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend, clock = Scripted(), FakeClock(1_700_000_000.0)
    poller = Poller([backend], interval=1, timeout=5, clock=clock)
    try:
        with caplog.at_level(logging.DEBUG, "accel_exporter.poller"):
            await poller.poll_once()
            caplog.clear()
            backend.state["gpu1"] = "xid"
            await poller.poll_once()
            backend.state["gpu1"] = "lost"
            for _ in range(3):
                clock.advance(15)
                await poller.poll_once()
            clock.advance(45)
            backend.state["gpu1"] = "up"
            await poller.poll_once()
            await poller.poll_once()
        assert [
            (r.levelno, r.getMessage())
            for r in caplog.records
            if r.getMessage().startswith("device gpu1")
        ] == [
            (logging.WARNING, "device gpu1 is down: GPU has fallen off the bus"),
            (logging.INFO, "device gpu1 is up again after 1m30s down"),
        ]
        assert not [m for m in lines(caplog) if "gpu0" in m]
    finally:
        await poller.stop()


async def test_a_backend_down_is_one_line_and_its_devices_come_back_with_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend, clock = Scripted(), FakeClock(1_700_000_000.0)
    poller = Poller([backend], interval=1, timeout=5, clock=clock)
    try:
        with caplog.at_level(logging.DEBUG, "accel_exporter.poller"):
            await poller.poll_once()
            assert lines(caplog) == ["backend scripted is up with 2 devices"]
            caplog.clear()
            backend.broken = "driver reloading"
            await poller.poll_once()
            clock.advance(5)
            backend.broken = "driver still reloading"
            await poller.poll_once()
            clock.advance(7)
            backend.broken = ""
            backend.state["gpu0"] = "lost"  # back, but this GPU did not survive it
            await poller.poll_once()
            clock.advance(3)
            backend.state["gpu0"] = "up"
            await poller.poll_once()
        said = [(r.levelno, r.getMessage()) for r in caplog.records]
        assert said == [
            (logging.WARNING, "backend scripted is down: RuntimeError: driver reloading"),
            (
                logging.DEBUG,
                "backend scripted is still down, now: RuntimeError: driver still reloading",
            ),
            (logging.INFO, "backend scripted is up with 2 devices after 12s down"),
            (logging.WARNING, "device gpu0 is down: device lost: GPU is lost"),
            (logging.WARNING, "fault on gpu0: code=lost severity=fatal action=reboot GPU is lost"),
            (logging.INFO, "device gpu0 is up again after 15s down"),
        ]
    finally:
        await poller.stop()


async def test_a_device_down_from_the_first_poll_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend, clock = Scripted(), FakeClock(1_700_000_000.0)
    backend.state["gpu0"] = "lost"
    poller = Poller([backend], interval=1, timeout=5, clock=clock)
    try:
        with caplog.at_level(logging.INFO, "accel_exporter.poller"):
            for _ in range(4):
                await poller.poll_once()
        # Said once, and its loss counted once although it was lost before the
        # exporter's first poll.
        assert [m for m in lines(caplog) if "gpu0" in m] == [
            "device gpu0 is down: device lost: GPU is lost",
            "fault on gpu0: code=lost severity=fatal action=reboot GPU is lost",
        ]
    finally:
        await poller.stop()
