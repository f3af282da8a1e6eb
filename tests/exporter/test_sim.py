"""The sim backend: deterministic load, scripted faults, and clear script errors."""

from __future__ import annotations

import asyncio
import math
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, SimScriptError, load_script, parse_sim_devices
from exporter.poller import Poller
from tests.support.clock import FakeClock
from tests.support.exposition import CORE_METRICS, names, parse, stable, total, value
from tests.support.paths import REPO

FIXED = 1_700_000_000.0


def sim(
    devices: str,
    script: Path | None = None,
    clock: Callable[[], float] | None = None,
    seed: int = 0,
) -> SimBackend:
    opts = BackendOptions(sim_devices=parse_sim_devices(devices), sim_script=script, sim_seed=seed)
    return SimBackend(opts, clock=clock or FakeClock(0.0))


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
        ("nvidia:1025", "at most 1024 simulated devices per vendor"),
        ("nvidia:99999999999999", "at most 1024 simulated devices per vendor"),
        ("nvidia:" + "9" * 5000, "at most 1024 simulated devices per vendor"),
        ("nvidia:1024,amd:1024,oneapi:1", "2049 in all, at most 2048"),
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
    a = Poller([sim("nvidia:2,amd:1", clock=FakeClock(42))], 1, 5, clock=lambda: FIXED)
    b = Poller([sim("nvidia:2,amd:1", clock=FakeClock(42))], 1, 5, clock=lambda: FIXED)
    c = Poller([sim("nvidia:2,amd:1", clock=FakeClock(42), seed=7)], 1, 5, clock=lambda: FIXED)
    ta, tb, tc = [stable(await text_of(p)) for p in (a, b, c)]
    assert ta == tb
    assert ta != tc


