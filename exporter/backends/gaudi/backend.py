"""The gaudi backend: Intel Gaudi accelerators through HLML (``libhlml.so``).

Why it is built this way:

* HLML is reached inside ``discover()``: through Intel's ``pyhlml`` binding where it
  imports and is sound (``exporter.backends.gaudi.binding``), else through ctypes on
  ``libhlml.so`` (``exporter.backends.gaudi.hlml``). Tests hand in the fake's function
  table or its binding through the constructor, so a host without the Gaudi software
  stack loses this backend only, with one clear reason (``BackendUnavailableError``),
  and the tests run the real code paths of both.
* A field HLML cannot give is left out of the ``Reading`` and its reason kept in
  ``self.missing``; what each HLML answer means is decided in
  ``exporter.backends.gaudi.device``.
* A lost device (``HLML_ERROR_AIP_IS_LOST``) aborts its whole read, so a half-read
  device is never shown as up; the first read that finds it lost returns a down
  ``Reading`` with the ``lost`` fault (and any events still queued for it), so the
  fatal fault is counted the moment it happens; later reads raise
  ``DeviceLostError``. Its identity stays, with ``accel_up 0``.
* ``HLML_ERROR_UNINITIALIZED`` in a read means the library was shut down under the
  backend: it initialises HLML again, checks each index still holds the same UUID,
  renews the event set, and reads again once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.backends.gaudi import binding, hlml, topology
from exporter.backends.gaudi.binding import Pyhlml
from exporter.backends.gaudi.device import (
    CLOCKS,
    ECC,
    FIELDS,
    KIB,
    PCIE,
    ROWS,
    STATIC,
    TEMPERATURES,
    THROTTLE,
    VENDOR,
    Gaudi,
    GaudiCalls,
    HlmlReinit,
)
from exporter.backends.gaudi.events import GaudiEvents
from exporter.backends.gaudi.hlml import Hlml, HlmlError, HlmlUnavailable
from exporter.model import (
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    FaultEvent,
    Link,
    Reading,
)
from exporter.pcitopo import cpu_affinity, numa_node

log = logging.getLogger("accel_exporter.gaudi")

TELEMETRY_SOURCE = "HLML"


def normalize_bus_id(bus_id: str) -> str:
    """HLML's ``domain:bus:device.function`` in the kernel's form (lower case, a
    4-digit domain), so it matches sysfs and the device plugin's IDs."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if not sep or rest.count(":") != 1:
        return bus_id
    return f"{int(domain, 16):04x}:{rest}" if domain else bus_id


def init_failure(e: HlmlError, binding: bool = False) -> str:
    """Why ``hlml_init`` failed, in words an operator can act on."""
    if binding and e.code == hlml.ERROR_UNINITIALIZED:
        # What pyhlml raises when it cannot load its library.
        return (
            "HLML library not found (pyhlml could not load /usr/lib/habanalabs/libhlml.so): "
            "install the Intel Gaudi software stack or mount /usr/lib/habanalabs"
        )
    if e.code == hlml.ERROR_DRIVER_NOT_LOADED:
        return "Gaudi driver not loaded (hlml_init: HLML_ERROR_DRIVER_NOT_LOADED): load habanalabs"
    return f"hlml_init failed: {e.reason}"


