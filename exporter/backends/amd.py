"""AMD GPUs (Instinct first) through AMD SMI, or through the amdgpu driver's sysfs files.

Why it is built this way:

* **Two sources, one vocabulary.** ``amdsmi`` is used when it imports *and* initialises
  with at least one GPU; otherwise the backend reads what amdgpu itself publishes under
  ``--path.sysfs``: ``class/drm/card*/device`` (``gpu_busy_percent``,
  ``mem_busy_percent``, ``mem_info_vram_*``, ``unique_id``, the binary ``gpu_metrics``
  table, ``ras/*_err_count``) and the card's hwmon directory. Both sources name devices
  in PCI bus order (``amd0`` is the lowest bus address) and compute the same ``uuid``
  (amd-smi's, built from the ASIC serial in ``unique_id`` and the PCI device id), so a
  host that gains or loses ROCm keeps its series.
* **The amdsmi import is guarded, and quiet.** Without ROCm, ``import amdsmi`` raises
  ``KeyError`` (not ImportError) after *printing* the loader's error to stdout, which
  would corrupt ``--once`` output. ``load_amdsmi`` imports it with both Python's
  ``sys.stdout`` and file descriptor 1 redirected, and turns what was printed into the
  reason it logs.
* **gpu_metrics is parsed from the kernel's own layouts** (``struct gpu_metrics_v1_1`` to
  ``v1_8`` of ``drivers/gpu/drm/amd/include/kgd_pp_interface.h``): natural C alignment,
  native byte order (little-endian on every host amdgpu runs on), field by field, with
  the size checked against the header's ``structure_size``. The kernel fills the table
  with 0xFF before writing what the firmware gave it, so an all-ones field means "not
  reported" and is left out. A table that is empty, truncated, of an unknown revision
  or of an unexpected size is skipped for that card with one log line per card and
  reason; the sysfs files still give that card's figures.
* **Precedence.** A valid gpu_metrics value wins over ``gpu_busy_percent`` and hwmon:
  it is what those files are computed from on SMU-based GPUs, and it has what they lack
  (several temperatures, energy, xGMI traffic, throttling). The memory bandwidth figure
  is ``average_umc_activity`` (MI300: DRAM bandwidth utilisation); without gpu_metrics it
  is ``mem_busy_percent``, a busy-time fraction, and its HELP source says so.
* **Throttling.** v1.3 tables carry ``indep_throttle_status``, the ASIC-independent
  ``SMU_THROTTLER_*`` bits of ``amdgpu_smu.h``, grouped here into vendor-neutral reasons.
  MI300's v1.4/v1.5 tables write 0 to ``throttle_status`` ("not reported through metrics
  now", smu_v13_0_6), so nothing is read from them: a 0 there is not "not throttled".
  v1.6+ tables carry throttle *residency* accumulators; a reason is active when its
  residency grew since the previous poll, so it needs two polls.
* **Rates need two polls.** xGMI read/write data accumulators (KB, taken as 1024 bytes)
  become bytes/s over the driver's own ``system_clock_counter`` between two polls.
* **RAS events.** Each ``ras/<block>_err_count`` holds running ``ue``/``ce`` (and on
  newer kernels ``de``, deferred) counts. Their sums are the ECC counters; an increase
  of one block's counts between polls is one fault event for that block (uncorrectable
  over deferred over correctable), classified by ``exporter.faults.AMD_RAS``.
* **Unsupported is not zero.** A file that is missing, unreadable, out of range or an
  all-ones sentinel leaves its field out, with the reason in ``self.missing``. A 0 W
  socket power (the secondary die of an MI250 writes 0) is not a measurement either.
* **A lost GPU** (its sysfs directory vanished, a read answered ENODEV, or AMD SMI
  answered NOT_FOUND or failed while its PCI function left sysfs) ends the read with
  ``DeviceLostError``; the poller keeps its identity with ``accel_up 0``.

Sensor names are vendor-neutral: amdgpu's ``edge`` sensor is ``gpu`` (the die
temperature NVIDIA calls GPU), ``junction``/``hotspot`` is ``hotspot``, ``mem`` is
``memory``; gpu_metrics adds ``vr_gfx``, ``vr_soc``, ``vr_memory`` and ``hbm0``..``hbm3``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import struct
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from exporter import amdpart
from exporter.backends.base import Backend, BackendOptions
from exporter.kfd import xgmi_links
from exporter.model import (
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    FaultEvent,
    Link,
    Reading,
)
from exporter.pcitopo import cpu_affinity, pcie_links

log = logging.getLogger("accel_exporter.amd")

VENDOR = "amd"
PCI_VENDOR_AMD = 0x1002

UMC_SOURCE = "gpu_metrics average_umc_activity"
MEM_BUSY_SOURCE = "amdgpu mem_busy_percent (busy time, not bandwidth)"
AMDSMI_UMC_SOURCE = "AMD SMI umc_activity"
FIRST_SAMPLE = "first sample taken; a rate needs two polls"

# PCI device id -> marketing name, for cards whose sysfs has no product_name.
MODELS: dict[int, str] = {
    0x738C: "AMD Instinct MI100",
    0x738E: "AMD Instinct MI100",
    0x7408: "AMD Instinct MI250X",
    0x740C: "AMD Instinct MI250X/MI250",
    0x740F: "AMD Instinct MI210",
    0x74A0: "AMD Instinct MI300A",
    0x74A1: "AMD Instinct MI300X",
    0x74A5: "AMD Instinct MI325X",
}

# gpu_metrics energy_accumulator unit: "15.259uJ (2^-16) units" (kgd_pp_interface.h).
ENERGY_UNIT_JOULES = 2.0**-16
# xGMI data accumulators are "KiloBytes"; the header does not say which kilo, and the
# 1024 that AMD's tools use for memory sizes is taken here.
XGMI_KB = 1024.0

# hwmon temp*_label -> sensor; an unlabelled temp1 is amdgpu's edge sensor.
HWMON_SENSORS: dict[str, str] = {"edge": "gpu", "junction": "hotspot", "mem": "memory"}
HWMON_CLOCKS: dict[str, str] = {"sclk": "graphics", "mclk": "memory"}
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

# Every catalogue field this backend can report: after a read each key is either in
# the reading or has a reason in ``missing``.
FIELDS: tuple[str, ...] = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_bandwidth_utilization",
    "ecc_errors",
    "temperatures",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    "clocks_hz.graphics",
    "clocks_hz.memory",
    "throttle",
    "link_bytes_per_second",
)

_CARD = re.compile(r"^card(\d+)$")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_RAS_LINE = re.compile(r"^\s*(ue|ce|de)\s*:\s*(\d+)\s*$")
_TEMP_INPUT = re.compile(r"^temp(\d+)_input$")
_FREQ_INPUT = re.compile(r"^freq(\d+)_input$")
# errno values that mean the device itself is gone, not that one file failed.
_LOST_ERRNOS = frozenset({errno.ENODEV, errno.ENXIO})


# -- the gpu_metrics table ---------------------------------------------------------------

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
# gfx_low_utilization_acc, gfx_below_host_limit_total_acc). Nothing in them is read.
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


def _valid(value: int | None, bits: int) -> int | None:
    if value is None or value == (1 << bits) - 1:
        return None
    return value


def _percent(value: int | float | None) -> float | None:
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
        utilization=_percent(one("average_gfx_activity")),
        memory_activity=_percent(one("average_umc_activity")),
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


def amdsmi_uuid(serial: int, device_id: int) -> str:
    """The UUID amd-smi prints for a whole GPU (amdsmi_uuid_gen with index 0xff): the
    device id and the ASIC serial from ``unique_id`` in a version-1 UUID layout."""
    b7 = (serial >> 56) & 0xFF
    b6 = (serial >> 48) & 0xFF
    return (
        f"{(b7 << 24) | (0xFF << 16) | (device_id & 0xFFFF):08x}-0000-1000-"
        f"80{b6:02x}-{(serial >> 32) & 0xFFFF:04x}{serial & 0xFFFFFFFF:08x}"
    )


def _reading_has(r: Reading, key: str) -> bool:
    if "." in key:
        name, sub = key.split(".", 1)
        return sub in getattr(r, name)
    value = getattr(r, key)
    return bool(value) if isinstance(value, dict) else value is not None


# -- the amdsmi import -------------------------------------------------------------------

_QUIET_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_stdout() -> Iterator[list[str]]:
    """Runs the body with ``sys.stdout`` and file descriptor 1 (where a C library
    writes) both redirected; yields a list that holds what was printed, once the body
    has finished. ``--once`` prints the exposition on stdout, so nothing else may."""
    printed: list[str] = []
    with _QUIET_LOCK, tempfile.TemporaryFile(mode="w+b") as c_out:
        captured = io.StringIO()
        saved = _redirect_fd1(c_out.fileno())
        try:
            with contextlib.redirect_stdout(captured):
                yield printed
        finally:
            _restore_fd1(saved)
            c_out.seek(0)
            text = captured.getvalue() + c_out.read().decode(errors="replace")
            printed.extend(line.strip() for line in text.splitlines() if line.strip())


def load_amdsmi() -> tuple[Any | None, str]:
    """Imports ``amdsmi`` without letting it write to stdout: ``(module, "")``, or
    ``(None, reason)`` with what it printed folded into the reason.

    Without ROCm its wrapper prints the loader's error and then fails with KeyError
    (not ImportError); any exception counts as "not available"."""
    module: Any | None = None
    reason = ""
    with quiet_stdout() as printed:
        try:
            import amdsmi

            module = amdsmi
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
    if module is None:
        said = " ".join(printed)
        reason = f"import amdsmi failed ({reason})" + (f": {said}" if said else "")
    return module, reason


def _redirect_fd1(target: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # sys.stdout may be None
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        return None  # no fd 1 at all: nothing to protect
    os.dup2(target, 1)
    return saved


def _restore_fd1(saved: int | None) -> None:
    if saved is None:
        return
    os.dup2(saved, 1)
    os.close(saved)


# -- the backend -------------------------------------------------------------------------


@dataclass
class _Gpu:
    """What the backend keeps about one GPU between polls, for either source."""

    info: DeviceInfo
    # sysfs: class/drm/cardN/device (through the links, so a vanished card is seen)
    device_dir: Path | None = None
    card: str = ""
    handle: Any = None
    # block -> (ue, ce, de) from the previous poll (sysfs: per RAS block; amdsmi: "total")
    ras_previous: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    metrics_previous: GpuMetrics | None = None
    # Reasons that stay true while the driver is loaded (AMD SMI NOT_SUPPORTED): not
    # asked again, copied into ``missing`` at every read.
    static: dict[str, str] = field(default_factory=dict)
    # A compute partition (``info.parent`` set): its memory partition's size, from KFD.
    partition_memory: float | None = None

    @property
    def name(self) -> str:
        return self.info.device


class AmdBackend(Backend):
    name: ClassVar[str] = "amd"

    def __init__(
        self,
        options: BackendOptions,
        amdsmi: Any | None = None,
        use_amdsmi: bool = True,
        loader: Callable[[], tuple[Any | None, str]] = load_amdsmi,
    ) -> None:
        super().__init__(options)
        self._given_smi = amdsmi
        self._use_amdsmi = use_amdsmi
        self._loader = loader
        self._smi: Any = None
        self._initialized = False
        self._gpus: dict[str, _Gpu] = {}
        self._logged: set[tuple[str, str]] = set()
        # "amdsmi" or "sysfs" once discovered; why AMD SMI is not used, if it is not.
        self.source = ""
        self.amdsmi_reason = ""
        # device -> field key -> why the last read of that device has no value for it.
        self.missing: dict[str, dict[str, str]] = {}

    # -- discovery ---------------------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        self.close()
        self._gpus, self.missing = {}, {}
        devices: list[DeviceInfo] | None = None
        if self._use_amdsmi:
            smi, reason = (self._given_smi, "") if self._given_smi is not None else self._loader()
            if smi is not None:
                devices, reason = self._discover_amdsmi(smi)
            self.amdsmi_reason = reason
        else:
            self.amdsmi_reason = "AMD SMI disabled"
        if devices:
            self.source = "amdsmi"
            log.info("amd: %d GPUs through AMD SMI", len(devices))
            return devices
        self.source = "sysfs"
        devices = self._discover_sysfs()
        log.info(
            "amd: %d GPUs from amdgpu sysfs under %s (%s)",
            len(devices),
            self._sys("class", "drm"),
            self.amdsmi_reason,
        )
        return devices

    def _sys(self, *parts: str) -> Path:
        return self.options.sysfs.joinpath(*parts)

    def _numa_node(self, path: Path) -> str:
        text = _read_quiet(path)
        node = (text or "").strip()
        # The kernel writes -1 when the platform does not say.
        return "" if node in ("", "-1") else node

    def _driver_version(self) -> str:
        # DKMS (ROCm) builds of amdgpu publish a module version; the in-tree driver is
        # the kernel's, so its version is the kernel release.
        for path in (
            self._sys("module", "amdgpu", "version"),
            self.options.procfs / "sys" / "kernel" / "osrelease",
        ):
            text = (_read_quiet(path) or "").strip()
            if text:
                return text
        return ""

    def _discover_sysfs(self) -> list[DeviceInfo]:
        drm = self._sys("class", "drm")
        found: dict[str, tuple[int, str, Path]] = {}  # pci -> (card number, card, device dir)
        for entry in drm.glob("card*"):
            m = _CARD.match(entry.name)  # card0, not the connector card0-DP-1
            if m is None:
                continue
            device_dir = entry / "device"
            if _read_hex(device_dir / "vendor") != PCI_VENDOR_AMD:
                continue
            pci = os.path.basename(os.path.realpath(device_dir)).lower()
            if not _PCI_ADDRESS.match(pci):
                pci = entry.name  # not a PCI device; still one GPU, named by its card
            number = int(m.group(1))
            if pci not in found or number < found[pci][0]:
                found[pci] = (number, entry.name, device_dir)
        if not found:
            raise BackendUnavailableError(
                f"no AMD GPU under {drm} (no card* with PCI vendor 0x1002); "
                f"AMD SMI not used: {self.amdsmi_reason}"
            )
        driver = self._driver_version()
        devices: list[DeviceInfo] = []
        for index, pci in enumerate(sorted(found)):
            _, card, device_dir = found[pci]
            device_id = _read_hex(device_dir / "device")
            model = (_read_quiet(device_dir / "product_name") or "").strip()
            if not model:
                model = _model(device_id)
            serial_text = (_read_quiet(device_dir / "unique_id") or "").strip()
            try:
                serial = int(serial_text, 16) if serial_text else None
            except ValueError:
                serial = None
            if serial is not None and device_id is not None:
                uuid = amdsmi_uuid(serial, device_id)
            else:
                # Without the ASIC serial the PCI address is the one stable name left.
                uuid = pci
            info = DeviceInfo(
                device=f"amd{index}",
                vendor=VENDOR,
                uuid=uuid,
                model=model,
                pci_bus_id=pci if _PCI_ADDRESS.match(pci) else "",
                driver_version=driver,
                numa_node=self._numa_node(device_dir / "numa_node"),
                cpu_affinity=cpu_affinity(self.options.sysfs, pci),
            )
            self._gpus[info.device] = _Gpu(info, device_dir=device_dir, card=card)
            devices.append(info)
            devices.extend(self._discover_partitions(info, device_dir))
        return devices

    def _discover_partitions(self, parent: DeviceInfo, device_dir: Path) -> list[DeviceInfo]:
        """The compute partitions of a GPU in DPX/QPX/CPX mode as child devices
        ``amdN_pK`` (see ``exporter.amdpart``); none for a whole GPU."""
        if not parent.pci_bus_id or not amdpart.read_mode(device_dir, "compute"):
            return []
        parts = amdpart.partitions(self.options.sysfs, parent.pci_bus_id)
        profile = amdpart.profile(device_dir)
        out: list[DeviceInfo] = []
        for part in parts:
            info = DeviceInfo(
                device=f"{parent.device}_p{part.index}",
                vendor=VENDOR,
                # The partitions share the ASIC serial; the index tells them apart.
                uuid=f"{parent.uuid}-p{part.index}",
                model=parent.model,
                pci_bus_id=parent.pci_bus_id,
                driver_version=parent.driver_version,
                numa_node=parent.numa_node,
                cpu_affinity=parent.cpu_affinity,
                parent=parent.device,
                profile=profile,
            )
            child = _Gpu(info, device_dir=device_dir, card=f"renderD{part.render_minor}")
            child.partition_memory = part.memory_bytes
            for key in FIELDS:
                child.static[key] = f"GPU-wide: reported on {parent.device}"
            for key in ("utilization", "memory_used_bytes", "memory_bandwidth_utilization"):
                child.static[key] = "amdgpu sysfs has no per-partition figure"
            if part.memory_bytes is not None:
                del child.static["memory_total_bytes"]
            self._gpus[info.device] = child
            out.append(info)
        if parts:
            log.info("%s: %s, %d partitions", parent.device, profile, len(parts))
        return out

    def _discover_amdsmi(self, smi: Any) -> tuple[list[DeviceInfo] | None, str]:
        failure = ""
        with quiet_stdout() as printed:  # the C library may print as it looks for GPUs
            try:
                smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
            except Exception as e:
                failure = f"amdsmi_init failed: {_smi_error(smi, e)}"
        if printed:
            log.debug("amd: amdsmi_init printed: %s", " ".join(printed))
        if failure:
            return None, failure
        self._smi, self._initialized = smi, True
        try:
            handles = list(smi.amdsmi_get_processor_handles())
            if not handles:
                self.close()
                return None, "AMD SMI found no GPU"
            found: list[tuple[str, Any]] = []
            for handle in handles:
                bdf = str(smi.amdsmi_get_gpu_device_bdf(handle)).strip().lower()
                found.append((bdf, handle))
            found.sort(key=lambda t: t[0])
            devices: list[DeviceInfo] = []
            for index, (bdf, handle) in enumerate(found):
                info = self._amdsmi_identity(smi, index, bdf, handle)
                self._gpus[info.device] = _Gpu(info, handle=handle)
                devices.append(info)
            return devices, ""
        except Exception as e:
            # A library that initialises but cannot name its GPUs is not a source.
            self.close()
            self._gpus = {}
            return None, f"AMD SMI could not list its GPUs: {_smi_error(smi, e)}"

    def _amdsmi_identity(self, smi: Any, index: int, bdf: str, handle: Any) -> DeviceInfo:
        uuid = str(smi.amdsmi_get_gpu_device_uuid(handle))
        model = ""
        try:
            asic = smi.amdsmi_get_gpu_asic_info(handle)
            market = str(asic.get("market_name", "")).strip()
            model = "" if market in ("", "N/A") else market
            if not model:
                model = _model(_hex_or_none(asic.get("device_id")))
        except smi.AmdSmiException as e:
            log.debug("amd%d: no ASIC info: %s", index, _smi_error(smi, e))
        driver = ""
        try:
            version = str(smi.amdsmi_get_gpu_driver_info(handle).get("driver_version", ""))
            driver = "" if version == "N/A" else version
        except smi.AmdSmiException as e:
            log.debug("amd%d: no driver info: %s", index, _smi_error(smi, e))
        return DeviceInfo(
            device=f"amd{index}",
            vendor=VENDOR,
            uuid=uuid or bdf,
            model=model,
            pci_bus_id=bdf,
            driver_version=driver or self._driver_version(),
            numa_node=self._numa_node(self._sys("bus", "pci", "devices", bdf, "numa_node")),
            cpu_affinity=cpu_affinity(self.options.sysfs, bdf),
        )

    # -- topology ----------------------------------------------------------------------

    def topology(self) -> list[Link]:
        """xGMI links from the KFD topology (read from sysfs for either source, since
        amdgpu publishes it without ROCm), and the PCIe path for every pair of GPUs
        that xGMI does not join, so every pair has a place on the distance scale."""
        devices = [g.info for g in self._gpus.values()]
        links = xgmi_links(self.options.sysfs, devices)
        joined = {(link.device, link.peer_device) for link in links}
        links += [
            link
            for link in pcie_links(self.options.sysfs, devices)
            if (link.device, link.peer_device) not in joined
        ]
        return links

    # -- reading -----------------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        gpu = self._gpus.get(device.device)
        if gpu is None:
            raise DeviceLostError(f"{device.device} is not known to this backend")
        self.missing[gpu.name] = dict(gpu.static)
        if gpu.info.parent:
            reading = self._read_partition(gpu)
        elif gpu.handle is not None:
            reading = self._read_amdsmi(gpu)
        else:
            reading = self._read_sysfs(gpu)
        missing = self.missing[gpu.name]
        for key in FIELDS:
            if _reading_has(reading, key):
                missing.pop(key, None)
            else:
                missing.setdefault(key, "not reported by this GPU")
        return reading

    def _read_partition(self, gpu: _Gpu) -> Reading:
        """A partition has no telemetry of its own in sysfs (``exporter.amdpart``): it
        is up while its GPU is, and reports its memory partition's size."""
        if gpu.device_dir is None or not gpu.device_dir.is_dir():
            raise DeviceLostError(f"{gpu.info.parent} ({gpu.info.pci_bus_id}) left sysfs")
        return Reading(memory_total_bytes=gpu.partition_memory, telemetry_source="none")

    # sysfs ------------------------------------------------------------------------------

    def _read_sysfs(self, gpu: _Gpu) -> Reading:
        device_dir = gpu.device_dir
        assert device_dir is not None
        if not device_dir.is_dir():
            raise DeviceLostError(f"{gpu.card} ({gpu.info.pci_bus_id}) left sysfs")
        r = Reading()
        missing = self.missing[gpu.name]
        busy = self._file_int(gpu, device_dir / "gpu_busy_percent", "utilization")
        r.utilization = _percent(busy)
        mem_busy = _percent(
            self._file_int(gpu, device_dir / "mem_busy_percent", "memory_bandwidth_utilization")
        )
        total = self._file_int(gpu, device_dir / "mem_info_vram_total", "memory_total_bytes")
        used = self._file_int(gpu, device_dir / "mem_info_vram_used", "memory_used_bytes")
        if total:
            r.memory_total_bytes = float(total)
            if used is not None:
                r.memory_used_bytes = float(used)
        self._ras_sysfs(gpu, r)
        self._hwmon(gpu, r)
        metrics = self._gpu_metrics(gpu)
        if metrics is not None:
            self._apply_metrics(gpu, r, metrics)
        if r.memory_bandwidth_utilization is None and mem_busy is not None:
            r.memory_bandwidth_utilization = mem_busy
            r.memory_bandwidth_source = MEM_BUSY_SOURCE
        if r.memory_bandwidth_utilization is None:
            missing.setdefault(
                "memory_bandwidth_utilization",
                "neither gpu_metrics average_umc_activity nor mem_busy_percent",
            )
        return r

    def _file(
        self, gpu: _Gpu, path: Path, binary: bool = False, key: str = ""
    ) -> str | bytes | None:
        """One sysfs file of the card: None when it is missing or unreadable (the reason
        kept under ``key`` in ``missing``); DeviceLostError when the card itself is gone."""
        try:
            return path.read_bytes() if binary else path.read_text()
        except FileNotFoundError:
            if gpu.device_dir is not None and not gpu.device_dir.is_dir():
                raise DeviceLostError(f"{gpu.card} ({gpu.info.pci_bus_id}) left sysfs") from None
            return None
        except OSError as e:
            if e.errno in _LOST_ERRNOS:
                raise DeviceLostError(f"{path.name}: {os.strerror(e.errno or 0)}") from e
            # EPERM during a GPU reset, EINVAL or EOPNOTSUPP where the ASIC has no such
            # sensor: this field is out for this poll, the rest is still read.
            self._note(gpu, path.name, os.strerror(e.errno) if e.errno else str(e), key)
            return None
        except UnicodeDecodeError:
            self._note(gpu, path.name, "not text", key)
            return None

    def _file_int(self, gpu: _Gpu, path: Path, key: str = "") -> int | None:
        text = self._file(gpu, path, key=key)
        if not isinstance(text, str):
            return None
        try:
            return int(text.strip())
        except ValueError:
            self._note(gpu, path.name, f"not a number: {text.strip()[:40]!r}", key)
            return None

    def _note(self, gpu: _Gpu, what: str, reason: str, key: str = "") -> None:
        if key:
            self.missing[gpu.name][key] = f"{what}: {reason}"
        mark = (gpu.name, f"{what}: {reason}")
        if mark not in self._logged:
            self._logged.add(mark)
            log.warning("%s (%s): cannot read %s: %s", gpu.name, gpu.card, what, reason)

    def _ras_sysfs(self, gpu: _Gpu, r: Reading) -> None:
        assert gpu.device_dir is not None
        files = sorted((gpu.device_dir / "ras").glob("*_err_count"))
        if not files:
            self.missing[gpu.name]["ecc_errors"] = "no ras/*_err_count files (RAS not enabled)"
            return
        counts: dict[str, tuple[int, int, int]] = {}
        complete = True
        for f in files:
            block = f.name[: -len("_err_count")]
            text = self._file(gpu, f)
            parsed = _parse_ras(text) if isinstance(text, str) else None
            if parsed is None:
                # "Query currently inaccessible" during a reset, or unreadable: a sum
                # without this block would step the counter down, so ECC waits a poll.
                complete = False
                continue
            counts[block] = parsed
        if complete:
            r.ecc_errors = {
                "uncorrected": float(sum(ue for ue, _, _ in counts.values())),
                "corrected": float(sum(ce for _, ce, _ in counts.values())),
            }
        else:
            self.missing[gpu.name]["ecc_errors"] = "a RAS block could not be read this poll"
        r.fault_events.extend(_ras_events(gpu.ras_previous, counts))
        gpu.ras_previous.update(counts)

    def _hwmon(self, gpu: _Gpu, r: Reading) -> None:
        assert gpu.device_dir is not None
        hwmons = sorted((gpu.device_dir / "hwmon").glob("hwmon*"))
        if not hwmons:
            return
        hw = hwmons[0]
        try:
            names = sorted(p.name for p in hw.iterdir())
        except OSError:
            return  # the hwmon device went away between the glob and the listing
        for name in names:
            m = _TEMP_INPUT.match(name)
            if m is None:
                continue
            label = (_read_quiet(hw / f"temp{m.group(1)}_label") or "").strip().lower()
            sensor = HWMON_SENSORS.get(label) or ("gpu" if not label and m.group(1) == "1" else "")
            if not sensor:
                continue
            millidegrees = self._file_int(gpu, hw / name)
            if millidegrees is not None:
                r.temperatures[sensor] = millidegrees / 1000.0
        for attr in ("power1_average", "power1_input"):
            if attr in names:
                uw = self._file_int(gpu, hw / attr)
                if uw:
                    r.power_watts = uw / 1e6
                    break
        if "power1_cap" in names:
            cap = self._file_int(gpu, hw / "power1_cap")
            if cap:
                r.power_limit_watts = cap / 1e6
        if "energy1_input" in names:
            # The hwmon ABI's energy counter (µJ); amdgpu itself publishes none as of
            # Linux 6.x, so on AMD GPUs energy normally comes from gpu_metrics.
            uj = self._file_int(gpu, hw / "energy1_input")
            if uj:
                r.energy_joules = uj / 1e6
        for name in names:
            m = _FREQ_INPUT.match(name)
            if m is None:
                continue
            label = (_read_quiet(hw / f"freq{m.group(1)}_label") or "").strip().lower()
            clock = HWMON_CLOCKS.get(label)
            hz = self._file_int(gpu, hw / name) if clock else None
            if clock and hz:
                r.clocks_hz[clock] = float(hz)

    def _gpu_metrics(self, gpu: _Gpu) -> GpuMetrics | None:
        assert gpu.device_dir is not None
        path = gpu.device_dir / "gpu_metrics"
        data = self._file(gpu, path, binary=True)
        if not isinstance(data, bytes):
            for key in ("throttle", "link_bytes_per_second"):
                self.missing[gpu.name][key] = "no gpu_metrics file"
            return None
        try:
            return parse_gpu_metrics(data)
        except GpuMetricsError as e:
            reason = str(e)
            for key in ("throttle", "link_bytes_per_second"):
                self.missing[gpu.name][key] = f"gpu_metrics skipped: {reason}"
            mark = (gpu.name, f"gpu_metrics: {reason}")
            if mark not in self._logged:
                self._logged.add(mark)
                log.warning(
                    "%s (%s): gpu_metrics skipped: %s; figures come from the other sysfs files",
                    gpu.name,
                    gpu.card,
                    reason,
                )
            return None

    def _apply_metrics(self, gpu: _Gpu, r: Reading, m: GpuMetrics) -> None:
        """gpu_metrics values over the busy-percent and hwmon ones, where valid."""
        missing = self.missing[gpu.name]
        if m.utilization is not None:
            r.utilization = m.utilization
        if m.memory_activity is not None:
            r.memory_bandwidth_utilization = m.memory_activity
            r.memory_bandwidth_source = UMC_SOURCE
        r.temperatures.update(m.temperatures)
        if m.power_watts is not None:
            r.power_watts = m.power_watts
        if m.energy_joules is not None:
            r.energy_joules = m.energy_joules
        r.clocks_hz.update(m.clocks_hz)
        before = gpu.metrics_previous
        gpu.metrics_previous = m
        if m.indep_throttle_status is not None:
            r.throttle = indep_throttle(m.indep_throttle_status)
        elif m.residencies:
            r.throttle, why = residency_throttle(before, m)
            if why:
                missing["throttle"] = why
        else:
            # v1.1/v1.2 have only the ASIC-dependent bits; MI300's v1.4/v1.5 write 0.
            missing["throttle"] = (
                f"gpu_metrics v{m.revision[0]}.{m.revision[1]} has no ASIC-independent "
                "throttle status"
            )
        r.link_bytes_per_second, why = xgmi_rates(before, m)
        if why:
            missing["link_bytes_per_second"] = why

    # amdsmi -----------------------------------------------------------------------------

    def _read_amdsmi(self, gpu: _Gpu) -> Reading:
        smi, h = self._smi, gpu.handle
        r = Reading()
        missing = self.missing[gpu.name]
        activity = self._smi_call(
            gpu, ("utilization", "memory_bandwidth_utilization"), "amdsmi_get_gpu_activity", h
        )
        if activity is not None:
            r.utilization = _smi_percent(activity.get("gfx_activity"))
            umc = _smi_percent(activity.get("umc_activity"))
            if umc is not None:
                r.memory_bandwidth_utilization = umc
                r.memory_bandwidth_source = AMDSMI_UMC_SOURCE
        vram = smi.AmdSmiMemoryType.VRAM
        total = self._smi_call(gpu, "memory_total_bytes", "amdsmi_get_gpu_memory_total", h, vram)
        used = self._smi_call(gpu, "memory_used_bytes", "amdsmi_get_gpu_memory_usage", h, vram)
        if _smi_number(total):
            r.memory_total_bytes = float(total)
            if _smi_number(used) is not None:
                r.memory_used_bytes = float(used)
        ecc = self._smi_call(gpu, "ecc_errors", "amdsmi_get_gpu_total_ecc_count", h)
        if ecc is not None:
            ce = _smi_number(ecc.get("correctable_count"))
            ue = _smi_number(ecc.get("uncorrectable_count"))
            de = _smi_number(ecc.get("deferred_count"))
            if ce is not None and ue is not None:
                r.ecc_errors = {"corrected": float(ce), "uncorrected": float(ue)}
                counts = {"total": (int(ue), int(ce), int(de or 0))}
                r.fault_events.extend(_ras_events(gpu.ras_previous, counts))
                gpu.ras_previous.update(counts)
        no_temperature: list[str] = []
        for sensor, kind in (("gpu", "EDGE"), ("hotspot", "HOTSPOT"), ("memory", "VRAM")):
            key = f"temperatures.{sensor}"
            c = self._smi_call(
                gpu,
                key,
                "amdsmi_get_temp_metric",
                h,
                smi.AmdSmiTemperatureType[kind],
                smi.AmdSmiTemperatureMetric.CURRENT,
            )
            if _smi_number(c) is not None:
                r.temperatures[sensor] = float(c)
            # Per-sensor keys steer the NOT_SUPPORTED memo; only the family is reported.
            reason = missing.pop(key, "")
            if reason:
                no_temperature.append(f"{kind}: {reason}")
        if not r.temperatures and no_temperature:
            missing["temperatures"] = "; ".join(no_temperature)
        power = self._smi_call(gpu, "power_watts", "amdsmi_get_power_info", h)
        if power is not None:
            # MI300 and newer report current_socket_power; older GPUs the average. 0
            # (secondary die) and 0xFFFF (the library's N/A) are not measurements.
            for key in ("current_socket_power", "average_socket_power"):
                w = _smi_number(power.get(key))
                if w and w < 0xFFFF:
                    r.power_watts = float(w)
                    break
        cap = self._smi_call(gpu, "power_limit_watts", "amdsmi_get_power_cap_info", h)
        if cap is not None:
            uw = _smi_number(cap.get("power_cap"))
            if uw:
                r.power_limit_watts = uw / 1e6
        energy = self._smi_call(gpu, "energy_joules", "amdsmi_get_energy_count", h)
        if energy is not None:
            ticks = _smi_number(energy.get("energy_accumulator"))
            resolution = _smi_number(energy.get("counter_resolution"))
            if ticks and resolution:
                r.energy_joules = ticks * resolution / 1e6  # resolution is in µJ
        for clock, kind in (("graphics", "GFX"), ("memory", "MEM")):
            info = self._smi_call(
                gpu, f"clocks_hz.{clock}", "amdsmi_get_clock_info", h, smi.AmdSmiClkType[kind]
            )
            mhz = _smi_number(info.get("clk")) if info is not None else None
            if mhz:
                r.clocks_hz[clock] = mhz * 1e6
        table = self._smi_call(
            gpu, ("throttle", "link_bytes_per_second"), "amdsmi_get_gpu_metrics_info", h
        )
        if table is not None:
            m = _metrics_from_amdsmi(table)
            before = gpu.metrics_previous
            gpu.metrics_previous = m
            r.throttle, why = residency_throttle(before, m)
            if why:
                # indep_throttle_status comes through the Python API as one bool, which
                # names no reason; only the residencies (MI300+) do.
                missing["throttle"] = why
            r.link_bytes_per_second, why = xgmi_rates(before, m)
            if why:
                missing["link_bytes_per_second"] = why
        return r

    def _smi_call(self, gpu: _Gpu, keys: str | tuple[str, ...], fn: str, *args: Any) -> Any:
        """One AMD SMI call for the fields ``keys``: its value, or None with the reason
        recorded. A GPU that is gone raises DeviceLostError."""
        smi = self._smi
        keys = (keys,) if isinstance(keys, str) else keys
        if all(k in gpu.static for k in keys):
            return None
        try:
            return getattr(smi, fn)(*args)
        except smi.AmdSmiLibraryException as e:
            code = _error_code(e)
            status = _status_name(smi, code)
            if code == _status(smi, "NOT_FOUND") or (
                code not in _statuses(smi, *_SMI_STATIC, *_SMI_QUIET) and self._pci_gone(gpu)
            ):
                raise DeviceLostError(f"{fn}: {status}") from e
            for key in keys:
                self.missing[gpu.name][key] = f"{fn}: {status}"
                if code in _statuses(smi, *_SMI_STATIC):
                    gpu.static[key] = f"{fn}: {status}"
            if code not in _statuses(smi, *_SMI_STATIC, *_SMI_QUIET):
                self._once(gpu, fn, status)
            return None
        except smi.AmdSmiException as e:
            for key in keys:
                self.missing[gpu.name][key] = f"{fn}: {type(e).__name__}"
            self._once(gpu, fn, f"{type(e).__name__}: {e}")
            return None

    def _once(self, gpu: _Gpu, fn: str, reason: str) -> None:
        mark = (gpu.name, f"{fn}: {reason}")
        if mark not in self._logged:
            self._logged.add(mark)
            log.warning("%s: AMD SMI %s failed: %s", gpu.name, fn, reason)

    def _pci_gone(self, gpu: _Gpu) -> bool:
        """Whether the GPU's PCI function left sysfs (only when sysfs can tell)."""
        devices = self._sys("bus", "pci", "devices")
        return (
            bool(gpu.info.pci_bus_id)
            and devices.is_dir()
            and not (devices / gpu.info.pci_bus_id).exists()
        )

    def close(self) -> None:
        if self._smi is not None and self._initialized:
            try:
                self._smi.amdsmi_shut_down()
            except Exception as e:  # shutting down: nothing useful to do with it
                log.debug("amdsmi_shut_down: %s", e)
        self._initialized = False


