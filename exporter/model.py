"""The vendor-neutral data that backends return.

A backend translates one vendor's library or sysfs into these types and nothing else:
it never builds metric families. Units are the catalogue's base units (bytes, watts,
joules, hertz, celsius, ratios 0–1), so the renderer converts nothing.

A field a device does not support stays ``None`` (or is absent from its dict) and is
then left out of the exposition. It is never reported as 0: a 0 that means "unknown"
would look like a healthy idle device to every rule that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accel_common.remedies import ActionClass


@dataclass(frozen=True)
class DeviceInfo:
    """The identity of one device: what stays the same while the device lives.

    ``device`` is the stable name every series carries (``nvidia0``, ``amd1``,
    ``cpu0``). ``parent`` names the physical device of a partition (a MIG instance,
    an AMD compute partition) and is empty for a whole device.
    """

    device: str
    vendor: str
    uuid: str
    model: str = ""
    pci_bus_id: str = ""
    driver_version: str = ""
    numa_node: str = ""
    parent: str = ""
    profile: str = ""
    # The CPUs local to the device (sysfs ``local_cpulist``, e.g. "0-31,64-95"), so a
    # job can be pinned next to its accelerator; empty when unknown.
    cpu_affinity: str = ""


@dataclass(frozen=True)
class FaultEvent:
    """One vendor fault event (an NVIDIA Xid, an AMD RAS/AFID event, an Intel RAS
    event) seen since the previous read. The poller counts these; the severity comes
    from ``exporter.faults``, never from the backend, so one catalogue decides.

    ``action`` is the driver's live verdict when the driver states one (NVML's GPU
    recovery action, Xid 154's payload, Level Zero's reset reasons); None leaves the
    class to the catalogue. The poller uses the stronger of the two
    (``accel_common.remedies.stronger``).

    ``decoded`` is the class the event's own payload calls for (an NVLink Xid's
    register fields, read from the kernel log): for the codes whose class the
    catalogue leaves to the payload it replaces the catalogue's default, lower or
    higher, and ``action`` still raises it (``exporter.faults.Catalogue.action``)."""

    code: str
    detail: str = ""
    action: ActionClass | None = None
    decoded: ActionClass | None = None


@dataclass(frozen=True)
class ProcessUsage:
    """One process that holds a device, as its vendor library lists it: what the
    per-pod figures are summed from. ``utilization`` is the share of the device (0–1)
    the process kept busy over the last sample period; None when the vendor gives no
    per-process figure (NVML on a MIG instance, an older driver)."""

    pid: int
    utilization: float | None = None
    memory_used_bytes: float | None = None


@dataclass
class Reading:
    """One poll of one device. Cumulative device counters (ECC, energy, link errors)
    are the device's own running totals; fault events are the new ones only."""

    up: bool = True
    # Why the device is down, for the log; never exported as a label.
    down_reason: str = ""
    utilization: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    memory_bandwidth_utilization: float | None = None
    # Where the bandwidth figure came from, e.g. "NVML GPM DRAM_BW_UTIL"; it is named
    # in the metric's HELP text.
    memory_bandwidth_source: str = ""
    # Where this device's telemetry came from, e.g. "Level Zero Sysman" or "i915
    # sysfs"; "none" when the backend knows only the device's identity (and perhaps
    # its memory size). Named in accel_device_info's HELP text, so that a device
    # without telemetry is not taken for an idle one.
    telemetry_source: str = ""
    # type -> count; types: corrected, uncorrected
    ecc_errors: dict[str, float] = field(default_factory=dict)
    # cause -> pages; causes: single_bit_ecc, double_bit_ecc (NVIDIA), ...
    retired_pages: dict[str, float] = field(default_factory=dict)
    # type -> rows; types: correctable, uncorrectable, pending, failure
    remapped_rows: dict[str, float] = field(default_factory=dict)
    fault_events: list[FaultEvent] = field(default_factory=list)
    # sensor -> celsius; sensors: gpu, memory, hotspot, package, ...
    temperatures: dict[str, float] = field(default_factory=dict)
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    # clock -> hertz; clocks: graphics, sm, memory, video
    clocks_hz: dict[str, float] = field(default_factory=dict)
    # reason -> active; reasons are vendor-neutral names (power_cap, hw_slowdown, ...)
    throttle: dict[str, bool] = field(default_factory=dict)
    # direction -> bytes/s; directions: rx, tx
    pcie_bytes_per_second: dict[str, float] = field(default_factory=dict)
    # (link, direction) -> bytes/s
    link_bytes_per_second: dict[tuple[str, str], float] = field(default_factory=dict)
    # (link, type) -> errors; types are the vendor's counter names (crc_flit, replay, ...)
    link_errors: dict[tuple[str, str], float] = field(default_factory=dict)
    # The processes that hold the device (compute processes, MPS clients), for the
    # per-pod figures. Meaningful only when ``processes_listed``: an empty list then
    # says "nobody", while a backend that cannot list processes leaves it False and
    # the device gets no per-pod series at all.
    processes: list[ProcessUsage] = field(default_factory=list)
    processes_listed: bool = False


@dataclass(frozen=True)
class Link:
    """A connection between two devices of one host, as the vendor reports it.

    ``link_type`` is one of nvlink, xgmi, xelink, roce (Gaudi's on-chip RoCE ports),
    hccs (Ascend's HCCS), ici (TPU inter-chip interconnect), pcie_switch,
    pcie_hostbridge, pcie_numa, system; ``links`` counts parallel links (NVLink
    lanes, xGMI links, RoCE ports, ICI ports).
    """

    device: str
    peer_device: str
    link_type: str
    links: int = 1


@dataclass(frozen=True)
class PodAssignment:
    """A container the kubelet assigned a device to. ``device_id`` is the device
    plugin's ID: a GPU or MIG UUID for NVIDIA, a PCI address for AMD and Intel; the
    renderer matches it to a device by UUID or PCI bus ID."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    # The ResourceClaim (in the pod's namespace) that gave the device, when Dynamic
    # Resource Allocation did; empty for a device plugin's extended resource.
    claim: str = ""


class DeviceLostError(Exception):
    """The device stopped answering (fallen off the bus, GPU is lost). The poller
    keeps its identity and exports ``accel_up 0``; the exporter never exits for it."""


class BackendUnavailableError(Exception):
    """The vendor library or driver is missing: the backend is disabled, with this
    message logged once and ``accel_exporter_backend_up 0``.

    ``retry_seconds`` is how soon to discover again; None leaves it to the poller
    (a minute). A backend whose check is cheap and whose resource comes back on its
    own (the kubelet's socket when the kubelet restarts) asks for the next poll."""

    def __init__(self, message: str, retry_seconds: float | None = None) -> None:
        super().__init__(message)
        self.retry_seconds = retry_seconds