class GaudiBackend(Backend):
    name: ClassVar[str] = "gaudi"

    def __init__(
        self,
        options: BackendOptions,
        library: Any | None = None,
        paths: Sequence[str] = hlml.LIBRARY_PATHS,
        pyhlml: Any | None = None,
    ) -> None:
        super().__init__(options)
        self._given = library
        self._given_pyhlml = pyhlml
        self._paths = tuple(paths)
        self._lib: Hlml | None = None
        self._initialized = False
        self._gpus: list[Gaudi] = []
        self._by_name: dict[str, Gaudi] = {}
        self._events: GaudiEvents | None = None
        # device -> field key -> why HLML gave no value in the last read of that device.
        self.missing = MissingFields(log)
        self._calls = GaudiCalls(None, self.missing)

    # -- discovery ---------------------------------------------------------------

    def _load(self) -> Hlml:
        if self._given is not None:
            return Hlml(self._given)
        if self._given_pyhlml is not None:
            return Pyhlml(self._given_pyhlml)
        # The binding loads its one fixed path; other paths are ctypes' to try.
        module = binding.load() if self._paths == hlml.LIBRARY_PATHS else None
        if module is not None:
            return Pyhlml(module)
        try:
            return hlml.load(self._paths)
        except HlmlUnavailable as e:
            raise BackendUnavailableError(
                f"HLML library not found ({e}): install the Intel Gaudi software "
                "stack (habanalabs-firmware-tools) or mount /usr/lib/habanalabs"
            ) from e

    def discover(self) -> list[DeviceInfo]:
        if self._initialized:  # asked again after a failure: start from scratch
            self.close()
        lib = self._lib = self._load()
        self._calls = GaudiCalls(lib, self.missing)
        try:
            lib.init()
        except HlmlError as e:
            raise BackendUnavailableError(init_failure(e, isinstance(lib, Pyhlml))) from e
        self._initialized = True
        try:
            return self._discover(lib)
        except BaseException:
            self.close()
            raise

    def _discover(self, lib: Hlml) -> list[DeviceInfo]:
        self._gpus, self._by_name = [], {}
        self.missing.clear()
        try:
            driver = lib.driver_version()
        except HlmlError:
            driver = ""  # older libraries lack the call; the label stays empty
        self._events = GaudiEvents(lib, self.missing)
        self._events.open()
        for index in range(lib.device_count()):
            try:
                gpu = self._discover_one(lib, index, driver)
            except HlmlError as e:
                # Without a handle and a UUID there is no identity to keep.
                log.warning("gaudi%d: skipped, HLML could not identify it: %s", index, e)
                continue
            self._events.watch(gpu)
            self._gpus.append(gpu)
            self._by_name[gpu.name] = gpu
        return [g.info for g in self._gpus]

    def _discover_one(self, lib: Hlml, index: int, driver: str) -> Gaudi:
        handle = lib.handle(index)
        bus_id = normalize_bus_id(lib.pci_bus_id(handle))
        try:
            serial = lib.serial(handle)
        except HlmlError:
            serial = ""
        info = DeviceInfo(
            device=f"gaudi{index}",
            vendor=VENDOR,
            uuid=lib.uuid(handle),
            model=lib.name(handle),
            pci_bus_id=bus_id,
            driver_version=driver,
            numa_node=numa_node(self.options.sysfs, bus_id),
            cpu_affinity=cpu_affinity(self.options.sysfs, bus_id),
        )
        return Gaudi(info, handle, index, serial=serial)

    def _reinit(self) -> None:
        """HLML was shut down under us: initialise it again and take fresh handles,
        keeping each device's identity only where its index holds the same UUID."""
        lib = self._lib
        assert lib is not None
        try:
            lib.init()
        except HlmlError as e:
            if e.code != hlml.ERROR_ALREADY_INITIALIZED:
                raise
        if self._events is None:
            self._events = GaudiEvents(lib, self.missing)
        self._events.renew()
        for gpu in self._gpus:
            try:
                handle = lib.handle(gpu.index)
                same = lib.uuid(handle) == gpu.info.uuid
            except HlmlError as e:
                if e.code == hlml.ERROR_UNINITIALIZED:
                    raise
                continue  # lost, say: its own read will find out and say so
            if not same:
                # Its index holds another device now: this one is not known any more.
                log.warning("%s: index %d holds another device now", gpu.name, gpu.index)
                self._by_name.pop(gpu.name, None)
                continue
            gpu.handle = handle
            self._events.watch(gpu)

    # -- topology ----------------------------------------------------------------

    def topology(self) -> list[Link]:
        """RoCE peers, and the PCIe path of every other pair
        (``exporter.backends.gaudi.topology``)."""
        if self._lib is None:
            return []
        return topology.links(self._lib, self._gpus, self.options.sysfs)

    # -- reading -----------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        gpu = self._by_name.get(device.device)
        if gpu is None or self._lib is None:
            raise DeviceLostError(f"{device.device} is not known to HLML any more")
        events = self._take(gpu)
        try:
            return self._finish(gpu, events)
        except HlmlReinit as e:
            log.warning("%s: %s; initialising HLML again", gpu.name, e)
            try:
                self._reinit()
            except HlmlError as again:
                raise DeviceLostError(f"HLML could not be initialised again: {again}") from e
            try:
                return self._finish(gpu, events + self._take(gpu))
            except HlmlReinit as still:
                raise DeviceLostError(f"HLML is not initialised: {still}") from e

    def _take(self, gpu: Gaudi) -> list[FaultEvent]:
        return self._events.take(gpu.name) if self._events is not None else []

    def _finish(self, gpu: Gaudi, events: list[FaultEvent]) -> Reading:
        """Reads ``gpu``'s fields and hands over ``events`` with them."""
        self.missing.begin(gpu.name, gpu.static)
        try:
            reading = self._read(gpu)
        except DeviceLostError as e:
            first = not gpu.lost
            gpu.lost = True
            if first or events:
                # The loss is the news: count it (and what came with it) now.
                news = events + ([FaultEvent("lost", str(e))] if first else [])
                return Reading(up=False, down_reason=f"device lost: {e}", fault_events=news)
            raise
        gpu.lost = False
        reading.fault_events = events
        return reading

    def _read(self, gpu: Gaudi) -> Reading:
        calls = self._calls
        r = Reading(telemetry_source=TELEMETRY_SOURCE)
        util = calls.call(gpu, "utilization", "utilization")
        if util is not None:
            r.utilization = util / 100.0
        mem = calls.call(gpu, ("memory_used_bytes", "memory_total_bytes"), "memory")
        if mem is not None:
            r.memory_used_bytes, r.memory_total_bytes = float(mem[0]), float(mem[1])
        for key, sensor in TEMPERATURES:
            c = calls.call(gpu, f"temperatures.{key}", "temperature", sensor)
            if c is not None:
                r.temperatures[key] = float(c)
        mw = calls.call(gpu, "power_watts", "power_mw")
        if mw is not None:
            r.power_watts = mw / 1000.0
        self._power_limit(gpu, r)
        mj = calls.call(gpu, "energy_joules", "energy_mj")
        if mj is not None:
            r.energy_joules = mj / 1000.0
        for key, clock in CLOCKS:
            mhz = calls.call(gpu, f"clocks_hz.{key}", "clock_mhz", clock)
            if mhz is not None:
                r.clocks_hz[key] = mhz * 1e6
        self._ecc(gpu, r)
        mask = calls.call(gpu, "throttle", "throttle_reasons")
        if mask is not None:
            for name, bit in THROTTLE:
                r.throttle[name] = bool(mask & bit)
        for key, counter in PCIE:
            kbs = calls.call(gpu, f"pcie_bytes_per_second.{key}", "pcie_throughput", counter)
            if kbs is not None:
                r.pcie_bytes_per_second[key] = kbs * KIB
        return r

    def _power_limit(self, gpu: Gaudi, r: Reading) -> None:
        key = "power_limit_watts"
        if gpu.enforced_limit and key not in gpu.static:
            assert self._lib is not None
            try:
                r.power_limit_watts = self._lib.power_limit_mw(gpu.handle) / 1000.0
                return
            except HlmlError as e:
                if e.code not in STATIC:
                    self._calls.fail(gpu, (key,), e)
                    return
                gpu.enforced_limit = False  # an older library: the default limit it is
        mw = self._calls.call(gpu, key, "power_default_limit_mw")
        if mw is not None:
            r.power_limit_watts = mw / 1000.0

    def _ecc(self, gpu: Gaudi, r: Reading) -> None:
        calls = self._calls
        keys = tuple(f"ecc_errors.{k}" for k, _ in ECC)
        enabled = calls.call(gpu, keys, "ecc_enabled")
        if enabled is False:
            self.missing.note(gpu.name, keys, "ECC mode is disabled")
        elif enabled:
            for key, error_type in ECC:
                n = calls.call(gpu, f"ecc_errors.{key}", "ecc_errors", error_type)
                if n is not None:
                    r.ecc_errors[key] = float(n)
        for key, cause in ROWS:
            rows = calls.call(gpu, f"remapped_rows.{key}", "replaced_rows", cause)
            if rows is not None:
                r.remapped_rows[key] = float(rows)
        pending = calls.call(gpu, "remapped_rows.pending", "replaced_rows_pending")
        if pending is not None:
            r.remapped_rows["pending"] = 1.0 if pending else 0.0

    # -- reporting and shutdown --------------------------------------------------

    def fields(self, device: DeviceInfo, reading: Reading) -> set[str]:
        """The keys of ``FIELDS`` that ``reading`` of ``device`` has a value for, for
        the tests and the docs: each key is either here or in ``missing``."""
        static = self._by_name[device.device].static if device.device in self._by_name else {}
        found: set[str] = set()
        for key in FIELDS:
            top, _, sub = key.partition(".")
            value = getattr(reading, top)
            if key == "throttle":
                ok = bool(value)
            elif key == "fault_events":
                ok = reading.up and key not in static
            elif sub:
                ok = sub in value
            else:
                ok = value is not None
            if ok:
                found.add(key)
        return found

    def close(self) -> None:
        lib = self._lib
        if lib is None or not self._initialized:
            return
        if self._events is not None:
            self._events.close()
            self._events = None
        try:
            lib.shutdown()
        except HlmlError as e:  # shutting down: nothing useful to do with it
            log.debug("%s", e)
        self._initialized = False
