"""Builds binary ``gpu_metrics`` tables as the amdgpu driver writes them, for the AMD tests.

Why it is built this way:

* The structures are transcribed from ``drivers/gpu/drm/amd/include/kgd_pp_interface.h``
  as ctypes structures, so ctypes (which follows the platform C ABI) decides every
  offset and the trailing padding. The backend lays the same structs out with its own
  ``struct`` arithmetic; a test compares the two field by field, so an offset mistake
  in either one shows up.
* ``build()`` does what ``smu_cmn_init_soft_gpu_metrics()`` does: fill the whole table
  with 0xFF, set the header (``structure_size = sizeof``), then write the values the
  firmware gave. A field that is not given stays all-ones, the kernel's "not reported".
* The fixture cards' tables are described here once (``MI300X`` at v1.6, ``MI210`` at
  v1.3) and written into ``tests/fixtures/sys`` by ``python -m tests.support.amd_gpu_metrics``;
  a test checks that the committed files are exactly what this module builds.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.paths import FIXTURES

u8, u16, u32, u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64

NUM_HBM_INSTANCES = 4
NUM_XGMI_LINKS = 8
MAX_GFX_CLKS = 8
MAX_CLKS = 4
NUM_VCN = 4
NUM_JPEG_ENG = 32
NUM_JPEG_ENG_V1 = 40
MAX_XCC = 8
NUM_XCP = 8

Fields = list[tuple[str, Any]]


class MetricsTableHeader(ctypes.LittleEndianStructure):
    _fields_ = (
        ("structure_size", u16),
        ("format_revision", u8),
        ("content_revision", u8),
    )


class XcpMetrics(ctypes.LittleEndianStructure):
    _fields_ = (
        ("gfx_busy_inst", u32 * MAX_XCC),
        ("jpeg_busy", u16 * NUM_JPEG_ENG),
        ("vcn_busy", u16 * NUM_VCN),
        ("gfx_busy_acc", u64 * MAX_XCC),
    )


class XcpMetricsV1_1(ctypes.LittleEndianStructure):
    _fields_ = (
        ("gfx_busy_inst", u32 * MAX_XCC),
        ("jpeg_busy", u16 * NUM_JPEG_ENG),
        ("vcn_busy", u16 * NUM_VCN),
        ("gfx_busy_acc", u64 * MAX_XCC),
        ("gfx_below_host_limit_acc", u64 * MAX_XCC),
    )


class XcpMetricsV1_2(ctypes.LittleEndianStructure):
    _fields_ = (
        ("gfx_busy_inst", u32 * MAX_XCC),
        ("jpeg_busy", u16 * NUM_JPEG_ENG_V1),
        ("vcn_busy", u16 * NUM_VCN),
        ("gfx_busy_acc", u64 * MAX_XCC),
        ("gfx_below_host_limit_ppt_acc", u64 * MAX_XCC),
        ("gfx_below_host_limit_thm_acc", u64 * MAX_XCC),
        ("gfx_low_utilization_acc", u64 * MAX_XCC),
        ("gfx_below_host_limit_total_acc", u64 * MAX_XCC),
    )


_V1_1: Fields = [
    ("common_header", MetricsTableHeader),
    ("temperature_edge", u16),
    ("temperature_hotspot", u16),
    ("temperature_mem", u16),
    ("temperature_vrgfx", u16),
    ("temperature_vrsoc", u16),
    ("temperature_vrmem", u16),
    ("average_gfx_activity", u16),
    ("average_umc_activity", u16),
    ("average_mm_activity", u16),
    ("average_socket_power", u16),
    ("energy_accumulator", u64),
    ("system_clock_counter", u64),
    ("average_gfxclk_frequency", u16),
    ("average_socclk_frequency", u16),
    ("average_uclk_frequency", u16),
    ("average_vclk0_frequency", u16),
    ("average_dclk0_frequency", u16),
    ("average_vclk1_frequency", u16),
    ("average_dclk1_frequency", u16),
    ("current_gfxclk", u16),
    ("current_socclk", u16),
    ("current_uclk", u16),
    ("current_vclk0", u16),
    ("current_dclk0", u16),
    ("current_vclk1", u16),
    ("current_dclk1", u16),
    ("throttle_status", u32),
    ("current_fan_speed", u16),
    ("pcie_link_width", u16),
    ("pcie_link_speed", u16),
    ("padding", u16),
    ("gfx_activity_acc", u32),
    ("mem_activity_acc", u32),
    ("temperature_hbm", u16 * NUM_HBM_INSTANCES),
]
_V1_2: Fields = [*_V1_1, ("firmware_timestamp", u64)]
_V1_3: Fields = [
    *_V1_2,
    ("voltage_soc", u16),
    ("voltage_gfx", u16),
    ("voltage_mem", u16),
    ("padding1", u16),
    ("indep_throttle_status", u64),
]
_V1_4: Fields = [
    ("common_header", MetricsTableHeader),
    ("temperature_hotspot", u16),
    ("temperature_mem", u16),
    ("temperature_vrsoc", u16),
    ("curr_socket_power", u16),
    ("average_gfx_activity", u16),
    ("average_umc_activity", u16),
    ("vcn_activity", u16 * NUM_VCN),
    ("energy_accumulator", u64),
    ("system_clock_counter", u64),
    ("throttle_status", u32),
    ("gfxclk_lock_status", u32),
    ("pcie_link_width", u16),
    ("pcie_link_speed", u16),
    ("xgmi_link_width", u16),
    ("xgmi_link_speed", u16),
    ("gfx_activity_acc", u32),
    ("mem_activity_acc", u32),
    ("pcie_bandwidth_acc", u64),
    ("pcie_bandwidth_inst", u64),
    ("pcie_l0_to_recov_count_acc", u64),
    ("pcie_replay_count_acc", u64),
    ("pcie_replay_rover_count_acc", u64),
    ("xgmi_read_data_acc", u64 * NUM_XGMI_LINKS),
    ("xgmi_write_data_acc", u64 * NUM_XGMI_LINKS),
    ("firmware_timestamp", u64),
    ("current_gfxclk", u16 * MAX_GFX_CLKS),
    ("current_socclk", u16 * MAX_CLKS),
    ("current_vclk0", u16 * MAX_CLKS),
    ("current_dclk0", u16 * MAX_CLKS),
    ("current_uclk", u16),
    ("padding", u16),
]
_V1_5: Fields = [
    ("common_header", MetricsTableHeader),
    ("temperature_hotspot", u16),
    ("temperature_mem", u16),
    ("temperature_vrsoc", u16),
    ("curr_socket_power", u16),
    ("average_gfx_activity", u16),
    ("average_umc_activity", u16),
    ("vcn_activity", u16 * NUM_VCN),
    ("jpeg_activity", u16 * NUM_JPEG_ENG),
    ("energy_accumulator", u64),
    ("system_clock_counter", u64),
    ("throttle_status", u32),
    ("gfxclk_lock_status", u32),
    ("pcie_link_width", u16),
    ("pcie_link_speed", u16),
    ("xgmi_link_width", u16),
    ("xgmi_link_speed", u16),
    ("gfx_activity_acc", u32),
    ("mem_activity_acc", u32),
    ("pcie_bandwidth_acc", u64),
    ("pcie_bandwidth_inst", u64),
    ("pcie_l0_to_recov_count_acc", u64),
    ("pcie_replay_count_acc", u64),
    ("pcie_replay_rover_count_acc", u64),
    ("pcie_nak_sent_count_acc", u32),
    ("pcie_nak_rcvd_count_acc", u32),
    ("xgmi_read_data_acc", u64 * NUM_XGMI_LINKS),
    ("xgmi_write_data_acc", u64 * NUM_XGMI_LINKS),
    ("firmware_timestamp", u64),
    ("current_gfxclk", u16 * MAX_GFX_CLKS),
    ("current_socclk", u16 * MAX_CLKS),
    ("current_vclk0", u16 * MAX_CLKS),
    ("current_dclk0", u16 * MAX_CLKS),
    ("current_uclk", u16),
    ("padding", u16),
]
_V1_6: Fields = [
    ("common_header", MetricsTableHeader),
    ("temperature_hotspot", u16),
    ("temperature_mem", u16),
    ("temperature_vrsoc", u16),
    ("curr_socket_power", u16),
    ("average_gfx_activity", u16),
    ("average_umc_activity", u16),
    ("energy_accumulator", u64),
    ("system_clock_counter", u64),
    ("accumulation_counter", u32),
    ("prochot_residency_acc", u32),
    ("ppt_residency_acc", u32),
    ("socket_thm_residency_acc", u32),
    ("vr_thm_residency_acc", u32),
    ("hbm_thm_residency_acc", u32),
    ("gfxclk_lock_status", u32),
    ("pcie_link_width", u16),
    ("pcie_link_speed", u16),
    ("xgmi_link_width", u16),
    ("xgmi_link_speed", u16),
    ("gfx_activity_acc", u32),
    ("mem_activity_acc", u32),
    ("pcie_bandwidth_acc", u64),
    ("pcie_bandwidth_inst", u64),
    ("pcie_l0_to_recov_count_acc", u64),
    ("pcie_replay_count_acc", u64),
    ("pcie_replay_rover_count_acc", u64),
    ("pcie_nak_sent_count_acc", u32),
    ("pcie_nak_rcvd_count_acc", u32),
    ("xgmi_read_data_acc", u64 * NUM_XGMI_LINKS),
    ("xgmi_write_data_acc", u64 * NUM_XGMI_LINKS),
    ("firmware_timestamp", u64),
    ("current_gfxclk", u16 * MAX_GFX_CLKS),
    ("current_socclk", u16 * MAX_CLKS),
    ("current_vclk0", u16 * MAX_CLKS),
    ("current_dclk0", u16 * MAX_CLKS),
    ("current_uclk", u16),
    ("num_partition", u16),
    ("xcp_stats", XcpMetrics * NUM_XCP),
    ("pcie_lc_perf_other_end_recovery", u32),
]


def _v1_7_like(xcp: type[ctypes.LittleEndianStructure]) -> Fields:
    fields = [f for f in _V1_6 if f[0] != "xcp_stats"]
    at = [n for n, _ in fields].index("energy_accumulator")
    fields.insert(at, ("mem_max_bandwidth", u64))
    at = [n for n, _ in fields].index("firmware_timestamp")
    fields[at:at] = [("xgmi_link_status", u16 * NUM_XGMI_LINKS), ("padding", u16)]
    at = [n for n, _ in fields].index("pcie_lc_perf_other_end_recovery")
    fields.insert(at, ("xcp_stats", xcp * NUM_XCP))
    return fields


def _struct(name: str, fields: Fields) -> type[ctypes.LittleEndianStructure]:
    return type(name, (ctypes.LittleEndianStructure,), {"_fields_": tuple(fields)})


STRUCTS: dict[tuple[int, int], type[ctypes.LittleEndianStructure]] = {
    (1, 1): _struct("GpuMetricsV1_1", _V1_1),
    (1, 2): _struct("GpuMetricsV1_2", _V1_2),
    (1, 3): _struct("GpuMetricsV1_3", _V1_3),
    (1, 4): _struct("GpuMetricsV1_4", _V1_4),
    (1, 5): _struct("GpuMetricsV1_5", _V1_5),
    (1, 6): _struct("GpuMetricsV1_6", _V1_6),
    (1, 7): _struct("GpuMetricsV1_7", _v1_7_like(XcpMetricsV1_1)),
    (1, 8): _struct("GpuMetricsV1_8", _v1_7_like(XcpMetricsV1_2)),
}

Value = int | Sequence[int | None] | Sequence[Mapping[str, Sequence[int]]]


def build(revision: tuple[int, int], values: Mapping[str, Value]) -> bytes:
    """A table of ``revision`` holding ``values`` (a list for an array member, where
    None leaves that element all-ones; for ``xcp_stats`` a list of per-partition dicts),
    everything else all-ones, as the kernel leaves what the firmware did not fill."""
    cls = STRUCTS[revision]
    table = cls()
    ctypes.memset(ctypes.addressof(table), 0xFF, ctypes.sizeof(table))
    table.common_header.structure_size = ctypes.sizeof(cls)
    table.common_header.format_revision, table.common_header.content_revision = revision
    members = {f[0] for f in cls._fields_}
    for name, value in values.items():
        if name not in members:
            raise KeyError(f"gpu_metrics v{revision[0]}.{revision[1]} has no {name}")
        if isinstance(value, int):
            setattr(table, name, value)
            continue
        array = getattr(table, name)
        for i, item in enumerate(value):
            if item is None:
                continue
            if isinstance(item, Mapping):
                for member, numbers in item.items():
                    target = getattr(array[i], member)
                    for j, n in enumerate(numbers):
                        target[j] = n
            else:
                array[i] = item
    return bytes(table)


def offsets(revision: tuple[int, int]) -> dict[str, int]:
    """Member -> byte offset, as ctypes (the C ABI) places it."""
    cls = STRUCTS[revision]
    return {f[0]: getattr(cls, f[0]).offset for f in cls._fields_}


# -- the fixture cards ---------------------------------------------------------------------

KB = 1024
# The second MI300X table of the two-poll tests comes 5 s of driver clock later.
SECONDS_BETWEEN = 5

# card0: an MI300X (SMU 13.0.6) on a 6.13+ kernel, gpu_metrics v1.6.
MI300X: dict[str, Value] = {
    "temperature_hotspot": 58,
    "temperature_mem": 49,
    "temperature_vrsoc": 44,
    "curr_socket_power": 512,
    "average_gfx_activity": 87,
    "average_umc_activity": 41,
    # 1 250 000 J in 2^-16 J units
    "energy_accumulator": 81_920_000_000,
    "system_clock_counter": 1_731_000_000_000_000_000,
    "accumulation_counter": 1_000_000,
    "prochot_residency_acc": 0,
    "ppt_residency_acc": 5_000,
    "socket_thm_residency_acc": 120,
    "vr_thm_residency_acc": 0,
    "hbm_thm_residency_acc": 0,
    "gfxclk_lock_status": 0,
    "pcie_link_width": 16,
    "pcie_link_speed": 320,
    "xgmi_link_width": 16,
    "xgmi_link_speed": 32,
    "gfx_activity_acc": 912_345,
    "mem_activity_acc": 401_122,
    "pcie_bandwidth_acc": 7_340_000,
    "pcie_bandwidth_inst": 18,
    "pcie_l0_to_recov_count_acc": 2,
    "pcie_replay_count_acc": 0,
    "pcie_replay_rover_count_acc": 0,
    "pcie_nak_sent_count_acc": 0,
    "pcie_nak_rcvd_count_acc": 0,
    # Seven peer links carry traffic; link 7 reports nothing (all-ones).
    "xgmi_read_data_acc": [(i + 1) * 1_000_000_000 for i in range(7)] + [None],
    "xgmi_write_data_acc": [(i + 1) * 900_000_000 for i in range(7)] + [None],
    "firmware_timestamp": 173_100_000_000_000_000,
    "current_gfxclk": [2100, 2100, 2090, 2100, 2080, 2100, 2100, 2100],
    "current_socclk": [1143, 1143, 1143, 1143],
    "current_vclk0": [1400, 1400, 1400, 1400],
    "current_dclk0": [1200, 1200, 1200, 1200],
    "current_uclk": 1300,
    "num_partition": 1,
    "xcp_stats": [
        {"gfx_busy_inst": [87, 88, 86, 87, 89, 85, 87, 87], "vcn_busy": [0, 0, 0, 0]},
    ],
    "pcie_lc_perf_other_end_recovery": 0,
}

# The MI300X table 5 s later: 512 W for 5 s, traffic on every live link, the power cap
# (PPT) residency grew, the thermal ones did not.
MI300X_LATER: dict[str, Value] = {
    **MI300X,
    "energy_accumulator": 81_920_000_000 + 512 * SECONDS_BETWEEN * 65_536,
    "system_clock_counter": 1_731_000_000_000_000_000 + SECONDS_BETWEEN * 1_000_000_000,
    "accumulation_counter": 1_000_000 + 5_000,
    "ppt_residency_acc": 5_000 + 750,
    "xgmi_read_data_acc": [(i + 1) * (1_000_000_000 + 10_000_000) for i in range(7)] + [None],
    "xgmi_write_data_acc": [(i + 1) * (900_000_000 + 4_000_000) for i in range(7)] + [None],
}

# card1: an MI210 (Aldebaran, SMU 13.0.2), gpu_metrics v1.3.
MI210: dict[str, Value] = {
    "temperature_edge": 39,
    "temperature_hotspot": 46,
    "temperature_mem": 51,
    "temperature_vrgfx": 41,
    "temperature_vrsoc": 40,
    "temperature_vrmem": 42,
    "average_gfx_activity": 63,
    "average_umc_activity": 22,
    "average_socket_power": 167,
    # 300 000 J in 2^-16 J units
    "energy_accumulator": 19_660_800_000,
    "system_clock_counter": 1_731_000_000_000_000_000,
    "average_gfxclk_frequency": 1698,
    "average_socclk_frequency": 1090,
    "average_uclk_frequency": 1600,
    "current_gfxclk": 1700,
    "current_socclk": 1090,
    "current_uclk": 1600,
    "current_vclk0": 0,
    "current_dclk0": 0,
    "throttle_status": 0x0000_0011,
    "pcie_link_width": 16,
    "pcie_link_speed": 160,
    "gfx_activity_acc": 612_000,
    "mem_activity_acc": 220_000,
    "firmware_timestamp": 173_100_000_000_000_000,
    "voltage_soc": 806,
    "voltage_gfx": 818,
    "voltage_mem": 1230,
    # SMU_THROTTLER_PPT0_BIT (0) and SMU_THROTTLER_TEMP_HOTSPOT_BIT (36)
    "indep_throttle_status": (1 << 0) | (1 << 36),
}

GPU_METRICS_PATHS: dict[str, str] = {
    "card0": "devices/pci0000:00/0000:00:01.1/0000:0c:00.0/gpu_metrics",
    "card1": "devices/pci0000:80/0000:80:01.1/0000:83:00.0/gpu_metrics",
}
REVISIONS: dict[str, tuple[int, int]] = {"card0": (1, 6), "card1": (1, 3)}
TABLES: dict[str, dict[str, Value]] = {"card0": MI300X, "card1": MI210}


def fixture_tables() -> dict[str, bytes]:
    """Path under tests/fixtures/sys -> the gpu_metrics bytes it must hold."""
    return {
        GPU_METRICS_PATHS[card]: build(REVISIONS[card], TABLES[card]) for card in GPU_METRICS_PATHS
    }


def write_fixture_tables(sysfs: Path) -> None:
    for relative, data in fixture_tables().items():
        (sysfs / relative).write_bytes(data)


if __name__ == "__main__":
    write_fixture_tables(FIXTURES / "sys")
