"""The amdgpu ``gpu_metrics`` table: its binary layouts, its parser, and the rates and
throttle reasons computed between two tables.

Why it is built this way:

* **Parsed from the kernel's own layouts** (``struct gpu_metrics_v1_1`` to ``v1_8`` of
  ``drivers/gpu/drm/amd/include/kgd_pp_interface.h``): natural C alignment, native
  byte order (little-endian on every host amdgpu runs on), field by field, with the
  size checked against the header's ``structure_size``. The kernel fills the table
  with 0xFF before writing what the firmware gave it, so an all-ones field means "not
  reported" and is left out. A table that is empty, truncated, of an unknown revision
  or of an unexpected size raises ``GpuMetricsError`` with the reason.
* **Throttling.** v1.3 tables carry ``indep_throttle_status``, the ASIC-independent
  ``SMU_THROTTLER_*`` bits of ``amdgpu_smu.h``, grouped here into vendor-neutral
  reasons. v1.6+ tables carry throttle *residency* accumulators; a reason is active
  when its residency grew since the previous poll, so it needs two polls.
* **Rates need two polls.** xGMI read/write data accumulators (KB, taken as 1024
  bytes) become bytes/s over the driver's own ``system_clock_counter`` between two
  polls.
* It knows nothing of sysfs or AMD SMI: the sysfs reader hands it the file's bytes,
  and the AMD SMI reader builds the same ``GpuMetrics`` from the library's dict, so
  both sources compute rates and throttling with this one code.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.backends.base import FIRST_SAMPLE

# gpu_metrics energy_accumulator unit: "15.259uJ (2^-16) units" (kgd_pp_interface.h).
ENERGY_UNIT_JOULES = 2.0**-16
# xGMI data accumulators are "KiloBytes"; the header does not say which kilo, and the
# 1024 that AMD's tools use for memory sizes is taken here.
XGMI_KB = 1024.0

# gpu_metrics field -> sensor
METRICS_SENSORS: tuple[tuple[str, str], ...] = (
    ("temperature_edge", "gpu"),
    ("temperature_hotspot", "hotspot"),
    ("temperature_mem", "memory"),
    ("temperature_vrgfx", "vr_gfx"),
    ("temperature_vrsoc", "vr_soc"),
    ("temperature_vrmem", "vr_memory"),
)


def _bits(*ranges: tuple[int, int]) -> int:
    mask = 0
    for lo, hi in ranges:
        for b in range(lo, hi + 1):
            mask |= 1 << b
    return mask


# Vendor-neutral reason -> SMU_THROTTLER_*_BIT mask (amdgpu_smu.h): PPT0-3, SPL, FPPT,
# SPPT, SPPT_APU are 0-7; TDC/EDC/APCC current limits 16-23; TEMP_GPU 32, TEMP_CORE 33,
# TEMP_MEM 34, TEMP_EDGE 35, TEMP_HOTSPOT 36, TEMP_SOC 37, TEMP_VR_GFX 38, TEMP_VR_SOC 39,
# TEMP_VR_MEM0/1 40-41, TEMP_LIQUID0/1 42-43; VRHOT0/1 44-45 and PROCHOT_CPU/GFX 46-47
# are external slowdown signals; PPM 56 and FIT 57 are the header's "Other" group.
INDEP_THROTTLE: tuple[tuple[str, int], ...] = (
    ("power_cap", _bits((0, 7))),
    ("current_limit", _bits((16, 23))),
    ("thermal", _bits((32, 33), (35, 37), (42, 43))),
    ("memory_thermal", _bits((34, 34))),
    ("vr_thermal", _bits((38, 41))),
    ("hw_slowdown", _bits((44, 47))),
    ("other", _bits((56, 63))),
)
# Vendor-neutral reason -> v1.6+ residency accumulator.
RESIDENCY_THROTTLE: tuple[tuple[str, str], ...] = (
    ("power_cap", "ppt_residency_acc"),
    ("thermal", "socket_thm_residency_acc"),
    ("memory_thermal", "hbm_thm_residency_acc"),
    ("vr_thermal", "vr_thm_residency_acc"),
    ("hw_slowdown", "prochot_residency_acc"),
)


# -- the layouts of struct gpu_metrics_v1_x --------------------------------------------

_SIZES = {"B": 1, "H": 2, "I": 4, "Q": 8}


@dataclass(frozen=True)
class _Field:
    name: str
    code: str  # B H I Q, or "s" for a block of bytes that is not decoded
    count: int = 1
    align: int = 0  # for "s": the alignment of the C type it stands for


def _u8(name: str) -> _Field:
    return _Field(name, "B")


def _u16(name: str, count: int = 1) -> _Field:
    return _Field(name, "H", count)


def _u32(name: str, count: int = 1) -> _Field:
    return _Field(name, "I", count)


def _u64(name: str, count: int = 1) -> _Field:
    return _Field(name, "Q", count)


def _opaque(name: str, size: int, align: int) -> _Field:
    return _Field(name, "s", size, align)


class MetricsLayout:
    """One ``struct gpu_metrics_vX_Y`` laid out as the C compiler lays it out: each
    member at a multiple of its alignment, the whole padded to its largest alignment."""

    def __init__(self, revision: tuple[int, int], fields: Sequence[_Field]) -> None:
        self.revision = revision
        self.fields = tuple(fields)
        fmt = ["<"]
        offset = 0
        max_align = 1
        self.offsets: dict[str, int] = {}
        self.widths: dict[str, int] = {}
        for f in self.fields:
            align = f.align if f.code == "s" else _SIZES[f.code]
            max_align = max(max_align, align)
            pad = -offset % align
            if pad:
                fmt.append(f"{pad}x")
                offset += pad
            self.offsets[f.name] = offset
            if f.code == "s":
                fmt.append(f"{f.count}s")
                offset += f.count
            else:
                fmt.append(f"{f.count}{f.code}")
                offset += f.count * _SIZES[f.code]
                self.widths[f.name] = _SIZES[f.code] * 8
        tail = -offset % max_align
        if tail:
            fmt.append(f"{tail}x")
            offset += tail
        self.format = "".join(fmt)
        self.size = offset
        if struct.calcsize(self.format) != self.size:  # pragma: no cover - a layout bug
            raise AssertionError(f"gpu_metrics v{revision}: layout arithmetic is wrong")

    def unpack(self, data: bytes) -> dict[str, int | tuple[int, ...]]:
        values = struct.unpack_from(self.format, data)
        out: dict[str, int | tuple[int, ...]] = {}
        i = 0
        for f in self.fields:
            if f.code == "s":
                i += 1
                continue
            if f.count == 1:
                out[f.name] = int(values[i])
            else:
                out[f.name] = tuple(int(v) for v in values[i : i + f.count])
            i += f.count
        return out


_HEADER = (_u16("structure_size"), _u8("format_revision"), _u8("content_revision"))
NUM_HBM_INSTANCES = 4
NUM_XGMI_LINKS = 8
MAX_GFX_CLKS = 8
MAX_CLKS = 4
NUM_VCN = 4
NUM_JPEG_ENG = 32
NUM_JPEG_ENG_V1 = 40
MAX_XCC = 8
NUM_XCP = 8
# sizeof(struct amdgpu_xcp_metrics), _v1_1 and _v1_2 (all 8-byte aligned): u32[8]
# gfx_busy_inst, u16[32 or 40] jpeg_busy, u16[4] vcn_busy, then 1, 2 or 5 u64[8]
# accumulator arrays (v1_2: gfx_busy_acc, gfx_below_host_limit_ppt_acc, _thm_acc,
# gfx_low_utilization_acc, gfx_below_host_limit_total_acc). Only gfx_busy_inst, the
# first member in every version, is read: a compute partition's utilization.
XCP_METRICS_SIZE = 4 * MAX_XCC + 2 * NUM_JPEG_ENG + 2 * NUM_VCN + 8 * MAX_XCC
XCP_METRICS_V1_1_SIZE = XCP_METRICS_SIZE + 8 * MAX_XCC
XCP_METRICS_V1_2_SIZE = 4 * MAX_XCC + 2 * NUM_JPEG_ENG_V1 + 2 * NUM_VCN + 5 * 8 * MAX_XCC

_V1_1 = (
    *_HEADER,
    _u16("temperature_edge"),
    _u16("temperature_hotspot"),
    _u16("temperature_mem"),
    _u16("temperature_vrgfx"),
    _u16("temperature_vrsoc"),
    _u16("temperature_vrmem"),
    _u16("average_gfx_activity"),
    _u16("average_umc_activity"),
    _u16("average_mm_activity"),
    _u16("average_socket_power"),
    _u64("energy_accumulator"),
    _u64("system_clock_counter"),
    _u16("average_gfxclk_frequency"),
    _u16("average_socclk_frequency"),
    _u16("average_uclk_frequency"),
    _u16("average_vclk0_frequency"),
    _u16("average_dclk0_frequency"),
    _u16("average_vclk1_frequency"),
    _u16("average_dclk1_frequency"),
    _u16("current_gfxclk"),
    _u16("current_socclk"),
    _u16("current_uclk"),
    _u16("current_vclk0"),
    _u16("current_dclk0"),
    _u16("current_vclk1"),
    _u16("current_dclk1"),
    _u32("throttle_status"),
    _u16("current_fan_speed"),
    _u16("pcie_link_width"),
    _u16("pcie_link_speed"),
    _u16("padding"),
    _u32("gfx_activity_acc"),
    _u32("mem_activity_acc"),
    _u16("temperature_hbm", NUM_HBM_INSTANCES),
)
_V1_2 = (*_V1_1, _u64("firmware_timestamp"))
_V1_3 = (
    *_V1_2,
    _u16("voltage_soc"),
    _u16("voltage_gfx"),
    _u16("voltage_mem"),
    _u16("padding1"),
    _u64("indep_throttle_status"),
)
# v1.4 onwards: MI300-class tables.
_MI300_HEAD = (
    *_HEADER,
    _u16("temperature_hotspot"),
    _u16("temperature_mem"),
    _u16("temperature_vrsoc"),
    _u16("curr_socket_power"),
    _u16("average_gfx_activity"),
    _u16("average_umc_activity"),
)
_PCIE_ACC = (
    _u64("pcie_bandwidth_acc"),
    _u64("pcie_bandwidth_inst"),
    _u64("pcie_l0_to_recov_count_acc"),
    _u64("pcie_replay_count_acc"),
    _u64("pcie_replay_rover_count_acc"),
)
_LINKS = (
    _u16("pcie_link_width"),
    _u16("pcie_link_speed"),
    _u16("xgmi_link_width"),
    _u16("xgmi_link_speed"),
    _u32("gfx_activity_acc"),
    _u32("mem_activity_acc"),
)
_XGMI_DATA = (
    _u64("xgmi_read_data_acc", NUM_XGMI_LINKS),
    _u64("xgmi_write_data_acc", NUM_XGMI_LINKS),
)
_CLOCKS = (
    _u16("current_gfxclk", MAX_GFX_CLKS),
    _u16("current_socclk", MAX_CLKS),
    _u16("current_vclk0", MAX_CLKS),
    _u16("current_dclk0", MAX_CLKS),
    _u16("current_uclk"),
)
_RESIDENCIES = (
    _u32("accumulation_counter"),
    _u32("prochot_residency_acc"),
    _u32("ppt_residency_acc"),
    _u32("socket_thm_residency_acc"),
    _u32("vr_thm_residency_acc"),
    _u32("hbm_thm_residency_acc"),
)
_V1_4 = (
    *_MI300_HEAD,
    _u16("vcn_activity", NUM_VCN),
    _u64("energy_accumulator"),
    _u64("system_clock_counter"),
    _u32("throttle_status"),
    _u32("gfxclk_lock_status"),
    *_LINKS,
    *_PCIE_ACC,
    *_XGMI_DATA,
    _u64("firmware_timestamp"),
    *_CLOCKS,
    _u16("padding"),
)
_V1_5 = (
    *_MI300_HEAD,
    _u16("vcn_activity", NUM_VCN),
    _u16("jpeg_activity", NUM_JPEG_ENG),
    _u64("energy_accumulator"),
    _u64("system_clock_counter"),
    _u32("throttle_status"),
    _u32("gfxclk_lock_status"),
    *_LINKS,
    *_PCIE_ACC,
    _u32("pcie_nak_sent_count_acc"),
    _u32("pcie_nak_rcvd_count_acc"),
    *_XGMI_DATA,
    _u64("firmware_timestamp"),
    *_CLOCKS,
    _u16("padding"),
)
_V1_6 = (
    *_MI300_HEAD,
    _u64("energy_accumulator"),
    _u64("system_clock_counter"),
    *_RESIDENCIES,
    _u32("gfxclk_lock_status"),
    *_LINKS,
    *_PCIE_ACC,
    _u32("pcie_nak_sent_count_acc"),
    _u32("pcie_nak_rcvd_count_acc"),
    *_XGMI_DATA,
    _u64("firmware_timestamp"),
    *_CLOCKS,
    _u16("num_partition"),
    _opaque("xcp_stats", NUM_XCP * XCP_METRICS_SIZE, 8),
    _u32("pcie_lc_perf_other_end_recovery"),
)


def _v1_7_like(xcp_size: int) -> tuple[_Field, ...]:
    return (
        *_MI300_HEAD,
        _u64("mem_max_bandwidth"),
        _u64("energy_accumulator"),
        _u64("system_clock_counter"),
        *_RESIDENCIES,
        _u32("gfxclk_lock_status"),
        *_LINKS,
        *_PCIE_ACC,
        _u32("pcie_nak_sent_count_acc"),
        _u32("pcie_nak_rcvd_count_acc"),
        *_XGMI_DATA,
        _u16("xgmi_link_status", NUM_XGMI_LINKS),
        _u16("padding"),
        _u64("firmware_timestamp"),
        *_CLOCKS,
        _u16("num_partition"),
        _opaque("xcp_stats", NUM_XCP * xcp_size, 8),
        _u32("pcie_lc_perf_other_end_recovery"),
    )


LAYOUTS: dict[tuple[int, int], MetricsLayout] = {
    rev: MetricsLayout(rev, fields)
    for rev, fields in (
        ((1, 1), _V1_1),
        ((1, 2), _V1_2),
        ((1, 3), _V1_3),
        ((1, 4), _V1_4),
        ((1, 5), _V1_5),
        ((1, 6), _V1_6),
        ((1, 7), _v1_7_like(XCP_METRICS_V1_1_SIZE)),
        ((1, 8), _v1_7_like(XCP_METRICS_V1_2_SIZE)),
    )
}


# The size of one xcp_stats element per revision (see XCP_METRICS_SIZE).
XCP_SIZES: dict[tuple[int, int], int] = {
    (1, 6): XCP_METRICS_SIZE,
    (1, 7): XCP_METRICS_V1_1_SIZE,
    (1, 8): XCP_METRICS_V1_2_SIZE,
}


def _xcp_busy(
    data: bytes, layout: MetricsLayout, partitions: int | None
) -> tuple[tuple[float | None, ...], ...]:
    """gfx_busy_inst of each of the ``partitions`` XCPs (num_partition), as ratios."""
    size = XCP_SIZES.get(layout.revision)
    start = layout.offsets.get("xcp_stats")
    if size is None or start is None or not partitions or not 0 < partitions <= NUM_XCP:
        return ()
    out = []
    for k in range(partitions):
        raw = struct.unpack_from(f"<{MAX_XCC}I", data, start + k * size)
        out.append(tuple(percent(_valid(v, 32)) for v in raw))
    return tuple(out)


class GpuMetricsError(ValueError):
    """A gpu_metrics table this backend cannot use; the message is the reason."""


@dataclass(frozen=True)
class GpuMetrics:
    """What the backend takes from one gpu_metrics table, in base units; a field the
    table does not report (all-ones, or out of range) is None or absent."""

    revision: tuple[int, int]
    utilization: float | None = None
    memory_activity: float | None = None
    temperatures: dict[str, float] = field(default_factory=dict)
    power_watts: float | None = None
    energy_joules: float | None = None
    clocks_hz: dict[str, float] = field(default_factory=dict)
    indep_throttle_status: int | None = None
    # accumulator name -> value, with "accumulation_counter"; empty when not reported.
    residencies: dict[str, int] = field(default_factory=dict)
    xgmi_link_width: int | None = None
    # per link: cumulative KB, None where the link reports nothing
    xgmi_read_kb: tuple[int | None, ...] = ()
    xgmi_write_kb: tuple[int | None, ...] = ()
    timestamp_ns: int | None = None
    # Per compute partition (XCP) of the GPU, in the driver's order: each of its XCDs'
    # gfx_busy_inst as a ratio, None where the table says "not reported". Empty for
    # revisions before 1.6, which have no per-partition figures.
    xcp_gfx_busy: tuple[tuple[float | None, ...], ...] = ()

    def partition_utilization(self, index: int) -> float | None:
        """The mean busy ratio of partition ``index``'s XCDs; None when the table has
        no figure for it."""
        if not 0 <= index < len(self.xcp_gfx_busy):
            return None
        valid = [v for v in self.xcp_gfx_busy[index] if v is not None]
        return sum(valid) / len(valid) if valid else None


def _valid(value: int | None, bits: int) -> int | None:
    if value is None or value == (1 << bits) - 1:
        return None
    return value


def percent(value: int | float | None) -> float | None:
    """A 0-100 percentage as a ratio; anything else (a sentinel, >100) is None."""
    if value is None or not 0 <= value <= 100:
        return None
    return float(value) / 100.0


def _energy(counts: int | None) -> float | None:
    # All-ones in 64 or 32 bits (smu_v14_0_2 writes UINT_MAX into the u64) and 0 (the
    # secondary die of an MI250) mean "not reported".
    if counts is None or counts in (0, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return counts * ENERGY_UNIT_JOULES


def parse_gpu_metrics(data: bytes) -> GpuMetrics:
    """Decodes a ``gpu_metrics`` file; raises GpuMetricsError with the reason when the
    table is empty, truncated, of an unknown revision or of an unexpected size."""
    if not data:
        raise GpuMetricsError("empty file")
    if len(data) < 4:
        raise GpuMetricsError(f"truncated header ({len(data)} bytes)")
    size, frev, crev = struct.unpack_from("<HBB", data)
    layout = LAYOUTS.get((frev, crev))
    if layout is None:
        raise GpuMetricsError(f"unknown revision {frev}.{crev}")
    if size != layout.size:
        raise GpuMetricsError(
            f"structure_size {size} does not match v{frev}.{crev}'s {layout.size} bytes"
        )
    if len(data) < layout.size:
        raise GpuMetricsError(f"truncated ({len(data)} of {layout.size} bytes)")
    raw = layout.unpack(data)
    widths = layout.widths

    def one(name: str) -> int | None:
        v = raw.get(name)
        return _valid(v, widths[name]) if isinstance(v, int) else None

    def many(name: str) -> tuple[int | None, ...]:
        v = raw.get(name)
        if isinstance(v, tuple):
            return tuple(_valid(x, widths[name]) for x in v)
        return ()

    temps: dict[str, float] = {}
    for name, sensor in METRICS_SENSORS:
        t = one(name)
        if t is not None:
            temps[sensor] = float(t)
    for i, t in enumerate(many("temperature_hbm")):
        if t is not None:
            temps[f"hbm{i}"] = float(t)

    power = one("average_socket_power") if "average_socket_power" in raw else None
    if "curr_socket_power" in raw:
        power = one("curr_socket_power")
    clocks: dict[str, float] = {}
    gfx = raw.get("current_gfxclk")
    if isinstance(gfx, tuple):
        # One clock per XCD on MI300; the device's figure is their mean.
        valid = [v for v in many("current_gfxclk") if v is not None]
        if valid:
            clocks["graphics"] = sum(valid) / len(valid) * 1e6
    elif (g := one("current_gfxclk")) is not None:
        clocks["graphics"] = g * 1e6
    if (u := one("current_uclk")) is not None:
        clocks["memory"] = u * 1e6

    residencies: dict[str, int] = {}
    if "accumulation_counter" in raw:
        names = ["accumulation_counter", *(acc for _, acc in RESIDENCY_THROTTLE)]
        values = {n: one(n) for n in names}
        if all(v is not None for v in values.values()):
            residencies = {n: int(v) for n, v in values.items() if v is not None}

    energy = raw.get("energy_accumulator")
    return GpuMetrics(
        revision=(frev, crev),
        utilization=percent(one("average_gfx_activity")),
        memory_activity=percent(one("average_umc_activity")),
        temperatures=temps,
        power_watts=float(power) if power else None,
        energy_joules=_energy(energy if isinstance(energy, int) else None),
        clocks_hz=clocks,
        indep_throttle_status=one("indep_throttle_status"),
        residencies=residencies,
        xgmi_link_width=one("xgmi_link_width"),
        xgmi_read_kb=many("xgmi_read_data_acc"),
        xgmi_write_kb=many("xgmi_write_data_acc"),
        timestamp_ns=one("system_clock_counter"),
        xcp_gfx_busy=_xcp_busy(data, layout, one("num_partition")),
    )


def xgmi_rates(
    before: GpuMetrics | None, now: GpuMetrics
) -> tuple[dict[tuple[str, str], float], str]:
    """xGMI bytes/s per (link, direction) between two tables, or why there are none.
    Read data is what arrived at this GPU (rx), write data what it sent (tx)."""
    if not now.xgmi_read_kb:
        return {}, "no xGMI counters in this gpu_metrics revision"
    if not now.xgmi_link_width:
        return {}, "no xGMI link is up (xgmi_link_width is 0 or not reported)"
    if before is None or before.timestamp_ns is None or now.timestamp_ns is None:
        return {}, FIRST_SAMPLE
    seconds = (now.timestamp_ns - before.timestamp_ns) / 1e9
    if seconds <= 0:
        return {}, "no time passed since the previous sample"
    out: dict[tuple[str, str], float] = {}
    for direction, was, new in (
        ("rx", before.xgmi_read_kb, now.xgmi_read_kb),
        ("tx", before.xgmi_write_kb, now.xgmi_write_kb),
    ):
        for link, (a, b) in enumerate(zip(was, new, strict=False)):
            if a is None or b is None or b < a:
                continue  # not reported, or the counter was reset
            out[(str(link), direction)] = (b - a) * XGMI_KB / seconds
    return out, "" if out else "no xGMI link reported its counters"


def residency_throttle(before: GpuMetrics | None, now: GpuMetrics) -> tuple[dict[str, bool], str]:
    """Throttle reasons from the v1.6+ residency accumulators: active when the reason's
    residency grew since the previous table (u32 counters, so a wrap is a delta too)."""
    if not now.residencies:
        return {}, "no throttle residency counters in this gpu_metrics"
    if before is None or not before.residencies:
        return {}, FIRST_SAMPLE
    cycles = (
        now.residencies["accumulation_counter"] - before.residencies["accumulation_counter"]
    ) % (1 << 32)
    if cycles == 0:
        return {}, "the firmware accumulated nothing since the previous sample"
    return {
        reason: (now.residencies[acc] - before.residencies[acc]) % (1 << 32) > 0
        for reason, acc in RESIDENCY_THROTTLE
    }, ""


def indep_throttle(status: int) -> dict[str, bool]:
    return {reason: bool(status & mask) for reason, mask in INDEP_THROTTLE}
