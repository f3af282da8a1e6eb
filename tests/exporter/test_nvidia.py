"""The NVIDIA backend against the fake NVML (tests/support/fakes/nvml.py), through the real
Poller and renderer, so that what is checked is the exposition Prometheus would scrape.

The main table is an 8-GPU HGX H100 node with 2 MIG instances on GPU 3; a V100 pair
covers what Hopper no longer has (page retirement, no GPM, direct GPU-to-GPU NVLink).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pynvml
import pytest

from exporter.backends.base import Backend, BackendOptions
from exporter.backends.nvidia import NvidiaBackend
from exporter.backends.nvidia.device import (
    FIELDS,
    GPM_SOURCE,
    UTILIZATION_SOURCE,
    normalize_bus_id,
)
from exporter.model import BackendUnavailableError, DeviceInfo, DeviceLostError, Reading
from exporter.poller import Poller
from tests.support.exposition import masked, names, parse, total, value
from tests.support.fakes.nvml import GIB, MIB, FakeNVML
from tests.support.paths import REPO
from tests.support.waits import until_awaited

NOW = 1_700_000_000.0
H100_DEVICES = [f"nvidia{i}" for i in range(8)] + ["nvidia3_mig1", "nvidia3_mig9"]

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A sysfs tree with the H100 node's PCI functions: NUMA 0 for the first four GPUs
    and 1 for the rest, except GPU 6 (-1, as on a platform without NUMA data) and
    GPU 7 (no numa_node file at all)."""
    root = tmp_path / "sys"
    h100_buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    for i, bus in enumerate([*h100_buses, "1b", "1c"]):  # and the V100 pair's
        d = root / "bus" / "pci" / "devices" / f"0000:{bus}:00.0"
        d.mkdir(parents=True)
        if i == 6:
            (d / "numa_node").write_text("-1\n")
        elif i != 7:
            (d / "numa_node").write_text(f"{0 if i < 4 or i > 7 else 1}\n")
    return root


@pytest.fixture
def h100() -> Iterator[FakeNVML]:
    fake = FakeNVML.h100_node(mig_on=3)
    yield fake
    fake.release()  # never leave a poller thread blocked in the fake


class StaticBackend(Backend):
    """A second, trivial backend: it must stay up whatever NVIDIA does."""

    name: ClassVar[str] = "static"

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("static0", "sim", "static-0")]

    def read(self, device: DeviceInfo) -> Reading:
        return Reading(utilization=0.5)


def make_poller(*backends: Backend, timeout: float = 5.0) -> Poller:
    return Poller(list(backends), interval=1, timeout=timeout, clock=lambda: NOW)


@pytest.fixture
async def poller_for(sysfs: Path) -> AsyncIterator[Callable[..., tuple[Poller, NvidiaBackend]]]:
    """Builds pollers over a fake NVML (plus any other backends) and stops them all."""
    made: list[Poller] = []

    def build(
        fake: FakeNVML, *others: Backend, timeout: float = 5.0
    ) -> tuple[Poller, NvidiaBackend]:
        backend = NvidiaBackend(BackendOptions(sysfs=sysfs), nvml=fake)
        poller = make_poller(backend, *others, timeout=timeout)
        made.append(poller)
        return poller, backend

    yield build
    for p in made:
        await p.stop()


async def poll(poller: Poller) -> str:
    return (await poller.poll_once()).text.decode()


# -- the fake itself ---------------------------------------------------------------


def test_fake_has_pynvml_names_and_signatures() -> None:
    fake = FakeNVML.h100_node()
    implemented = FakeNVML.implemented()
    assert len(implemented) > 40
    for name in implemented:
        real = getattr(pynvml, name, None)
        assert inspect.isfunction(real), f"pynvml has no function {name}"
        want = [(p.name, p.default) for p in inspect.signature(real).parameters.values()]
        got = [
            (p.name, p.default) for p in inspect.signature(getattr(fake, name)).parameters.values()
        ]
        assert got == want, f"{name}{got} differs from pynvml's {want}"
    # Constants, structures and errors are the real module's; functions the fake
    # does not implement are refused rather than passed through.
    assert fake.NVML_FI_DEV_MEMORY_TEMP == pynvml.NVML_FI_DEV_MEMORY_TEMP
    assert fake.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    with pytest.raises(AttributeError, match="does not implement"):
        _ = fake.nvmlDeviceGetBoardId


