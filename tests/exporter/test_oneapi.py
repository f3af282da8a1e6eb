"""The oneapi backend: the real dpctl on this machine's CPU, i915/xe sysfs fixtures,
and Level Zero Sysman through its ctypes code against the fake loader
(tests/support/fakes/level_zero.py), all through the real Poller and renderer.

The Level Zero node is a two-tile Max 1550 (listed by dpctl as two FLAT-mode tiles of
one composite device) and a Flex 170 that both Level Zero and OpenCL list, beside the
host CPU on OpenCL, an NVIDIA GPU from its own OpenCL ICD and the FPGA emulator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from exporter import faults
from exporter.backends import default_backends
from exporter.backends.base import FIRST_SAMPLE, BackendOptions
from exporter.backends.oneapi import OneapiBackend, sycl, sysman, zes
from exporter.backends.oneapi.device import FIELDS, found_fields
from exporter.backends.oneapi.sysman import BANDWIDTH_SOURCE
from exporter.backends.oneapi.zes import PROTOTYPES
from exporter.model import BackendUnavailableError, DeviceInfo, DeviceLostError, Reading
from exporter.poller import Poller
from tests.support.clock import FakeClock
from tests.support.exposition import names, parse, stable, total, value
from tests.support.fakes import level_zero as lz
from tests.support.fakes.dpctl import FakeDpctl, SyclDevice
from tests.support.fakes.level_zero import GIB, FakeLevelZero, flex_170, max_1550
from tests.support.paths import FIXTURES, REPO

NOW = 1_700_000_000.0
MAX = "Intel(R) Data Center GPU Max 1550"
FLEX = "Intel(R) Data Center GPU Flex 170"
B580 = "Intel(R) Arc(TM) B580 Graphics"

pytestmark = pytest.mark.timeout(60)


def cpu(**kw: Any) -> SyclDevice:
    return SyclDevice(
        "AMD EPYC 9654 96-Core Processor",
        backend="opencl",
        kind="cpu",
        driver_version="2026.21.7.0.24_160000",
        global_mem_size=768 * GIB,
        device_id=0xB00F21,
        **kw,
    )


def level_zero_node() -> FakeDpctl:
    card = SyclDevice(
        MAX, backend="level_zero", kind="gpu", global_mem_size=128 * GIB, device_id=0x0BD5
    )
    tiles = [
        SyclDevice(
            MAX,
            backend="level_zero",
            kind="gpu",
            global_mem_size=64 * GIB,
            device_id=0x0BD5,
            composite=card,
        )
        for _ in range(2)
    ]
    return FakeDpctl(
        [
            *tiles,
            SyclDevice(
                FLEX, backend="level_zero", kind="gpu", global_mem_size=16 * GIB, device_id=0x56C0
            ),
            SyclDevice(
                FLEX,
                backend="opencl",
                kind="gpu",
                driver_version="24.35.30872",
                global_mem_size=16 * GIB,
                device_id=0x56C0,
            ),
            cpu(),
            SyclDevice(
                "NVIDIA H100 80GB HBM3",
                backend="opencl",
                kind="gpu",
                vendor="NVIDIA Corporation",
                driver_version="550.90.07",
                global_mem_size=80 * GIB,
            ),
            SyclDevice(
                "Intel(R) FPGA Emulation Device",
                backend="opencl",
                kind="accelerator",
                global_mem_size=64 * GIB,
                emulated=True,
            ),
        ]
    )


def sysfs_node() -> FakeDpctl:
    return FakeDpctl(
        [
            SyclDevice(
                FLEX, backend="level_zero", kind="gpu", global_mem_size=16 * GIB, device_id=0x56C0
            ),
            SyclDevice(
                B580,
                backend="level_zero",
                kind="gpu",
                driver_version="1.6.32224",
                global_mem_size=12 * GIB,
                device_id=0xE20B,
            ),
            cpu(),
        ]
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the fixture sysfs (symlinks kept, as the kernel has them)."""
    shutil.copytree(FIXTURES / "sys", tmp_path / "sys", symlinks=True)
    return tmp_path / "sys"


@pytest.fixture
def gpus() -> tuple[FakeLevelZero, lz.FakeDevice, lz.FakeDevice]:
    big, flex = max_1550(), flex_170()
    return FakeLevelZero([big, flex]), big, flex


@pytest.fixture
async def poller_for() -> AsyncIterator[Callable[..., Poller]]:
    made: list[Poller] = []

    def build(backend: OneapiBackend) -> Poller:
        poller = Poller([backend], interval=1, timeout=10, clock=lambda: NOW)
        made.append(poller)
        return poller

    yield build
    for p in made:
        await p.stop()


async def poll(poller: Poller) -> str:
    return (await poller.poll_once()).text.decode()


def info_of(text: str) -> dict[str, dict[str, str]]:
    return {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}


def assert_every_field_found_or_explained(backend: OneapiBackend, devices: list[str]) -> None:
    for d in devices:
        reading = backend.read(DeviceInfo(d, "oneapi", ""))
        found = found_fields(reading)
        if reading.fault_events:
            found.add("fault_events")
        missing = backend.missing[d]
        if "fault_events" not in missing:
            found.add("fault_events")
        assert found | set(missing) == set(FIELDS), d
        assert not found & set(missing), (d, found & set(missing))


# -- the real dpctl and this machine's CPU --------------------------------------------

_REAL_DPCTL = r"""
import dataclasses, inspect, json, sys
import dpctl, dpctl.utils
from exporter.backends.base import BackendOptions
from exporter.backends.oneapi import OneapiBackend

backend = OneapiBackend(BackendOptions(oneapi_include_cpu=True))
devices = backend.discover()
readings = {d.device: dataclasses.asdict(backend.read(d)) for d in devices}
attrs = ("name", "vendor", "driver_version", "global_mem_size", "device_type", "backend",
         "has_aspect_emulated", "composite_device")
json.dump({
    "devices": [dataclasses.asdict(d) for d in devices],
    "readings": readings,
    "sources": backend.sources,
    "level_zero_reason": backend.level_zero_reason,
    "opencl": [[d.name, d.vendor, d.device_type.name, d.global_mem_size]
               for d in dpctl.get_devices(backend="opencl")],
    "missing_attrs": [a for a in attrs if not hasattr(dpctl.SyclDevice, a)],
    "get_devices": list(inspect.signature(dpctl.get_devices).parameters),
    "intel_device_info": callable(dpctl.utils.intel_device_info),
}, sys.stdout)
"""


