"""The AMD backend: amdgpu sysfs (fixture tree tests/fixtures/sys, cards 0 and 1) and AMD
SMI (tests/support/fakes/amdsmi.py), through the real Poller and renderer.

card0 is an MI300X whose gpu_metrics is v1.6, card1 an MI210 whose gpu_metrics is v1.3;
both tables are built by tests/support/amd_gpu_metrics.py from the kernel's struct layouts. The
expected figures are computed here from the fixture files and the builder's values, in
base units, never copied from the output.
"""

from __future__ import annotations

import ast
import ctypes
import errno
import importlib.util
import inspect
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest

from exporter import faults
from exporter.backends.amd import AmdBackend
from exporter.backends.amd.device import FIELDS, amdsmi_uuid
from exporter.backends.amd.gpu_metrics import (
    ENERGY_UNIT_JOULES,
    LAYOUTS,
    GpuMetricsError,
    parse_gpu_metrics,
)
from exporter.backends.amd.smi import AMDSMI_UMC_SOURCE
from exporter.backends.amd.sysfs import MEM_BUSY_SOURCE, UMC_SOURCE
from exporter.backends.base import BackendOptions
from exporter.model import BackendUnavailableError, DeviceLostError
from exporter.poller import Poller
from tests.support.amd_gpu_metrics import (
    GPU_METRICS_PATHS,
    MI210,
    MI300X,
    MI300X_LATER,
    REVISIONS,
    SECONDS_BETWEEN,
    STRUCTS,
    Value,
    build,
    fixture_tables,
    offsets,
)
from tests.support.exposition import names, parse, stable, total, value
from tests.support.fakes.amdsmi import STATUS, FakeAmdGpu, FakeAmdProcess, FakeAmdSmi
from tests.support.paths import FIXTURES, REPO

pytestmark = pytest.mark.timeout(60)

NOW = 1_700_000_000.0
SYS = FIXTURES / "sys"
CARD_DIRS = {card: SYS / Path(rel).parent for card, rel in GPU_METRICS_PATHS.items()}
DEVICE = {"card0": "amd0", "card1": "amd1"}
MI300X_UUID = "c4ff74a1-0000-1000-80e1-d2b0a7f2e5c3"
MI210_UUID = "5aff740f-0000-1000-803c-9e7f01d2b846"


def num(table: dict[str, Value], key: str) -> int:
    v = table[key]
    assert isinstance(v, int)
    return v


def links(table: dict[str, Value], key: str) -> list[int]:
    """The seven live xGMI links' counters of a fixture table (link 7 is all-ones)."""
    values = table[key]
    assert isinstance(values, list)
    out = [v for v in values[:7] if isinstance(v, int)]
    assert len(out) == 7
    return out


def file_int(path: Path) -> int:
    return int(path.read_text().strip())


def ras_totals(card: str) -> tuple[int, int]:
    """(uncorrected, corrected) summed over the card's RAS blocks, read independently."""
    ue = ce = 0
    for f in (CARD_DIRS[card] / "ras").glob("*_err_count"):
        counts = dict(re.findall(r"^(ue|ce|de): (\d+)$", f.read_text(), flags=re.M))
        ue += int(counts["ue"])
        ce += int(counts["ce"])
    return ue, ce


def sysfs_backend(root: Path = SYS, **kw: Any) -> AmdBackend:
    return AmdBackend(BackendOptions(sysfs=root, procfs=FIXTURES / "proc"), use_amdsmi=False, **kw)


