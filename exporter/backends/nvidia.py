"""NVIDIA GPUs through NVML (the ``pynvml`` module of the nvidia-ml-py distribution).

Why it is built this way:

* ``pynvml`` is imported inside ``discover()``, and tests hand in a fake module through
  the constructor, so a host without the driver loses this backend only, with one clear
  reason (``BackendUnavailableError``), and the tests run the real code paths.
* A field that NVML cannot give (``NotSupported``, ``NoPermission``, a function the
  driver lacks) is left out of the ``Reading``, never reported as 0, and the reason is
  kept in ``self.missing`` so that ``bench/nvml_check.py`` can say why a metric is
  absent on a real GPU. Answers that cannot change while the driver is loaded
  (``NotSupported``, ``FunctionNotFound``, ``NoPermission``) are remembered per device,
  so a GPU without, say, memory temperature is not asked again on every poll and
  nothing is logged for it: that is normal, not an error.
* A GPU that fell off the bus answers ``GpuIsLost`` (or ``GpuNotFound``,
  ``ResetRequired``, or ``Unknown`` once it has been lost) to any call: that aborts the
  whole read with ``DeviceLostError``, so a half-read device is never shown as up.
* Rates are computed between consecutive polls from NVML's own cumulative counters
  (GPM samples, NVLink KiB counters with their NVML timestamps), so the figure covers the
  whole poll interval instead of a short window, and the first poll reports nothing
  rather than a made-up 0.
* Memory bandwidth comes from GPM ``DRAM_BW_UTIL`` (Hopper and newer), which is a
  fraction of peak DRAM bandwidth. Older GPUs only have NVML's "memory utilization",
  the fraction of time the memory controller was busy; the source is named in the
  metric's HELP text so that nobody compares the two as if they were one figure.
* Xid events come through one NVML event set for the whole backend. The set is drained
  without blocking at every ``read()``; events for other devices are kept until their
  own read, so nothing is lost whatever order the poller reads devices in. When a lost
  GPU has pending events (Xid 79 arrives as the GPU falls off the bus), the read returns
  a down ``Reading`` that carries them instead of raising, so the fatal fault is
  counted at the moment it happens.
* MIG instances are child devices (``nvidia3_mig9``) with their own memory; GPU-wide
  figures (power, clocks, ECC, NVLink) stay on the parent, where NVML reports them.
  On a GPU with GPM, each GPU instance also has its own utilization (GPM
  ``GRAPHICS_UTIL``) and memory bandwidth (``DRAM_BW_UTIL``), from per-instance
  samples (``nvmlGpmMigSampleGet``) taken at every poll: NVML has no other
  utilization in MIG mode, for the instances or for the whole GPU.
"""

from __future__ import annotations

import ctypes
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from exporter.backends.base import Backend, BackendOptions
from exporter.model import (
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    FaultEvent,
    Link,
    Reading,
)
from exporter.pcitopo import cpu_affinity

log = logging.getLogger("accel_exporter.nvidia")

VENDOR = "nvidia"
GPM_SOURCE = "NVML GPM DRAM_BW_UTIL"
UTILIZATION_SOURCE = "NVML memory utilization (busy time, not bandwidth)"
FIRST_SAMPLE = "first sample taken; a rate needs two polls"

# NVML reports throughput in KB/s (PCIe) and KiB (NVLink counters): 1024 bytes.
KIB = 1024.0
# Sentinel NVML puts in nvmlEventData_t.gpuInstanceId / computeInstanceId when an
# event is not attributable to one MIG instance (NVML_GPU_INSTANCE_ID_ANY).
_INSTANCE_ANY = 0xFFFFFFFF
# An event set is drained at every read; this bounds one drain so that an event storm
# cannot keep a read from finishing.
_MAX_EVENTS_PER_DRAIN = 1024
# Events buffered for a device that is not being read (its backend hung, say).
_MAX_PENDING_EVENTS = 1024