# -- helpers -----------------------------------------------------------------------------

# AMD SMI answers that stay true while the driver is loaded, and ones that are normal
# at times (the GPU is busy or resetting): neither is logged.
_SMI_STATIC = ("NOT_SUPPORTED", "NOT_YET_IMPLEMENTED", "NO_PERM")
_SMI_QUIET = ("NO_DATA", "BUSY", "RETRY", "TIMEOUT", "INTERRUPT")
# Fallbacks for the amdsmi_wrapper constants, as amdsmi.h numbers them.
_STATUS_NUMBERS = {
    "NOT_SUPPORTED": 2,
    "NOT_YET_IMPLEMENTED": 3,
    "TIMEOUT": 8,
    "RETRY": 9,
    "NO_PERM": 10,
    "INTERRUPT": 11,
    "BUSY": 30,
    "NOT_FOUND": 31,
    "NO_DATA": 40,
}


def _status(smi: Any, name: str) -> int:
    wrapper = getattr(smi, "amdsmi_wrapper", None)
    return int(getattr(wrapper, f"AMDSMI_STATUS_{name}", _STATUS_NUMBERS.get(name, -1)))


def _statuses(smi: Any, *names: str) -> tuple[int, ...]:
    return tuple(_status(smi, n) for n in names)


def _status_name(smi: Any, code: int | None) -> str:
    wrapper = getattr(smi, "amdsmi_wrapper", None)
    for k, v in vars(wrapper).items() if wrapper is not None else ():
        if k.startswith("AMDSMI_STATUS_") and v == code:
            return str(k)
    return f"AMD SMI status {code}"