def test_fake_fails_like_nvml() -> None:
    fake = FakeNVML.h100_node()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetPciInfo(h).busId == "00000000:18:00.0"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetRetiredPages(h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetNvLinkState(h, 18)
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait(fake.nvmlEventSetCreate(), 0)
    fake.lose(0, xid=None)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(h)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        FakeNVML([], library_missing=True).nvmlInit()


# -- the H100 node through the poller ----------------------------------------------


async def test_h100_node_values_and_units(
    h100: FakeNVML,
    poller_for: Callable[..., tuple[Poller, NvidiaBackend]],
    golden: Callable[[str, str], None],
    promtool_check: Callable[[str], None],
) -> None:
    poller, _ = poller_for(h100)
    first = await poll(poller)
    # Rates need two samples: absent on the first poll, never 0.
    assert value(first, "accel_memory_bandwidth_utilization_ratio", device="nvidia2") is None
    assert "accel_link_throughput_bytes_per_second" not in names(first)
    h100.advance(1.0)
    text = await poll(poller)

    assert value(text, "accel_exporter_backend_up", backend="nvidia") == 1
    for d in H100_DEVICES:
        assert value(text, "accel_up", device=d) == 1, d
        assert total(text, "accel_fault_events_total", device=d, severity="fatal") == 0

    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert info["nvidia0"]["pci_bus_id"] == "0000:18:00.0"
    assert info["nvidia1"]["pci_bus_id"] == "0000:2a:00.0"
    assert info["nvidia0"]["model"] == "NVIDIA H100 80GB HBM3"
    assert info["nvidia0"]["driver_version"] == "550.90.07"
    assert info["nvidia0"]["uuid"].startswith("GPU-")
    assert [info[f"nvidia{i}"]["numa_node"] for i in range(8)] == ["0"] * 4 + ["1"] * 2 + ["", ""]
    mig = info["nvidia3_mig9"]
    assert (mig["parent"], mig["profile"], mig["pci_bus_id"]) == (
        "nvidia3",
        "1g.10gb",
        "0000:5d:00.0",
    )
    assert mig["uuid"].startswith("MIG-") and mig["model"] == "NVIDIA H100 80GB HBM3"
    assert info["nvidia3_mig1"]["profile"] == "3g.40gb"

    def v(name: str, device: str = "nvidia0", **labels: str) -> float | None:
        return value(text, name, device=device, **labels)

    assert v("accel_utilization_ratio") == 0.97
    # MIG mode: NVML has no whole-GPU utilization; each instance has GPM's.
    assert v("accel_utilization_ratio", "nvidia3") is None
    assert v("accel_utilization_ratio", "nvidia3_mig9") == 0.125
    # Memory v2: "used" without the driver's reservation.
    assert v("accel_memory_used_bytes") == 10 * GIB
    assert v("accel_memory_total_bytes") == 81559 * MIB
    assert v("accel_memory_total_bytes", "nvidia3_mig1") == 40_448 * MIB
    assert v("accel_memory_used_bytes", "nvidia3_mig9") == 2 * GIB
    # GPM DRAM_BW_UTIL is a percent; the catalogue wants a ratio.
    assert v("accel_memory_bandwidth_utilization_ratio") == 0.725
    assert v("accel_memory_bandwidth_utilization_ratio", "nvidia2") == 0
    assert f"Source: {GPM_SOURCE} on 10 devices." in text  # 8 GPUs, 2 MIG instances
    # Volatile ECC (since the driver loaded), not the aggregate lifetime count.
    assert v("accel_ecc_errors_total", "nvidia4", type="corrected") == 12
    assert v("accel_ecc_errors_total", "nvidia4", type="uncorrected") == 0
    # Hopper remaps rows; it has no page retirement.
    assert "accel_retired_pages" not in names(text)
    assert v("accel_remapped_rows", "nvidia4", type="correctable") == 2
    assert v("accel_remapped_rows", "nvidia6", type="pending") == 1
    assert v("accel_remapped_rows", "nvidia6", type="uncorrectable") == 1
    assert v("accel_temperature_celsius", sensor="gpu") == 41
    assert v("accel_temperature_celsius", sensor="memory") == 47
    assert v("accel_power_watts") == 612.345  # mW -> W
    assert v("accel_power_limit_watts") == 700
    # mJ -> J, and the second poll saw one second of 612.345 W.
    assert v("accel_energy_joules_total") == pytest.approx(12_000_000 + 612.345)
    assert v("accel_clock_hertz", clock="graphics") == 1.98e9  # MHz -> Hz
    assert v("accel_clock_hertz", clock="memory") == 2.619e9
    assert v("accel_clock_hertz", "nvidia2", clock="sm") == 345e6
    assert v("accel_throttle_active", "nvidia2", reason="gpu_idle") == 1
    assert v("accel_throttle_active", "nvidia4", reason="sw_power_cap") == 1
    assert v("accel_throttle_active", "nvidia4", reason="hw_slowdown") == 1
    assert v("accel_throttle_active", "nvidia4", reason="gpu_idle") == 0
    assert (
        sum(
            1
            for n, lb, _ in parse(text)
            if n == "accel_throttle_active" and lb["device"] == "nvidia0"
        )
        == 9
    )
    # KB/s -> bytes/s; rx and tx not swapped.
    assert v("accel_pcie_throughput_bytes_per_second", direction="rx") == 1_200_000 * 1024
    assert v("accel_pcie_throughput_bytes_per_second", direction="tx") == 800_000 * 1024
    # NVLink: cumulative KiB counters -> bytes/s over the poll interval, per link.
    assert v("accel_link_throughput_bytes_per_second", link="0", direction="rx") == 1_000_000 * 1024
    assert (
        v("accel_link_throughput_bytes_per_second", "nvidia1", link="17", direction="tx")
        == (4_000_000 + 1024 * 17) * 1024
    )
    assert (
        sum(
            1
            for n, lb, _ in parse(text)
            if n == "accel_link_throughput_bytes_per_second" and lb["device"] == "nvidia0"
        )
        == 36
    )
    assert v("accel_link_errors_total", "nvidia1", link="3", type="replay") == 2
    assert v("accel_link_errors_total", "nvidia5", link="17", type="crc_flit") == 1
    assert v("accel_link_errors_total", "nvidia0", link="17", type="crc_data") == 0
    # GPU-wide figures stay on the parent.
    assert v("accel_power_watts", "nvidia3_mig1") is None
    # Topology: 18 links each through the NVSwitches, every pair of the 8 GPUs.
    topo = [lb for n, lb, _ in parse(text) if n == "accel_topology_link_info"]
    assert len(topo) == 56
    assert all(lb["link_type"] == "nvlink" and lb["links"] == "18" for lb in topo)
    assert not any(lb["device"].endswith(("mig1", "mig9")) for lb in topo)

    promtool_check(text)
    golden("nvidia_h100.prom", masked(text))


async def test_every_field_is_found_or_explained(h100: FakeNVML, sysfs: Path) -> None:
    """What bench/nvml_check.py prints on a real GPU: each catalogue field has a value
    or NVML's reason, never neither."""
    for fake in (h100, FakeNVML.v100_pair()):
        backend = NvidiaBackend(BackendOptions(sysfs=sysfs), nvml=fake)
        devices = backend.discover()
        for d in devices:
            backend.read(d)
        fake.advance(1.0)
        for d in devices:
            found = backend.fields(d, backend.read(d))
            missing = backend.missing[d.device]
            assert set(found) | set(missing) == set(FIELDS), d.device
            assert not set(found) & set(missing), d.device
        assert (
            backend.missing["nvidia0"][
                "retired_pages.single_bit_ecc" if fake is h100 else "remapped_rows.pending"
            ]
            == "NVMLError_NotSupported"
        )
        backend.close()


# -- faults -------------------------------------------------------------------------


async def test_xid_events_are_counted_by_severity(
    h100: FakeNVML, poller_for: Callable[..., tuple[Poller, NvidiaBackend]]
) -> None:
    poller, _ = poller_for(h100)
    await poll(poller)
    assert h100.inject_xid(1, 79) == 1  # fallen off the bus: fatal
    for index, code in ((0, 13), (2, 31), (5, 43), (6, 45)):  # one application's fault
        h100.inject_xid(index, code)
    h100.inject_xid(3, 31, gpu_instance=9, compute_instance=0)  # inside one MIG instance
    h100.inject_xid(3, 48, gpu_instance=1)  # a whole GPU instance (one compute instance)
    h100.inject_xid(7, 94)  # contained ECC error: recoverable
    text = await poll(poller)

    def fault(device: str, severity: str) -> float | None:
        return total(text, "accel_fault_events_total", device=device, severity=severity)

    assert fault("nvidia1", "fatal") == 1
    assert total(text, "accel_fault_code_events_total", device="nvidia1", code="79") == 1
    for d, xid in (("nvidia0", "13"), ("nvidia2", "31"), ("nvidia5", "43"), ("nvidia6", "45")):
        assert fault(d, "info") == 1 and fault(d, "fatal") == 0, d
        assert (
            total(text, "accel_fault_code_events_total", device=d, code=xid, severity="info") == 1
        )
    assert fault("nvidia3_mig9", "info") == 1
    assert fault("nvidia3_mig1", "fatal") == 1
    assert fault("nvidia3", "fatal") == 0 and fault("nvidia3", "info") == 0
    assert fault("nvidia7", "recoverable") == 1
    # Counted once: a second poll sees no new events, and the totals stay.
    text = await poll(poller)
    assert total(text, "accel_fault_events_total", device="nvidia1", severity="fatal") == 1


def test_events_for_other_devices_wait_for_their_read(h100: FakeNVML, sysfs: Path) -> None:
    backend = NvidiaBackend(BackendOptions(sysfs=sysfs), nvml=h100)
    devices = {d.device: d for d in backend.discover()}
    h100.inject_xid(5, 45)
    h100.inject_xid(3, 31, gpu_instance=9, compute_instance=0)
    assert backend.read(devices["nvidia0"]).fault_events == []  # drains the set
    assert h100.calls["nvmlEventSetWait"] == 3  # two events, then Timeout
    assert [e.code for e in backend.read(devices["nvidia5"]).fault_events] == ["45"]
    mig = backend.read(devices["nvidia3_mig9"]).fault_events
    assert [(e.code, e.detail) for e in mig] == [("31", "gpu_instance=9 compute_instance=0")]
    assert backend.read(devices["nvidia5"]).fault_events == []
    backend.close()


async def test_gpu_lost_mid_poll_is_down_alone_and_keeps_identity(
    h100: FakeNVML, poller_for: Callable[..., tuple[Poller, NvidiaBackend]]
) -> None:
    poller, backend = poller_for(h100)
    before = await poll(poller)
    uuid5 = next(
        lb["uuid"]
        for n, lb, _ in parse(before)
        if n == "accel_device_info" and lb["device"] == "nvidia5"
    )
    h100.lose(5, xid=None, after_calls=4)  # a few fields answer, then the GPU is gone
    text = await poll(poller)
    assert value(text, "accel_up", device="nvidia5") == 0
    assert value(text, "accel_device_info", device="nvidia5", uuid=uuid5) == 1
    # Nothing from the half-done read is shown as current.
    assert value(text, "accel_utilization_ratio", device="nvidia5") is None
    assert value(text, "accel_power_watts", device="nvidia5") is None
    for d in H100_DEVICES:
        if d != "nvidia5":
            assert value(text, "accel_up", device=d) == 1, d
    assert value(text, "accel_exporter_backend_up", backend="nvidia") == 1
    with pytest.raises(DeviceLostError, match="GpuIsLost"):
        backend.read(DeviceInfo("nvidia5", "nvidia", uuid5))

    h100.recover(5)
    text = await poll(poller)
    assert value(text, "accel_up", device="nvidia5") == 1
    assert value(text, "accel_utilization_ratio", device="nvidia5") == 0.73


async def test_gpu_falling_off_the_bus_counts_xid_79_while_down(
    h100: FakeNVML, poller_for: Callable[..., tuple[Poller, NvidiaBackend]]
) -> None:
    poller, _ = poller_for(h100)
    await poll(poller)
    h100.lose(3)  # the driver reports Xid 79; the MIG instances go with their GPU
    text = await poll(poller)
    for d in ("nvidia3", "nvidia3_mig1", "nvidia3_mig9"):
        assert value(text, "accel_up", device=d) == 0, d
    # Xid 79 and the loss itself, which is what starts a ladder at its reboot step.
    assert total(text, "accel_fault_events_total", device="nvidia3", severity="fatal") == 2
    assert value(text, "accel_fault_code_events_total", device="nvidia3", code="lost") == 1
    assert total(text, "accel_fault_events_total", device="nvidia3", action="reboot") == 2
    text = await poll(poller)  # still lost: the loss is not counted again
    assert value(text, "accel_fault_code_events_total", device="nvidia3", code="lost") == 1
    assert value(text, "accel_up", device="nvidia4") == 1


def test_unknown_error_is_lost_only_after_gpu_is_lost(
    h100: FakeNVML, sysfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = NvidiaBackend(BackendOptions(sysfs=sysfs), nvml=h100)
    d0 = backend.discover()[0]
    h100.gpus[0].errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_UNKNOWN
    with caplog.at_level(logging.WARNING, "accel_exporter.nvidia"):
        for _ in range(3):
            r = backend.read(d0)
    # A healthy GPU's odd answer costs that field only, and is said once.
    assert r.up and r.power_watts is None and r.temperatures["gpu"] == 41
    assert backend.missing["nvidia0"]["power_watts"] == "NVMLError_Unknown"
    assert len([m for m in caplog.messages if "power_watts" in m]) == 1
    h100.lose(0, xid=None)
    with pytest.raises(DeviceLostError):
        backend.read(d0)
    h100.recover(0)  # ...but the same Unknown right after a loss means it is still gone
    with pytest.raises(DeviceLostError, match="NVMLError_Unknown"):
        backend.read(d0)
    del h100.gpus[0].errors["nvmlDeviceGetPowerUsage"]
    assert backend.read(d0).power_watts == 612.345
    backend.close()


async def test_not_supported_fields_are_absent_not_zero(
    h100: FakeNVML,
    poller_for: Callable[..., tuple[Poller, NvidiaBackend]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    h100.gpus[0].unsupported |= {
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetPcieThroughput",
        "NVML_FI_DEV_MEMORY_TEMP",
        "NVML_NVLINK_ERROR_DL_CRC_DATA",
    }
    poller, backend = poller_for(h100)
    with caplog.at_level(logging.DEBUG, "accel_exporter.nvidia"):
        await poll(poller)
        h100.advance(1.0)
        text = await poll(poller)
    assert value(text, "accel_up", device="nvidia0") == 1
    for name, labels in (
        ("accel_energy_joules_total", {}),
        ("accel_power_watts", {}),
        ("accel_pcie_throughput_bytes_per_second", {"direction": "rx"}),
        ("accel_temperature_celsius", {"sensor": "memory"}),
        ("accel_link_errors_total", {"link": "0", "type": "crc_data"}),
    ):
        assert value(text, name, device="nvidia0", **labels) is None, name
        assert value(text, name, device="nvidia1", **labels) is not None, name
    assert value(text, "accel_temperature_celsius", device="nvidia0", sensor="gpu") == 41
    assert value(text, "accel_link_errors_total", device="nvidia0", link="0", type="replay") == 0
    assert backend.missing["nvidia0"]["energy_joules"] == "NVMLError_NotSupported"
    assert backend.missing["nvidia0"]["temperatures.memory"] == "NVMLError_NotSupported"
    # Normal, so silent, and not asked again on every poll. (The fake's nvidia6 has a
    # row remap pending, a fault event of its own.)
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for m in loud if "code=remap_pending" not in m] == []
    assert h100.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2 * 8 - 1
    assert h100.calls["nvmlDeviceGetNvLinkErrorCounter"] == 2 * 8 * 18 * 4 - (2 * 18 - 1)


# -- the library and the poller -------------------------------------------------------


async def test_library_not_found(
    poller_for: Callable[..., tuple[Poller, NvidiaBackend]], sysfs: Path
) -> None:
    fake = FakeNVML([], library_missing=True)
    poller, backend = poller_for(fake)
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="nvidia") == 0
    assert "accel_up" not in names(text)
    with pytest.raises(
        BackendUnavailableError,
        match=re.escape("NVML library not found (libnvidia-ml.so.1): install the NVIDIA driver"),
    ):
        backend.discover()
    with pytest.raises(BackendUnavailableError, match="driver not loaded"):
        NvidiaBackend(BackendOptions(), nvml=FakeNVML([], driver_not_loaded=True)).discover()


def test_real_pynvml_without_a_driver() -> None:
    """The real module on a machine without libnvidia-ml.so.1: one clear reason."""
    backend = NvidiaBackend(BackendOptions())
    try:
        devices = backend.discover()
    except BackendUnavailableError as e:
        assert "NVML library not found" in str(e) or "driver" in str(e)
        return
    backend.close()
    pytest.skip(f"real NVML present here ({len(devices)} GPUs); see bench/nvml_check.py")


def test_pynvml_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(BackendUnavailableError, match="nvidia-ml-py"):
        NvidiaBackend(BackendOptions()).discover()


async def test_hung_nvml_call_times_out_and_other_backends_stay_up(
    h100: FakeNVML, poller_for: Callable[..., tuple[Poller, NvidiaBackend]]
) -> None:
    poller, _ = poller_for(h100, StaticBackend(BackendOptions()), timeout=0.3)
    text = await poll(poller)
    assert value(text, "accel_exporter_backend_up", backend="nvidia") == 1
    h100.hang("nvmlDeviceGetPowerUsage", 2)
    for _ in range(2):  # timed out, then skipped while the call is still stuck
        text = await asyncio.wait_for(poll(poller), 2)
        assert h100.hanging.is_set()
        assert value(text, "accel_exporter_backend_up", backend="nvidia") == 0
        assert value(text, "accel_exporter_backend_up", backend="static") == 1
        assert value(text, "accel_up", device="static0") == 1
        for d in H100_DEVICES:  # identities kept, shown down rather than stale
            assert value(text, "accel_up", device=d) == 0, d
            assert value(text, "accel_device_info", device=d) == 1, d
    h100.release()

    async def up_again() -> str:
        text = await poll(poller)
        return text if value(text, "accel_exporter_backend_up", backend="nvidia") == 1 else ""

    # The stuck thread finishes; the next poll is a fresh one.
    text = await until_awaited(up_again, what="the backend up again")
    assert value(text, "accel_exporter_backend_up", backend="nvidia") == 1
    assert value(text, "accel_up", device="nvidia2") == 1


# -- sources and fallbacks -------------------------------------------------------------


async def test_without_gpm_bandwidth_is_nvml_memory_utilization(
    poller_for: Callable[..., tuple[Poller, NvidiaBackend]],
) -> None:
    fake = FakeNVML.h100_node(mig_on=None)
    for g in fake.gpus:
        g.gpm = False
    poller, _ = poller_for(fake)
    text = await poll(poller)
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="nvidia0") == 0.61
    assert f"Source: {UTILIZATION_SOURCE} on 8 devices." in text
    assert GPM_SOURCE not in text
    assert fake.calls["nvmlGpmSampleGet"] == 0


async def test_older_driver_fallbacks(
    poller_for: Callable[..., tuple[Poller, NvidiaBackend]],
) -> None:
    fake = FakeNVML.h100_node(
        mig_on=None,
        missing_functions={
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetTemperatureV",
        },
    )
    poller, _ = poller_for(fake)
    await poll(poller)
    text = await poll(poller)
    assert value(text, "accel_throttle_active", device="nvidia2", reason="gpu_idle") == 1
    assert value(text, "accel_temperature_celsius", device="nvidia0", sensor="gpu") == 41
    # v1 counts the driver's reservation as used.
    assert value(text, "accel_memory_used_bytes", device="nvidia0") == 10 * GIB + 556 * MIB
    # Each newer function was tried once per GPU, then no more.
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 8
    assert fake.calls["nvmlDeviceGetTemperatureV"] == 8
    assert fake.calls["nvmlDeviceGetTemperature"] == 16


async def test_ecc_disabled_reports_no_ecc_counters(
    h100: FakeNVML, poller_for: Callable[..., tuple[Poller, NvidiaBackend]]
) -> None:
    h100.gpus[0].ecc_enabled = False
    poller, backend = poller_for(h100)
    text = await poll(poller)
    assert value(text, "accel_ecc_errors_total", device="nvidia0", type="corrected") is None
    assert value(text, "accel_ecc_errors_total", device="nvidia1", type="corrected") == 0
    assert backend.missing["nvidia0"]["ecc_errors.uncorrected"] == "ECC mode is disabled"


async def test_v100_pair(
    poller_for: Callable[..., tuple[Poller, NvidiaBackend]], promtool_check: Callable[[str], None]
) -> None:
    fake = FakeNVML.v100_pair()
    poller, backend = poller_for(fake)
    await poll(poller)
    fake.advance(2.0)
    text = await poll(poller)
    assert value(text, "accel_retired_pages", device="nvidia1", cause="single_bit_ecc") == 2
    assert value(text, "accel_retired_pages", device="nvidia1", cause="double_bit_ecc") == 1
    assert value(text, "accel_retired_pages", device="nvidia0", cause="double_bit_ecc") == 0
    assert "accel_remapped_rows" not in names(text)
    # No memory sensor: NVML says 0 °C, which is not a temperature.
    assert value(text, "accel_temperature_celsius", device="nvidia0", sensor="memory") is None
    assert "no memory temperature sensor" in backend.missing["nvidia0"]["temperatures.memory"]
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="nvidia0") == 0.2
    assert (
        value(
            text,
            "accel_link_throughput_bytes_per_second",
            device="nvidia0",
            link="5",
            direction="tx",
        )
        == 200 * 1024
    )
    assert (
        value(text, "accel_link_errors_total", device="nvidia0", link="0", type="crc_data") is None
    )
    assert (
        value(
            text,
            "accel_topology_link_info",
            device="nvidia0",
            peer_device="nvidia1",
            link_type="nvlink",
            links="6",
        )
        == 1
    )
    assert value(text, "accel_device_info", device="nvidia0", numa_node="0") == 1
    promtool_check(text)


