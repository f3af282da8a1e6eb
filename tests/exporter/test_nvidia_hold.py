"""The nvidia backend lets go of NVML while the node agent resets GPUs
(``exporter/backends/nvidia/hold.py``): at the poll after the agent's hold appears it
closes NVML, answers, and is down with the reason; once the hold ends it discovers
again. A hold it cannot read leaves NVML open. Through the real Poller, so that what is
checked is what Prometheus would scrape."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel_common.nvmlhold import HOLD, Hold, clear_hold, read_released, write_hold
from exporter.backends.base import BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.poller import Poller
from tests.support.exposition import value
from tests.support.fakes.nvml import FakeNVML

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def fake() -> Iterator[FakeNVML]:
    fake = FakeNVML.pcie_node()
    yield fake
    fake.release()


def test_the_backend_lets_go_for_the_hold_and_comes_back_after(
    fake: FakeNVML, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="accel_exporter.poller")
    hold_dir = tmp_path / "run"
    backend = NvidiaBackend(BackendOptions(sysfs=tmp_path, nvml_hold_dir=hold_dir), nvml=fake)
    poller = Poller([backend], interval=60, timeout=5)

    async def go() -> None:
        text = (await poller.poll_once()).text.decode()
        assert value(text, "accel_exporter_backend_up", backend="nvidia") == 1
        assert fake.init_count == 1 and not backend.layout_changed()
        write_hold(hold_dir, Hold("r1", time.time() + 60), by="test")
        text = (await poller.poll_once()).text.decode()
        # Let go before it answered, and down for the reset with the reason.
        assert fake.init_count == 0
        assert read_released(hold_dir) == "r1"
        assert value(text, "accel_exporter_backend_up", backend="nvidia") == 0
        assert value(text, "accel_up", device="nvidia1") == 0
        down = [r.getMessage() for r in caplog.records if "is down" in r.getMessage()]
        assert len(down) == 1 and "resets GPUs (request r1" in down[0], down
        clear_hold(hold_dir)
        await asyncio.sleep(1.1)  # the backend asked to be tried again after 1 s
        text = (await poller.poll_once()).text.decode()
        assert value(text, "accel_exporter_backend_up", backend="nvidia") == 1
        assert value(text, "accel_up", device="nvidia1") == 1
        assert fake.init_count == 1
        await poller.stop()

    asyncio.run(go())


def test_an_ended_hold_is_no_hold(fake: FakeNVML, tmp_path: Path) -> None:
    backend = NvidiaBackend(BackendOptions(sysfs=tmp_path, nvml_hold_dir=tmp_path), nvml=fake)
    write_hold(tmp_path, Hold("old", time.time() - 1), by="test")
    backend.discover()
    assert fake.init_count == 1 and not backend.layout_changed()
    backend.close()


@pytest.mark.parametrize("content", [b"{", b'{"id": 7}', b"x" * 10_000])
def test_a_hold_that_cannot_be_read_leaves_nvml_open(
    fake: FakeNVML, tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    backend = NvidiaBackend(BackendOptions(sysfs=tmp_path, nvml_hold_dir=tmp_path), nvml=fake)
    (tmp_path / HOLD).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="accel_exporter.nvidia"):
        backend.discover()
        for _ in range(3):
            assert not backend.layout_changed()
    assert fake.init_count == 1
    said = [r for r in caplog.records if "NVML stays open" in r.getMessage()]
    assert len(said) == 1, "said once, not every poll"
    assert str(tmp_path / HOLD) in said[0].getMessage()
    backend.close()


def test_no_directory_no_hold(fake: FakeNVML, tmp_path: Path) -> None:
    backend = NvidiaBackend(BackendOptions(sysfs=tmp_path), nvml=fake)
    backend.discover()
    assert not backend.layout_changed()
    backend.close()
