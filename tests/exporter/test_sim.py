"""The sim backend: deterministic load, scripted faults, and clear script errors."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, SimScriptError, load_script, parse_sim_devices
from exporter.poller import Poller
from tests.support.exposition import CORE_METRICS, names, stable, value

FIXED = 1_700_000_000.0


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sim(
    devices: str,
    script: Path | None = None,
    clock: Callable[[], float] | None = None,
    seed: int = 0,
) -> SimBackend:
    opts = BackendOptions(sim_devices=parse_sim_devices(devices), sim_script=script, sim_seed=seed)
    return SimBackend(opts, clock=clock or Clock())


async def text_of(poller: Poller) -> str:
    return (await poller.poll_once()).text.decode()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nvidia", "bad device count in 'nvidia'"),
        ("nvidia:0", "bad device count"),
        ("nvdia:2", "unknown sim vendor 'nvdia'"),
        ("nvidia:2,nvidia:3", "named twice"),
        ("", "no devices given"),
    ],
)
def test_bad_device_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sim_devices(spec)


def test_script_problems_are_all_reported_with_positions(tmp_path: Path) -> None:
    script = tmp_path / "faults.yaml"
    script.write_text(
        "events:\n"
        "  - at: 30s\n"
        "    device: nvidia9\n"
        "    fault: 79\n"
        "  - at: soon\n"
        "    device: nvidia1\n"
        "  - at: 5s\n"
        "    devic: nvidia1\n"
        "  - at: 5s\n"
        "    device: nvidia0\n"
        "    set: {utilisation: 1}\n"
    )
    with pytest.raises(SimScriptError) as err:
        load_script(script, {"nvidia0", "nvidia1"})
    lines = str(err.value).splitlines()
    assert any(
        line.startswith(f"{script}:3:13: no simulated device 'nvidia9'; did you mean")
        for line in lines
    )
    assert any(line.startswith(f"{script}:5:9: at: invalid duration 'soon'") for line in lines)
    assert any(
        line.startswith(f"{script}:8:5: unknown key 'devic' in an event; did you mean 'device'?")
        for line in lines
    )
    assert f"{script}:7:5: an event: missing required key 'device'" in lines
    assert any("cannot set 'utilisation'" in line and ":11:10:" in line for line in lines)
    assert len(lines) == 5


async def test_same_seed_and_clock_give_the_same_exposition() -> None:
    a = Poller([sim("nvidia:2,amd:1", clock=Clock(42))], 1, 5, clock=lambda: FIXED)
    b = Poller([sim("nvidia:2,amd:1", clock=Clock(42))], 1, 5, clock=lambda: FIXED)
    c = Poller([sim("nvidia:2,amd:1", clock=Clock(42), seed=7)], 1, 5, clock=lambda: FIXED)
    ta, tb, tc = [stable(await text_of(p)) for p in (a, b, c)]
    assert ta == tb
    assert ta != tc


async def test_sim_golden_and_promtool(
    golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    clock = Clock(0)
    poller = Poller([sim("nvidia:2,amd:1,oneapi:1", clock=clock)], 1, 5, clock=lambda: FIXED)
    await poller.poll_once()
    clock.t = 10.0  # a second poll, so energy has accumulated
    text = await text_of(poller)
    promtool_check(text)
    golden("sim.prom", stable(text))


async def test_load_is_plausible_and_moves() -> None:
    clock = Clock(0)
    poller = Poller([sim("nvidia:4", clock=clock)], 1, 5)
    seen: set[float] = set()
    for t in range(0, 600, 60):
        clock.t = float(t)
        text = await text_of(poller)
        for i in range(4):
            u = value(text, "accel_utilization_ratio", device=f"nvidia{i}")
            assert u is not None and 0.0 <= u <= 1.0
            seen.add(u)
            used = value(text, "accel_memory_used_bytes", device=f"nvidia{i}")
            total = value(text, "accel_memory_total_bytes", device=f"nvidia{i}")
            assert used is not None and total is not None and 0 < used < total
    assert len(seen) > 20


async def test_script_fault_loses_device_and_counts_fatal(tmp_path: Path) -> None:
    script = tmp_path / "faults.yaml"
    script.write_text(
        "events:\n"
        "  - {at: 30s, device: nvidia3, fault: 79, lost: true}\n"
        "  - {at: 31s, device: nvidia1, fault: 13}\n"
        "  - {at: 60s, device: amd1, ecc: {uncorrected: 2}}\n"
        "  - {at: 90s, device: nvidia3, recover: true}\n"
        "  - {at: 90s, device: nvidia0, set: {utilization: 0.99, temperature: 92}}\n"
    )
    clock = Clock(0)
    poller = Poller([sim("nvidia:4,amd:2", script, clock)], 1, 5)
    text = await text_of(poller)
    assert value(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 0
    assert value(text, "accel_ecc_errors_total", device="amd1", type="uncorrected") == 0

    clock.t = 45
    text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia3") == 0
    assert value(text, "accel_device_info", device="nvidia3") == 1  # identity kept
    assert value(text, "accel_utilization_ratio", device="nvidia3") is None
    assert value(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 1
    assert value(text, "accel_fault_code_events_total", device="nvidia3", code="79") == 1
    # Xid 13 is an application's fault, not the device's.
    assert value(text, "accel_fault_events_total", device="nvidia1", severity="info") == 1
    assert value(text, "accel_fault_events_total", device="nvidia1", severity="fatal") == 0
    assert value(text, "accel_up", device="nvidia2") == 1
    assert value(text, "accel_exporter_backend_up", backend="sim") == 1

    clock.t = 61
    text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia3") == 0  # still lost, counter kept
    assert value(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 1
    assert value(text, "accel_ecc_errors_total", device="amd1", type="uncorrected") == 2

    clock.t = 95
    text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia3") == 1
    assert value(text, "accel_utilization_ratio", device="nvidia0") == 0.99
    assert value(text, "accel_temperature_celsius", device="nvidia0", sensor="gpu") == 92


async def test_scripted_hang_times_out_only_that_backend(tmp_path: Path) -> None:
    script = tmp_path / "hang.yaml"
    script.write_text("- {at: 0s, device: nvidia0, hang: forever}\n")
    hung = sim("nvidia:1", script)
    healthy = SimBackend(BackendOptions(sim_devices=(("amd", 1),)), clock=Clock())
    healthy.name = "sim-amd"  # type: ignore[misc]  # two sims, told apart by name
    poller = Poller([hung, healthy], 1, timeout=0.3)
    loop = asyncio.get_running_loop()
    start = loop.time()
    text = await text_of(poller)
    assert loop.time() - start < 2.0
    assert value(text, "accel_exporter_backend_up", backend="sim") == 0
    assert value(text, "accel_exporter_backend_up", backend="sim-amd") == 1
    # A second poll does not pile another call onto the hung thread.
    text = await text_of(poller)
    assert value(text, "accel_exporter_backend_up", backend="sim") == 0
    await poller.stop()


def test_hang_durations(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "- {at: 1m, device: nvidia0, hang: 20s}\n- {at: 2m, device: nvidia0, hang: true}\n"
    )
    events = load_script(script, {"nvidia0"})
    assert [(e.at, e.hang) for e in events] == [(60.0, 20.0), (120.0, math.inf)]


def test_script_file_missing(tmp_path: Path) -> None:
    with pytest.raises(SimScriptError, match=r"nope\.yaml: cannot read: "):
        load_script(tmp_path / "nope.yaml", set())


def test_sim_exports_every_device_metric_it_claims() -> None:
    text = asyncio.run(text_of(Poller([sim("nvidia:2,amd:1,oneapi:1")], 1, 5)))
    expected = {
        *CORE_METRICS,
        "accel_power_limit_watts",
        "accel_energy_joules_total",
        "accel_clock_hertz",
        "accel_throttle_active",
        "accel_pcie_throughput_bytes_per_second",
        "accel_link_throughput_bytes_per_second",
        "accel_link_errors_total",
        "accel_topology_link_info",
        "accel_remapped_rows",
    }
    assert expected <= names(text)