def _error_code(e: Exception) -> int | None:
    getter = getattr(e, "get_error_code", None)
    code = getter() if callable(getter) else getattr(e, "err_code", None)
    return int(code) if isinstance(code, int) else None


def _smi_error(smi: Any, e: Exception) -> str:
    code = _error_code(e)
    return _status_name(smi, code) if code is not None else f"{type(e).__name__}: {e}"


def _smi_number(value: Any) -> float | None:
    """An AMD SMI value, None for its "N/A" (and anything else that is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _smi_percent(value: Any) -> float | None:
    return _percent(_smi_number(value))


def _metrics_from_amdsmi(table: dict[str, Any]) -> GpuMetrics:
    """The parts of amdsmi_get_gpu_metrics_info's dict that the rates need, in the same
    shape as a parsed sysfs table (the library says "N/A" where sysfs has all-ones)."""

    def number(key: str) -> int | None:
        v = _smi_number(table.get(key))
        return None if v is None else int(v)

    def numbers(key: str) -> tuple[int | None, ...]:
        values = table.get(key)
        if not isinstance(values, list):
            return ()
        return tuple(None if (n := _smi_number(v)) is None else int(n) for v in values)

    names = ["accumulation_counter", *(acc for _, acc in RESIDENCY_THROTTLE)]
    values = {n: number(n) for n in names}
    residencies = (
        {n: v for n, v in values.items() if v is not None}
        if all(v is not None for v in values.values())
        else {}
    )
    return GpuMetrics(
        revision=(
            number("common_header.format_revision") or 0,
            number("common_header.content_revision") or 0,
        ),
        residencies=residencies,
        xgmi_link_width=number("xgmi_link_width"),
        xgmi_read_kb=numbers("xgmi_read_data_acc"),
        xgmi_write_kb=numbers("xgmi_write_data_acc"),
        timestamp_ns=number("system_clock_counter"),
    )


def _parse_ras(text: str) -> tuple[int, int, int] | None:
    """``ue: N\\nce: M`` (and ``de: K`` on ACA kernels) as (ue, ce, de)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _RAS_LINE.match(line)
        if m is None:
            return None
        values[m.group(1)] = int(m.group(2))
    if "ue" not in values or "ce" not in values:
        return None
    return values["ue"], values["ce"], values.get("de", 0)


