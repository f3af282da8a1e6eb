"""The metric catalogue: the one place metric names, types, units and labels live.

The renderer, the docs' metric table and the autoscaler's rule checker all read
this module, so a name spelled here is spelled the same everywhere. Names follow
Prometheus conventions: base units, ratios 0–1, ``_total`` on counters, ``_info``
for identity series that are always 1.

Every per-device series carries ``DEVICE_LABELS`` first (``device``, ``vendor``,
``uuid``). The Kubernetes node name is not a label here: it is attached at scrape
time by relabeling, so that the exporter does not stamp a static hostname on every
series.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter"]

DEVICE_LABELS: tuple[str, ...] = ("device", "vendor", "uuid")

SEVERITIES: tuple[str, ...] = ("fatal", "recoverable", "info")
ECC_TYPES: tuple[str, ...] = ("corrected", "uncorrected")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: MetricType
    help: str
    unit: str
    # Labels after the device labels (or the only labels, for exporter metrics).
    labels: tuple[str, ...] = ()
    per_device: bool = True

    @property
    def all_labels(self) -> tuple[str, ...]:
        return (DEVICE_LABELS + self.labels) if self.per_device else self.labels


def _g(name: str, help_: str, unit: str, *labels: str, per_device: bool = True) -> MetricSpec:
    return MetricSpec(name, "gauge", help_, unit, tuple(labels), per_device)


def _c(name: str, help_: str, unit: str, *labels: str, per_device: bool = True) -> MetricSpec:
    return MetricSpec(name, "counter", help_, unit, tuple(labels), per_device)


DEVICE_INFO = _g(
    "accel_device_info",
    "Identity of an accelerator device; always 1.",
    "",
    "model",
    "pci_bus_id",
    "driver_version",
    "numa_node",
    "cpu_affinity",
    "parent",
    "profile",
)
UP = _g("accel_up", "Whether the device answered its last poll (1) or not (0).", "")
UTILIZATION = _g(
    "accel_utilization_ratio",
    "Fraction of the last sample period during which the device was busy (0-1).",
    "ratio",
)
MEMORY_USED = _g("accel_memory_used_bytes", "Device memory in use.", "bytes")
MEMORY_TOTAL = _g("accel_memory_total_bytes", "Device memory in total.", "bytes")
MEMORY_BANDWIDTH = _g(
    "accel_memory_bandwidth_utilization_ratio",
    "Fraction of peak device memory bandwidth in use (0-1).",
    "ratio",
)
ECC_ERRORS = _c(
    "accel_ecc_errors_total",
    "Volatile ECC errors since the driver loaded, by type (corrected, uncorrected).",
    "",
    "type",
)
RETIRED_PAGES = _g(
    "accel_retired_pages",
    "Device memory pages retired (blacklisted), by cause.",
    "",
    "cause",
)
REMAPPED_ROWS = _g(
    "accel_remapped_rows",
    "Device memory rows remapped, by type (correctable, uncorrectable, pending, failure).",
    "",
    "type",
)
FAULT_EVENTS = _c(
    "accel_fault_events_total",
    "Vendor fault events (NVIDIA Xid, AMD and Intel RAS, Gaudi HLML events, Ascend "
    "alarms, TPU errors) seen by this exporter, by vendor-neutral severity (fatal, "
    "recoverable, info) and action class (ignore, app, watch, reset_when_idle, reset, "
    "reboot, isolate: the vendor's recommended first step, raised by the driver's live "
    "verdict). Present at 0 from the start for every pair the vendor's catalogue yields.",
    "",
    "severity",
    "action",
)
FAULT_CODE_EVENTS = _c(
    "accel_fault_code_events_total",
    "Vendor fault events seen by this exporter, by vendor code, severity and action class.",
    "",
    "code",
    "severity",
    "action",
)
TEMPERATURE = _g("accel_temperature_celsius", "Temperature by sensor.", "celsius", "sensor")
POWER = _g("accel_power_watts", "Power draw.", "watts")
POWER_LIMIT = _g("accel_power_limit_watts", "Enforced power limit.", "watts")
ENERGY = _c("accel_energy_joules_total", "Energy consumed since the driver loaded.", "joules")
CLOCK = _g("accel_clock_hertz", "Current clock frequency by clock domain.", "hertz", "clock")
THROTTLE = _g(
    "accel_throttle_active",
    "Whether a clock throttle reason is active (1) or not (0).",
    "",
    "reason",
)
PCIE_THROUGHPUT = _g(
    "accel_pcie_throughput_bytes_per_second",
    "PCIe throughput by direction (rx, tx).",
    "bytes_per_second",
    "direction",
)
LINK_THROUGHPUT = _g(
    "accel_link_throughput_bytes_per_second",
    "Device interconnect (NVLink, xGMI, Xe Link) throughput by link and direction.",
    "bytes_per_second",
    "link",
    "direction",
)
LINK_ERRORS = _c(
    "accel_link_errors_total",
    "Device interconnect errors by link and error type.",
    "",
    "link",
    "type",
)
TOPOLOGY_LINK = _g(
    "accel_topology_link_info",
    "A connection between two devices of this host; always 1.",
    "",
    "peer_device",
    "link_type",
    "links",
)
TOPOLOGY_DISTANCE = _g(
    "accel_topology_distance",
    "Vendor-neutral distance between two devices of this host; lower is closer.",
    "",
    "peer_device",
)
DEVICE_POD = _g(
    "accel_device_pod_info",
    "A Kubernetes container that the kubelet assigned this device to; always 1.",
    "",
    "namespace",
    "pod",
    "container",
    # The ResourceClaim that gave the device (DRA); absent for a device plugin's.
    "claim",
)
POD_UTILIZATION = _g(
    "accel_pod_utilization_ratio",
    "Share of the device (0-1) a container's processes kept busy over the last sample "
    "period; an empty pod label holds processes in no pod, so the parts add up to the device.",
    "ratio",
    "namespace",
    "pod",
    "container",
)
POD_MEMORY_USED = _g(
    "accel_pod_memory_used_bytes",
    "Device memory a container's processes hold; an empty pod label holds processes in no pod.",
    "bytes",
    "namespace",
    "pod",
    "container",
)
BACKEND_UP = _g(
    "accel_exporter_backend_up",
    "Whether a backend's last poll succeeded (1) or it is missing, failing or hung (0).",
    "",
    "backend",
    per_device=False,
)
POLL_DURATION = _g(
    "accel_exporter_poll_duration_seconds",
    "How long a backend's last poll took.",
    "seconds",
    "backend",
    per_device=False,
)
LAST_SUCCESS = _g(
    "accel_exporter_last_success_timestamp_seconds",
    "Unix time of a backend's last successful poll; tells stale data from fresh.",
    "seconds",
    "backend",
    per_device=False,
)

CATALOGUE: tuple[MetricSpec, ...] = (
    DEVICE_INFO,
    UP,
    UTILIZATION,
    MEMORY_USED,
    MEMORY_TOTAL,
    MEMORY_BANDWIDTH,
    ECC_ERRORS,
    RETIRED_PAGES,
    REMAPPED_ROWS,
    FAULT_EVENTS,
    FAULT_CODE_EVENTS,
    TEMPERATURE,
    POWER,
    POWER_LIMIT,
    ENERGY,
    CLOCK,
    THROTTLE,
    PCIE_THROUGHPUT,
    LINK_THROUGHPUT,
    LINK_ERRORS,
    TOPOLOGY_LINK,
    TOPOLOGY_DISTANCE,
    DEVICE_POD,
    POD_UTILIZATION,
    POD_MEMORY_USED,
    BACKEND_UP,
    POLL_DURATION,
    LAST_SUCCESS,
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in CATALOGUE}

# Which vendor gives each device metric, and from where (docs table). A metric a
# vendor cannot give is simply absent for its devices, never 0.
SOURCES: dict[str, dict[str, str]] = {
    "accel_utilization_ratio": {
        "nvidia": "NVML utilization; GPM GRAPHICS_UTIL per MIG instance",
        "amd": "gpu_metrics average_gfx_activity / gpu_busy_percent / amdsmi",
        "oneapi": "Sysman engine activity",
        "cpu": "/proc/stat",
        "gaudi": "HLML utilization rates (aip)",
        "ascend": "DCMI AI Core utilization / npu-smi AICore(%)",
        "tpu": "libtpu runtime tensorcore duty cycle",
    },
    "accel_memory_used_bytes": {
        "nvidia": "NVML memory info",
        "amd": "mem_info_vram_used / amdsmi",
        "oneapi": "Sysman memory state",
        "cpu": "NUMA meminfo",
        "gaudi": "HLML memory info",
        "ascend": "DCMI HBM info / npu-smi HBM-Usage",
        "tpu": "libtpu runtime hbm.memory.usage.bytes",
    },
    "accel_memory_total_bytes": {
        "nvidia": "NVML memory info",
        "amd": "mem_info_vram_total / amdsmi",
        "oneapi": "Sysman memory state / dpctl global_mem_size",
        "cpu": "NUMA meminfo",
        "gaudi": "HLML memory info",
        "ascend": "DCMI HBM info / npu-smi HBM-Usage",
        "tpu": "libtpu runtime hbm.memory.total.bytes",
    },
    "accel_memory_bandwidth_utilization_ratio": {
        "nvidia": "GPM DRAM_BW_UTIL (Hopper+) / NVML memory utilization",
        "amd": "gpu_metrics average_umc_activity / mem_busy_percent",
        "oneapi": "Sysman memory bandwidth counters",
        "ascend": "DCMI HBM bandwidth rate / npu-smi usages",
        "tpu": "libtpu runtime hbm.utilization.percent",
    },
    "accel_ecc_errors_total": {
        "nvidia": "NVML volatile ECC",
        "amd": "ras/*_err_count / amdsmi",
        "oneapi": "Sysman RAS",
        "gaudi": "HLML total ECC errors (uncorrected)",
        "ascend": "DCMI HBM ECC totals",
    },
    "accel_retired_pages": {
        "nvidia": "NVML retired pages (pre-Ampere)",
        "ascend": "DCMI double-bit isolated pages",
    },
    "accel_remapped_rows": {
        "nvidia": "NVML remapped rows (Ampere+)",
        "gaudi": "HLML replaced rows",
    },
    "accel_fault_events_total": {
        "nvidia": "Xid events (NVML event set)",
        "amd": "RAS count increases",
        "oneapi": "Sysman RAS and device state",
        "gaudi": "HLML event set (critical, ECC, DRAM)",
        "ascend": "DCMI health and error codes / npu-smi health",
        "tpu": "sysfs AER, driver status, runtime core errors",
    },
    "accel_temperature_celsius": {
        "nvidia": "NVML",
        "amd": "gpu_metrics / hwmon / amdsmi",
        "oneapi": "Sysman / xe hwmon",
        "cpu": "coretemp, k10temp hwmon",
        "gaudi": "HLML temperature (AIP, board, HBM)",
        "ascend": "DCMI temperature, HBM info / npu-smi Temp",
    },
    "accel_power_watts": {
        "nvidia": "NVML power usage",
        "amd": "gpu_metrics / hwmon / amdsmi",
        "oneapi": "Sysman energy / i915, xe hwmon energy",
        "cpu": "RAPL energy",
        "gaudi": "HLML power usage",
        "ascend": "DCMI power info / npu-smi Power",
    },
    "accel_power_limit_watts": {
        "nvidia": "NVML enforced limit",
        "amd": "hwmon power1_cap / amdsmi",
        "oneapi": "Sysman limits / hwmon power1_max",
        "gaudi": "HLML power management limit",
    },
    "accel_energy_joules_total": {
        "nvidia": "NVML total energy (Volta+)",
        "amd": "gpu_metrics energy_accumulator / amdsmi",
        "oneapi": "Sysman energy / hwmon energy1_input",
        "cpu": "RAPL energy_uj",
        "gaudi": "HLML total energy consumption",
    },
    "accel_clock_hertz": {
        "nvidia": "NVML clocks",
        "amd": "gpu_metrics / hwmon freq*",
        "oneapi": "Sysman frequency / i915, xe act_freq",
        "gaudi": "HLML SoC clock",
        "ascend": "DCMI AI Core and HBM frequency",
    },
    "accel_throttle_active": {
        "nvidia": "NVML clocks event reasons",
        "amd": "gpu_metrics throttle status or residency",
        "oneapi": "Sysman frequency throttle reasons",
        "gaudi": "HLML clock throttle reasons",
    },
    "accel_pcie_throughput_bytes_per_second": {
        "nvidia": "NVML PCIe throughput",
        "gaudi": "HLML PCIe throughput",
    },
    "accel_link_throughput_bytes_per_second": {
        "nvidia": "NVLink throughput fields",
        "amd": "gpu_metrics xGMI accumulators",
    },
    "accel_link_errors_total": {"nvidia": "NVLink error counters"},
    "accel_topology_link_info": {
        "nvidia": "NVLink remote PCI info, NVML topology common ancestor",
        "amd": "KFD topology io_links (xGMI), sysfs PCI tree",
        "oneapi": "sysfs PCI tree",
        "sim": "simulated",
        "gaudi": "HLML RoCE port masks and link state",
        "ascend": "DCMI topology by device pair / npu-smi topo",
        "tpu": "sysfs PCI tree (ICI not published)",
    },
    "accel_topology_distance": {
        "all": "computed from the links (exporter/topology.py), else by NUMA node",
    },
    "accel_device_pod_info": {
        "kubelet": "PodResources API List (devices and DRA dynamic_resources), matched by "
        "GPU/MIG UUID or PCI address, DRA devices through ResourceSlices or driver naming",
    },
    "accel_pod_utilization_ratio": {
        "nvidia": "NVML process utilization samples (smUtil); a MIG instance's GPM figure "
        "when one container holds it",
        "amd": "amdsmi process list engine_usage.gfx (ns) over the poll",
    },
    "accel_pod_memory_used_bytes": {
        "nvidia": "NVML running compute processes (usedGpuMemory), per MIG instance",
        "amd": "amdsmi process list memory_usage.vram_mem",
    },
}


def markdown_table() -> str:
    """docs/exporter/metrics.md's metric table, generated so that it cannot drift from the code."""
    rows = [
        "| metric | type | labels | help | sources by vendor |",
        "|---|---|---|---|---|",
    ]
    for m in CATALOGUE:
        labels = ", ".join(m.labels) if m.labels else ""
        if m.per_device:
            labels = "device, vendor, uuid" + (", " + labels if labels else "")
        by_vendor = SOURCES.get(m.name, {})
        sources = "; ".join(f"{v}: {src}" for v, src in by_vendor.items())
        if not sources:
            sources = "the exporter itself" if not m.per_device else "all backends"
        rows.append(f"| `{m.name}` | {m.type} | {labels} | {m.help} | {sources} |")
    return "\n".join(rows)