def _real_env() -> dict[str, str]:
    """The environment `make test` gives: the venv's own OpenCL CPU runtime named
    explicitly, since the wheel's .icd file points at a placeholder path."""
    env = dict(os.environ)
    icd = env.setdefault("OCL_ICD_FILENAMES", str(Path(sys.prefix) / "lib" / "libintelocl.so"))
    assert Path(icd).is_file(), (
        f"OCL_ICD_FILENAMES={icd} does not exist: `make setup` installs dpcpp-cpp-rt and "
        "intel-cmplr-lib-ur 2026.1.2 into the venv"
    )
    return env


def test_real_dpctl_discovers_this_machines_cpu() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _REAL_DPCTL],
        cwd=REPO,
        env=_real_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"dpctl did not find this machine's CPU:\n{proc.stderr}"
    report = json.loads(proc.stdout)
    # The fake dpctl has the real module's names.
    assert report["missing_attrs"] == []
    assert report["get_devices"] == ["backend", "device_type"]
    assert report["intel_device_info"]
    cpus = [d for d in report["opencl"] if d[2] == "cpu"]
    assert len(cpus) == 1, report["opencl"]
    name, vendor, _, memory = cpus[0]
    assert "Intel" in vendor  # the runtime's vendor, whatever CPU it runs on
    [device] = [d for d in report["devices"] if d["profile"] == "cpu"]
    assert device["device"] == "oneapi0"
    assert device["vendor"] == "oneapi"
    assert device["model"] == name
    assert device["driver_version"]
    assert device["uuid"]
    reading = report["readings"]["oneapi0"]
    assert reading["up"] and reading["memory_total_bytes"] == memory
    # A CPU seen through OpenCL has no telemetry of its own here: nothing else is made up.
    assert reading["utilization"] is None and reading["power_watts"] is None
    assert report["sources"]["oneapi0"] == "none"
    if ctypes.util.find_library("ze_loader") is None:
        assert "Level Zero loader is not installed" in report["level_zero_reason"]


def test_exporter_once_exports_this_machines_cpu(promtool_check: Callable[[str], None]) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter.cli",
            "--backends",
            "oneapi",
            "--oneapi.include-cpu",
            "--once",
        ],
        cwd=REPO,
        env=_real_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert value(text, "accel_exporter_backend_up", backend="oneapi") == 1, proc.stderr
    info = info_of(text)
    assert set(info) == {"oneapi0"}, proc.stderr
    cpu0 = info["oneapi0"]
    assert cpu0["vendor"] == "oneapi" and cpu0["profile"] == "cpu"
    uuid = cpu0["uuid"]
    assert value(text, "accel_up", device="oneapi0", vendor="oneapi", uuid=uuid) == 1
    assert (value(text, "accel_memory_total_bytes", device="oneapi0") or 0) > 0
    for absent in ("accel_utilization_ratio", "accel_power_watts", "accel_temperature_celsius"):
        assert absent not in names(text)
    promtool_check(text)


def test_oneapi_is_a_default_backend() -> None:
    assert "oneapi" in default_backends()


# -- i915 and xe cards in sysfs --------------------------------------------------------


async def test_sysfs_cards_power_energy_frequency(
    tree: Path,
    poller_for: Callable[..., Poller],
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    clock = FakeClock()
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tree),
        dpctl=sysfs_node(),
        level_zero=FakeLevelZero(),
        clock=clock,
    )
    poller = poller_for(backend)
    first = await poll(poller)
    # Power is an energy delta: nothing on the first poll, never a made-up 0.
    assert "accel_power_watts" not in names(first)
    assert value(first, "accel_energy_joules_total", device="oneapi0") == 8124.53781

    flex_energy = tree / "class/drm/card2/device/hwmon/hwmon5/energy1_input"
    flex_energy.write_text(f"{8124537810 + 191_000_000}\n")  # 95.5 W for 2 s
    b580_energy = tree / "class/drm/card3/device/hwmon/hwmon6/energy2_input"
    b580_energy.write_text(f"{4512398741 + 300_000_000}\n")  # 150 W for 2 s
    clock.advance(2.0)
    text = await poll(poller)

    info = info_of(text)
    assert set(info) == {"oneapi0", "oneapi1", "oneapi2"}
    assert [info[d]["model"] for d in ("oneapi0", "oneapi1", "oneapi2")] == [
        FLEX,
        B580,
        "AMD EPYC 9654 96-Core Processor",
    ]
    assert info["oneapi0"]["pci_bus_id"] == "0000:4d:00.0"
    assert info["oneapi0"]["numa_node"] == "0"
    assert info["oneapi1"]["pci_bus_id"] == "0000:c3:00.0"
    assert info["oneapi1"]["numa_node"] == ""  # the kernel says -1
    assert {lb["vendor"] for lb in info.values()} == {"oneapi"}
    assert [info[d]["profile"] for d in sorted(info)] == ["gpu", "gpu", "cpu"]

    def v(name: str, device: str, **labels: str) -> float | None:
        return value(text, name, device=device, **labels)

    # i915: card energy (µJ -> J), power from its delta, PL1 as the limit (µW -> W).
    assert v("accel_energy_joules_total", "oneapi0") == pytest.approx(8315.53781)
    assert v("accel_power_watts", "oneapi0") == pytest.approx(95.5)
    assert v("accel_power_limit_watts", "oneapi0") == 120
    assert v("accel_clock_hertz", "oneapi0", clock="graphics") == 2.05e9  # MHz -> Hz
    # xe: the package channel (no card channel here); PL1 disabled is no limit, not 0 W.
    assert v("accel_energy_joules_total", "oneapi1") == pytest.approx(4812.398741)
    assert v("accel_power_watts", "oneapi1") == pytest.approx(150.0)
    assert v("accel_power_limit_watts", "oneapi1") is None
    assert v("accel_clock_hertz", "oneapi1", clock="graphics") == 2.85e9
    assert v("accel_temperature_celsius", "oneapi1", sensor="package") == 48
    assert v("accel_temperature_celsius", "oneapi1", sensor="memory") == 52
    # What sysfs cannot say stays out; memory size is dpctl's.
    assert v("accel_utilization_ratio", "oneapi0") is None
    assert v("accel_ecc_errors_total", "oneapi0", type="corrected") is None
    assert v("accel_memory_total_bytes", "oneapi0") == 16 * GIB
    assert v("accel_memory_total_bytes", "oneapi2") == 768 * GIB
    assert v("accel_power_watts", "oneapi2") is None

    assert backend.sources == {"oneapi0": "i915 sysfs", "oneapi1": "xe sysfs", "oneapi2": "none"}
    assert "zesInit: ZE_RESULT_ERROR_UNINITIALIZED" in backend.level_zero_reason
    assert (
        backend.missing["oneapi1"]["power_limit_watts"] == "power2_max is 0: the limit is disabled"
    )
    promtool_check(text)
    golden("oneapi_sysfs.prom", stable(text))