def test_close_releases_everything_and_discover_again_starts_clean(
    h100: FakeNVML, sysfs: Path
) -> None:
    backend = NvidiaBackend(BackendOptions(sysfs=sysfs), nvml=h100)
    backend.discover()
    assert h100.init_count == 1
    assert len(backend.discover()) == 10  # a second discovery shuts the first down
    assert h100.init_count == 1
    backend.close()
    backend.close()  # idempotent
    assert h100.init_count == 0
    # Two samples per GPU and per MIG instance (two on GPU 3), for two discoveries.
    assert h100.calls["nvmlGpmSampleFree"] == 2 * 2 * (8 + 2)
    assert h100.calls["nvmlEventSetFree"] == 2


@pytest.mark.parametrize(
    ("nvml", "kernel"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        (b"00000000:DB:00.0", "0000:db:00.0"),
        ("0001:2A:00.0", "0001:2a:00.0"),
        ("3A:00.0", "0000:3a:00.0"),
    ],
)
def test_normalize_bus_id(nvml: str | bytes, kernel: str) -> None:
    assert normalize_bus_id(nvml) == kernel


# -- bench/nvml_check.py ------------------------------------------------------------


def test_nvml_check_runs_from_the_repo_root() -> None:
    """The GPU-machine check, as a dry run against the fake, and its exit status when
    NVML is missing (on a machine with a GPU that case is skipped)."""
    cmd = [sys.executable, "bench/nvml_check.py", "--reads", "2", "--gap", "0.05"]
    dry = subprocess.run(
        [*cmd, "--fake", "v100", "--json"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    gpu0 = report["devices"][0]
    assert set(gpu0["found"]) | set(gpu0["missing"]) == set(FIELDS)
    assert gpu0["missing"]["remapped_rows.pending"] == "NVMLError_NotSupported"
    assert gpu0["found"]["link_bytes_per_second.tx"] == 6 * 200 * 1024
    assert gpu0["read_seconds"]["reads"] == 2
    real = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    if real.returncode == 0:
        pytest.skip("real NVML present: the report above is the real one")
    assert real.returncode == 1
    assert "NVML is not usable here" in real.stderr
