"""What the NVIDIA backend keeps about one GPU between polls, and the field keys it
reports under.

Every other module of the package reads or writes a ``Gpu``: discovery fills it,
the GPM, MIG, NVLink and Xid modules keep their state in it, and the reads record
per-field reasons under the keys of ``FIELDS``. It lives here, below all of them, so
that none of them imports the backend class.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from exporter.model import DeviceInfo

VENDOR = "nvidia"
GPM_SOURCE = "NVML GPM DRAM_BW_UTIL"
UTILIZATION_SOURCE = "NVML memory utilization (busy time, not bandwidth)"

# NVML reports throughput in KB/s (PCIe) and KiB (NVLink counters): 1024 bytes.
KIB = 1024.0

# Reading key -> NVML clock type constant.
CLOCKS: tuple[tuple[str, str], ...] = (
    ("graphics", "NVML_CLOCK_GRAPHICS"),
    ("sm", "NVML_CLOCK_SM"),
    ("memory", "NVML_CLOCK_MEM"),
    ("video", "NVML_CLOCK_VIDEO"),
)
# Reading key -> suffix of nvmlClocksEventReason* (nvmlClocksThrottleReason* before
# driver 535; the bit values are the same).
THROTTLE: tuple[tuple[str, str], ...] = (
    ("gpu_idle", "GpuIdle"),
    ("applications_clocks_setting", "ApplicationsClocksSetting"),
    ("sw_power_cap", "SwPowerCap"),
    ("hw_slowdown", "HwSlowdown"),
    ("sync_boost", "SyncBoost"),
    ("sw_thermal_slowdown", "SwThermalSlowdown"),
    ("hw_thermal_slowdown", "HwThermalSlowdown"),
    ("hw_power_brake_slowdown", "HwPowerBrakeSlowdown"),
    ("display_clock_setting", "DisplayClockSetting"),
)
# Reading link-error type -> nvmlNvLinkErrorCounter_t constant.
LINK_ERRORS: tuple[tuple[str, str], ...] = (
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
)
ECC: tuple[tuple[str, str], ...] = (
    ("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
    ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
)
RETIRED: tuple[tuple[str, str], ...] = (
    ("single_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
    ("double_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
)
REMAPPED = ("correctable", "uncorrectable", "pending", "failure")
PCIE: tuple[tuple[str, str], ...] = (
    ("rx", "NVML_PCIE_UTIL_RX_BYTES"),
    ("tx", "NVML_PCIE_UTIL_TX_BYTES"),
)
LINK_THROUGHPUT: tuple[tuple[str, str], ...] = (
    ("rx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"),
    ("tx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"),
)

PROCESS_FIELDS = ("processes", "process_utilization")

# Every catalogue field this backend can report, by the key that ``fields()`` and
# ``missing`` use: after a read, each key is either found or has a reason.
FIELDS: tuple[str, ...] = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_bandwidth_utilization",
    *(f"ecc_errors.{k}" for k, _ in ECC),
    *(f"retired_pages.{k}" for k, _ in RETIRED),
    *(f"remapped_rows.{k}" for k in REMAPPED),
    "fault_events",
    "temperatures.gpu",
    "temperatures.memory",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    *(f"clocks_hz.{k}" for k, _ in CLOCKS),
    "throttle",
    *(f"pcie_bytes_per_second.{k}" for k, _ in PCIE),
    *(f"link_bytes_per_second.{k}" for k, _ in LINK_THROUGHPUT),
    *(f"link_errors.{k}" for k, _ in LINK_ERRORS),
    # Per-pod use (``procs``): how many processes NVML lists on the device, and the
    # sum of their per-process utilization samples; not metrics of their own, but
    # what bench/nvml_check.py shows of the per-pod figures' inputs on a real GPU.
    *PROCESS_FIELDS,
)
LINK_KEYS = tuple(k for k in FIELDS if k.startswith("link_"))


def normalize_bus_id(bus_id: str | bytes) -> str:
    """NVML's ``00000000:1B:00.0`` as the kernel writes it: ``0000:1b:00.0``."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    parts = text.strip().lower().split(":")
    if len(parts) == 2:  # no domain at all
        parts.insert(0, "0")
    if len(parts) != 3:
        return text.strip().lower()
    try:
        domain = int(parts[0], 16)
    except ValueError:
        return text.strip().lower()
    return f"{domain:04x}:{parts[1]}:{parts[2]}"


def address(handle: Any) -> int:
    """A stable key for an NVML handle (a ctypes pointer): the address it holds.
    Two handle objects for one device compare unequal; their addresses do not."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


@dataclass
class Gpu:
    """What the backend keeps about one physical GPU or MIG instance between polls."""

    info: DeviceInfo
    handle: Any
    index: int
    parent: Gpu | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    children: list[Gpu] = field(default_factory=list)
    # Reasons that stay true while the driver is loaded: a field in here is not
    # asked for again, and its reason is copied into ``missing`` at every read.
    static: dict[str, str] = field(default_factory=dict)
    lost: bool = False
    memory_v2: bool = True
    clocks_event_api: bool = True
    temperature_v: bool = True
    # GPM: two samples used in turn, the previous one and the one being taken.
    gpm_samples: list[Any] = field(default_factory=list)
    gpm_next: int = 0
    gpm_have_previous: bool = False
    gpm_request: Any = None
    # NVLink links that exist on this GPU (found once), and the previous cumulative
    # throughput counter per (link, direction): (KiB, NVML timestamp in µs).
    links: list[int] = field(default_factory=list)
    link_previous: dict[tuple[int, str], tuple[float, float]] = field(default_factory=dict)
    events_registered: bool = False
    # Why NVML gives no GPU recovery action here, once the answer cannot change
    # (``verdicts``); "" while it may.
    no_recovery_action: str = ""
    # Processes (``procs``): whether the MPS process list answers, which of the
    # process-utilization functions to use (an index; past the end: none), and the
    # newest sample timestamp seen (µs), so that each read takes only newer samples.
    mps_api: bool = True
    proc_util_api: int = 0
    proc_util_seen: int = 0

    @property
    def name(self) -> str:
        return self.info.device

    @property
    def is_lost(self) -> bool:
        return self.lost or (self.parent is not None and self.parent.lost)
