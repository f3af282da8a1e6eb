"""The CPU backend against a fixture tree of a two-socket host (2×8 CPUs, cpu15
offline, two NUMA nodes, coretemp, RAPL), through the real Poller and renderer, plus
one look at this machine's own /sys and /proc."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.backends.base import BackendOptions
from exporter.backends.cpu import CpuBackend, parse_cpu_list
from exporter.poller import Poller
from tests.support.clock import FakeClock
from tests.support.exposition import names, stable, value
from tests.support.paths import FIXTURES

NOW = 1700000000.0
KIB = 1024
# Lines whose value is a measured duration differ on every run; the golden file
# leaves them out (the Poller's fixed clock keeps last_success stable).


def backend(root: Path = FIXTURES, clock: Callable[[], float] | None = None) -> CpuBackend:
    options = BackendOptions(sysfs=root / "sys", procfs=root / "proc")
    return CpuBackend(options) if clock is None else CpuBackend(options, clock=clock)


async def poll(b: CpuBackend, *changes: Callable[[], None]) -> str:
    """Polls the backend through a real Poller, then once more after each change to
    the tree; returns the last exposition."""
    poller = Poller([b], interval=1, timeout=5, clock=lambda: NOW)
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
    """A writable copy of the fixture tree (sysfs and procfs only)."""
    for part in ("sys", "proc"):
        shutil.copytree(FIXTURES / part, tmp_path / part, symlinks=True)
    return tmp_path


def cpu_line(cpu: int, user: int, idle: int, iowait: int = 0, system: int = 0) -> str:
    return f"cpu{cpu} {user} 0 {system} {idle} {iowait} 0 0 0 0 0"


SOCKET0 = (0, 1, 2, 3, 8, 9, 10, 11)
SOCKET1 = (4, 5, 6, 7, 12, 13, 14)


async def test_golden(
    golden: Callable[[str, str], None], promtool_check: Callable[[str], None]
) -> None:
    text = await poll(backend())
    promtool_check(text)
    golden("cpu.prom", stable(text))


async def test_identity() -> None:
    text = await poll(backend())
    common = {
        "vendor": "cpu",
        "model": "Intel(R) Xeon(R) Gold 6326 CPU @ 2.90GHz",
        "driver_version": "6.8.0-45-generic",
    }
    for s in (0, 1):
        info = value(
            text,
            "accel_device_info",
            device=f"cpu{s}",
            uuid=f"4c4c4544-0042-3510-8052-b3c04f4e3332-socket{s}",
            numa_node=str(s),
            **common,
        )
        assert info == 1
        assert value(text, "accel_up", device=f"cpu{s}") == 1
    assert value(text, "accel_exporter_backend_up", backend="cpu") == 1
    assert value(text, "accel_device_info", device="cpu2") is None


async def test_first_read_values() -> None:
    text = await poll(backend())
    # Since boot: socket 0 is 2500 busy of 10000 jiffies per CPU (guest time is
    # inside user and not added again), socket 1 is 5000 of 10000.
    assert value(text, "accel_utilization_ratio", device="cpu0") == 0.25
    assert value(text, "accel_utilization_ratio", device="cpu1") == 0.5

    # The host's MemAvailable (98 800 000 kB) split over the nodes in proportion to
    # free + file LRU + reclaimable slab: node0 49 000 000, node1 55 000 000 kB.
    total = 65536000 * KIB
    assert value(text, "accel_memory_total_bytes", device="cpu0") == total
    assert value(text, "accel_memory_total_bytes", device="cpu1") == total
    used0 = (65536000 - 49000000 * 98800000 // 104000000) * KIB
    used1 = (65536000 - 55000000 * 98800000 // 104000000) * KIB
    assert value(text, "accel_memory_used_bytes", device="cpu0") == used0
    assert value(text, "accel_memory_used_bytes", device="cpu1") == used1
    # Together the sockets say what `free` says: total - available.
    assert used0 + used1 == (131072000 - 98800000) * KIB

    assert value(text, "accel_temperature_celsius", device="cpu0", sensor="package") == 45.0
    assert value(text, "accel_temperature_celsius", device="cpu1", sensor="package") == 47.5
    # Per-core sensors and non-CPU hwmons (acpitz) are not exported.
    temps = [line for line in text.splitlines() if line.startswith("accel_temperature_celsius{")]
    assert len(temps) == 2

    # Package zones only: the dram sub-zone is part of the package, not added to it.
    assert value(text, "accel_energy_joules_total", device="cpu0") == 123.456789
    assert value(text, "accel_energy_joules_total", device="cpu1") == 98.765432
    # One read is no interval: no power yet, rather than a made-up 0.
    assert "accel_power_watts" not in names(text)


async def test_utilization_between_two_reads(tree: Path) -> None:
    def busier() -> None:
        lines = []
        for c in SOCKET0:
            # +1000 jiffies each: 300 user, 100 system, 500 idle, 100 iowait.
            lines.append(cpu_line(c, user=2300, system=600, idle=7500, iowait=600))
        for c in SOCKET1:
            # +1000 jiffies each, all user.
            lines.append(f"cpu{c} 5000 500 400 4800 200 50 50 0 0 0")
        (tree / "proc" / "stat").write_text("cpu  0 0 0 0 0 0 0 0 0 0\n" + "\n".join(lines) + "\n")

    text = await poll(backend(tree), busier)
    assert value(text, "accel_utilization_ratio", device="cpu0") == pytest.approx(0.4)
    assert value(text, "accel_utilization_ratio", device="cpu1") == pytest.approx(1.0)


async def test_utilization_counters_going_backwards_are_not_negative_work(tree: Path) -> None:
    def idle_steps_back() -> None:
        stat = (tree / "proc" / "stat").read_text()
        # NO_HZ kernels can report idle a little lower than before.
        (tree / "proc" / "stat").write_text(
            stat.replace("cpu0 2000 0 500 7000 500", "cpu0 2100 0 500 6990 500")
        )

    text = await poll(backend(tree), idle_steps_back)
    assert value(text, "accel_utilization_ratio", device="cpu0") == 1.0


async def test_no_elapsed_jiffies_leaves_utilization_out() -> None:
    text = await poll(backend(), lambda: None)
    assert value(text, "accel_utilization_ratio", device="cpu0") is None
    assert value(text, "accel_up", device="cpu0") == 1


async def test_power_and_energy_wraparound(tree: Path) -> None:
    clock = FakeClock()
    zone = tree / "sys" / "class" / "powercap" / "intel-rapl:0"
    first = 123456789

    def plus_1500_joules() -> None:
        clock.advance(10)
        (zone / "energy_uj").write_text(f"{first + 1_500_000_000}\n")

    def plus_2000_joules_across_the_wrap() -> None:
        clock.advance(10)
        # A range that wraps 500 J above the last value: 500 J to the top, 1500 after.
        (zone / "max_energy_range_uj").write_text(f"{first + 2_000_000_000}\n")
        (zone / "energy_uj").write_text("1500000000\n")

    b = backend(tree, clock=clock)
    text = await poll(b, plus_1500_joules)
    assert value(text, "accel_power_watts", device="cpu0") == pytest.approx(150.0)
    assert value(text, "accel_energy_joules_total", device="cpu0") == pytest.approx(
        123.456789 + 1500
    )
    # Socket 1's counter did not move: 0 W is a measurement here, not a default.
    assert value(text, "accel_power_watts", device="cpu1") == 0

    (zone / "energy_uj").write_text(f"{first}\n")
    b = backend(tree, clock=clock)
    text = await poll(b, plus_1500_joules, plus_2000_joules_across_the_wrap)
    assert value(text, "accel_energy_joules_total", device="cpu0") == pytest.approx(
        123.456789 + 1500 + 2000
    )
    assert value(text, "accel_power_watts", device="cpu0") == pytest.approx(200.0)


async def test_missing_files_leave_fields_out(tree: Path) -> None:
    for path in (
        "sys/class/hwmon",
        "sys/class/powercap",
        "sys/class/dmi",
        "sys/devices/system/node/node0/meminfo",
        "proc/meminfo",
        "proc/stat",
        "proc/cpuinfo",
        "proc/sys",
    ):
        target = tree / path
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    text = await poll(backend(tree))
    assert value(text, "accel_up", device="cpu0") == 1
    assert value(text, "accel_up", device="cpu1") == 1
    present = names(text)
    for absent in (
        "accel_utilization_ratio",
        "accel_temperature_celsius",
        "accel_energy_joules_total",
        "accel_power_watts",
    ):
        assert absent not in present
    # Socket 0's node meminfo is gone: its memory is left out. Socket 1 still has
    # its node's total; with the host's MemAvailable gone (and a node missing) there
    # is nothing to scale by...
    assert value(text, "accel_memory_total_bytes", device="cpu0") is None
    assert value(text, "accel_memory_used_bytes", device="cpu0") is None
    assert value(text, "accel_memory_total_bytes", device="cpu1") == 65536000 * KIB
    # ...so it falls back to the node's own estimate, unscaled.
    assert value(text, "accel_memory_used_bytes", device="cpu1") == (65536000 - 55000000) * KIB
    # Without the DMI product UUID the uuid is unique within the host only.
    assert (
        value(
            text,
            "accel_device_info",
            device="cpu0",
            uuid="cpu-socket0",
            model="",
            driver_version="",
        )
        == 1
    )


async def test_unreadable_energy_is_left_out(tree: Path) -> None:
    # RAPL is root-only on most kernels; a value that is not a number reads the same.
    (tree / "sys/class/powercap/intel-rapl:1/energy_uj").write_text("")
    text = await poll(backend(tree))
    assert value(text, "accel_energy_joules_total", device="cpu0") is not None
    assert value(text, "accel_energy_joules_total", device="cpu1") is None


async def test_shared_numa_node_leaves_memory_out(tree: Path) -> None:
    # NUMA off in the firmware: one node holds every CPU of both sockets.
    shutil.rmtree(tree / "sys/devices/system/node/node1")
    (tree / "sys/devices/system/node/node0/cpulist").write_text("0-15\n")
    text = await poll(backend(tree))
    assert "accel_memory_total_bytes" not in names(text)
    assert value(text, "accel_device_info", device="cpu1", numa_node="0") == 1


async def test_single_socket_reports_host_memory(tree: Path) -> None:
    (tree / "sys/devices/system/cpu/online").write_text("0-3,8-11\n")
    text = await poll(backend(tree))
    assert value(text, "accel_up", device="cpu1") is None
    assert value(text, "accel_memory_total_bytes", device="cpu0") == 131072000 * KIB
    assert value(text, "accel_memory_used_bytes", device="cpu0") == (131072000 - 98800000) * KIB


async def test_socket_gone_offline_is_down(tree: Path) -> None:
    def offline() -> None:
        stat = tree / "proc" / "stat"
        keep = [
            line
            for line in stat.read_text().splitlines()
            if not any(line.startswith(f"cpu{c} ") for c in SOCKET1)
        ]
        stat.write_text("\n".join(keep) + "\n")

    text = await poll(backend(tree), offline)
    assert value(text, "accel_up", device="cpu0") == 1
    assert value(text, "accel_up", device="cpu1") == 0
    assert value(text, "accel_device_info", device="cpu1") == 1


async def test_amd_k10temp_is_mapped_by_data_fabric_device(tree: Path) -> None:
    hwmon = tree / "sys/class/hwmon"
    shutil.rmtree(hwmon)
    for socket, (tctl, ccd) in enumerate(((61125, 55000), (58000, 52250))):
        # The hwmon's device is the socket's data-fabric function 3: 00:18.3, 00:19.3.
        pci = tree / f"sys/devices/pci0000:00/0000:00:{0x18 + socket:02x}.3"
        d = pci / "hwmon" / f"hwmon{socket}"
        d.mkdir(parents=True)
        (d / "device").symlink_to(pci)
        (d / "name").write_text("k10temp\n")
        (d / "temp1_label").write_text("Tctl\n")
        (d / "temp1_input").write_text(f"{tctl}\n")
        (d / "temp3_label").write_text("Tccd1\n")
        (d / "temp3_input").write_text(f"{ccd}\n")
        (d / "temp9_label").write_text("Odd sensor#2\n")
        (d / "temp9_input").write_text("40000\n")
        hwmon.mkdir(exist_ok=True)
        (hwmon / f"hwmon{socket}").symlink_to(d)
    text = await poll(backend(tree))
    assert value(text, "accel_temperature_celsius", device="cpu0", sensor="package") == 61.125
    assert value(text, "accel_temperature_celsius", device="cpu0", sensor="ccd1") == 55.0
    assert value(text, "accel_temperature_celsius", device="cpu1", sensor="package") == 58.0
    assert value(text, "accel_temperature_celsius", device="cpu1", sensor="ccd1") == 52.25
    assert value(text, "accel_temperature_celsius", device="cpu1", sensor="odd_sensor_2") == 40.0


async def test_no_cpus_disables_the_backend(tmp_path: Path) -> None:
    text = await poll(backend(tmp_path))
    assert value(text, "accel_exporter_backend_up", backend="cpu") == 0
    assert "accel_device_info" not in names(text)


def test_parse_cpu_list() -> None:
    assert parse_cpu_list("0-3,8-11\n") == {0, 1, 2, 3, 8, 9, 10, 11}
    assert parse_cpu_list("5") == {5}
    assert parse_cpu_list("\n") == set()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads this host's /sys")
async def test_this_machine() -> None:
    b = CpuBackend(BackendOptions(sysfs=Path("/sys"), procfs=Path("/proc")))
    text = await poll(b)
    assert value(text, "accel_up", device="cpu0") == 1
    util = value(text, "accel_utilization_ratio", device="cpu0")
    assert util is not None and 0.0 <= util <= 1.0
    total = value(text, "accel_memory_total_bytes", device="cpu0")
    used = value(text, "accel_memory_used_bytes", device="cpu0")
    if total is not None:  # left out only on a multi-socket host with NUMA off
        assert total > 64 * 1024 * 1024
        assert used is not None and 0 < used < total
