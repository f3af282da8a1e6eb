"""The sim backend's device links: throughput that follows the load on the vendors
whose real backends publish it (NVIDIA, AMD), none on the others, and a scripted
hung collective (``hang: collective``): the device stays busy and answers, its
links fall silent until ``recover``."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, SimScriptError, load_script, parse_sim_devices
from exporter.poller import Poller
from tests.support.clock import FakeClock
from tests.support.exposition import parse, value

LINK = "accel_link_throughput_bytes_per_second"


def _sim(devices: str, script: Path | None, clock: FakeClock) -> SimBackend:
    opts = BackendOptions(sim_devices=parse_sim_devices(devices), sim_script=script)
    return SimBackend(opts, clock=clock)


def _links(text: str, device: str) -> list[float]:
    """Every link and direction's figure of ``device``."""
    return [v for name, labels, v in parse(text) if name == LINK and labels["device"] == device]


async def test_links_follow_the_load_on_nvidia_and_amd_only() -> None:
    clock = FakeClock(0.0)
    poller = Poller([_sim("nvidia:2,amd:1,gaudi:1,oneapi:1", None, clock)], 1, 5)
    for t in (0.0, 150.0, 300.0):
        clock.set(t)
        text = (await poller.poll_once()).text.decode()
        for device, links in (("nvidia0", 18), ("amd0", 7)):
            util = value(text, "accel_utilization_ratio", device=device)
            assert util is not None and util > 0
            seen = _links(text, device)
            assert len(seen) == 2 * links  # rx and tx of every link, as NVML/xGMI give
            assert all(v > 0 for v in seen)
        # What the real backends cannot read is absent, never 0.
        assert _links(text, "gaudi0") == [] and _links(text, "oneapi0") == []
    # Busier, more traffic: the figure is in proportion to the load.
    low = FakeClock(0.0)
    b = _sim("nvidia:1", None, low)
    readings = []
    for t in range(0, 600, 30):
        low.set(float(t))
        r = b.read(b.discover()[0])
        readings.append((r.utilization or 0.0, r.link_bytes_per_second[("0", "rx")]))
    readings.sort()
    assert readings[0][1] < readings[-1][1]
    assert all(rate == pytest.approx(25e9 * u * 0.5, rel=1e-6, abs=1.0) for u, rate in readings)


async def test_a_hung_collective_keeps_the_device_busy_with_silent_links(tmp_path: Path) -> None:
    script = tmp_path / "hang.yaml"
    script.write_text(
        "events:\n"
        "  - {at: 60s, device: nvidia1, hang: collective}\n"
        "  - {at: 60s, device: amd0, hang: collective}\n"
        "  - {at: 120s, device: nvidia1, recover: true}\n"
    )
    clock = FakeClock(0.0)
    poller = Poller([_sim("nvidia:2,amd:1", script, clock)], 1, timeout=5)
    clock.set(30.0)
    before = (await poller.poll_once()).text.decode()
    assert all(v > 0 for v in _links(before, "nvidia1"))
    clock.set(90.0)
    text = (await poller.poll_once()).text.decode()
    for device in ("nvidia1", "amd0"):
        assert value(text, "accel_up", device=device) == 1  # it answers, no wedge
        util = value(text, "accel_utilization_ratio", device=device)
        assert util is not None and util > 0.1  # busy as when it ran
        assert _links(text, device) and all(v == 0 for v in _links(text, device))
    assert value(text, "accel_exporter_backend_up", backend="sim") == 1
    # Its neighbour runs on, links busy; power follows the load as before.
    assert all(v > 0 for v in _links(text, "nvidia0"))
    power = value(text, "accel_power_watts", device="nvidia1")
    assert power is not None and power > 70.0
    clock.set(150.0)
    text = (await poller.poll_once()).text.decode()
    assert all(v > 0 for v in _links(text, "nvidia1"))  # recovered
    assert all(v == 0 for v in _links(text, "amd0"))  # still hung
    await poller.stop()


def test_hang_collective_is_read_and_a_typo_is_placed(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("- {at: 1m, device: nvidia0, hang: collective}\n")
    (event,) = load_script(script, {"nvidia0"})
    assert event.collective and event.hang is None
    script.write_text("- {at: 1m, device: nvidia0, hang: colective}\n")
    with pytest.raises(SimScriptError) as e:
        load_script(script, {"nvidia0"})
    assert f"{script}:1:35: hang (forever, collective, or a duration" in str(e.value)
    assert "invalid duration 'colective'" in str(e.value)