def test_sysfs_fields_found_or_explained(tree: Path) -> None:
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tree),
        dpctl=sysfs_node(),
        level_zero=FakeLevelZero(),
    )
    devices = [d.device for d in backend.discover()]
    assert_every_field_found_or_explained(backend, devices)
    assert backend.missing["oneapi0"]["power_watts"] == FIRST_SAMPLE
    assert "cpu backend" in backend.missing["oneapi2"]["utilization"]


async def test_card_gone_from_sysfs_is_lost(tree: Path, poller_for: Callable[..., Poller]) -> None:
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tree),
        dpctl=sysfs_node(),
        level_zero=FakeLevelZero(),
    )
    poller = poller_for(backend)
    await poll(poller)
    shutil.rmtree(tree / "devices" / "pci0000:c0")  # the B580 fell off the bus
    text = await poll(poller)
    assert value(text, "accel_up", device="oneapi1") == 0
    assert value(text, "accel_device_info", device="oneapi1") == 1
    assert total(text, "accel_fault_events_total", device="oneapi1", severity="fatal") == 1
    assert total(text, "accel_fault_code_events_total", device="oneapi1", code="lost") == 1
    assert value(text, "accel_up", device="oneapi0") == 1
    with pytest.raises(DeviceLostError, match="gone from sysfs"):
        backend.read(DeviceInfo("oneapi1", "oneapi", ""))
    text = await poll(poller)  # still gone: still down, counted once
    assert total(text, "accel_fault_events_total", device="oneapi1", severity="fatal") == 1


def test_card_without_uevent_slot_uses_the_device_link(tmp_path: Path) -> None:
    """Older kernels' uevent may lack PCI_SLOT_NAME: the device link names the address."""
    pci = tmp_path / "sys/devices/pci0000:00/0000:00:02.0"
    (pci / "drm/card0").mkdir(parents=True)
    (pci / "vendor").write_text("0x8086\n")
    (pci / "device").write_text("0x56c0\n")
    (pci / "uevent").write_text("DRIVER=i915\n")
    (pci / "drm/card0/device").symlink_to("../../../0000:00:02.0")
    (tmp_path / "sys/class/drm").mkdir(parents=True)
    (tmp_path / "sys/class/drm/card0").symlink_to("../../devices/pci0000:00/0000:00:02.0/drm/card0")
    dpctl = FakeDpctl([SyclDevice(FLEX, backend="level_zero", kind="gpu", device_id=0x56C0)])
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path / "sys"),
        dpctl=dpctl,
        level_zero=FakeLevelZero(),
    )
    [device] = backend.discover()
    assert device.pci_bus_id == "0000:00:02.0"
    assert backend.sources["oneapi0"] == "i915 sysfs"


# -- Level Zero Sysman against the fake loader ------------------------------------------