# Reading key -> NVML clock type constant.
_CLOCKS: tuple[tuple[str, str], ...] = (
    ("graphics", "NVML_CLOCK_GRAPHICS"),
    ("sm", "NVML_CLOCK_SM"),
    ("memory", "NVML_CLOCK_MEM"),
    ("video", "NVML_CLOCK_VIDEO"),
)
# Reading key -> suffix of nvmlClocksEventReason* (nvmlClocksThrottleReason* before
# driver 535; the bit values are the same).
_THROTTLE: tuple[tuple[str, str], ...] = (
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
_LINK_ERRORS: tuple[tuple[str, str], ...] = (
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
)
_ECC: tuple[tuple[str, str], ...] = (
    ("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
    ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
)
_RETIRED: tuple[tuple[str, str], ...] = (
    ("single_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
    ("double_bit_ecc", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
)
_REMAPPED = ("correctable", "uncorrectable", "pending", "failure")
_PCIE: tuple[tuple[str, str], ...] = (
    ("rx", "NVML_PCIE_UTIL_RX_BYTES"),
    ("tx", "NVML_PCIE_UTIL_TX_BYTES"),
)
_LINK_THROUGHPUT: tuple[tuple[str, str], ...] = (
    ("rx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"),
    ("tx", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"),
)

# Every catalogue field this backend can report, by the key that ``fields()`` and
# ``missing`` use: after a read, each key is either found or has a reason.
FIELDS: tuple[str, ...] = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_bandwidth_utilization",
    *(f"ecc_errors.{k}" for k, _ in _ECC),
    *(f"retired_pages.{k}" for k, _ in _RETIRED),
    *(f"remapped_rows.{k}" for k in _REMAPPED),
    "fault_events",
    "temperatures.gpu",
    "temperatures.memory",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    *(f"clocks_hz.{k}" for k, _ in _CLOCKS),
    "throttle",
    *(f"pcie_bytes_per_second.{k}" for k, _ in _PCIE),
    *(f"link_bytes_per_second.{k}" for k, _ in _LINK_THROUGHPUT),
    *(f"link_errors.{k}" for k, _ in _LINK_ERRORS),
)
_LINK_KEYS = tuple(k for k in FIELDS if k.startswith("link_"))
# What a MIG instance reports itself; the rest is the parent GPU's.
_MIG_OWN = ("memory_used_bytes", "memory_total_bytes", "fault_events")
_MIG_NAME = re.compile(r"^(?P<model>.*?)\s+MIG\s+(?P<profile>\S+)\s*$")


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


def _address(handle: Any) -> int:
    """A stable key for an NVML handle (a ctypes pointer): the address it holds.
    Two handle objects for one device compare unequal; their addresses do not."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


@dataclass
class _Gpu:
    """What the backend keeps about one physical GPU or MIG instance between polls."""

    info: DeviceInfo
    handle: Any
    index: int
    parent: _Gpu | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    children: list[_Gpu] = field(default_factory=list)
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

    @property
    def name(self) -> str:
        return self.info.device

    @property
    def is_lost(self) -> bool:
        return self.lost or (self.parent is not None and self.parent.lost)


class NvidiaBackend(Backend):
    name: ClassVar[str] = "nvidia"

    def __init__(self, options: BackendOptions, nvml: Any | None = None) -> None:
        super().__init__(options)
        self._given_nvml = nvml
        self._nvml: Any = None
        self._initialized = False
        self._gpus: list[_Gpu] = []
        self._by_name: dict[str, _Gpu] = {}
        self._by_address: dict[int, _Gpu] = {}
        self._event_set: Any = None
        self._pending: dict[str, list[FaultEvent]] = {}
        self._logged: set[tuple[str, str, str]] = set()
        # device -> field key -> why NVML gave no value in the last read of that device.
        self.missing: dict[str, dict[str, str]] = {}

    # -- discovery ---------------------------------------------------------------

    def _load(self) -> Any:
        if self._given_nvml is not None:
            return self._given_nvml
        try:
            import pynvml
        except ImportError as e:
            raise BackendUnavailableError(
                f"the pynvml module is missing ({e}): install accel-fleet[nvidia] "
                "(the nvidia-ml-py distribution)"
            ) from e
        return pynvml

    def discover(self) -> list[DeviceInfo]:
        if self._initialized:  # asked again after a failure: start from scratch
            self.close()
        nvml = self._nvml = self._load()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise BackendUnavailableError(_init_failure(nvml, e)) from e
        self._initialized = True
        try:
            return self._discover(nvml)
        except BaseException:
            self.close()
            raise

    def _discover(self, nvml: Any) -> list[DeviceInfo]:
        self._gpus, self._by_name, self._by_address = [], {}, {}
        self._pending, self.missing = {}, {}
        driver = str(nvml.nvmlSystemGetDriverVersion())
        try:
            self._event_set = nvml.nvmlEventSetCreate()
            event_reason = ""
        except nvml.NVMLError as e:
            self._event_set = None
            event_reason = f"nvmlEventSetCreate: {type(e).__name__}"
        devices: list[DeviceInfo] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                gpu = self._discover_gpu(nvml, index, driver)
            except nvml.NVMLError as e:
                # Without a handle and a UUID there is no identity to keep.
                log.warning(
                    "nvidia%d: skipped, NVML could not identify it: %s", index, type(e).__name__
                )
                continue
            self._register_events(gpu, event_reason)
            for d in (gpu, *gpu.children):
                self._by_name[d.name] = d
                devices.append(d.info)
            self._gpus.append(gpu)
            self._by_address[_address(gpu.handle)] = gpu
        return devices

    def _discover_gpu(self, nvml: Any, index: int, driver: str) -> _Gpu:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        bus_id = normalize_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
        info = DeviceInfo(
            device=f"nvidia{index}",
            vendor=VENDOR,
            uuid=str(nvml.nvmlDeviceGetUUID(handle)),
            model=str(nvml.nvmlDeviceGetName(handle)),
            pci_bus_id=bus_id,
            driver_version=driver,
            numa_node=self._numa_node(bus_id),
            cpu_affinity=cpu_affinity(self.options.sysfs, bus_id),
        )
        gpu = _Gpu(info, handle, index)
        self._discover_links(gpu)
        gpu.children = self._discover_mig(gpu)
        self._discover_gpm(gpu)  # last: it allocates samples that a failure above would leak
        return gpu

    def _numa_node(self, bus_id: str) -> str:
        path = self.options.sysfs / "bus" / "pci" / "devices" / bus_id / "numa_node"
        try:
            node = path.read_text().strip()
        except OSError:
            return ""
        # The kernel writes -1 when the platform does not say (single-socket hosts, VMs).
        return "" if node in ("", "-1") else node

    def _discover_gpm(self, gpu: _Gpu) -> None:
        nvml = self._nvml
        reason = ""
        try:
            supported = bool(nvml.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice)
            if supported:
                for _ in range(2):
                    gpu.gpm_samples.append(nvml.nvmlGpmSampleAlloc())
            else:
                reason = "GPM not supported by this GPU (Hopper and newer)"
        except nvml.NVMLError as e:
            reason = f"GPM: {type(e).__name__}"
        except AttributeError:
            reason = "this pynvml has no GPM functions"
        if reason:
            for sample in gpu.gpm_samples:
                _quietly(nvml.nvmlGpmSampleFree, sample)
            gpu.gpm_samples = []
            log.debug("%s: memory bandwidth from NVML memory utilization: %s", gpu.name, reason)
            return
        self._discover_mig_gpm(gpu)

    def _discover_mig_gpm(self, gpu: _Gpu) -> None:
        """Two GPM samples per MIG GPU instance, the only per-instance utilization NVML
        has (nvmlDeviceGetUtilizationRates answers NotSupported in MIG mode). GPM
        measures a GPU instance, so a GPU instance split into several compute
        instances keeps no figure: giving each compute instance the whole GPU
        instance's activity would count the same work twice."""
        nvml = self._nvml
        for child in gpu.children:
            if sum(c.gpu_instance == child.gpu_instance for c in gpu.children) > 1:
                reason = "GPM measures the GPU instance, which is split in compute instances"
                child.static["utilization"] = child.static["memory_bandwidth_utilization"] = reason
                continue
            try:
                for _ in range(2):
                    child.gpm_samples.append(nvml.nvmlGpmSampleAlloc())
            except nvml.NVMLError as e:
                for sample in child.gpm_samples:
                    _quietly(nvml.nvmlGpmSampleFree, sample)
                child.gpm_samples = []
                log.debug("%s: no GPM samples: %s", child.name, type(e).__name__)
                continue
            child.static.pop("utilization", None)
            child.static.pop("memory_bandwidth_utilization", None)

    def _discover_links(self, gpu: _Gpu) -> None:
        """Finds which NVLink links exist, once: links past the GPU's own count answer
        InvalidArgument, and asking all NVML_NVLINK_MAX_LINKS on every poll would be
        wasted calls."""
        nvml = self._nvml
        for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
            try:
                nvml.nvmlDeviceGetNvLinkState(gpu.handle, link)
            except nvml.NVMLError as e:
                if e.value == nvml.NVML_ERROR_INVALID_ARGUMENT:
                    continue  # no such link on this GPU
                if e.value in _codes(nvml, *_LOST):
                    raise
                if not gpu.links:
                    reason = f"no NVLink: {type(e).__name__}"
                    for key in _LINK_KEYS:
                        gpu.static[key] = reason
                break
            gpu.links.append(link)
        if not gpu.links and not any(k in gpu.static for k in _LINK_KEYS):
            for key in _LINK_KEYS:
                gpu.static[key] = "no NVLink links on this GPU"

    def _discover_mig(self, gpu: _Gpu) -> list[_Gpu]:
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(gpu.handle)
        except nvml.NVMLError:
            return []  # not MIG-capable: a whole GPU, which is the common case
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return []
        found: list[tuple[int, int, Any, str, str]] = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
            except nvml.NVMLError as e:
                if e.value in (nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue  # an empty slot: instances need not be contiguous
                raise
            try:
                gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
                ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
                uuid = str(nvml.nvmlDeviceGetUUID(mig))
                name = str(nvml.nvmlDeviceGetName(mig))
            except nvml.NVMLError as e:
                log.warning("%s: MIG slot %d skipped: %s", gpu.name, slot, type(e).__name__)
                continue
            found.append((gi, ci, mig, uuid, name))
        per_gi: dict[int, int] = {}
        for gi, *_ in found:
            per_gi[gi] = per_gi.get(gi, 0) + 1
        children: list[_Gpu] = []
        for gi, ci, mig, uuid, name in found:
            # One compute instance per GPU instance is the usual layout, and its name
            # is nvidiaN_migGI; a GPU instance split further names each compute instance.
            suffix = f"_mig{gi}" + (f"_ci{ci}" if per_gi[gi] > 1 else "")
            m = _MIG_NAME.match(name)
            info = DeviceInfo(
                device=f"{gpu.name}{suffix}",
                vendor=VENDOR,
                uuid=uuid,
                model=m.group("model") if m else gpu.info.model,
                pci_bus_id=gpu.info.pci_bus_id,
                driver_version=gpu.info.driver_version,
                numa_node=gpu.info.numa_node,
                cpu_affinity=gpu.info.cpu_affinity,
                parent=gpu.name,
                profile=m.group("profile") if m else "",
            )
            child = _Gpu(info, mig, gpu.index, parent=gpu, gpu_instance=gi, compute_instance=ci)
            for key in FIELDS:
                if key not in _MIG_OWN:
                    child.static[key] = f"GPU-wide: reported on {gpu.name}"
            # Until GPM samples are allocated for it (``_discover_mig_gpm``): NVML's
            # only per-instance load figures are GPM's.
            reason = "no GPM on this GPU: NVML has no other per-MIG-instance load figure"
            child.static["utilization"] = child.static["memory_bandwidth_utilization"] = reason
            children.append(child)
        return children

    def _register_events(self, gpu: _Gpu, event_reason: str) -> None:
        nvml = self._nvml
        reason = event_reason
        if not reason:
            try:
                nvml.nvmlDeviceRegisterEvents(
                    gpu.handle, nvml.nvmlEventTypeXidCriticalError, self._event_set
                )
                gpu.events_registered = True
            except nvml.NVMLError as e:
                reason = f"nvmlDeviceRegisterEvents: {type(e).__name__}"
        if reason:
            for d in (gpu, *gpu.children):
                d.static["fault_events"] = reason

    # -- topology ----------------------------------------------------------------

    def topology(self) -> list[Link]:
        """NVLink peers. Links that end on an NVSwitch (HGX boards) connect the GPU
        to every other switch-attached GPU, as ``nvidia-smi topo -m`` shows them
        (NV18 between every pair of an 8-GPU H100 board). Pairs without NVLink get
        their PCIe path instead, so every pair has a place on the distance scale."""
        nvml = self._nvml
        if nvml is None:
            return []
        by_bus = {g.info.pci_bus_id: g for g in self._gpus}
        direct: dict[tuple[str, str], int] = {}
        switched: dict[str, int] = {}
        switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        for gpu in self._gpus:
            for link in gpu.links:
                try:
                    if not nvml.nvmlDeviceGetNvLinkState(gpu.handle, link):
                        continue
                    remote = normalize_bus_id(
                        nvml.nvmlDeviceGetNvLinkRemotePciInfo(gpu.handle, link).busId
                    )
                except nvml.NVMLError:
                    continue  # topology is best effort: it must never fail discovery
                peer = by_bus.get(remote)
                if peer is not None and peer is not gpu:
                    key = (gpu.name, peer.name)
                    direct[key] = direct.get(key, 0) + 1
                    continue
                try:
                    kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(gpu.handle, link)
                except (nvml.NVMLError, AttributeError):
                    continue
                if kind == switch_type:
                    switched[gpu.name] = switched.get(gpu.name, 0) + 1
        links = dict(direct)
        for a, na in switched.items():
            for b, nb in switched.items():
                if a != b:
                    links[(a, b)] = links.get((a, b), 0) + min(na, nb)
        order = {g.name: g.index for g in self._gpus}
        typed: dict[tuple[str, str], tuple[str, int]] = {
            pair: ("nvlink", n) for pair, n in links.items()
        }
        typed.update(self._pcie_links(set(links)))
        return [
            Link(a, b, kind, n)
            for (a, b), (kind, n) in sorted(
                typed.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]])
            )
        ]

    def _pcie_links(self, nvlinked: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, int]]:
        """The PCIe path between every pair of GPUs that NVLink does not join, as NVML
        sees it (``nvmlDeviceGetTopologyCommonAncestor``, what ``nvidia-smi topo -m``
        prints): NVML knows the tree even where sysfs is hidden from the container.
        A pair NVML cannot place is left out, and the distance matrix then places it
        by NUMA node."""
        nvml = self._nvml
        levels = _topology_levels(nvml)
        out: dict[tuple[str, str], tuple[str, int]] = {}
        for i, a in enumerate(self._gpus):
            for b in self._gpus[i + 1 :]:
                if (a.name, b.name) in nvlinked or (b.name, a.name) in nvlinked:
                    continue
                try:
                    level = nvml.nvmlDeviceGetTopologyCommonAncestor(a.handle, b.handle)
                except (nvml.NVMLError, AttributeError):
                    continue  # an old driver, or a GPU gone: best effort, never fatal
                kind = levels.get(int(level))
                if kind is not None:
                    out[(a.name, b.name)] = (kind, 1)
                    out[(b.name, a.name)] = (kind, 1)
        return out

    # -- reading -----------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        gpu = self._by_name.get(device.device)
        if gpu is None or self._nvml is None:
            raise DeviceLostError(f"{device.device} is not known to NVML any more")
        self._drain_events()
        events = self._pending.pop(gpu.name, [])
        self.missing[gpu.name] = dict(gpu.static)
        try:
            reading = self._read_mig(gpu) if gpu.parent is not None else self._read_gpu(gpu)
        except DeviceLostError as e:
            gpu.lost = True
            gpu.gpm_have_previous = False
            gpu.link_previous.clear()
            if events:
                # The events are the news (Xid 79 is how a GPU falls off the bus):
                # hand them over with the down reading rather than hold them back.
                return Reading(up=False, down_reason=f"device lost: {e}", fault_events=events)
            raise
        gpu.lost = False
        reading.fault_events = events
        return reading

    def _read_mig(self, gpu: _Gpu) -> Reading:
        r = Reading()
        self._memory(gpu, r)
        self._mig_gpm(gpu, r)
        return r

    def _mig_gpm(self, gpu: _Gpu, r: Reading) -> None:
        """GPM of one GPU instance between this poll's sample and the previous one:
        GRAPHICS_UTIL (the fraction of time any kernel ran, what NVML's whole-GPU
        utilization and DCGM's GR_ENGINE_ACTIVE measure, so a MIG instance and a whole
        GPU read alike) and DRAM_BW_UTIL. NVML samples a GPU instance through the
        parent GPU's handle and the GPU instance id."""
        keys = ("utilization", "memory_bandwidth_utilization")
        if not gpu.gpm_samples or gpu.parent is None or gpu.gpu_instance is None:
            return
        if all(k in gpu.static for k in keys):  # NotSupported once: not asked again
            return
        nvml = self._nvml
        current = gpu.gpm_samples[gpu.gpm_next]
        previous = gpu.gpm_samples[gpu.gpm_next ^ 1]
        _, err = self._try(gpu, "nvmlGpmMigSampleGet", gpu.parent.handle, gpu.gpu_instance, current)
        if err is not None:
            gpu.gpm_have_previous = False
            self._record(gpu, keys, err, static_ok=True)
            return
        had_previous = gpu.gpm_have_previous
        gpu.gpm_have_previous = True
        gpu.gpm_next ^= 1
        if not had_previous:
            for key in keys:
                self.missing[gpu.name][key] = FIRST_SAMPLE
            return
        if gpu.gpm_request is None:
            gpu.gpm_request = nvml.c_nvmlGpmMetricsGet_t()
        req = gpu.gpm_request
        req.version = nvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = 2
        req.sample1 = previous  # the older sample first: NVML divides by sample2 - sample1
        req.sample2 = current
        req.metrics[0].metricId = nvml.NVML_GPM_METRIC_GRAPHICS_UTIL
        req.metrics[1].metricId = nvml.NVML_GPM_METRIC_DRAM_BW_UTIL
        _, err = self._try(gpu, "nvmlGpmMetricsGet", req)
        if err is not None:
            self._record(gpu, keys, err)
            return
        for i, key in enumerate(keys):
            metric = req.metrics[i]
            if metric.nvmlReturn != nvml.NVML_SUCCESS:
                self._record(gpu, (key,), nvml.NVMLError(metric.nvmlReturn))
                continue
            if key == "utilization":
                r.utilization = metric.value / 100.0
            else:
                r.memory_bandwidth_utilization = metric.value / 100.0
                r.memory_bandwidth_source = GPM_SOURCE

    def _read_gpu(self, gpu: _Gpu) -> Reading:
        nvml, h = self._nvml, gpu.handle
        r = Reading()
        util = self._call(gpu, "utilization", "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            r.utilization = util.gpu / 100.0
        self._memory(gpu, r)
        self._bandwidth(gpu, r, util)
        self._ecc(gpu, r)
        for key, cause in _RETIRED:
            pages = self._call(
                gpu, f"retired_pages.{key}", "nvmlDeviceGetRetiredPages", h, getattr(nvml, cause)
            )
            if pages is not None:
                r.retired_pages[key] = float(len(pages))
        rows = self._call(
            gpu, tuple(f"remapped_rows.{k}" for k in _REMAPPED), "nvmlDeviceGetRemappedRows", h
        )
        if rows is not None:
            for key, value in zip(_REMAPPED, rows, strict=True):
                r.remapped_rows[key] = float(value)
        self._temperature(gpu, r)
        mw = self._call(gpu, "power_watts", "nvmlDeviceGetPowerUsage", h)
        if mw is not None:
            r.power_watts = mw / 1000.0
        mw = self._call(gpu, "power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit", h)
        if mw is not None:
            r.power_limit_watts = mw / 1000.0
        mj = self._call(gpu, "energy_joules", "nvmlDeviceGetTotalEnergyConsumption", h)
        if mj is not None:
            r.energy_joules = mj / 1000.0
        for key, clock in _CLOCKS:
            mhz = self._call(
                gpu, f"clocks_hz.{key}", "nvmlDeviceGetClockInfo", h, getattr(nvml, clock)
            )
            if mhz is not None:
                r.clocks_hz[key] = mhz * 1e6
        self._throttle(gpu, r)
        for key, counter in _PCIE:
            # Each call samples a byte counter over 20 ms inside the driver.
            kbs = self._call(
                gpu,
                f"pcie_bytes_per_second.{key}",
                "nvmlDeviceGetPcieThroughput",
                h,
                getattr(nvml, counter),
            )
            if kbs is not None:
                r.pcie_bytes_per_second[key] = kbs * KIB
        active = self._nvlink(gpu, r)
        self._field_values(gpu, r, active)
        return r

    def _memory(self, gpu: _Gpu, r: Reading) -> None:
        nvml = self._nvml
        keys = ("memory_used_bytes", "memory_total_bytes")
        mem = None
        version = getattr(nvml, "nvmlMemory_v2", None)
        if gpu.memory_v2 and version is not None:
            # v2 counts reserved memory apart from used, as nvidia-smi does; v1's
            # "used" includes the driver's reservation.
            mem, err = self._try(gpu, "nvmlDeviceGetMemoryInfo", gpu.handle, version)
            if err is not None:
                if err.value in _codes(
                    nvml, "FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH", "NOT_SUPPORTED"
                ):
                    gpu.memory_v2 = False
                else:
                    self._record(gpu, keys, err)
                    return
        if mem is None:
            mem = self._call(gpu, keys, "nvmlDeviceGetMemoryInfo", gpu.handle)
        if mem is not None:
            r.memory_used_bytes = float(mem.used)
            r.memory_total_bytes = float(mem.total)

    def _bandwidth(self, gpu: _Gpu, r: Reading, util: Any) -> None:
        key = "memory_bandwidth_utilization"
        if not gpu.gpm_samples:
            if util is not None:
                r.memory_bandwidth_utilization = util.memory / 100.0
                r.memory_bandwidth_source = UTILIZATION_SOURCE
            else:
                self.missing[gpu.name].setdefault(
                    key, self.missing[gpu.name].get("utilization", "no utilization from NVML")
                )
            return
        nvml = self._nvml
        current = gpu.gpm_samples[gpu.gpm_next]
        previous = gpu.gpm_samples[gpu.gpm_next ^ 1]
        _, err = self._try(gpu, "nvmlGpmSampleGet", gpu.handle, current)
        if err is not None:
            gpu.gpm_have_previous = False
            self._record(gpu, (key,), err)
            return
        had_previous = gpu.gpm_have_previous
        gpu.gpm_have_previous = True
        gpu.gpm_next ^= 1
        if not had_previous:
            self.missing[gpu.name][key] = FIRST_SAMPLE
            return
        if gpu.gpm_request is None:
            gpu.gpm_request = nvml.c_nvmlGpmMetricsGet_t()
        req = gpu.gpm_request
        req.version = nvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = 1
        req.sample1 = previous  # the older sample first: NVML divides by sample2 - sample1
        req.sample2 = current
        req.metrics[0].metricId = nvml.NVML_GPM_METRIC_DRAM_BW_UTIL
        _, err = self._try(gpu, "nvmlGpmMetricsGet", req)
        if err is None and req.metrics[0].nvmlReturn != nvml.NVML_SUCCESS:
            err = nvml.NVMLError(req.metrics[0].nvmlReturn)
        if err is not None:
            self._record(gpu, (key,), err)
            return
        r.memory_bandwidth_utilization = req.metrics[0].value / 100.0
        r.memory_bandwidth_source = GPM_SOURCE

    def _ecc(self, gpu: _Gpu, r: Reading) -> None:
        nvml = self._nvml
        keys = tuple(f"ecc_errors.{k}" for k, _ in _ECC)
        mode = self._call(gpu, keys, "nvmlDeviceGetEccMode", gpu.handle)
        if mode is None:
            return
        if mode[0] != nvml.NVML_FEATURE_ENABLED:
            for key in keys:
                self.missing[gpu.name][key] = "ECC mode is disabled"
            return
        for key, error_type in _ECC:
            n = self._call(
                gpu,
                f"ecc_errors.{key}",
                "nvmlDeviceGetTotalEccErrors",
                gpu.handle,
                getattr(nvml, error_type),
                # Volatile: since the driver loaded, as the catalogue's HELP says; the
                # aggregate count survives reboots and would never reset after repair.
                nvml.NVML_VOLATILE_ECC,
            )
            if n is not None:
                r.ecc_errors[key] = float(n)

    def _temperature(self, gpu: _Gpu, r: Reading) -> None:
        nvml = self._nvml
        key = "temperatures.gpu"
        if gpu.temperature_v and key not in gpu.static:
            # nvmlDeviceGetTemperature is deprecated (to go in CUDA 14); the V form is
            # only in recent drivers and bindings, so fall back when it is missing.
            try:
                c, err = self._try(
                    gpu, "nvmlDeviceGetTemperatureV", gpu.handle, nvml.NVML_TEMPERATURE_GPU
                )
            except AttributeError:
                c, err = None, nvml.NVMLError(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if err is None:
                r.temperatures["gpu"] = float(c)
                return
            if err.value not in _codes(nvml, "FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH"):
                self._record(gpu, (key,), err, static_ok=True)
                return
            gpu.temperature_v = False
        c = self._call(gpu, key, "nvmlDeviceGetTemperature", gpu.handle, nvml.NVML_TEMPERATURE_GPU)
        if c is not None:
            r.temperatures["gpu"] = float(c)

    def _throttle(self, gpu: _Gpu, r: Reading) -> None:
        nvml = self._nvml
        key = "throttle"
        mask = None
        if gpu.clocks_event_api and key not in gpu.static:
            # Renamed from "throttle reasons" in driver 535; the bits are the same.
            try:
                mask, err = self._try(gpu, "nvmlDeviceGetCurrentClocksEventReasons", gpu.handle)
            except AttributeError:
                mask, err = None, nvml.NVMLError(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if err is not None:
                if err.value != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    self._record(gpu, (key,), err, static_ok=True)
                    return
                gpu.clocks_event_api = False
        if mask is None:
            mask = self._call(gpu, key, "nvmlDeviceGetCurrentClocksThrottleReasons", gpu.handle)
        if mask is None:
            return
        for name, suffix in _THROTTLE:
            bit = getattr(nvml, f"nvmlClocksEventReason{suffix}", None)
            if bit is None:
                bit = getattr(nvml, f"nvmlClocksThrottleReason{suffix}")
            r.throttle[name] = bool(mask & bit)

    def _nvlink(self, gpu: _Gpu, r: Reading) -> list[int]:
        """Error counters of the active links; returns them for the throughput read."""
        nvml = self._nvml
        active: list[int] = []
        for link in gpu.links:
            state = self._call(gpu, "nvlink_state", "nvmlDeviceGetNvLinkState", gpu.handle, link)
            if not state:
                continue
            active.append(link)
            for kind, counter in _LINK_ERRORS:
                n = self._call(
                    gpu,
                    f"link_errors.{kind}",
                    "nvmlDeviceGetNvLinkErrorCounter",
                    gpu.handle,
                    link,
                    getattr(nvml, counter),
                )
                if n is not None:
                    r.link_errors[(str(link), kind)] = float(n)
        missing = self.missing[gpu.name]
        missing.pop("nvlink_state", None)  # an internal key, not a catalogue field
        if gpu.links and not active:
            for key in _LINK_KEYS:
                missing.setdefault(key, "no NVLink link is active")
        return active

    def _field_values(self, gpu: _Gpu, r: Reading, active: list[int]) -> None:
        """One nvmlDeviceGetFieldValues call for every field-value metric: memory
        temperature and the per-link NVLink throughput counters (KiB, cumulative)."""
        nvml = self._nvml
        missing = self.missing[gpu.name]
        wanted: list[tuple[str, int, int]] = []  # (key, field id, scope id)
        if "temperatures.memory" not in gpu.static:
            wanted.append(("temperatures.memory", nvml.NVML_FI_DEV_MEMORY_TEMP, 0))
        for link in active:
            for direction, fid in _LINK_THROUGHPUT:
                key = f"link_bytes_per_second.{direction}"
                if key not in gpu.static:
                    wanted.append((key, getattr(nvml, fid), link))
        if not wanted:
            return
        keys = tuple(dict.fromkeys(k for k, _, _ in wanted))
        values = self._call(
            gpu, keys, "nvmlDeviceGetFieldValues", gpu.handle, [(f, s) for _, f, s in wanted]
        )
        if values is None:
            return
        now_us = time.time() * 1e6
        # direction -> why no rate came out this poll, if none did
        no_rate: dict[str, str] = {}
        for (key, _fid, scope), fv in zip(wanted, values, strict=True):
            if fv.nvmlReturn != nvml.NVML_SUCCESS:
                self._record(gpu, (key,), nvml.NVMLError(fv.nvmlReturn), static_ok=True)
                continue
            value = _field_value(nvml, fv)
            if key == "temperatures.memory":
                # Boards without a memory sensor answer success with 0 °C.
                if value > 0:
                    r.temperatures["memory"] = value
                else:
                    missing[key] = "NVML returned 0 (no memory temperature sensor)"
                continue
            direction = key.rsplit(".", 1)[1]
            stamp = float(fv.timestamp) or now_us
            previous = gpu.link_previous.get((scope, direction))
            gpu.link_previous[(scope, direction)] = (value, stamp)
            if previous is None:
                no_rate[direction] = FIRST_SAMPLE
                continue
            kib, then = previous
            if stamp <= then:
                no_rate[direction] = "no time passed since the previous sample"
                continue
            if value < kib:
                no_rate[direction] = "the counter went back (reset); the rate resumes next poll"
                continue
            r.link_bytes_per_second[(str(scope), direction)] = (
                (value - kib) * KIB / ((stamp - then) / 1e6)
            )
        for direction, reason in no_rate.items():
            if not any(d == direction for _, d in r.link_bytes_per_second):
                missing.setdefault(f"link_bytes_per_second.{direction}", reason)

    # -- NVML calls and their failures ------------------------------------------------

    def _try(self, gpu: _Gpu, fn: str, *args: Any) -> tuple[Any, Any]:
        """Calls one NVML function: (value, None), or (None, the NVMLError). A lost
        device raises DeviceLostError instead, which ends the read."""
        nvml = self._nvml
        try:
            return getattr(nvml, fn)(*args), None
        except nvml.NVMLError as e:
            code = getattr(e, "value", None)
            lost = code in _codes(nvml, *_LOST)
            if lost or (code == nvml.NVML_ERROR_UNKNOWN and gpu.is_lost):
                raise DeviceLostError(f"{fn}: {type(e).__name__}") from e
            return None, e

    def _call(self, gpu: _Gpu, keys: str | tuple[str, ...], fn: str, *args: Any) -> Any:
        """Calls one NVML function for the fields ``keys``; None when NVML cannot give
        them, with the reason recorded in ``missing``."""
        keys = (keys,) if isinstance(keys, str) else keys
        if all(k in gpu.static for k in keys):
            return None
        value, err = self._try(gpu, fn, *args)
        if err is not None:
            self._record(gpu, keys, err, static_ok=True)
            return None
        return value

    def _record(self, gpu: _Gpu, keys: tuple[str, ...], err: Any, static_ok: bool = False) -> None:
        nvml = self._nvml
        reason = type(err).__name__
        code = getattr(err, "value", None)
        for key in keys:
            self.missing[gpu.name][key] = reason
            if static_ok and code in _codes(nvml, *_STATIC):
                gpu.static[key] = reason
        if code not in _codes(nvml, *_STATIC, *_QUIET):
            # A transient or unexpected failure: say it once per device and field,
            # not once per poll.
            mark = (gpu.name, ",".join(keys), reason)
            if mark not in self._logged:
                self._logged.add(mark)
                log.warning("%s: NVML gave no %s: %s", gpu.name, "/".join(keys), reason)

    # -- Xid events --------------------------------------------------------------

    def _drain_events(self) -> None:
        nvml = self._nvml
        if self._event_set is None:
            return
        for _ in range(_MAX_EVENTS_PER_DRAIN):
            try:
                data = nvml.nvmlEventSetWait(self._event_set, 0)
            except nvml.NVMLError as e:
                if e.value != nvml.NVML_ERROR_TIMEOUT:  # Timeout: nothing more queued
                    mark = ("", "events", type(e).__name__)
                    if mark not in self._logged:
                        self._logged.add(mark)
                        log.warning("NVML event set: %s", type(e).__name__)
                return
            self._attribute(data)

    def _attribute(self, data: Any) -> None:
        nvml = self._nvml
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return
        gpu = self._by_address.get(_address(data.device))
        if gpu is None:
            try:
                uuid = str(nvml.nvmlDeviceGetUUID(data.device))
            except nvml.NVMLError:
                uuid = ""
            gpu = next((g for g in self._gpus if g.info.uuid == uuid), None)
        code = str(int(data.eventData))
        if gpu is None:
            log.warning("Xid %s on a GPU this exporter does not know; not counted", code)
            return
        target, detail = gpu, ""
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        if gi != _INSTANCE_ANY:
            detail = f"gpu_instance={gi}" + (
                f" compute_instance={ci}" if ci != _INSTANCE_ANY else ""
            )
            matches = [
                c
                for c in gpu.children
                if c.gpu_instance == gi and (ci == _INSTANCE_ANY or c.compute_instance == ci)
            ]
            # One instance matches: it is that instance's fault. None or several (an
            # event for a whole GPU instance split in compute instances): the GPU's.
            if len(matches) == 1:
                target = matches[0]
        pending = self._pending.setdefault(target.name, [])
        if len(pending) >= _MAX_PENDING_EVENTS:
            log.warning(
                "%s: more than %d Xid events unread; dropping Xid %s",
                target.name,
                _MAX_PENDING_EVENTS,
                code,
            )
            return
        pending.append(FaultEvent(code=code, detail=detail))

    # -- reporting and shutdown --------------------------------------------------

    def fields(self, device: DeviceInfo, reading: Reading) -> dict[str, float | str]:
        """The reading flattened to the keys of ``FIELDS`` (only those found), for
        ``bench/nvml_check.py`` and tests: each key is here or in ``missing``."""
        out: dict[str, float | str] = {}
        for key in (
            "utilization",
            "memory_used_bytes",
            "memory_total_bytes",
            "memory_bandwidth_utilization",
            "power_watts",
            "power_limit_watts",
            "energy_joules",
        ):
            value = getattr(reading, key)
            if value is not None:
                out[key] = value
        for name in (
            "ecc_errors",
            "retired_pages",
            "remapped_rows",
            "temperatures",
            "clocks_hz",
            "pcie_bytes_per_second",
        ):
            for k, v in getattr(reading, name).items():
                out[f"{name}.{k}"] = v
        if reading.throttle:
            out["throttle"] = ",".join(k for k, on in reading.throttle.items() if on) or "none"
        for (_link, direction), v in reading.link_bytes_per_second.items():
            key = f"link_bytes_per_second.{direction}"
            out[key] = float(out.get(key, 0.0)) + v
        for (_link, kind), v in reading.link_errors.items():
            key = f"link_errors.{kind}"
            out[key] = float(out.get(key, 0.0)) + v
        if reading.up and "fault_events" not in self.missing.get(device.device, {}):
            out["fault_events"] = float(len(reading.fault_events))
        return out

    def close(self) -> None:
        nvml = self._nvml
        if nvml is None or not self._initialized:
            return
        for gpu in self._gpus:
            for d in (gpu, *gpu.children):
                for sample in d.gpm_samples:
                    _quietly(nvml.nvmlGpmSampleFree, sample)
                d.gpm_samples = []
        if self._event_set is not None:
            _quietly(nvml.nvmlEventSetFree, self._event_set)
            self._event_set = None
        _quietly(nvml.nvmlShutdown)
        self._initialized = False


# Answers that mean the GPU itself is gone, whatever was asked.
_LOST = ("GPU_IS_LOST", "GPU_NOT_FOUND", "RESET_REQUIRED")
# Answers that stay true while the driver is loaded: remembered, asked no more.
_STATIC = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NO_PERMISSION", "DEPRECATED")
# Answers that are normal for some fields at some times: no log line.
_QUIET = (
    "NOT_FOUND",
    "NO_DATA",
    "INVALID_ARGUMENT",
    "ARGUMENT_VERSION_MISMATCH",
    "NOT_READY",
    "VGPU_ECC_NOT_SUPPORTED",
)


def _topology_levels(nvml: Any) -> dict[int, str]:
    """NVML_TOPOLOGY_* level -> the catalogue's link type. INTERNAL (two GPUs of one
    board), SINGLE and MULTIPLE (one or more PCIe switches) are all "behind a common
    switch"; NODE was called CPU in older bindings, and both name the same value."""
    names = (
        ("NVML_TOPOLOGY_INTERNAL", "pcie_switch"),
        ("NVML_TOPOLOGY_SINGLE", "pcie_switch"),
        ("NVML_TOPOLOGY_MULTIPLE", "pcie_switch"),
        ("NVML_TOPOLOGY_HOSTBRIDGE", "pcie_hostbridge"),
        ("NVML_TOPOLOGY_NODE", "pcie_numa"),
        ("NVML_TOPOLOGY_CPU", "pcie_numa"),
        ("NVML_TOPOLOGY_SYSTEM", "system"),
    )
    return {int(v): kind for n, kind in names if (v := getattr(nvml, n, None)) is not None}


def _codes(nvml: Any, *names: str) -> tuple[int, ...]:
    """NVML_ERROR_* values by name, skipping those an older pynvml does not define."""
    return tuple(
        v for v in (getattr(nvml, f"NVML_ERROR_{n}", None) for n in names) if v is not None
    )


def _field_value(nvml: Any, fv: Any) -> float:
    member = {
        nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }.get(fv.valueType, "ullVal")
    if fv.valueType == getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", -1):
        member = "usVal"
    return float(getattr(fv.value, member))


def _init_failure(nvml: Any, e: Any) -> str:
    code = getattr(e, "value", None)
    if code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library not found (libnvidia-ml.so.1): install the NVIDIA driver"
    if code == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (nvmlInit: DriverNotLoaded): load the nvidia module"
    if code == nvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to open the NVIDIA devices (nvmlInit: NoPermission)"
    return f"nvmlInit failed: {type(e).__name__}"


def _quietly(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception as e:  # shutting down: nothing useful to do with the error
        log.debug("%s: %s", getattr(fn, "__name__", fn), e)