_RAS_KINDS: tuple[tuple[int, str, str], ...] = (
    (0, "ue", "ras_uncorrectable"),
    (2, "de", "ras_deferred"),
    (1, "ce", "ras_correctable"),
)


def _ras_events(
    previous: dict[str, tuple[int, int, int]], counts: dict[str, tuple[int, int, int]]
) -> Iterable[FaultEvent]:
    """At most one event per block per poll: the most severe kind that grew (ue, then
    de, then ce), its detail naming the block and every delta. The first poll only sets
    the baseline; a count that went down (driver reload) starts a new one."""
    for block, now in sorted(counts.items()):
        before = previous.get(block)
        if before is None:
            continue
        deltas = [(i, kind, code, now[i] - before[i]) for i, kind, code in _RAS_KINDS]
        grown = [d for d in deltas if d[3] > 0]
        if not grown:
            continue
        detail = " ".join(f"{kind}+{n}" for _, kind, _, n in grown)
        yield FaultEvent(code=grown[0][2], detail=f"block={block} {detail}")


def _read_quiet(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_hex(path: Path) -> int | None:
    return _hex_or_none(_read_quiet(path))


def _hex_or_none(text: Any) -> int | None:
    if not isinstance(text, str):
        return text if isinstance(text, int) and not isinstance(text, bool) else None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _model(device_id: int | None) -> str:
    if device_id is None:
        return "AMD GPU"
    return MODELS.get(device_id, f"AMD GPU 0x{device_id:04x}")