async def test_level_zero_node(
    tmp_path: Path,
    gpus: tuple[FakeLevelZero, lz.FakeDevice, lz.FakeDevice],
    poller_for: Callable[..., Poller],
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    ze, _, _ = gpus
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
        dpctl=level_zero_node(),
        level_zero=ze,
    )
    poller = poller_for(backend)
    first = await poll(poller)
    for rate in (
        "accel_utilization_ratio",
        "accel_memory_bandwidth_utilization_ratio",
        "accel_power_watts",
    ):
        assert rate not in names(first), rate
    ze.advance(2.0)
    text = await poll(poller)

    info = info_of(text)
    # The Max's two FLAT tiles are one card; the Flex is listed once though both
    # Level Zero and OpenCL see it; no NVIDIA GPU and no emulator.
    assert set(info) == {"oneapi0", "oneapi1", "oneapi2"}
    assert info["oneapi0"]["model"] == MAX and info["oneapi0"]["pci_bus_id"] == "0000:29:00.0"
    assert info["oneapi1"]["model"] == FLEX and info["oneapi1"]["pci_bus_id"] == "0000:4d:00.0"
    assert info["oneapi1"]["driver_version"] == "1.3.29735"  # Level Zero's, not OpenCL's
    assert info["oneapi2"]["profile"] == "cpu"
    # The UUID Sysman chains through pNext (zes_device_ext_properties_t).
    assert info["oneapi0"]["uuid"] == "8680d50b-1500-0000-0000-000000000029"

    def v(name: str, device: str, **labels: str) -> float | None:
        return value(text, name, device=device, **labels)

    # Two tiles without a device-level engine group: their mean.
    assert v("accel_utilization_ratio", "oneapi0") == pytest.approx(0.7)
    # The ALL group, not the copy engine that is always busy.
    assert v("accel_utilization_ratio", "oneapi1") == pytest.approx(0.25)
    # Device memory of both tiles; system memory is not the device's.
    assert v("accel_memory_total_bytes", "oneapi0") == 128 * GIB
    assert v("accel_memory_used_bytes", "oneapi0") == 28 * GIB
    assert v("accel_memory_used_bytes", "oneapi1") == 4 * GIB
    # (read + write bytes) / time / peak, over both tiles.
    assert v("accel_memory_bandwidth_utilization_ratio", "oneapi0") == pytest.approx(0.3)
    assert v("accel_memory_bandwidth_utilization_ratio", "oneapi1") == pytest.approx(0.1)
    assert f"Source: {BANDWIDTH_SOURCE} on 2 devices." in text
    # The package domain (µJ -> J; µJ/µs = W), not package + tiles counted twice.
    assert v("accel_energy_joules_total", "oneapi0") == pytest.approx(9000 + 480 * 2)
    assert v("accel_power_watts", "oneapi0") == pytest.approx(480)
    assert v("accel_power_watts", "oneapi1") == pytest.approx(95.5)
    assert v("accel_power_limit_watts", "oneapi0") == 600  # mW -> W
    assert v("accel_power_limit_watts", "oneapi1") == 150
    # Tile 0's clocks (MHz -> Hz); throttle reasons from the graphics domain.
    assert v("accel_clock_hertz", "oneapi0", clock="graphics") == 1.55e9
    assert v("accel_clock_hertz", "oneapi0", clock="memory") == 3.2e9
    assert v("accel_throttle_active", "oneapi0", reason="power_cap") == 1
    assert v("accel_throttle_active", "oneapi0", reason="thermal") == 0
    assert v("accel_throttle_active", "oneapi1", reason="thermal") == 1
    # The hottest tile per kind of sensor; minimum sensors are left out.
    assert v("accel_temperature_celsius", "oneapi0", sensor="global") == 64
    assert v("accel_temperature_celsius", "oneapi0", sensor="gpu") == 62.5
    assert v("accel_temperature_celsius", "oneapi0", sensor="memory") == 55
    assert len([1 for n, lb, _ in parse(text) if n == "accel_temperature_celsius"]) == 5
    # Hardware-error categories only: the engine reset in the uncorrectable set is a
    # fault event kind, not an ECC error.
    assert v("accel_ecc_errors_total", "oneapi0", type="corrected") == 6
    assert v("accel_ecc_errors_total", "oneapi0", type="uncorrected") == 0
    assert v("accel_ecc_errors_total", "oneapi1", type="uncorrected") == 0
    # Counts from before the exporter started are not replayed as new faults.
    for d in ("oneapi0", "oneapi1", "oneapi2"):
        for sev in ("fatal", "recoverable", "info"):
            assert total(text, "accel_fault_events_total", device=d, severity=sev) == 0, (d, sev)
    assert backend.sources == {
        "oneapi0": "Level Zero Sysman",
        "oneapi1": "Level Zero Sysman",
        "oneapi2": "none",
    }
    promtool_check(text)
    golden("oneapi_level_zero.prom", stable(text))


def test_level_zero_fields_found_or_explained(
    tmp_path: Path, gpus: tuple[FakeLevelZero, lz.FakeDevice, lz.FakeDevice]
) -> None:
    ze, _, _ = gpus
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
        dpctl=level_zero_node(),
        level_zero=ze,
    )
    devices = [d.device for d in backend.discover()]
    assert_every_field_found_or_explained(backend, devices)
    assert backend.missing["oneapi0"]["utilization"] == FIRST_SAMPLE
    ze.advance(1.0)
    assert_every_field_found_or_explained(backend, devices)
    assert backend.missing["oneapi0"] == {}
    assert backend.missing["oneapi1"] == {}


async def test_ras_errors_are_ecc_and_fault_events(
    tmp_path: Path,
    gpus: tuple[FakeLevelZero, lz.FakeDevice, lz.FakeDevice],
    poller_for: Callable[..., Poller],
) -> None:
    ze, big, flex = gpus
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
        dpctl=level_zero_node(),
        level_zero=ze,
    )
    poller = poller_for(backend)
    await poll(poller)
    correctable, uncorrectable = big.ras
    correctable.counts[lz.RAS_CAT_COMPUTE_ERRORS] += 5
    uncorrectable.counts[lz.RAS_CAT_CACHE_ERRORS] += 1
    uncorrectable.counts[lz.RAS_CAT_RESET] += 2
    flex.ras[1].counts[lz.RAS_CAT_PROGRAMMING_ERRORS] += 1
    flex.reset_reasons = lz.RESET_REASON_WEDGED
    text = await poll(poller)

    def fault(device: str, severity: str) -> float | None:
        return total(text, "accel_fault_events_total", device=device, severity=severity)

    def code(device: str, c: str) -> float | None:
        return total(text, "accel_fault_code_events_total", device=device, code=c)

    assert value(text, "accel_ecc_errors_total", device="oneapi0", type="corrected") == 11
    assert value(text, "accel_ecc_errors_total", device="oneapi0", type="uncorrected") == 1
    # One event per kind and poll, classified by exporter.faults.
    assert (
        fault("oneapi0", "fatal"),
        fault("oneapi0", "recoverable"),
        fault("oneapi0", "info"),
    ) == (
        1,
        1,
        1,
    )
    assert code("oneapi0", "ras_uncorrectable") == 1
    assert code("oneapi0", "ras_engine_reset") == 1
    assert code("oneapi0", "ras_correctable") == 1
    # The application's fault is info; a wedged device needs a reset: fatal.
    assert code("oneapi1", "ras_programming") == 1 and fault("oneapi1", "info") == 1
    assert code("oneapi1", "reset_wedged") == 1 and fault("oneapi1", "fatal") == 1
    assert total(text, "accel_fault_events_total", device="oneapi1", action="reset") == 1
    assert value(text, "accel_up", device="oneapi1") == 1

    # Nothing new: the totals stay, nothing is counted twice; a still-pending reset
    # is not a new fault either.
    text = await poll(poller)
    assert fault("oneapi0", "fatal") == 1 and fault("oneapi1", "fatal") == 1
    # A repair waits for a reset: its own event, to be applied once the device is idle.
    flex.reset_reasons = lz.RESET_REASON_WEDGED | lz.RESET_REASON_REPAIR
    text = await poll(poller)
    assert code("oneapi1", "reset_repair") == 1 and code("oneapi1", "reset_wedged") == 1
    repair = {"device": "oneapi1", "action": "reset_when_idle", "severity": "recoverable"}
    assert value(text, "accel_fault_events_total", **repair) == 1
    # Someone cleared the counters: a new baseline, not negative errors.
    correctable.counts = [0] * 7
    text = await poll(poller)
    assert value(text, "accel_ecc_errors_total", device="oneapi0", type="corrected") == 0
    assert fault("oneapi0", "info") == 1