async def poll(backend: AmdBackend, *changes: Callable[[], None]) -> str:
    """Polls through a real Poller, then once more after each change; the last text."""
    poller = Poller([backend], interval=1, timeout=5, clock=lambda: NOW)
    try:
        snapshot = await poller.poll_once()
        for change in changes:
            change()
            snapshot = await poller.poll_once()
        return snapshot.text.decode()
    finally:
        await poller.stop()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the sysfs fixture tree (its links stay relative)."""
    root = tmp_path / "sys"
    shutil.copytree(SYS, root, symlinks=True)
    return root


def card_dir(root: Path, card: str) -> Path:
    return root / Path(GPU_METRICS_PATHS[card]).parent


# -- the gpu_metrics layouts -----------------------------------------------------------


@pytest.mark.parametrize("revision", sorted(STRUCTS))
def test_layouts_match_the_c_abi(revision: tuple[int, int]) -> None:
    """The backend's struct arithmetic against ctypes' C layout, member by member."""
    layout = LAYOUTS[revision]
    c = offsets(revision)
    assert layout.size == ctypes.sizeof(STRUCTS[revision])
    assert {k: v for k, v in layout.offsets.items() if k in c} == {
        k: v for k, v in c.items() if k != "common_header"
    }
    header = build(revision, {})[:4]
    assert int.from_bytes(header[:2], "little") == layout.size
    assert (header[2], header[3]) == revision


def test_layout_sizes_are_the_kernels() -> None:
    # sizeof() of each struct as the kernel's compiler lays it out (x86-64/arm64 ABI).
    assert {rev: layout.size for rev, layout in LAYOUTS.items()} == {
        (1, 1): 96,
        (1, 2): 104,
        (1, 3): 120,
        (1, 4): 288,
        (1, 5): 360,
        (1, 6): 1664,
        (1, 7): 2208,
        (1, 8): 3872,
    }


def test_parse_v1_3_and_v1_6() -> None:
    m = parse_gpu_metrics(build((1, 3), MI210))
    assert m.revision == (1, 3)
    assert m.utilization == num(MI210, "average_gfx_activity") / 100
    assert m.memory_activity == num(MI210, "average_umc_activity") / 100
    assert m.temperatures == {
        "gpu": num(MI210, "temperature_edge"),
        "hotspot": num(MI210, "temperature_hotspot"),
        "memory": num(MI210, "temperature_mem"),
        "vr_gfx": num(MI210, "temperature_vrgfx"),
        "vr_soc": num(MI210, "temperature_vrsoc"),
        "vr_memory": num(MI210, "temperature_vrmem"),
    }  # temperature_hbm stays all-ones: no hbm sensors
    assert m.power_watts == num(MI210, "average_socket_power")
    assert m.energy_joules == num(MI210, "energy_accumulator") * 2**-16
    assert m.clocks_hz == {
        "graphics": num(MI210, "current_gfxclk") * 1e6,
        "memory": num(MI210, "current_uclk") * 1e6,
    }
    assert m.indep_throttle_status == num(MI210, "indep_throttle_status")
    assert m.xgmi_read_kb == () and m.residencies == {}

    m = parse_gpu_metrics(build((1, 6), MI300X))
    gfx = MI300X["current_gfxclk"]
    assert isinstance(gfx, list)
    assert m.clocks_hz["graphics"] == sum(gfx) / len(gfx) * 1e6
    assert m.power_watts == num(MI300X, "curr_socket_power")
    assert m.energy_joules == 1_250_000.0
    assert m.indep_throttle_status is None
    assert m.residencies["ppt_residency_acc"] == num(MI300X, "ppt_residency_acc")
    assert m.xgmi_link_width == num(MI300X, "xgmi_link_width")
    assert m.xgmi_read_kb[:7] == tuple(links(MI300X, "xgmi_read_data_acc"))
    assert m.xgmi_read_kb[7] is None  # link 7 left all-ones
    assert m.timestamp_ns == num(MI300X, "system_clock_counter")


@pytest.mark.parametrize("revision", [(1, 1), (1, 2), (1, 4), (1, 5), (1, 7), (1, 8)])
def test_parse_other_revisions(revision: tuple[int, int]) -> None:
    values: dict[str, Value] = {
        "temperature_hotspot": 60,
        "average_gfx_activity": 50,
        "average_umc_activity": 25,
        "energy_accumulator": 65_536 * 1000,
        "system_clock_counter": 10**18,
    }
    members = {f[0] for f in STRUCTS[revision]._fields_}
    power = "curr_socket_power" if "curr_socket_power" in members else "average_socket_power"
    values[power] = 300
    if "xgmi_link_width" in members:
        values |= {"xgmi_link_width": 16, "xgmi_read_data_acc": [5] * 8, "current_uclk": 900}
    if "accumulation_counter" in members:
        values |= {
            "accumulation_counter": 7,
            "prochot_residency_acc": 1,
            "ppt_residency_acc": 2,
            "socket_thm_residency_acc": 3,
            "vr_thm_residency_acc": 4,
            "hbm_thm_residency_acc": 5,
        }
    m = parse_gpu_metrics(build(revision, values))
    assert (m.utilization, m.memory_activity, m.power_watts) == (0.5, 0.25, 300.0)
    assert m.energy_joules == 1000.0
    assert m.temperatures == {"hotspot": 60.0}
    assert m.timestamp_ns == 10**18
    assert bool(m.residencies) == ("accumulation_counter" in members)
    if "xgmi_link_width" in members:
        assert m.xgmi_read_kb == (5,) * 8
        assert m.clocks_hz == {"memory": 900e6}


def test_sentinels_and_impossible_values_are_left_out() -> None:
    m = parse_gpu_metrics(build((1, 3), {}))  # everything all-ones
    assert (m.utilization, m.memory_activity, m.power_watts, m.energy_joules) == (None,) * 4
    assert m.temperatures == {} and m.clocks_hz == {} and m.indep_throttle_status is None
    # The secondary die of an MI250 writes 0 W and 0 energy; smu_v14_0_2 writes UINT_MAX.
    m = parse_gpu_metrics(
        build(
            (1, 3),
            {"average_socket_power": 0, "energy_accumulator": 0, "average_gfx_activity": 101},
        )
    )
    assert (m.power_watts, m.energy_joules, m.utilization) == (None, None, None)
    m = parse_gpu_metrics(build((1, 3), {"energy_accumulator": 0xFFFFFFFF}))
    assert m.energy_joules is None


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"\x78\x00", "truncated header (2 bytes)"),
        (build((1, 6), MI300X)[:1000], "truncated (1000 of 1664 bytes)"),
        (b"\x80\x00\x01\x09" + bytes(124), "unknown revision 1.9"),
        (b"\x20\x00\x02\x01" + bytes(28), "unknown revision 2.1"),
        # A v1.6 header over a table of another size (a pre-release v1.6 layout).
        (b"\x80\x01\x01\x06" + bytes(380), "structure_size 384 does not match v1.6's 1664 bytes"),
    ],
)
def test_unusable_tables_say_why(data: bytes, reason: str) -> None:
    with pytest.raises(GpuMetricsError) as e:
        parse_gpu_metrics(data)
    assert str(e.value) == reason


def test_fixture_tables_are_what_the_builder_writes() -> None:
    """The committed binaries are reproducible: python -m tests.support.amd_gpu_metrics."""
    for relative, data in fixture_tables().items():
        assert (SYS / relative).read_bytes() == data, relative
    assert REVISIONS == {"card0": (1, 6), "card1": (1, 3)}


def test_uuid_is_amd_smis() -> None:
    # amdsmi_uuid_gen(serial, device id, 0xff), worked by hand for the two fixture cards.
    assert amdsmi_uuid(0xC4E1D2B0A7F2E5C3, 0x74A1) == MI300X_UUID
    assert amdsmi_uuid(0x5A3C9E7F01D2B846, 0x740F) == MI210_UUID


# -- the command line over the fixture tree ----------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", "--backends", "amd", "--once", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_prints_the_fixture_values_in_base_units() -> None:
    proc = run_cli("--path.sysfs", str(SYS))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    parse(text)  # every line is exposition: nothing the amdsmi import printed
    assert value(text, "accel_exporter_backend_up", backend="amd") == 1

    def v(name: str, card: str, **labels: str) -> float | None:
        return value(text, name, device=DEVICE[card], **labels)

    for card, table in (("card0", MI300X), ("card1", MI210)):
        d = CARD_DIRS[card]
        assert v("accel_up", card) == 1
        # gpu_metrics wins over gpu_busy_percent and mem_busy_percent.
        assert v("accel_utilization_ratio", card) == num(table, "average_gfx_activity") / 100
        assert v("accel_memory_bandwidth_utilization_ratio", card) == (
            num(table, "average_umc_activity") / 100
        )
        assert v("accel_memory_used_bytes", card) == file_int(d / "mem_info_vram_used")
        assert v("accel_memory_total_bytes", card) == file_int(d / "mem_info_vram_total")
        ue, ce = ras_totals(card)
        assert v("accel_ecc_errors_total", card, type="uncorrected") == ue
        assert v("accel_ecc_errors_total", card, type="corrected") == ce
        assert total(text, "accel_fault_events_total", device=DEVICE[card], severity="fatal") == 0
        hwmon = next((d / "hwmon").glob("hwmon*"))
        assert v("accel_power_limit_watts", card) == file_int(hwmon / "power1_cap") / 1e6
        assert v("accel_energy_joules_total", card) == (
            num(table, "energy_accumulator") * ENERGY_UNIT_JOULES
        )
    assert f"Source: {UMC_SOURCE} on 2 devices." in text
    assert (
        v("accel_temperature_celsius", "card0", sensor="hotspot") == MI300X["temperature_hotspot"]
    )
    assert v("accel_temperature_celsius", "card0", sensor="memory") == MI300X["temperature_mem"]
    # MI300 has no edge sensor; the MI210 has, and its VR sensors.
    assert v("accel_temperature_celsius", "card0", sensor="gpu") is None
    assert v("accel_temperature_celsius", "card1", sensor="gpu") == MI210["temperature_edge"]
    assert v("accel_temperature_celsius", "card1", sensor="vr_memory") == MI210["temperature_vrmem"]
    assert v("accel_power_watts", "card0") == MI300X["curr_socket_power"]
    assert v("accel_power_watts", "card1") == MI210["average_socket_power"]
    assert v("accel_clock_hertz", "card1", clock="graphics") == num(MI210, "current_gfxclk") * 1e6
    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert info["amd0"]["model"] == (CARD_DIRS["card0"] / "product_name").read_text().strip()
    assert info["amd1"]["model"] == "AMD Instinct MI210"  # no product_name: the id table
    assert (info["amd0"]["uuid"], info["amd1"]["uuid"]) == (MI300X_UUID, MI210_UUID)
    assert info["amd0"]["pci_bus_id"] == "0000:0c:00.0"
    assert (info["amd0"]["numa_node"], info["amd1"]["numa_node"]) == ("0", "1")
    assert info["amd1"]["driver_version"] == (SYS / "module/amdgpu/version").read_text().strip()
    # The source and why AMD SMI is not it, said once.
    assert proc.stderr.count("GPUs from amdgpu sysfs") == 1


# -- the whole exposition, over two polls ------------------------------------------------


async def test_golden_sysfs_two_polls(
    tree: Path, golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    def five_seconds_later() -> None:
        (card_dir(tree, "card0") / "gpu_metrics").write_bytes(build((1, 6), MI300X_LATER))

    backend = sysfs_backend(tree)
    first = await poll(sysfs_backend(tree))
    # Rates and residency throttling need two tables: absent on the first poll, never 0.
    assert "accel_link_throughput_bytes_per_second" not in names(first)
    assert value(first, "accel_throttle_active", device="amd0", reason="power_cap") is None
    text = await poll(backend, five_seconds_later)

    read_before, read_after = (links(t, "xgmi_read_data_acc") for t in (MI300X, MI300X_LATER))
    write_before, write_after = (links(t, "xgmi_write_data_acc") for t in (MI300X, MI300X_LATER))
    for link in range(7):
        rx = (read_after[link] - read_before[link]) * 1024 / SECONDS_BETWEEN
        tx = (write_after[link] - write_before[link]) * 1024 / SECONDS_BETWEEN
        labels = {"device": "amd0", "link": str(link)}
        assert value(text, "accel_link_throughput_bytes_per_second", direction="rx", **labels) == rx
        assert value(text, "accel_link_throughput_bytes_per_second", direction="tx", **labels) == tx
    # Link 7 reported nothing: no series rather than 0.
    assert value(text, "accel_link_throughput_bytes_per_second", device="amd0", link="7") is None
    # Only the PPT residency grew: power capping, no thermal throttling.
    assert value(text, "accel_throttle_active", device="amd0", reason="power_cap") == 1
    for reason in ("thermal", "memory_thermal", "vr_thermal", "hw_slowdown"):
        assert value(text, "accel_throttle_active", device="amd0", reason=reason) == 0
    # The MI210's v1.3 bits: PPT0 and TEMP_HOTSPOT.
    assert value(text, "accel_throttle_active", device="amd1", reason="power_cap") == 1
    assert value(text, "accel_throttle_active", device="amd1", reason="thermal") == 1
    assert value(text, "accel_throttle_active", device="amd1", reason="vr_thermal") == 0
    assert value(text, "accel_energy_joules_total", device="amd0") == (
        num(MI300X_LATER, "energy_accumulator") * 2**-16
    )
    promtool_check(text)
    golden("amd_sysfs.prom", stable(text))


# -- a gpu_metrics the backend cannot use ------------------------------------------------


BAD_TABLES = {
    "truncated": build((1, 3), MI210)[:64],
    "unknown revision": b"\x80\x00\x01\x09" + bytes(124),
    "empty": b"",
}


@pytest.mark.parametrize("kind", sorted(BAD_TABLES))
async def test_unusable_gpu_metrics_is_one_logged_skip(
    tree: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    (card_dir(tree, "card1") / "gpu_metrics").write_bytes(BAD_TABLES[kind])
    caplog.set_level(logging.INFO, logger="accel_exporter")
    text = await poll(sysfs_backend(tree), lambda: None, lambda: None)  # three polls
    skips = [r.getMessage() for r in caplog.records if "gpu_metrics skipped" in r.getMessage()]
    assert len(skips) == 1, skips
    assert skips[0].startswith("amd1 (card1): gpu_metrics skipped: ")
    # card1 still exports, from gpu_busy_percent, mem_busy_percent and hwmon...
    d = card_dir(tree, "card1")
    assert value(text, "accel_up", device="amd1") == 1
    assert value(text, "accel_utilization_ratio", device="amd1") == (
        file_int(d / "gpu_busy_percent") / 100
    )
    assert value(text, "accel_memory_bandwidth_utilization_ratio", device="amd1") == (
        file_int(d / "mem_busy_percent") / 100
    )
    hwmon = d / "hwmon" / "hwmon4"
    assert value(text, "accel_power_watts", device="amd1") == (
        file_int(hwmon / "power1_average") / 1e6
    )
    assert value(text, "accel_temperature_celsius", device="amd1", sensor="gpu") == (
        file_int(hwmon / "temp1_input") / 1000
    )
    assert value(text, "accel_clock_hertz", device="amd1", clock="memory") == file_int(
        hwmon / "freq2_input"
    )
    # ...with no energy, throttling or VR temperatures, which only gpu_metrics has.
    for name in ("accel_energy_joules_total", "accel_throttle_active"):
        assert value(text, name, device="amd1") is None
    assert value(text, "accel_temperature_celsius", device="amd1", sensor="vr_soc") is None
    # The HELP text names both sources; the other card is untouched.
    assert f"{MEM_BUSY_SOURCE} on 1 device" in text and f"{UMC_SOURCE} on 1 device" in text
    assert value(text, "accel_utilization_ratio", device="amd0") == 0.87


def test_unusable_gpu_metrics_on_the_command_line(tree: Path) -> None:
    (card_dir(tree, "card0") / "gpu_metrics").write_bytes(BAD_TABLES["truncated"][:10])
    proc = run_cli("--path.sysfs", str(tree))
    assert proc.returncode == 0
    lines = [line for line in proc.stderr.splitlines() if "gpu_metrics skipped" in line]
    assert len(lines) == 1 and "amd0 (card0)" in lines[0], proc.stderr
    assert value(proc.stdout, "accel_up", device="amd0") == 1
    assert value(proc.stdout, "accel_up", device="amd1") == 1
    assert value(proc.stdout, "accel_energy_joules_total", device="amd1") is not None


# -- RAS ---------------------------------------------------------------------------------


async def test_ras_increases_are_fault_events_by_severity(tree: Path) -> None:
    umc0 = card_dir(tree, "card0") / "ras" / "umc_err_count"
    gfx1 = card_dir(tree, "card1") / "ras" / "gfx_err_count"
    sdma1 = card_dir(tree, "card1") / "ras" / "sdma_err_count"
    backend = sysfs_backend(tree)

    def errors() -> None:
        umc0.write_text("ue: 2\nce: 5\nde: 0\n")  # ue +2 and ce +2: one fatal event
        gfx1.write_text("ue: 0\nce: 3\n")  # ce +3: one info event
        sdma1.write_text("ue: 0\nce: 0\nde: 1\n")  # a deferred (poisoned) error

    def nothing_new() -> None:
        pass

    def driver_reloaded() -> None:
        umc0.write_text("ue: 0\nce: 0\nde: 0\n")  # counts restart: a new baseline

    text = await poll(backend, errors)
    fatal = faults.AMD_RAS["ras_uncorrectable"].severity
    info = faults.AMD_RAS["ras_correctable"].severity
    recoverable = faults.AMD_RAS["ras_deferred"].severity
    assert (fatal, info, recoverable) == ("fatal", "info", "recoverable")

    def events(device: str, severity: str) -> float | None:
        return total(text, "accel_fault_events_total", device=device, severity=severity)

    assert events("amd0", "fatal") == 1 and events("amd0", "info") == 0
    assert events("amd1", "info") == 1 and events("amd1", "recoverable") == 1
    assert events("amd1", "fatal") == 0
    assert (
        total(text, "accel_fault_code_events_total", device="amd0", code="ras_uncorrectable") == 1
    )
    assert value(text, "accel_ecc_errors_total", device="amd0", type="uncorrected") == 2
    assert value(text, "accel_ecc_errors_total", device="amd0", type="corrected") == 5 + 1

    text = await poll(backend, nothing_new, driver_reloaded)
    assert total(text, "accel_fault_events_total", device="amd0", severity="fatal") == 0
    assert value(text, "accel_ecc_errors_total", device="amd0", type="corrected") == 1


def test_ras_event_detail_names_block_and_deltas(tree: Path) -> None:
    backend = sysfs_backend(tree)
    amd0 = backend.discover()[0]
    assert backend.read(amd0).fault_events == []  # the first read is the baseline
    (card_dir(tree, "card0") / "ras" / "umc_err_count").write_text("ue: 2\nce: 5\nde: 0\n")
    events = backend.read(amd0).fault_events
    assert [(e.code, e.detail) for e in events] == [("ras_uncorrectable", "block=umc ue+2 ce+2")]


async def test_ras_query_inaccessible_holds_ecc_for_a_poll(tree: Path) -> None:
    umc = card_dir(tree, "card1") / "ras" / "umc_err_count"
    umc.write_text("Query currently inaccessible\n")  # what amdgpu says during a reset
    text = await poll(sysfs_backend(tree))
    assert value(text, "accel_ecc_errors_total", device="amd1", type="corrected") is None
    assert value(text, "accel_ecc_errors_total", device="amd0", type="corrected") == 4


async def test_no_ras_leaves_ecc_out(tree: Path) -> None:
    shutil.rmtree(card_dir(tree, "card1") / "ras")
    backend = sysfs_backend(tree)
    text = await poll(backend)
    assert value(text, "accel_ecc_errors_total", device="amd1", type="corrected") is None
    assert "RAS" in backend.missing["amd1"]["ecc_errors"]


# -- lost cards, odd trees ---------------------------------------------------------------


async def test_card_gone_from_sysfs_is_down_and_keeps_identity(tree: Path) -> None:
    def unplug() -> None:
        shutil.rmtree(card_dir(tree, "card1"))

    text = await poll(sysfs_backend(tree), unplug)
    assert value(text, "accel_up", device="amd1") == 0
    assert value(text, "accel_device_info", device="amd1", uuid=MI210_UUID) == 1
    # A device loss is a fault event of its own, whose class starts a ladder at reboot.
    assert value(text, "accel_fault_events_total", device="amd1", action="reboot") == 1
    assert value(text, "accel_fault_code_events_total", device="amd1", code="lost") == 1
    assert value(text, "accel_up", device="amd0") == 1
    assert value(text, "accel_exporter_backend_up", backend="amd") == 1


def test_enodev_is_a_lost_card_and_eperm_one_field(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = sysfs_backend(tree)
    amd0, amd1 = backend.discover()
    real = os.open
    fail: dict[str, int] = {}

    def os_open(path: str | Path, *args: Any, **kwargs: Any) -> int:
        # The failure comes from the open(2) under the bounded reader, as the kernel's would.
        for needle, code in fail.items():
            if needle in str(path):
                raise OSError(code, os.strerror(code))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    fail["card1/device/gpu_busy_percent"] = errno.ENODEV
    with pytest.raises(DeviceLostError, match="No such device"):
        backend.read(amd1)
    # EPERM is what amdgpu answers while it resets the GPU: that field, this poll.
    fail.clear()
    fail["card0/device/mem_info_vram_used"] = errno.EPERM
    r = backend.read(amd0)
    assert r.up and r.memory_used_bytes is None and r.memory_total_bytes is not None
    assert backend.missing["amd0"]["memory_used_bytes"] == (
        "mem_info_vram_used: Operation not permitted"
    )


def test_connectors_other_vendors_and_duplicates_are_not_gpus(tree: Path) -> None:
    drm = tree / "class" / "drm"
    (drm / "card0-DP-1").mkdir()
    (drm / "card0-DP-1" / "status").write_text("disconnected\n")
    (drm / "renderD128").symlink_to("card0")
    intel = tree / "devices" / "pci0000:00" / "0000:00:02.0"
    (intel / "drm" / "card7").mkdir(parents=True)
    (intel / "vendor").write_text("0x8086\n")
    (intel / "drm" / "card7" / "device").symlink_to("../../../0000:00:02.0")
    (drm / "card7").symlink_to("../../devices/pci0000:00/0000:00:02.0/drm/card7")
    # A second DRM card on the same PCI function (a partition node) is one GPU.
    (drm / "card9").symlink_to("card0")
    devices = sysfs_backend(tree).discover()
    assert [(d.device, d.pci_bus_id) for d in devices] == [
        ("amd0", "0000:0c:00.0"),
        ("amd1", "0000:83:00.0"),
    ]


async def test_no_amd_gpu_disables_the_backend(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="no AMD GPU under"):
        sysfs_backend(tmp_path).discover()
    text = await poll(sysfs_backend(tmp_path))
    assert value(text, "accel_exporter_backend_up", backend="amd") == 0
    assert "accel_device_info" not in names(text)


async def test_without_gpu_metrics_the_other_files_answer(tree: Path) -> None:
    d = card_dir(tree, "card0")
    (d / "gpu_metrics").unlink()
    hwmon = d / "hwmon" / "hwmon3"
    (hwmon / "energy1_input").write_text("123456789\n")  # the hwmon ABI's µJ counter
    backend = sysfs_backend(tree)
    text = await poll(backend)
    assert value(text, "accel_utilization_ratio", device="amd0") == (
        file_int(d / "gpu_busy_percent") / 100
    )
    assert value(text, "accel_temperature_celsius", device="amd0", sensor="hotspot") == (
        file_int(hwmon / "temp2_input") / 1000
    )
    assert value(text, "accel_power_watts", device="amd0") == file_int(hwmon / "power1_input") / 1e6
    assert value(text, "accel_energy_joules_total", device="amd0") == 123.456789
    assert value(text, "accel_clock_hertz", device="amd0", clock="graphics") == file_int(
        hwmon / "freq1_input"
    )
    assert backend.missing["amd0"]["link_bytes_per_second"] == "no gpu_metrics file"


def test_every_field_is_found_or_explained(tree: Path) -> None:
    backend = sysfs_backend(tree)
    devices = backend.discover()
    for d in devices:
        r = backend.read(d)
        missing = backend.missing[d.device]
        assert set(missing) <= set(FIELDS), missing
        assert "link_bytes_per_second" in missing  # one table: no rate yet
    assert backend.missing["amd0"]["link_bytes_per_second"] == (
        "first sample taken; a rate needs two polls"
    )
    assert "no xGMI counters" in backend.missing["amd1"]["link_bytes_per_second"]
    assert "utilization" not in backend.missing["amd0"] and r.utilization is not None


# -- AMD SMI -----------------------------------------------------------------------------


def mi300x_smi(**kw: Any) -> FakeAmdGpu:
    values: dict[str, Any] = dict(
        bdf="0000:0c:00.0",
        uuid=MI300X_UUID,
        serial=0xC4E1D2B0A7F2E5C3,
        market_name="AMD Instinct MI300X",
        device_id=0x74A1,
        gfx_activity=87,
        umc_activity=41,
        vram_total=206_141_652_992,
        vram_used=61_203_283_968,
        ecc=(4, 0, 0),
        temperatures={"HOTSPOT": 58, "VRAM": 49},  # MI300 has no edge sensor
        current_socket_power=512,
        power_cap_uw=750_000_000,
        energy_ticks=81_699_345_000,
        counter_resolution=15.3,
        power_for_energy_w=512.0,
        clocks_mhz={"GFX": 2100, "MEM": 1300},
        xgmi_link_width=16,
        xgmi_read_kb=[(i + 1) * 1_000_000_000 for i in range(7)] + ["N/A"],
        xgmi_write_kb=[(i + 1) * 900_000_000 for i in range(7)] + ["N/A"],
        xgmi_read_kb_per_s=[(i + 1) * 2_000_000 for i in range(7)],
        xgmi_write_kb_per_s=[(i + 1) * 800_000 for i in range(7)],
        residencies={
            "accumulation_counter": 1_000_000,
            "prochot_residency_acc": 0,
            "ppt_residency_acc": 5_000,
            "socket_thm_residency_acc": 120,
            "vr_thm_residency_acc": 0,
            "hbm_thm_residency_acc": 0,
        },
        residencies_per_s={"accumulation_counter": 1000, "hbm_thm_residency_acc": 10},
    )
    return FakeAmdGpu(**(values | kw))


def mi210_smi(**kw: Any) -> FakeAmdGpu:
    values: dict[str, Any] = dict(
        bdf="0000:83:00.0",
        uuid=MI210_UUID,
        serial=0x5A3C9E7F01D2B846,
        market_name="",  # an older library with no market name: the id table names it
        device_id=0x740F,
        gfx_activity=63,
        umc_activity=22,
        vram_total=68_702_699_520,
        vram_used=12_884_901_888,
        ecc=(7, 1, 0),
        temperatures={"EDGE": 39, "HOTSPOT": 46, "VRAM": 51},
        average_socket_power=167,
        power_cap_uw=300_000_000,
        energy_ticks=19_607_843_137,
        counter_resolution=15.3,
        power_for_energy_w=167.0,
        clocks_mhz={"GFX": 1700, "MEM": 1600},
        metrics_revision=(1, 3),
    )
    return FakeAmdGpu(**(values | kw))


def smi_backend(fake: FakeAmdSmi, root: Path = SYS) -> AmdBackend:
    return AmdBackend(BackendOptions(sysfs=root, procfs=FIXTURES / "proc"), amdsmi=fake)


async def test_amdsmi_golden_and_values(
    golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    fake = FakeAmdSmi([mi210_smi(), mi300x_smi()])  # handles in any order: named by bus
    backend = smi_backend(fake)
    text = await poll(backend, lambda: fake.advance(2.0))
    assert backend.source == "amdsmi"

    def v(name: str, device: str, **labels: str) -> float | None:
        return value(text, name, device=device, **labels)

    info = {lb["device"]: lb for n, lb, _ in parse(text) if n == "accel_device_info"}
    assert (info["amd0"]["uuid"], info["amd1"]["uuid"]) == (MI300X_UUID, MI210_UUID)
    assert info["amd1"]["model"] == "AMD Instinct MI210"
    assert info["amd0"]["numa_node"] == "0"  # from sysfs, as for NVIDIA
    assert v("accel_utilization_ratio", "amd0") == 0.87
    assert v("accel_memory_bandwidth_utilization_ratio", "amd1") == 0.22
    assert f"Source: {AMDSMI_UMC_SOURCE} on 2 devices." in text
    assert v("accel_memory_total_bytes", "amd0") == 206_141_652_992
    assert v("accel_ecc_errors_total", "amd1", type="uncorrected") == 1
    assert v("accel_temperature_celsius", "amd0", sensor="gpu") is None  # NOT_SUPPORTED
    assert v("accel_temperature_celsius", "amd1", sensor="gpu") == 39
    assert v("accel_power_watts", "amd0") == 512  # current_socket_power
    assert v("accel_power_watts", "amd1") == 167  # average_socket_power
    assert v("accel_power_limit_watts", "amd0") == 750  # µW -> W
    energy = fake.gpus[1].energy_ticks * 15.3 / 1e6  # µJ ticks -> J
    assert v("accel_energy_joules_total", "amd0") == pytest.approx(energy)
    assert v("accel_clock_hertz", "amd1", clock="memory") == 1.6e9
    # xGMI KB counters over the fake's 2 s; residency throttling from the accumulators.
    assert v("accel_link_throughput_bytes_per_second", "amd0", link="3", direction="rx") == (
        4 * 2_000_000 * 1024
    )
    assert v("accel_link_throughput_bytes_per_second", "amd0", link="7", direction="rx") is None
    assert v("accel_throttle_active", "amd0", reason="memory_thermal") == 1
    assert v("accel_throttle_active", "amd0", reason="power_cap") == 0
    assert v("accel_throttle_active", "amd1", reason="power_cap") is None
    # MI300X's EDGE is asked once: NOT_SUPPORTED is remembered, not asked every poll.
    assert fake.calls["amdsmi_get_temp_metric"] == (3 + 3) + (2 + 3)
    promtool_check(text)
    golden("amd_amdsmi.prom", stable(text))


def test_amdsmi_and_sysfs_name_the_same_gpus_the_same() -> None:
    by_smi = smi_backend(FakeAmdSmi([mi300x_smi(), mi210_smi()])).discover()
    by_sysfs = sysfs_backend().discover()
    keep = ("device", "uuid", "pci_bus_id", "numa_node")
    assert [[getattr(d, k) for k in keep] for d in by_smi] == [
        [getattr(d, k) for k in keep] for d in by_sysfs
    ]


def test_amdsmi_unsupported_fields_are_absent_with_reasons() -> None:
    gpu = mi210_smi(
        unsupported={
            "amdsmi_get_gpu_total_ecc_count",
            "amdsmi_get_energy_count",
            "amdsmi_get_temp_metric",
            "amdsmi_get_clock_info:MEM",
        },
        gfx_activity="N/A",
    )
    fake = FakeAmdSmi([gpu])
    backend = smi_backend(fake)
    (d,) = backend.discover()
    for _ in range(3):
        r = backend.read(d)
    assert r.ecc_errors == {} and r.energy_joules is None and r.temperatures == {}
    assert r.utilization is None  # "N/A" is not 0
    assert r.clocks_hz == {"graphics": 1.7e9}
    missing = backend.missing["amd0"]
    assert missing["ecc_errors"] == ("amdsmi_get_gpu_total_ecc_count: AMDSMI_STATUS_NOT_SUPPORTED")
    assert missing["temperatures"].startswith("EDGE: amdsmi_get_temp_metric: AMDSMI_STATUS_NOT")
    assert missing["clocks_hz.memory"].endswith("NOT_SUPPORTED")
    assert missing["utilization"] == "not reported by this GPU"
    assert set(missing) <= set(FIELDS)
    assert fake.calls["amdsmi_get_energy_count"] == 1  # remembered after the first
    assert fake.calls["amdsmi_get_temp_metric"] == 3


def test_amdsmi_ecc_increases_are_fault_events() -> None:
    fake = FakeAmdSmi([mi300x_smi()])
    backend = smi_backend(fake)
    (d,) = backend.discover()
    assert backend.read(d).fault_events == []
    fake.gpus[0].ecc = (6, 1, 0)
    events = backend.read(d).fault_events
    assert [(e.code, e.detail) for e in events] == [("ras_uncorrectable", "block=total ue+1 ce+2")]


@pytest.mark.parametrize(
    ("status", "unplug", "lost"),
    [
        ("NOT_FOUND", False, True),
        ("FILE_ERROR", True, True),  # the library fails and the PCI function left sysfs
        ("FILE_ERROR", False, False),  # it fails, but the GPU is still there
    ],
)
async def test_amdsmi_lost_gpu(tree: Path, status: str, unplug: bool, lost: bool) -> None:
    fake = FakeAmdSmi([mi300x_smi(), mi210_smi()])
    backend = smi_backend(fake, tree)

    def fall_off() -> None:
        fake.lose(1, status)
        if unplug:
            (tree / "bus" / "pci" / "devices" / "0000:83:00.0").unlink()

    text = await poll(backend, fall_off)
    assert value(text, "accel_up", device="amd1") == (0 if lost else 1)
    assert value(text, "accel_device_info", device="amd1", uuid=MI210_UUID) == 1
    assert value(text, "accel_up", device="amd0") == 1
    if not lost:
        assert value(text, "accel_utilization_ratio", device="amd1") is None


def test_amdsmi_that_does_not_initialise_falls_back_to_sysfs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="accel_exporter.amd")
    backend = smi_backend(FakeAmdSmi([mi300x_smi()], init_status="DRIVER_NOT_LOADED"))
    assert len(backend.discover()) == 2
    assert backend.source == "sysfs"
    assert backend.amdsmi_reason == "amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED"
    assert "AMDSMI_STATUS_DRIVER_NOT_LOADED" in caplog.text
    backend = smi_backend(FakeAmdSmi([]))
    assert len(backend.discover()) == 2 and backend.amdsmi_reason == "AMD SMI found no GPU"


def test_amdsmi_is_shut_down_on_close_and_rediscovery() -> None:
    fake = FakeAmdSmi([mi300x_smi()])
    backend = smi_backend(fake)
    backend.discover()
    backend.discover()  # asked again after a failure: starts from scratch
    backend.close()
    assert fake.calls["amdsmi_init"] == 2 and fake.calls["amdsmi_shut_down"] == 2
    assert not fake.initialized


# -- the fake against the real package's source ------------------------------------------


def _real_sources() -> dict[str, ast.Module]:
    spec = importlib.util.find_spec("amdsmi")  # finds it without running its import
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    return {
        name: ast.parse((root / f"{name}.py").read_text())
        for name in ("__init__", "amdsmi_interface", "amdsmi_wrapper", "amdsmi_exception")
    }


def test_fake_matches_the_real_amdsmi_source() -> None:
    src = _real_sources()
    exported = {
        a.name
        for node in src["__init__"].body
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }
    functions = {n.name: n for n in src["amdsmi_interface"].body if isinstance(n, ast.FunctionDef)}
    constants: dict[str, int] = {}
    for node in src["amdsmi_wrapper"].body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int)
        ):
            constants[node.targets[0].id] = node.value.value
    gpu = mi300x_smi()
    gpu.processes.append(FakeAmdProcess(4242, 1 << 30, gfx_busy=0.5))
    fake = FakeAmdSmi([gpu])
    fake.amdsmi_init()
    (handle,) = fake.amdsmi_get_processor_handles()
    implemented = FakeAmdSmi.implemented()
    assert len(implemented) >= 17
    for name in implemented:
        assert name in exported, f"amdsmi does not export {name}"
        real = functions[name]
        want = [a.arg for a in real.args.args]
        want_defaults = [ast.unparse(d) for d in real.args.defaults]
        sig = inspect.signature(getattr(fake, name))
        got = list(sig.parameters)
        got_defaults = [
            f"{type(p.default).__name__}.{p.default.name}"
            for p in sig.parameters.values()
            if p.default is not inspect.Parameter.empty
        ]
        assert (got, got_defaults) == (want, want_defaults), name
    # Every key of every dict the fake returns is one the real function builds.
    args: dict[str, tuple[Any, ...]] = {
        "amdsmi_get_clock_info": (handle, fake.AmdSmiClkType.GFX),
    }
    for name in implemented:
        real_keys = {
            k.value
            for node in ast.walk(functions[name])
            if isinstance(node, ast.Dict)
            for k in node.keys
            if isinstance(k, ast.Constant)
        }
        if not real_keys:
            continue
        result = getattr(fake, name)(*args.get(name, (handle,)))
        # A dict, or a list of them (the process list), with dicts nested one deep.
        rows = result if isinstance(result, list) else [result]
        assert rows, name
        for row in rows:
            assert isinstance(row, dict), name
            keys = set(row) | {k for v in row.values() if isinstance(v, dict) for k in v}
            assert keys <= real_keys, (name, keys - real_keys)
    # Enum members and status numbers are the real ones.
    classes = {n.name: n for n in src["amdsmi_interface"].body if isinstance(n, ast.ClassDef)}
    for enum_name in (
        "AmdSmiInitFlags",
        "AmdSmiMemoryType",
        "AmdSmiTemperatureType",
        "AmdSmiTemperatureMetric",
        "AmdSmiClkType",
    ):
        assert enum_name in exported
        real_members = {
            stmt.targets[0].id: constants[stmt.value.attr]
            for stmt in classes[enum_name].body
            if isinstance(stmt, ast.Assign)
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Attribute)
        }
        fake_enum: type[IntEnum] = getattr(fake, enum_name)
        for member, number in fake_enum.__members__.items():
            assert real_members[member] == number, (enum_name, member)
    for name, code in STATUS.items():
        assert constants[name] == code, name
    exceptions = {n.name: n for n in src["amdsmi_exception"].body if isinstance(n, ast.ClassDef)}
    for cls in ("AmdSmiException", "AmdSmiLibraryException", "AmdSmiParameterException"):
        assert cls in exceptions and cls in exported
    init = next(
        f
        for f in exceptions["AmdSmiLibraryException"].body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    assert [a.arg for a in init.args.args] == ["self", "err_code"]


def test_fake_fails_like_amdsmi() -> None:
    fake = FakeAmdSmi([mi300x_smi()])
    with pytest.raises(fake.AmdSmiLibraryException) as e:
        fake.amdsmi_get_processor_handles()
    assert e.value.get_error_code() == STATUS["AMDSMI_STATUS_NOT_INIT"]
    fake.amdsmi_init()
    (h,) = fake.amdsmi_get_processor_handles()
    with pytest.raises(fake.AmdSmiParameterException):
        fake.amdsmi_get_gpu_memory_total(h, 0)  # a plain int is not an AmdSmiMemoryType
    with pytest.raises(fake.AmdSmiParameterException):
        fake.amdsmi_get_gpu_activity("gpu0")
    with pytest.raises(fake.AmdSmiLibraryException) as e:
        fake.amdsmi_get_temp_metric(
            h, fake.AmdSmiTemperatureType.EDGE, fake.AmdSmiTemperatureMetric.CURRENT
        )
    assert e.value.get_error_code() == STATUS["AMDSMI_STATUS_NOT_SUPPORTED"]
    fake.lose(0)
    with pytest.raises(fake.AmdSmiLibraryException) as e:
        fake.amdsmi_get_gpu_activity(h)
    assert e.value.get_error_code() == STATUS["AMDSMI_STATUS_NOT_FOUND"]


# -- the amdsmi import -------------------------------------------------------------------


@pytest.fixture
def no_rocm() -> Iterator[None]:
    probe = subprocess.run(
        [sys.executable, "-c", "import amdsmi"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode == 0:
        pytest.skip("amdsmi imports here (ROCm is installed)")
    # What the guard is for: the bare import prints to stdout before it fails.
    assert "libamd_smi.so" in probe.stdout and "KeyError" in probe.stderr
    yield


def test_the_import_guard_keeps_stdout_clean(no_rocm: None) -> None:
    code = (
        "import sys\n"
        "from exporter.backends.amd.smi import load_amdsmi\n"
        "module, reason = load_amdsmi()\n"
        "sys.stderr.write(f'{module is None}|{reason}')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    none, _, reason = proc.stderr.partition("|")
    assert none == "True"
    assert reason.startswith("import amdsmi failed (KeyError: 'libamd_smi.so'): ")
    assert "Unable to find libamd_smi.so" in reason  # what it printed, kept as the reason


def test_quiet_stdout_catches_python_and_c_writes() -> None:
    code = (
        "import os\n"
        "from exporter.backends.amd.smi import quiet_stdout\n"
        "with quiet_stdout() as printed:\n"
        "    print('from Python')\n"
        "    os.write(1, b'from C\\n')\n"
        "print('after', printed)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "after ['from Python', 'from C']\n"


def test_the_default_loader_falls_back_to_sysfs(no_rocm: None) -> None:
    backend = AmdBackend(BackendOptions(sysfs=SYS, procfs=FIXTURES / "proc"))
    assert len(backend.discover()) == 2
    assert backend.source == "sysfs" and "KeyError" in backend.amdsmi_reason


def test_a_given_loader_is_used() -> None:
    fake = FakeAmdSmi([mi300x_smi()])
    backend = AmdBackend(BackendOptions(sysfs=SYS), loader=lambda: (fake, ""))
    assert [d.uuid for d in backend.discover()] == [MI300X_UUID]
    assert backend.source == "amdsmi"


def test_reading_an_unknown_device_is_a_lost_one() -> None:
    backend = sysfs_backend()
    (amd0, _) = backend.discover()
    other = type(amd0)("amd9", "amd", "x")
    with pytest.raises(DeviceLostError):
        backend.read(other)
