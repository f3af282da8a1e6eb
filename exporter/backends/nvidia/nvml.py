"""The NVIDIA backend: NVML discovery and reads (the ``pynvml`` module of the
nvidia-ml-py distribution).

Why it is built this way:

* ``pynvml`` is imported inside ``discover()``, and tests hand in a fake module through
  the constructor, so a host without the driver loses this backend only, with one clear
  reason (``BackendUnavailableError``), and the tests run the real code paths.
* A field that NVML cannot give (``NotSupported``, ``NoPermission``, a function the
  driver lacks) is left out of the ``Reading``, never reported as 0, and the reason is
  kept in ``self.missing`` so that ``bench/nvml_check.py`` can say why a metric is
  absent on a real GPU; what each NVML answer means is decided in
  ``exporter.backends.nvidia.calls``.
* A GPU that fell off the bus aborts the whole read with ``DeviceLostError``, so a
  half-read device is never shown as up. When it has pending Xid events (Xid 79
  arrives as the GPU falls off the bus), the read returns a down ``Reading`` that
  carries them instead of raising, so the fatal fault is counted at the moment it
  happens.
* The parts with state of their own live beside this module: GPM samples (``gpm``),
  MIG instances (``mig``), NVLink counters (``nvlink``), the Xid event set
  (``events``), the processes on a device (``procs``), the host's GPU topology
  (``topology``), the PCIe samples every GPU's read shares (``pcie``) and the node
  agent's hold on NVML while it resets GPUs (``hold``).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from accel_common.remedies import LOST_CODE, ActionClass
from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.backends.nvidia import gpm, mig, nvlink, procs, topology, verdicts
from exporter.backends.nvidia.calls import LOST, NvmlCalls, codes, init_failure, quietly
from exporter.backends.nvidia.device import (
    CLOCKS,
    ECC,
    REMAPPED,
    RETIRED,
    THROTTLE,
    VENDOR,
    Gpu,
    normalize_bus_id,
)
from exporter.backends.nvidia.events import XidEvents
from exporter.backends.nvidia.hold import AgentHold
from exporter.backends.nvidia.kmsg import KmsgReader
from exporter.backends.nvidia.payloads import Payloads
from exporter.backends.nvidia.pcie import PcieSampler
from exporter.model import (
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    FaultEvent,
    Link,
    Reading,
)
from exporter.pcitopo import cpu_affinity, numa_node

log = logging.getLogger("accel_exporter.nvidia")


class NvidiaBackend(Backend):
    name: ClassVar[str] = "nvidia"

    def __init__(self, options: BackendOptions, nvml: Any | None = None) -> None:
        super().__init__(options)
        self._given_nvml = nvml
        self._nvml: Any = None
        self._initialized = False
        # The GPUs' MIG instances as discovered (``mig.layout``).
        self._layout: tuple[tuple[str, tuple[str, ...]], ...] = ()
        self._gpus: list[Gpu] = []
        self._by_name: dict[str, Gpu] = {}
        self._events: XidEvents | None = None
        # NVLink Xid payloads from the kernel log (--path.kmsg), joined to the events.
        self._payloads = Payloads(None)
        # device -> field key -> why NVML gave no value in the last read of that device.
        self.missing = MissingFields(log)
        self._calls = NvmlCalls(None, self.missing)
        self._pcie = PcieSampler(self._calls)
        # The node agent's hold on NVML for a GPU reset (``hold``).
        self._hold = AgentHold(options.nvml_hold_dir)

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
        hold = self._hold.current()
        if hold is not None:  # the node agent resets GPUs: NVML stays closed
            raise self._hold.let_go(hold)
        nvml = self._nvml = self._load()
        self._calls = NvmlCalls(nvml, self.missing)
        self._pcie = PcieSampler(self._calls)
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise BackendUnavailableError(init_failure(nvml, e)) from e
        self._initialized = True
        try:
            return self._discover(nvml)
        except BaseException:
            self.close()
            raise

    def _discover(self, nvml: Any) -> list[DeviceInfo]:
        self._gpus, self._by_name = [], {}
        self.missing.clear()
        driver = str(nvml.nvmlSystemGetDriverVersion())
        self._events = XidEvents(nvml, self.missing)
        self._events.open()
        self._payloads.close()
        path = self.options.kmsg_path
        self._payloads = Payloads(KmsgReader(path) if path is not None else None)
        devices: list[DeviceInfo] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                gpu = self._discover_gpu(nvml, index, driver)
            except nvml.NVMLError as e:
                if getattr(e, "value", None) in codes(nvml, *LOST):
                    # Lost before the exporter started: no identity to read, but the
                    # index is a GPU the node has, so it is exported down and its loss
                    # is counted (a reboot is what brings it back).
                    log.warning("nvidia%d: lost at discovery: %s", index, type(e).__name__)
                    devices.append(DeviceInfo(f"nvidia{index}", VENDOR, "", driver_version=driver))
                    continue
                # Without a handle and a UUID there is no identity to keep.
                log.warning(
                    "nvidia%d: skipped, NVML could not identify it: %s", index, type(e).__name__
                )
                continue
            self._events.watch(gpu)
            for d in (gpu, *gpu.children):
                self._by_name[d.name] = d
                devices.append(d.info)
            self._gpus.append(gpu)
        self._layout = mig.layout(nvml, self._gpus)
        return devices

    def layout_changed(self) -> bool:
        """MIG instances made or destroyed since discovery (the node agent's layouts),
        or the node agent's hold on NVML for a reset (discovery then lets go)."""
        nvml = self._nvml
        if nvml is None or not self._initialized:
            return False
        if self._hold.current() is not None:
            return True
        try:
            return mig.layout(nvml, self._gpus) != self._layout
        except Exception:  # never the reason a poll fails
            return False

    def _discover_gpu(self, nvml: Any, index: int, driver: str) -> Gpu:
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
        gpu = Gpu(info, handle, index)
        nvlink.discover(nvml, gpu)
        gpu.children = mig.discover(nvml, gpu)
        gpm.discover(nvml, gpu)  # last: it allocates samples that a failure above would leak
        return gpu

    def _numa_node(self, bus_id: str) -> str:
        # Read through the bounded reader; an unusable file leaves the label empty.
        return numa_node(self.options.sysfs, bus_id)

    # -- topology ----------------------------------------------------------------

    def topology(self) -> list[Link]:
        """NVLink peers, and the PCIe path of every pair without NVLink, so every pair
        has a place on the distance scale (``exporter.backends.nvidia.topology``)."""
        if self._nvml is None:
            return []
        return topology.links(self._nvml, self._gpus)

    # -- reading -----------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        gpu = self._by_name.get(device.device)
        if gpu is None or self._nvml is None:
            raise DeviceLostError(f"{device.device} is not known to NVML any more")
        # The kernel log first: the driver prints an Xid's line before it posts the
        # event, so the payload is in hand when the event is drained (``payloads``).
        self._payloads.poll()
        events = self._events.take(gpu.name) if self._events is not None else []
        self.missing.begin(gpu.name, gpu.static)
        if events:
            # The driver's verdict travels with the Xids it follows, and an NVLink
            # Xid's payload grades it.
            events = self._payloads.apply(gpu, verdicts.apply(events, self._verdict(gpu)))
        try:
            reading = self._read_mig(gpu) if gpu.parent is not None else self._read_gpu(gpu)
        except DeviceLostError as e:
            gpu.lost = True
            gpu.gpm_have_previous = False
            gpu.link_previous.clear()
            if events:
                # The events are the news (Xid 79 is how a GPU falls off the bus):
                # hand them over with the down reading rather than hold them back.
                # The loss itself is an event too (the poller counts it once).
                events.append(FaultEvent(LOST_CODE, str(e)))
                return Reading(up=False, down_reason=f"device lost: {e}", fault_events=events)
            raise
        gpu.lost = False
        reading.fault_events = events
        return reading

    def _verdict(self, gpu: Gpu) -> ActionClass | None:
        """The physical GPU's recovery action; None when NVML has none or the GPU
        no longer answers (the read that follows says so)."""
        try:
            return verdicts.read(self._calls, gpu.parent or gpu)
        except DeviceLostError:
            return None

    def _read_mig(self, gpu: Gpu) -> Reading:
        r = Reading()
        self._memory(gpu, r)
        gpm.read_mig(self._calls, gpu, r)
        procs.read(self._calls, gpu, r)
        return r

    def _read_gpu(self, gpu: Gpu) -> Reading:
        nvml, h, calls = self._nvml, gpu.handle, self._calls
        r = Reading()
        util = calls.call(gpu, "utilization", "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            r.utilization = util.gpu / 100.0
        self._memory(gpu, r)
        gpm.bandwidth(calls, gpu, r, util)
        self._ecc(gpu, r)
        for key, cause in RETIRED:
            pages = calls.call(
                gpu, f"retired_pages.{key}", "nvmlDeviceGetRetiredPages", h, getattr(nvml, cause)
            )
            if pages is not None:
                r.retired_pages[key] = float(len(pages))
        rows = calls.call(
            gpu, tuple(f"remapped_rows.{k}" for k in REMAPPED), "nvmlDeviceGetRemappedRows", h
        )
        if rows is not None:
            for key, value in zip(REMAPPED, rows, strict=True):
                r.remapped_rows[key] = float(value)
        self._temperature(gpu, r)
        mw = calls.call(gpu, "power_watts", "nvmlDeviceGetPowerUsage", h)
        if mw is not None:
            r.power_watts = mw / 1000.0
        mw = calls.call(gpu, "power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit", h)
        if mw is not None:
            r.power_limit_watts = mw / 1000.0
        mj = calls.call(gpu, "energy_joules", "nvmlDeviceGetTotalEnergyConsumption", h)
        if mj is not None:
            r.energy_joules = mj / 1000.0
        for key, clock in CLOCKS:
            mhz = calls.call(
                gpu, f"clocks_hz.{key}", "nvmlDeviceGetClockInfo", h, getattr(nvml, clock)
            )
            if mhz is not None:
                r.clocks_hz[key] = mhz * 1e6
        self._throttle(gpu, r)
        # Sampled over 20 ms in the driver, every GPU's at once (``pcie``).
        self._pcie.read(self._gpus, gpu, r)
        active = nvlink.read_errors(calls, gpu, r)
        nvlink.read_field_values(calls, gpu, r, active)
        procs.read(calls, gpu, r)
        return r

    def _memory(self, gpu: Gpu, r: Reading) -> None:
        nvml, calls = self._nvml, self._calls
        keys = ("memory_used_bytes", "memory_total_bytes")
        mem = None
        version = getattr(nvml, "nvmlMemory_v2", None)
        if gpu.memory_v2 and version is not None:
            # v2 counts reserved memory apart from used, as nvidia-smi does; v1's
            # "used" includes the driver's reservation.
            mem, err = calls.attempt(gpu, "nvmlDeviceGetMemoryInfo", gpu.handle, version)
            if err is not None:
                if err.value in codes(
                    nvml, "FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH", "NOT_SUPPORTED"
                ):
                    gpu.memory_v2 = False
                else:
                    calls.record(gpu, keys, err)
                    return
        if mem is None:
            mem = calls.call(gpu, keys, "nvmlDeviceGetMemoryInfo", gpu.handle)
        if mem is not None:
            r.memory_used_bytes = float(mem.used)
            r.memory_total_bytes = float(mem.total)

    def _ecc(self, gpu: Gpu, r: Reading) -> None:
        nvml, calls = self._nvml, self._calls
        keys = tuple(f"ecc_errors.{k}" for k, _ in ECC)
        mode = calls.call(gpu, keys, "nvmlDeviceGetEccMode", gpu.handle)
        if mode is None:
            return
        if mode[0] != nvml.NVML_FEATURE_ENABLED:
            self.missing.note(gpu.name, keys, "ECC mode is disabled")
            return
        for key, error_type in ECC:
            n = calls.call(
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

    def _temperature(self, gpu: Gpu, r: Reading) -> None:
        nvml, calls = self._nvml, self._calls
        key = "temperatures.gpu"
        if gpu.temperature_v and key not in gpu.static:
            # nvmlDeviceGetTemperature is deprecated (to go in CUDA 14); the V form is
            # only in recent drivers and bindings, so fall back when it is missing.
            try:
                c, err = calls.attempt(
                    gpu, "nvmlDeviceGetTemperatureV", gpu.handle, nvml.NVML_TEMPERATURE_GPU
                )
            except AttributeError:
                c, err = None, nvml.NVMLError(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if err is None:
                r.temperatures["gpu"] = float(c)
                return
            if err.value not in codes(nvml, "FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH"):
                calls.record(gpu, (key,), err, static_ok=True)
                return
            gpu.temperature_v = False
        c = calls.call(gpu, key, "nvmlDeviceGetTemperature", gpu.handle, nvml.NVML_TEMPERATURE_GPU)
        if c is not None:
            r.temperatures["gpu"] = float(c)

    def _throttle(self, gpu: Gpu, r: Reading) -> None:
        nvml, calls = self._nvml, self._calls
        key = "throttle"
        mask = None
        if gpu.clocks_event_api and key not in gpu.static:
            # Renamed from "throttle reasons" in driver 535; the bits are the same.
            try:
                mask, err = calls.attempt(gpu, "nvmlDeviceGetCurrentClocksEventReasons", gpu.handle)
            except AttributeError:
                mask, err = None, nvml.NVMLError(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            if err is not None:
                if err.value != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    calls.record(gpu, (key,), err, static_ok=True)
                    return
                gpu.clocks_event_api = False
        if mask is None:
            mask = calls.call(gpu, key, "nvmlDeviceGetCurrentClocksThrottleReasons", gpu.handle)
        if mask is None:
            return
        for name, suffix in THROTTLE:
            bit = getattr(nvml, f"nvmlClocksEventReason{suffix}", None)
            if bit is None:
                bit = getattr(nvml, f"nvmlClocksThrottleReason{suffix}")
            r.throttle[name] = bool(mask & bit)

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
        if reading.processes_listed:
            out["processes"] = float(len(reading.processes))
            shares = [p.utilization for p in reading.processes if p.utilization is not None]
            if shares or "process_utilization" not in self.missing.get(device.device, {}):
                out["process_utilization"] = sum(shares)
        return out

    def close(self) -> None:
        nvml = self._nvml
        if nvml is None or not self._initialized:
            return
        self._pcie.close()
        for gpu in self._gpus:
            for d in (gpu, *gpu.children):
                gpm.free(nvml, d)
        if self._events is not None:
            self._events.close()
        self._payloads.close()
        quietly(nvml.nvmlShutdown)
        self._initialized = False