def test_every_code_the_backend_emits_is_in_the_catalogue() -> None:
    emitted = {
        sysman.ras_code(cat, correctable) for cat in range(7) for correctable in (True, False)
    } | {"lost", "reset_required", *(c for _, c in sysman.RESET_REASON_CODES)}
    for c in emitted:
        assert faults.lookup("oneapi", c) is not None, c
    assert faults.classify("oneapi", "ras_uncorrectable") == "fatal"
    assert faults.classify("oneapi", "ras_programming") == "info"
    assert faults.classify("oneapi", "ras_engine_reset") == "recoverable"


async def test_unsupported_is_absent_and_not_asked_again(
    tmp_path: Path, poller_for: Callable[..., Poller], caplog: pytest.LogCaptureFixture
) -> None:
    big = max_1550()
    big.unsupported |= {
        "zesMemoryGetBandwidth",
        "zesPowerGetEnergyCounter",
        "zesTemperatureGetState",
        "zesRasGetState",
    }
    big.errors["zesFrequencyGetState"] = lz.ERROR_INSUFFICIENT_PERMISSIONS
    ze = FakeLevelZero([big])
    dpctl = FakeDpctl([SyclDevice(MAX, backend="level_zero", kind="gpu", device_id=0x0BD5)])
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path), dpctl=dpctl, level_zero=ze
    )
    poller = poller_for(backend)
    with caplog.at_level(logging.DEBUG, "accel_exporter.oneapi"):
        for _ in range(3):
            text = await poll(poller)
            ze.advance(1.0)
    assert value(text, "accel_up", device="oneapi0") == 1
    assert value(text, "accel_utilization_ratio", device="oneapi0") == pytest.approx(0.7)
    for absent in (
        "accel_memory_bandwidth_utilization_ratio",
        "accel_energy_joules_total",
        "accel_power_watts",
        "accel_temperature_celsius",
        "accel_ecc_errors_total",
        "accel_clock_hertz",
        "accel_throttle_active",
    ):
        assert absent not in names(text), absent
    assert value(text, "accel_power_limit_watts", device="oneapi0") == 600
    missing = backend.missing["oneapi0"]
    assert missing["memory_bandwidth_utilization"] == (
        "zesMemoryGetBandwidth: ZE_RESULT_ERROR_UNSUPPORTED_FEATURE"
    )
    assert missing["clocks_hz.graphics"].endswith("ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS")
    # Normal answers, so silent, and each refusing handle was asked once.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert ze.calls["zesMemoryGetBandwidth"] == 1
    assert ze.calls["zesTemperatureGetState"] == 6  # each of the six sensors once
    assert ze.calls["zesRasGetState"] == 1


def test_transient_error_costs_one_poll_and_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flex = flex_170()
    ze = FakeLevelZero([flex])
    dpctl = FakeDpctl(
        [
            SyclDevice(
                FLEX, backend="level_zero", kind="gpu", global_mem_size=16 * GIB, device_id=0x56C0
            )
        ]
    )
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path), dpctl=dpctl, level_zero=ze
    )
    [device] = backend.discover()
    flex.errors["zesMemoryGetState"] = lz.ERROR_UNKNOWN
    with caplog.at_level(logging.WARNING, "accel_exporter.oneapi"):
        for _ in range(3):
            r = backend.read(device)
    assert r.memory_used_bytes is None
    assert r.memory_total_bytes == 16 * GIB  # dpctl's size is still true
    assert backend.missing["oneapi0"]["memory_used_bytes"] == (
        "zesMemoryGetState: ZE_RESULT_ERROR_UNKNOWN"
    )
    assert len(caplog.records) == 1
    del flex.errors["zesMemoryGetState"]
    assert backend.read(device).memory_used_bytes == 4 * GIB


async def test_device_lost_is_down_alone_and_counted_once(
    tmp_path: Path,
    gpus: tuple[FakeLevelZero, lz.FakeDevice, lz.FakeDevice],
    poller_for: Callable[..., Poller],
) -> None:
    ze, big, flex = gpus
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
        dpctl=level_zero_node(),
        level_zero=ze,
    )
    poller = poller_for(backend)
    before = await poll(poller)
    uuid1 = info_of(before)["oneapi1"]["uuid"]
    ze.lose(flex)
    text = await poll(poller)
    assert value(text, "accel_up", device="oneapi1") == 0
    assert value(text, "accel_device_info", device="oneapi1", uuid=uuid1) == 1
    assert value(text, "accel_memory_used_bytes", device="oneapi1") is None
    assert total(text, "accel_fault_code_events_total", device="oneapi1", code="lost") == 1
    assert total(text, "accel_fault_events_total", device="oneapi1", severity="fatal") == 1
    for d in ("oneapi0", "oneapi2"):
        assert value(text, "accel_up", device=d) == 1, d
    assert value(text, "accel_exporter_backend_up", backend="oneapi") == 1
    with pytest.raises(DeviceLostError, match="ZE_RESULT_ERROR_DEVICE_LOST"):
        backend.read(DeviceInfo("oneapi1", "oneapi", uuid1))
    text = await poll(poller)
    assert total(text, "accel_fault_events_total", device="oneapi1", severity="fatal") == 1

    ze.recover(flex)
    text = await poll(poller)
    assert value(text, "accel_up", device="oneapi1") == 1
    assert value(text, "accel_memory_used_bytes", device="oneapi1") == 4 * GIB

    # Lost in the middle of a read: nothing from the half-done read is shown.
    ze.lose(big, after_calls=3)
    text = await poll(poller)
    assert value(text, "accel_up", device="oneapi0") == 0
    assert value(text, "accel_utilization_ratio", device="oneapi0") is None
    assert total(text, "accel_fault_code_events_total", device="oneapi0", code="lost") == 1


