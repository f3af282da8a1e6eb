"""What the AMD backend knows of one GPU, whichever source reads it (AMD SMI or amdgpu
sysfs): its state between polls, the field keys it reports under, and the facts both
sources compute the same way (the UUID, the model name, RAS fault events).

Both sources name devices in PCI bus order (``amd0`` is the lowest bus address) and
compute the same ``uuid`` (amd-smi's, built from the ASIC serial and the PCI device
id), so a host that gains or loses ROCm keeps its series; that is why these pieces
live here, below both sources, and not in either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.backends.amd.gpu_metrics import GpuMetrics
from exporter.model import DeviceInfo, FaultEvent

VENDOR = "amd"
PCI_VENDOR_AMD = 0x1002

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


@dataclass
class Gpu:
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
    # A compute partition's index in the driver's order: its xcp_stats entry.
    partition_index: int | None = None
    # AMD SMI's process list (``procs``): each PID's engine_usage.gfx total (ns) at
    # the previous read, and when that read was (seconds, the backend's clock).
    proc_gfx_previous: dict[int, int] = field(default_factory=dict)
    proc_read_at: float | None = None

    @property
    def name(self) -> str:
        return self.info.device


def amdsmi_uuid(serial: int, device_id: int) -> str:
    """The UUID amd-smi prints for a whole GPU (amdsmi_uuid_gen with index 0xff): the
    device id and the ASIC serial from ``unique_id`` in a version-1 UUID layout."""
    b7 = (serial >> 56) & 0xFF
    b6 = (serial >> 48) & 0xFF
    return (
        f"{(b7 << 24) | (0xFF << 16) | (device_id & 0xFFFF):08x}-0000-1000-"
        f"80{b6:02x}-{(serial >> 32) & 0xFFFF:04x}{serial & 0xFFFFFFFF:08x}"
    )


def model_name(device_id: int | None) -> str:
    """The marketing name of a PCI device id, for a GPU that names itself nowhere."""
    if device_id is None:
        return "AMD GPU"
    return MODELS.get(device_id, f"AMD GPU 0x{device_id:04x}")


def hex_or_none(text: Any) -> int | None:
    """A hex string (sysfs ``0x74a1``) or an int (AMD SMI) as an int; None otherwise."""
    if not isinstance(text, str):
        return text if isinstance(text, int) and not isinstance(text, bool) else None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


_RAS_KINDS: tuple[tuple[int, str, str], ...] = (
    (0, "ue", "ras_uncorrectable"),
    (2, "de", "ras_deferred"),
    (1, "ce", "ras_correctable"),
)


def ras_events(
    previous: dict[str, tuple[int, int, int]], counts: dict[str, tuple[int, int, int]]
) -> Iterable[FaultEvent]:
    """RAS fault events from running ``(ue, ce, de)`` counts per block, classified by
    ``exporter.faults.AMD_RAS``.

    At most one event per block per poll: the most severe kind that grew (ue, then
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