async def test_sim_golden_and_promtool(
    golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    clock = FakeClock(0)
    poller = Poller([sim("nvidia:2,amd:1,oneapi:1", clock=clock)], 1, 5, clock=lambda: FIXED)
    await poller.poll_once()
    clock.set(10.0)  # a second poll, so energy has accumulated
    text = await text_of(poller)
    promtool_check(text)
    golden("sim.prom", stable(text))


async def test_load_is_plausible_and_moves() -> None:
    clock = FakeClock(0)
    poller = Poller([sim("nvidia:4", clock=clock)], 1, 5)
    seen: set[float] = set()
    for t in range(0, 600, 60):
        clock.set(float(t))
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
    clock = FakeClock(0)
    poller = Poller([sim("nvidia:4,amd:2", script, clock)], 1, 5)
    text = await text_of(poller)
    assert total(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 0
    assert value(text, "accel_ecc_errors_total", device="amd1", type="uncorrected") == 0

    clock.set(45)
    text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia3") == 0
    assert value(text, "accel_device_info", device="nvidia3") == 1  # identity kept
    assert value(text, "accel_utilization_ratio", device="nvidia3") is None
    # Xid 79 and the loss.
    assert total(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 2
    assert total(text, "accel_fault_code_events_total", device="nvidia3", code="79") == 1
    assert total(text, "accel_fault_code_events_total", device="nvidia3", code="lost") == 1
    # Xid 13 is an application's fault, not the device's.
    assert total(text, "accel_fault_events_total", device="nvidia1", severity="info") == 1
    assert total(text, "accel_fault_events_total", device="nvidia1", severity="fatal") == 0
    assert value(text, "accel_up", device="nvidia2") == 1
    assert value(text, "accel_exporter_backend_up", backend="sim") == 1

    clock.set(61)
    text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia3") == 0  # still lost, counter kept
    assert total(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 2
    assert value(text, "accel_ecc_errors_total", device="amd1", type="uncorrected") == 2

    clock.set(95)
    text = await text_of(poller)
    assert value(text, "accel_up", device="nvidia3") == 1
    assert value(text, "accel_utilization_ratio", device="nvidia0") == 0.99
    assert value(text, "accel_temperature_celsius", device="nvidia0", sensor="gpu") == 92


async def test_scripted_hang_times_out_only_that_backend(tmp_path: Path) -> None:
    script = tmp_path / "hang.yaml"
    script.write_text("- {at: 0s, device: nvidia0, hang: forever}\n")
    hung = sim("nvidia:1", script)
    healthy = SimBackend(BackendOptions(sim_devices=(("amd", 1),)), clock=FakeClock(0.0))
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


# -- hostile input: a clear message and exit 2, within 10 s and 1 GiB ------------------

GIB = 1024**3

# Nine aliases of nine: 9**8 (43 million) strings if anything expanded it.
ALIAS_BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9 if prev else ['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefg"], "abcdefgh", strict=True)
)

HOSTILE_SCRIPTS = {
    "not-utf8": b'events:\n  - {at: 1s, device: nvidia0, fault: "\xff\xfe"}\n',
    "list-as-device": b"events:\n  - {at: 1s, device: [nvidia0, nvidia1]}\n",
    "ecc-5000-digits": (
        "events:\n  - {at: 1s, device: nvidia0, ecc: {uncorrected: " + "9" * 5000 + "}}\n"
    ).encode(),
    "python-tag": b"events:\n  - {at: 1s, device: !!python/object/apply:os.getpid []}\n",
    "alias-bomb": (
        ALIAS_BOMB + "events:\n  - {at: 1s, device: nvidia0, set: {power: *h}}\n"
    ).encode(),
}


def _limited() -> None:
    """The child's address space is capped at 1 GiB: an input that would take more
    fails the test instead of the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB))


def run_exporter(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "--backends", "sim", "--once", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=_limited,
    )
    return proc, time.monotonic() - start


@pytest.mark.parametrize("case", sorted(HOSTILE_SCRIPTS))
def test_hostile_scripts_are_refused_with_a_position(tmp_path: Path, case: str) -> None:
    script = tmp_path / f"{case}.yaml"
    script.write_bytes(HOSTILE_SCRIPTS[case])
    proc, took = run_exporter("--sim-devices", "nvidia:2", "--sim-script", str(script))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert re.search(rf"{re.escape(str(script))}:\d+:\d+: ", proc.stderr), proc.stderr
    assert took < 10.0


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("list-as-device", "2:22: device must be a single value, got a list"),
        ("ecc-5000-digits", "ecc.uncorrected must be at most 1000000000, got 5000 digits"),
        ("python-tag", "2:22: "),
    ],
)
def test_hostile_script_fields_say_what_is_wrong(tmp_path: Path, case: str, message: str) -> None:
    script = tmp_path / f"{case}.yaml"
    script.write_bytes(HOSTILE_SCRIPTS[case])
    with pytest.raises(SimScriptError) as err:
        load_script(script, {"nvidia0", "nvidia1"})
    assert message in str(err.value)
    assert all(line.startswith(f"{script}:") for line in str(err.value).splitlines())


def test_script_values_are_range_checked(tmp_path: Path) -> None:
    script = tmp_path / "ranges.yaml"
    script.write_text(
        "events:\n"
        "  - {at: 1s, device: nvidia0, set: {utilization: 7, temperature: 1e9}}\n"
        "  - {at: 1s, device: nvidia0, ecc: {uncorrected: 2000000000, corrected: -1}}\n"
        "  - {at: 1s, device: nvidia0, fault: " + "x" * 65 + "}\n"
        "  - {at: 1s, device: nvidia0, hang: [forever]}\n"
    )
    with pytest.raises(SimScriptError) as err:
        load_script(script, {"nvidia0"})
    text = str(err.value)
    assert "set.utilization must be a number from 0 to 1, got 7" in text
    assert "set.temperature must be a number from -40 to 150" in text
    assert "ecc.uncorrected must be at most 1000000000, got 2000000000" in text
    assert "ecc.corrected must be a whole number >= 0, got -1" in text
    assert "fault must be a fault code of at most 64 characters" in text
    assert f"{script}:5:37: hang must be a single value, got a list" in text


def test_huge_device_count_is_refused_at_once() -> None:
    proc, took = run_exporter("--sim-devices", "nvidia:99999999999999")
    assert proc.returncode == 2
    assert "at most 1024 simulated devices per vendor" in proc.stderr
    assert took < 10.0


# -- simulated identities ---------------------------------------------------------------


def test_uuids_differ_across_hosts_and_stay_put_on_one() -> None:
    """Two simulated nodes with the same seed (the default 0) have different UUIDs,
    so a dashboard keyed by uuid never mixes them; one host keeps its own."""

    def uuids(host: str) -> list[str]:
        opts = BackendOptions(
            sim_devices=parse_sim_devices("nvidia:4,amd:2,oneapi:2"),
            sim_host=host,
            sim_partitions=True,
        )
        return [d.uuid for d in SimBackend(opts, clock=FakeClock(0.0)).discover()]

    a, b = uuids("node-a"), uuids("node-b")
    assert len(set(a)) == len(a)
    assert not set(a) & set(b)
    assert uuids("node-a") == a


def test_simulated_devices_say_so() -> None:
    backend = sim("nvidia:1,amd:1,oneapi:1")
    assert all(d.model.startswith("Simulated ") for d in backend.discover())


def test_the_cli_derives_uuids_from_this_host() -> None:
    proc, _ = run_exporter("--sim-devices", "nvidia:1")
    assert proc.returncode == 0, proc.stderr
    [info] = [labels for name, labels, _ in parse(proc.stdout) if name == "accel_device_info"]
    here = BackendOptions(sim_devices=(("nvidia", 1),), sim_host=socket.gethostname())
    assert info["uuid"] == SimBackend(here, clock=FakeClock(0.0)).discover()[0].uuid
    assert info["model"] == "Simulated NVIDIA H100 80GB HBM3"