async def test_device_requiring_reset_is_down_with_a_fatal_fault(
    tmp_path: Path,
    gpus: tuple[FakeLevelZero, lz.FakeDevice, lz.FakeDevice],
    poller_for: Callable[..., Poller],
) -> None:
    ze, _, flex = gpus
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
        dpctl=level_zero_node(),
        level_zero=ze,
    )
    poller = poller_for(backend)
    await poll(poller)
    flex.needs_reset = True
    text = await poll(poller)
    assert value(text, "accel_up", device="oneapi1") == 0
    assert (
        total(text, "accel_fault_code_events_total", device="oneapi1", code="reset_required") == 1
    )
    with pytest.raises(DeviceLostError, match="REQUIRES_RESET"):
        backend.read(DeviceInfo("oneapi1", "oneapi", ""))


async def test_sysfs_fills_what_sysman_cannot(
    tree: Path, poller_for: Callable[..., Poller]
) -> None:
    flex = flex_170(pci_bus=0x4D)  # the fixture's card2
    flex.unsupported |= {"zesPowerGetEnergyCounter", "zesFrequencyGetState"}
    ze = FakeLevelZero([flex])
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tree), dpctl=sysfs_node(), level_zero=ze
    )
    poller = poller_for(backend)
    text = await poll(poller)
    assert backend.sources["oneapi0"] == "Level Zero Sysman + i915 sysfs"
    assert backend.sources["oneapi1"] == "xe sysfs"  # Sysman does not list the B580
    assert value(text, "accel_energy_joules_total", device="oneapi0") == 8124.53781  # sysfs
    assert value(text, "accel_power_limit_watts", device="oneapi0") == 150  # Sysman's
    assert value(text, "accel_clock_hertz", device="oneapi0", clock="graphics") == 2.05e9
    assert value(text, "accel_clock_hertz", device="oneapi0", clock="memory") is None
    assert value(text, "accel_memory_used_bytes", device="oneapi0") == 4 * GIB  # Sysman
    assert info_of(text)["oneapi0"]["uuid"] == "8680c056-0000-0000-0000-00000000004d"
    assert info_of(text)["oneapi0"]["numa_node"] == "0"


def test_old_driver_without_ext_properties_uses_the_core_uuid(tmp_path: Path) -> None:
    flex = flex_170()
    flex.ext_properties = False
    dpctl = FakeDpctl([SyclDevice(FLEX, backend="level_zero", kind="gpu", device_id=0x56C0)])
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
        dpctl=dpctl,
        level_zero=FakeLevelZero([flex]),
    )
    [device] = backend.discover()
    assert device.uuid == "8680c056-0000-0000-0000-00000000004d"


# -- the fake loader itself --------------------------------------------------------------


def _flat_offsets(structure: type[ctypes.Structure], base: int = 0) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, ctype, *_ in structure._fields_:
        offset = getattr(structure, name).offset + base
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
            for sub, off in _flat_offsets(ctype, offset).items():
                out[f"{name}.{sub}"] = off
        else:
            out[name] = offset
    return out


@pytest.mark.parametrize(
    ("layout", "structure"),
    [
        ("zes_device_properties_t", zes.ZesDeviceProperties),
        ("zes_device_ext_properties_t", zes.ZesDeviceExtProperties),
        ("zes_device_state_t", zes.ZesDeviceState),
        ("zes_pci_properties_t", zes.ZesPciProperties),
        ("zes_engine_properties_t", zes.ZesEngineProperties),
        ("zes_engine_stats_t", zes.ZesEngineStats),
        ("zes_mem_properties_t", zes.ZesMemProperties),
        ("zes_mem_state_t", zes.ZesMemState),
        ("zes_mem_bandwidth_t", zes.ZesMemBandwidth),
        ("zes_power_properties_t", zes.ZesPowerProperties),
        ("zes_power_energy_counter_t", zes.ZesPowerEnergyCounter),
        ("zes_power_sustained_limit_t", zes.ZesPowerSustainedLimit),
        ("zes_freq_properties_t", zes.ZesFreqProperties),
        ("zes_freq_state_t", zes.ZesFreqState),
        ("zes_temp_properties_t", zes.ZesTempProperties),
        ("zes_ras_properties_t", zes.ZesRasProperties),
        ("zes_ras_state_t", zes.ZesRasState),
    ],
)
def test_backend_structures_match_the_fakes_transcription(
    layout: str, structure: type[ctypes.Structure]
) -> None:
    """Two transcriptions of zes_api.h, one ctypes and one struct codes, agree."""
    fake = {k: off for k, (off, _) in lz.offsets(layout).items()}
    assert _flat_offsets(structure) == fake


def test_known_offsets_on_this_abi() -> None:
    """A few offsets worked out by hand from the header for LP64."""
    offs = _flat_offsets(zes.ZesDeviceProperties)
    assert offs["core.stype"] == 16
    assert offs["core.uuid"] == 16 + 96
    assert offs["core.name"] == 16 + 112
    assert offs["numSubdevices"] == 16 + 368
    assert offs["driverVersion"] == 388 + 5 * 64
    assert ctypes.sizeof(zes.ZesDeviceProperties) == 776
    assert ctypes.sizeof(zes.ZesRasState) == 16 + 7 * 8
    assert _flat_offsets(zes.ZesPciProperties)["maxSpeed.maxBandwidth"] == 40
    assert _flat_offsets(zes.ZesFreqState)["actual"] == 48


def test_fake_implements_every_function_the_backend_binds() -> None:
    implemented = FakeLevelZero.implemented()
    for fn, argtypes in PROTOTYPES.items():
        assert fn in implemented, fn
        params = getattr(FakeLevelZero, fn).__code__.co_argcount - 1  # less self
        assert params == len(argtypes), fn


def test_fake_fails_like_the_loader() -> None:
    ze = FakeLevelZero([flex_170()])
    count = ctypes.c_uint32(0)
    assert ze.zesDriverGet(ctypes.pointer(count), None) == lz.ERROR_UNINITIALIZED
    assert FakeLevelZero([]).zesInit(0) == lz.ERROR_UNINITIALIZED  # no driver
    assert ze.zesInit(0) == lz.SUCCESS
    assert ze.zesDriverGet(None, None) == lz.ERROR_INVALID_NULL_POINTER
    assert ze.zesDriverGet(ctypes.pointer(count), None) == lz.SUCCESS and count.value == 1
    drivers = (ctypes.c_void_p * 1)()
    assert ze.zesDriverGet(ctypes.pointer(count), drivers) == lz.SUCCESS
    devices = (ctypes.c_void_p * 4)()
    count.value = 4  # more room than devices: the count is corrected
    assert ze.zesDeviceGet(ctypes.c_void_p(drivers[0]), ctypes.pointer(count), devices) == 0
    assert count.value == 1
    state = zes.ZesMemState()  # stype left 0: the driver refuses it
    memory = (ctypes.c_void_p * 1)()
    count.value = 1
    ze.zesDeviceEnumMemoryModules(ctypes.c_void_p(devices[0]), ctypes.pointer(count), memory)
    rc = ze.zesMemoryGetState(ctypes.c_void_p(memory[0]), ctypes.pointer(state))
    assert rc == lz.ERROR_INVALID_ARGUMENT
    assert ze.zesMemoryGetState(ctypes.c_void_p(12345), ctypes.pointer(state)) == (
        lz.ERROR_INVALID_NULL_HANDLE
    )
    with pytest.raises(TypeError, match="pointers"):
        ze.zesMemoryGetState(ctypes.c_void_p(memory[0]), ctypes.byref(state))


# -- discovery rules ------------------------------------------------------------------


def test_no_intel_device_is_backend_unavailable(tmp_path: Path) -> None:
    nvidia_only = FakeDpctl(
        [SyclDevice("NVIDIA H100", backend="opencl", kind="gpu", vendor="NVIDIA Corporation")],
        broken_backends=["level_zero"],
    )
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path), dpctl=nvidia_only
    )
    with pytest.raises(BackendUnavailableError, match="no Intel SYCL device") as e:
        backend.discover()
    assert "NVIDIA H100 (opencl, vendor 'NVIDIA Corporation'): not an Intel runtime" in str(e.value)
    assert "OCL_ICD_FILENAMES" in str(e.value)


def test_the_cpu_is_published_only_when_asked(tmp_path: Path) -> None:
    """By default the oneapi backend publishes GPUs and accelerators: the CPU an OpenCL
    runtime lists is the cpu backend's, and would otherwise be listed twice."""
    arc = SyclDevice(B580, backend="opencl", kind="gpu", device_id=0xE20B)
    found = OneapiBackend(
        BackendOptions(sysfs=tmp_path), dpctl=FakeDpctl([cpu(), arc]), level_zero=FakeLevelZero()
    ).discover()
    assert [(d.device, d.profile) for d in found] == [("oneapi0", "gpu")]
    alone = OneapiBackend(BackendOptions(sysfs=tmp_path), dpctl=FakeDpctl([cpu()]))
    with pytest.raises(BackendUnavailableError, match="no Intel SYCL device") as e:
        alone.discover()
    assert "a CPU, which the cpu backend exports (--oneapi.include-cpu" in str(e.value)


def test_exporter_leaves_this_machines_cpu_to_the_cpu_backend() -> None:
    """The real dpctl sees only this machine's CPU: without --oneapi.include-cpu the
    oneapi backend publishes nothing and says why, and the CPU is cpu0 alone."""
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "--backends", "oneapi,cpu", "--once"],
        cwd=REPO,
        env=_real_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert value(proc.stdout, "accel_exporter_backend_up", backend="oneapi") == 0
    assert set(info_of(proc.stdout)) == {"cpu0"}
    assert "--oneapi.include-cpu" in proc.stderr


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("raise ImportError('No module named dpctl')", r"not usable .*accel-fleet\[oneapi\]"),
        ("import os\nos.abort()", r"listing the SYCL devices failed \(killed by signal 6\)"),
        ("import sys\nprint('runtime noise')\nsys.exit(3)", r"\(exit status 3\)"),
        ("import time\ntime.sleep(30)", r"did not list the SYCL devices within 1s"),
    ],
)
def test_dpctl_missing_crashing_or_hung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, reason: str
) -> None:
    """dpctl runs in a child process: whatever it does, the exporter gets one reason."""
    (tmp_path / "dpctl").mkdir()
    (tmp_path / "dpctl" / "__init__.py").write_text(body + "\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the child imports this dpctl
    # 1 s for the child that hangs; the others must end in their own way however
    # slowly a busy machine starts a Python child, so their limit is generous.
    hangs = "sleep" in body
    monkeypatch.setattr(sycl, "DISCOVERY_TIMEOUT_SECONDS", 1.0 if hangs else 60.0)
    with pytest.raises(BackendUnavailableError, match=reason):
        OneapiBackend(BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path)).discover()


def test_real_discovery_keeps_sycl_out_of_the_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real dpctl lists this machine's CPU from a child process: the SYCL and
    OpenCL runtimes (about 130 MiB) never load into the exporter."""
    for key, val in _real_env().items():
        monkeypatch.setenv(key, val)
    backend = OneapiBackend(BackendOptions(oneapi_include_cpu=True), level_zero=FakeLevelZero())
    [device] = [d for d in backend.discover() if d.profile == "cpu"]
    assert device.vendor == "oneapi" and device.model
    assert "dpctl" not in sys.modules


def test_real_loader_absent_here(tmp_path: Path) -> None:
    if ctypes.util.find_library("ze_loader") is not None:
        pytest.skip("a Level Zero loader is installed on this machine")
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path), dpctl=FakeDpctl([cpu()])
    )
    backend.discover()
    assert backend.level_zero_reason.startswith("the Level Zero loader is not installed")
    reading = backend.read(DeviceInfo("oneapi0", "oneapi", ""))
    assert reading.memory_total_bytes == 768 * GIB
    assert found_fields(reading) == {"memory_total_bytes"}


def test_ids_order_and_synthetic_uuids(tmp_path: Path) -> None:
    """GPUs first, by PCI address; CPUs last; two identical GPUs without a PCI address
    keep dpctl's order. Synthetic UUIDs are stable and tell devices apart."""
    arc = [SyclDevice(B580, backend="opencl", kind="gpu", device_id=0xE20B) for _ in range(2)]
    dpctl = FakeDpctl([cpu(), *arc])

    def discover() -> list[DeviceInfo]:
        return OneapiBackend(
            BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
            dpctl=dpctl,
            level_zero=FakeLevelZero(),
        ).discover()

    first, again = discover(), discover()
    assert [(d.device, d.profile) for d in first] == [
        ("oneapi0", "gpu"),
        ("oneapi1", "gpu"),
        ("oneapi2", "cpu"),
    ]
    assert [d.uuid for d in first] == [d.uuid for d in again]
    assert len({d.uuid for d in first}) == 3
    assert all(d.uuid[14] == "5" for d in first)  # version 5: synthetic, and says so


def test_discover_again_starts_clean(
    tmp_path: Path, gpus: tuple[FakeLevelZero, lz.FakeDevice, lz.FakeDevice]
) -> None:
    ze, _, _ = gpus
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path),
        dpctl=level_zero_node(),
        level_zero=ze,
    )
    assert len(backend.discover()) == 3
    ze.advance(1.0)
    assert len(backend.discover()) == 3
    backend.close()
    backend.close()  # idempotent
    assert backend.sources == {} and backend.missing == {}


def test_the_fields_are_the_readings() -> None:
    """``found_fields`` names Reading attributes that exist."""
    fields = {f.name for f in dataclasses.fields(Reading)}
    for key in FIELDS:
        assert key.split(".")[0] in fields, key


def test_sparse_and_odd_devices(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A GPU whose Sysman lists nothing, one with only per-tile power domains and odd
    answers, a non-Intel Level Zero device, one lost during discovery, and one no
    SYCL device matches."""
    bare = lz.FakeDevice("Intel(R) Arc(TM) A770 Graphics", 0x56A0, (0, 3, 0, 0), bytes(16))
    bare.unsupported |= {"zesDeviceGetState", "zesDeviceEnumPowerDomains"}
    odd = max_1550(pci_bus=0x9A)
    odd.power = [p for p in odd.power if p.subdevice is not None]  # tiles only
    odd.frequency[0].actual_mhz = -1.0  # the driver does not know
    other = flex_170(pci_bus=0x10)
    other.vendor_id = 0x1234
    gone = flex_170(pci_bus=0x11)
    gone.errors["zesDeviceEnumEngineGroups"] = lz.ERROR_DEVICE_LOST
    spare = flex_170(pci_bus=0x12)
    spare.device_id = 0x56C1
    ze = FakeLevelZero([bare, odd, other, gone, spare])
    dpctl = FakeDpctl(
        [
            SyclDevice("Intel(R) Arc(TM) A770 Graphics", backend="level_zero", kind="gpu"),
            SyclDevice(MAX, backend="level_zero", kind="gpu", device_id=0x0BD5),
        ]
    )
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tmp_path), dpctl=dpctl, level_zero=ze
    )
    with caplog.at_level(logging.INFO, "accel_exporter.oneapi"):
        devices = backend.discover()
    assert [d.model for d in devices] == ["Intel(R) Arc(TM) A770 Graphics", MAX]
    assert devices[0].pci_bus_id == "0000:03:00.0"  # matched by name: no device id
    assert devices[0].uuid[14] == "5"  # no UUID from Sysman: a synthetic one
    assert any("was skipped" in m and "DEVICE_LOST" in m for m in caplog.messages)
    assert any("Level Zero device" in m and "not exported" in m for m in caplog.messages)

    ze.advance(1.0)
    bare_reading = backend.read(devices[0])
    assert found_fields(bare_reading) == set()
    missing = backend.missing["oneapi0"]
    assert missing["utilization"] == (
        "Level Zero Sysman lists no engine group covering the whole device on this device"
    )
    assert missing["power_watts"] == "Level Zero Sysman lists no power domain on this device"
    assert "fault_events" in missing and "ecc_errors" in missing

    backend.read(devices[1])
    ze.advance(1.0)
    odd_before = odd.power[0].energy_uj
    r = backend.read(devices[1])
    # Two tile domains: their energy and power add up; no device-level limit.
    assert r.power_watts == pytest.approx(250 + 230)
    assert r.energy_joules == pytest.approx((odd_before + odd.power[1].energy_uj) / 1e6)
    assert r.power_limit_watts is None
    assert "clocks_hz.graphics" not in r.clocks_hz and r.clocks_hz["memory"] == 3.2e9
    missing = backend.missing["oneapi1"]
    assert missing["clocks_hz.graphics"] == "the driver does not know the actual frequency (-1)"
    assert missing["power_limit_watts"].endswith("no device-level power domain on this device")
    # A counter that went back (a driver reload) gives no rate for that poll.
    odd.power[0].energy_uj = 0
    r = backend.read(devices[1])
    assert r.power_watts is None
    assert backend.missing["oneapi1"]["power_watts"] == (
        "the energy counter did not advance or went back"
    )
    odd.engines[0].busy = 0.0
    for e in odd.engines:
        odd.active_us[ze.handle_of(e)] = 0
    assert backend.read(devices[1]).utilization is None
    assert backend.missing["oneapi1"]["utilization"] == (
        "the engine counter did not advance or went back"
    )


def test_power_limit_disabled_and_sysfs_energy_going_back(tree: Path) -> None:
    flex = flex_170(pci_bus=0x4D)
    flex.power[0].limit_enabled = False
    flex.unsupported.add("zesPowerGetEnergyCounter")
    clock = FakeClock()
    backend = OneapiBackend(
        BackendOptions(oneapi_include_cpu=True, sysfs=tree),
        dpctl=sysfs_node(),
        level_zero=FakeLevelZero([flex]),
        clock=clock,
    )
    devices = backend.discover()
    r = backend.read(devices[0])
    # Sysman says the sustained limit is off; sysfs's PL1 is the limit in force.
    assert r.power_limit_watts == 120
    (tree / "class/drm/card2/device/hwmon/hwmon5/energy1_input").write_text("1000\n")
    clock.advance(1.0)
    r = backend.read(devices[0])
    assert r.energy_joules == 0.001 and r.power_watts is None
    assert backend.missing["oneapi0"]["power_watts"] == (
        "the energy counter went back (driver reload)"
    )


def test_loader_without_sysman_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library that loads but has no zesInit (a loader older than 1.5): refused with
    the reason, not called."""
    libc = ctypes.util.find_library("c")
    assert libc is not None
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: libc)
    with pytest.raises(zes.LevelZeroUnavailable, match="has no zesInit"):
        zes.load_level_zero()
