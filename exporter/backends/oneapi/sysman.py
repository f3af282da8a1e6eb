"""Telemetry of Intel devices through Level Zero Sysman (the bindings in
``exporter.backends.oneapi.zes``): which Sysman devices and domains there are, and
one poll of each.

Why it is built this way:

* **Rates come from the driver's own counters** and timestamps between two polls
  (engine activity, memory bandwidth, energy), so the first poll reports none
  (``FIRST_SAMPLE``) rather than a made-up 0. Where a card has tiles and no
  device-level domain, utilization is the mean of the tiles, memory and energy are
  their sum, temperatures the hottest sensor of each kind, and clocks tile 0's.
* **RAS**: hardware-error categories (compute, fixed-function, cache) of the
  correctable and uncorrectable error sets are ``accel_ecc_errors_total`` (corrected,
  uncorrected). New errors since the previous poll become one fault event per kind
  and poll (``ras_correctable``, ``ras_uncorrectable``, ``ras_engine_reset``,
  ``ras_programming``, ``ras_driver``, ``ras_display``), classified by
  ``exporter.faults``; counts that were already there when the exporter started are
  not replayed as new faults. ``zesDeviceGetState`` asking for a reset is one event
  per new reason: ``reset_wedged``, ``reset_repair``, or ``reset_required`` for a
  reason this exporter does not name.
* **A lost device** (``ZE_RESULT_ERROR_DEVICE_LOST``, or a reset required) ends the
  read with ``Lost``. Answers that cannot change while the driver is loaded
  (unsupported feature, insufficient permissions) are remembered per call and
  handle, so such a field is not asked again; a domain the device does not list is
  a static reason for its fields. Other failures are logged once (``MissingFields``).
"""

from __future__ import annotations

import ctypes
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.backends.base import FIRST_SAMPLE, MissingFields
from exporter.backends.oneapi import zes
from exporter.backends.oneapi.device import INTEL_PCI_VENDOR, Lost
from exporter.model import FaultEvent, Reading

log = logging.getLogger("accel_exporter.oneapi")

# The name the sim backend gives the same figure, so the HELP text reads alike.
BANDWIDTH_SOURCE = "Level Zero memory bandwidth counters"

# Engine groups that stand for "the whole device is busy", in order of preference.
_ENGINE_GROUPS = (
    zes.ZES_ENGINE_GROUP_ALL,
    zes.ZES_ENGINE_GROUP_COMPUTE_ALL,
    zes.ZES_ENGINE_GROUP_RENDER_ALL,
    zes.ZES_ENGINE_GROUP_3D_RENDER_COMPUTE_ALL,
)
_FREQ_CLOCKS = {zes.ZES_FREQ_DOMAIN_GPU: "graphics", zes.ZES_FREQ_DOMAIN_MEMORY: "memory"}
# The *_MIN sensors (3..5) report minimums, which no rule reads; they are skipped.
_TEMP_SENSORS = {
    zes.ZES_TEMP_SENSORS_GLOBAL: "global",
    zes.ZES_TEMP_SENSORS_GPU: "gpu",
    zes.ZES_TEMP_SENSORS_MEMORY: "memory",
}
# Vendor-neutral throttle reasons (the sim's power_cap and thermal, and the rest as
# Level Zero names them).
_THROTTLE: tuple[tuple[str, int], ...] = (
    (
        "power_cap",
        zes.ZES_FREQ_THROTTLE_REASON_FLAG_AVE_PWR_CAP
        | zes.ZES_FREQ_THROTTLE_REASON_FLAG_BURST_PWR_CAP,
    ),
    ("current_limit", zes.ZES_FREQ_THROTTLE_REASON_FLAG_CURRENT_LIMIT),
    ("thermal", zes.ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT),
    ("psu_alert", zes.ZES_FREQ_THROTTLE_REASON_FLAG_PSU_ALERT),
    ("sw_range", zes.ZES_FREQ_THROTTLE_REASON_FLAG_SW_RANGE),
    ("hw_range", zes.ZES_FREQ_THROTTLE_REASON_FLAG_HW_RANGE),
)
# RAS categories that count errors in the hardware itself: what ECC and parity catch.
_HARDWARE_CATEGORIES = (
    zes.ZES_RAS_ERROR_CAT_COMPUTE_ERRORS,
    zes.ZES_RAS_ERROR_CAT_NON_COMPUTE_ERRORS,
    zes.ZES_RAS_ERROR_CAT_CACHE_ERRORS,
)
_CATEGORY_NAMES = {
    zes.ZES_RAS_ERROR_CAT_RESET: "reset",
    zes.ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS: "programming",
    zes.ZES_RAS_ERROR_CAT_DRIVER_ERRORS: "driver",
    zes.ZES_RAS_ERROR_CAT_COMPUTE_ERRORS: "compute",
    zes.ZES_RAS_ERROR_CAT_NON_COMPUTE_ERRORS: "non_compute",
    zes.ZES_RAS_ERROR_CAT_CACHE_ERRORS: "cache",
    zes.ZES_RAS_ERROR_CAT_DISPLAY_ERRORS: "display",
}
# Answers that stay true while the driver is loaded: the field is asked no more.
_STATIC_RESULTS = frozenset(
    {
        zes.ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
        zes.ZE_RESULT_ERROR_UNSUPPORTED_VERSION,
        zes.ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION,
        zes.ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS,
    }
)


# zesDeviceGetState's reset reasons, by the fault code each one is (a reason this
# table does not name is ``reset_required``).
RESET_REASON_CODES: tuple[tuple[int, str], ...] = (
    (zes.ZES_RESET_REASON_FLAG_WEDGED, "reset_wedged"),
    (zes.ZES_RESET_REASON_FLAG_REPAIR, "reset_repair"),
)


@dataclass(frozen=True)
class Domain:
    """One Sysman handle (engine group, power or frequency domain, sensor, error set)
    with what its properties said; ``subdevice`` is None for a device-level one."""

    handle: int
    kind: int
    subdevice: int | None


@dataclass
class Sysman:
    """One Level Zero Sysman device and its handles, found at discovery."""

    handle: int
    name: str
    device_id: int
    pci: str
    uuid: str
    engines: list[Domain] = field(default_factory=list)
    memory: list[Domain] = field(default_factory=list)
    power: list[Domain] = field(default_factory=list)
    frequency: list[Domain] = field(default_factory=list)
    temperature: list[Domain] = field(default_factory=list)
    ras: list[Domain] = field(default_factory=list)
    # Previous counter samples by handle, for rates between two polls.
    engine_previous: dict[int, tuple[int, int]] = field(default_factory=dict)
    bandwidth_previous: dict[int, tuple[int, int]] = field(default_factory=dict)
    energy_previous: dict[int, tuple[int, int]] = field(default_factory=dict)
    # (handle, category) -> count seen at the previous poll.
    ras_previous: dict[tuple[int, int], int] = field(default_factory=dict)
    reset_reasons: int = 0
    # field -> why the device has nothing to read for it (no such domain): asked no more.
    static: dict[str, str] = field(default_factory=dict)
    # (function, handle) -> the answer that stays true while the driver is loaded
    # (unsupported, no permission): that call is not made again.
    refused: dict[tuple[str, int], str] = field(default_factory=dict)


def _choose(domains: Iterable[Domain]) -> list[Domain]:
    """The device-level handles if there are any, else the per-tile ones."""
    found = list(domains)
    device_level = [d for d in found if d.subdevice is None]
    return device_level or found


def _first(domains: Sequence[Domain]) -> Domain:
    """The device-level handle, else tile 0's (the lowest sub-device id)."""
    return min(domains, key=lambda d: -1 if d.subdevice is None else d.subdevice)


def _format_uuid(raw: Sequence[int]) -> str:
    data = bytes(raw)
    if not any(data):
        return ""
    return str(uuid.UUID(bytes=data))


class SysmanReader:
    """One Level Zero loader: finds its Intel Sysman devices, and reads them."""

    def __init__(self, ze: Any, missing: MissingFields) -> None:
        self.ze = ze
        self.missing = missing

    def discover(self) -> tuple[list[Sysman], str]:
        """The Intel devices Sysman lists, in PCI address order; or none and why
        Sysman is not a source here."""
        lib = self.ze
        try:
            self._check("zesInit", lib.zesInit(0))
            drivers = self._enum("zesDriverGet", None)
            found: list[Sysman] = []
            for driver in drivers:
                for handle in self._enum("zesDeviceGet", driver):
                    try:
                        dev = self._sysman_device(handle)
                    except zes.ZeError as e:
                        # Without its properties and handles there is nothing to read.
                        log.warning("oneapi: a Level Zero device was skipped: %s", e)
                        continue
                    if dev is not None:
                        found.append(dev)
        except zes.ZeError as e:
            if e.code == zes.ZE_RESULT_ERROR_UNINITIALIZED:
                return [], f"no Level Zero driver answered ({e})"
            return [], f"Level Zero Sysman failed: {e}"
        if not found:
            return [], "Level Zero Sysman lists no Intel device"
        return sorted(found, key=lambda s: s.pci), ""

    def _sysman_device(self, handle: int) -> Sysman | None:
        ext = zes.ZesDeviceExtProperties(stype=zes.ZES_STRUCTURE_TYPE_DEVICE_EXT_PROPERTIES)
        props = zes.ZesDeviceProperties(
            stype=zes.ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES, pNext=ctypes.addressof(ext)
        )
        props.core.stype = zes.ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES
        self._check(
            "zesDeviceGetProperties",
            self.ze.zesDeviceGetProperties(zes.HANDLE(handle), ctypes.pointer(props)),
        )
        if props.core.vendorId != INTEL_PCI_VENDOR:
            return None
        pci = zes.ZesPciProperties(stype=zes.ZES_STRUCTURE_TYPE_PCI_PROPERTIES)
        rc = self.ze.zesDevicePciGetProperties(zes.HANDLE(handle), ctypes.pointer(pci))
        address = ""
        if rc == zes.ZE_RESULT_SUCCESS:
            a = pci.address
            address = f"{a.domain:04x}:{a.bus:02x}:{a.device:02x}.{a.function:x}"
        dev = Sysman(
            handle=handle,
            name=props.core.name.decode(errors="replace").strip(),
            device_id=int(props.core.deviceId),
            pci=address,
            uuid=_format_uuid(ext.uuid) or _format_uuid(props.core.uuid),
        )
        dev.engines = self._domains(
            handle, "zesDeviceEnumEngineGroups", "zesEngineGetProperties", zes.ZesEngineProperties
        )
        dev.memory = self._domains(
            handle, "zesDeviceEnumMemoryModules", "zesMemoryGetProperties", zes.ZesMemProperties
        )
        dev.power = self._domains(
            handle, "zesDeviceEnumPowerDomains", "zesPowerGetProperties", zes.ZesPowerProperties
        )
        dev.frequency = self._domains(
            handle,
            "zesDeviceEnumFrequencyDomains",
            "zesFrequencyGetProperties",
            zes.ZesFreqProperties,
        )
        dev.temperature = self._domains(
            handle,
            "zesDeviceEnumTemperatureSensors",
            "zesTemperatureGetProperties",
            zes.ZesTempProperties,
        )
        dev.ras = self._domains(
            handle, "zesDeviceEnumRasErrorSets", "zesRasGetProperties", zes.ZesRasProperties
        )
        return dev

    def _domains(self, device: int, enum_fn: str, props_fn: str, props_type: Any) -> list[Domain]:
        """Every handle of one kind with its properties; an enumeration the device
        refuses is an empty list (its fields then carry the reason at read time)."""
        try:
            handles = self._enum(enum_fn, device)
        except zes.ZeError as e:
            if e.code == zes.ZE_RESULT_ERROR_DEVICE_LOST:
                raise
            log.debug("oneapi: %s", e)
            return []
        out: list[Domain] = []
        stype = {
            zes.ZesEngineProperties: zes.ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES,
            zes.ZesMemProperties: zes.ZES_STRUCTURE_TYPE_MEM_PROPERTIES,
            zes.ZesPowerProperties: zes.ZES_STRUCTURE_TYPE_POWER_PROPERTIES,
            zes.ZesFreqProperties: zes.ZES_STRUCTURE_TYPE_FREQ_PROPERTIES,
            zes.ZesTempProperties: zes.ZES_STRUCTURE_TYPE_TEMP_PROPERTIES,
            zes.ZesRasProperties: zes.ZES_STRUCTURE_TYPE_RAS_PROPERTIES,
        }[props_type]
        for h in handles:
            props = props_type(stype=stype)
            rc = getattr(self.ze, props_fn)(zes.HANDLE(h), ctypes.pointer(props))
            if rc != zes.ZE_RESULT_SUCCESS:
                log.debug("oneapi: %s: %s", props_fn, zes.result_name(rc))
                continue
            # zes_power_properties_t has no type; memory modules are kept by location.
            if props_type is zes.ZesPowerProperties:
                kind = 0
            elif props_type is zes.ZesMemProperties:
                kind = int(props.location)
            else:
                kind = int(props.type)
            sub = int(props.subdeviceId) if props.onSubdevice else None
            out.append(Domain(h, kind, sub))
        return out

    def _enum(self, fn: str, parent: int | None) -> list[int]:
        """The two-call count-then-fill protocol of every zes*Get / zesDeviceEnum*."""
        proc = getattr(self.ze, fn)
        head = () if parent is None else (zes.HANDLE(parent),)
        count = ctypes.c_uint32(0)
        self._check(fn, proc(*head, ctypes.pointer(count), None))
        if count.value == 0:
            return []
        handles = (ctypes.c_void_p * count.value)()
        self._check(fn, proc(*head, ctypes.pointer(count), handles))
        return [int(h) for h in handles[: count.value] if h]

    @staticmethod
    def _check(fn: str, rc: int) -> None:
        if rc != zes.ZE_RESULT_SUCCESS:
            raise zes.ZeError(fn, int(rc))

    def read(self, name: str, z: Sysman, r: Reading, missing: dict[str, str]) -> bool:
        """Reads every Sysman field of the device exported as ``name`` into ``r``; True
        when fault events could be looked for (the device state or the RAS counters
        answered)."""
        state = self._device_state(name, z, r)
        self._utilization(name, z, r, missing)
        self._memory(name, z, r, missing)
        self._energy(name, z, r, missing)
        self._frequency(name, z, r, missing)
        self._temperatures(name, z, r, missing)
        ras = self._ras(name, z, r)
        return state or ras

    def _zes(
        self, name: str, z: Sysman, keys: Sequence[str], fn: str, handle: int, *args: Any
    ) -> bool:
        """Calls one Sysman function on one handle for the fields ``keys``. False
        (with the reason in ``missing``) when it gave nothing; a lost device raises
        ``Lost``."""
        refused = z.refused.get((fn, handle))
        if refused is not None:
            self.missing.note(name, keys, refused)
            return False
        rc = int(getattr(self.ze, fn)(zes.HANDLE(handle), *args))
        if rc == zes.ZE_RESULT_SUCCESS:
            return True
        reason = f"{fn}: {zes.result_name(rc)}"
        if rc == zes.ZE_RESULT_ERROR_DEVICE_LOST:
            raise Lost(reason, "lost")
        if rc == zes.ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET:
            raise Lost(reason, "reset_required")
        self.missing.note(name, keys, reason)
        if rc in _STATIC_RESULTS:
            z.refused[(fn, handle)] = reason
        else:
            self.missing.warn_once(
                (name, reason), "%s: Level Zero gave no %s: %s", name, "/".join(keys), reason
            )
        return False

    def _none_found(self, name: str, z: Sysman, keys: Sequence[str], what: str) -> None:
        reason = f"Level Zero Sysman lists no {what} on this device"
        self.missing.note(name, keys, reason, z.static)

    def _device_state(self, name: str, z: Sysman, r: Reading) -> bool:
        state = zes.ZesDeviceState(stype=zes.ZES_STRUCTURE_TYPE_DEVICE_STATE)
        if not self._zes(
            name, z, ("fault_events",), "zesDeviceGetState", z.handle, ctypes.pointer(state)
        ):
            return False
        reasons = int(state.reset)
        new = reasons & ~z.reset_reasons
        z.reset_reasons = reasons
        # One event per reason that appeared: the reason is the driver's verdict on
        # what the reset is for (a wedged device runs nothing: reset; a repair waits
        # for the reset that applies it: reset once idle, exporter.faults).
        for bit, code in RESET_REASON_CODES:
            if new & bit:
                why = code.removeprefix("reset_")
                r.fault_events.append(FaultEvent(code, f"reset reason {why}"))
                new &= ~bit
        if new:
            r.fault_events.append(FaultEvent("reset_required", f"reset reasons: {hex(new)}"))
        return True

    def _utilization(self, name: str, z: Sysman, r: Reading, missing: dict[str, str]) -> None:
        key = ("utilization",)
        groups = next(
            (c for t in _ENGINE_GROUPS if (c := _choose(e for e in z.engines if e.kind == t))),
            [],
        )
        if not groups:
            self._none_found(name, z, key, "engine group covering the whole device")
            return
        ratios: list[float] = []
        first = False
        for g in groups:
            stats = zes.ZesEngineStats()
            if not self._zes(name, z, key, "zesEngineGetActivity", g.handle, ctypes.pointer(stats)):
                return
            now = (int(stats.activeTime), int(stats.timestamp))
            before = z.engine_previous.get(g.handle)
            z.engine_previous[g.handle] = now
            if before is None:
                first = True
                continue
            dt = now[1] - before[1]
            if dt <= 0 or now[0] < before[0]:
                missing["utilization"] = "the engine counter did not advance or went back"
                return
            ratios.append(min(max((now[0] - before[0]) / dt, 0.0), 1.0))
        if first:
            missing["utilization"] = FIRST_SAMPLE
            return
        r.utilization = sum(ratios) / len(ratios)

    def _memory(self, name: str, z: Sysman, r: Reading, missing: dict[str, str]) -> None:
        modules = [m for m in z.memory if m.kind == zes.ZES_MEM_LOC_DEVICE]
        if not modules:
            self._none_found(
                name,
                z,
                ("memory_used_bytes", "memory_total_bytes", "memory_bandwidth_utilization"),
                "device memory module",
            )
            return
        size = used = 0
        for m in modules:
            state = zes.ZesMemState(stype=zes.ZES_STRUCTURE_TYPE_MEM_STATE)
            if not self._zes(
                name,
                z,
                ("memory_used_bytes", "memory_total_bytes"),
                "zesMemoryGetState",
                m.handle,
                ctypes.pointer(state),
            ):
                break
            size += int(state.size)
            used += max(int(state.size) - int(state.free), 0)
        else:
            r.memory_total_bytes = float(size)
            r.memory_used_bytes = float(used)
        self._bandwidth(name, z, modules, r, missing)

    def _bandwidth(
        self,
        name: str,
        z: Sysman,
        modules: list[Domain],
        r: Reading,
        missing: dict[str, str],
    ) -> None:
        key = ("memory_bandwidth_utilization",)
        rate = peak = 0.0
        reason = ""
        for m in modules:
            bw = zes.ZesMemBandwidth()
            if not self._zes(name, z, key, "zesMemoryGetBandwidth", m.handle, ctypes.pointer(bw)):
                return
            now = (int(bw.readCounter) + int(bw.writeCounter), int(bw.timestamp))
            before = z.bandwidth_previous.get(m.handle)
            z.bandwidth_previous[m.handle] = now
            if before is None:
                reason = FIRST_SAMPLE
                continue
            dt_us = now[1] - before[1]
            if dt_us <= 0 or now[0] < before[0]:
                # Counters have fewer valid bits than 64 and wrap; skip this interval.
                reason = reason or "the bandwidth counter did not advance or wrapped"
                continue
            rate += (now[0] - before[0]) / (dt_us / 1e6)
            peak += float(bw.maxBandwidth)
        if reason:
            missing[key[0]] = reason
        elif peak <= 0:
            missing[key[0]] = "zesMemoryGetBandwidth gave no peak bandwidth"
        else:
            r.memory_bandwidth_utilization = min(rate / peak, 1.0)
            r.memory_bandwidth_source = BANDWIDTH_SOURCE

    def _energy(self, name: str, z: Sysman, r: Reading, missing: dict[str, str]) -> None:
        domains = _choose(z.power)
        if not domains:
            self._none_found(
                name, z, ("energy_joules", "power_watts", "power_limit_watts"), "power domain"
            )
            return
        energy_uj = 0
        watts = 0.0
        reason = ""
        for p in domains:
            counter = zes.ZesPowerEnergyCounter()
            if not self._zes(
                name,
                z,
                ("energy_joules", "power_watts"),
                "zesPowerGetEnergyCounter",
                p.handle,
                ctypes.pointer(counter),
            ):
                break
            now = (int(counter.energy), int(counter.timestamp))
            energy_uj += now[0]
            before = z.energy_previous.get(p.handle)
            z.energy_previous[p.handle] = now
            if before is None:
                reason = FIRST_SAMPLE
            elif now[1] <= before[1] or now[0] < before[0]:
                reason = reason or "the energy counter did not advance or went back"
            else:
                watts += (now[0] - before[0]) / (now[1] - before[1])  # µJ/µs = W
        else:
            r.energy_joules = energy_uj / 1e6
            if reason:
                missing["power_watts"] = reason
            else:
                r.power_watts = watts
        device_level = [p for p in domains if p.subdevice is None]
        if not device_level:
            self._none_found(name, z, ("power_limit_watts",), "device-level power domain")
            return
        limit = zes.ZesPowerSustainedLimit()
        if self._zes(
            name,
            z,
            ("power_limit_watts",),
            "zesPowerGetLimits",
            device_level[0].handle,
            ctypes.pointer(limit),
            None,
            None,
        ):
            if limit.enabled and limit.power > 0:
                r.power_limit_watts = limit.power / 1000.0  # mW -> W
            else:
                missing["power_limit_watts"] = "the sustained power limit is disabled"

    def _frequency(self, name: str, z: Sysman, r: Reading, missing: dict[str, str]) -> None:
        for kind, clock in _FREQ_CLOCKS.items():
            key = f"clocks_hz.{clock}"
            keys = (key, "throttle") if clock == "graphics" else (key,)
            domains = [f for f in z.frequency if f.kind == kind]
            if not domains:
                self._none_found(name, z, keys, f"{clock} frequency domain")
                continue
            state = zes.ZesFreqState(stype=zes.ZES_STRUCTURE_TYPE_FREQ_STATE)
            if not self._zes(
                name, z, keys, "zesFrequencyGetState", _first(domains).handle, ctypes.pointer(state)
            ):
                continue
            if state.actual >= 0:
                r.clocks_hz[clock] = float(state.actual) * 1e6  # MHz -> Hz
            else:
                missing[key] = "the driver does not know the actual frequency (-1)"
            if clock == "graphics":
                reasons = int(state.throttleReasons)
                for reason, bits in _THROTTLE:
                    r.throttle[reason] = bool(reasons & bits)

    def _temperatures(self, name: str, z: Sysman, r: Reading, missing: dict[str, str]) -> None:
        sensors = [t for t in z.temperature if t.kind in _TEMP_SENSORS]
        if not sensors:
            self._none_found(name, z, ("temperatures",), "temperature sensor")
            return
        for t in sensors:
            celsius = ctypes.c_double()
            if not self._zes(
                name,
                z,
                ("temperatures",),
                "zesTemperatureGetState",
                t.handle,
                ctypes.pointer(celsius),
            ):
                continue
            sensor = _TEMP_SENSORS[t.kind]
            # Tiles each have their own sensors: the hottest is the one that throttles.
            r.temperatures[sensor] = max(celsius.value, r.temperatures.get(sensor, celsius.value))
        if r.temperatures:
            missing.pop("temperatures", None)

    def _ras(self, name: str, z: Sysman, r: Reading) -> bool:
        kinds = (zes.ZES_RAS_ERROR_TYPE_CORRECTABLE, zes.ZES_RAS_ERROR_TYPE_UNCORRECTABLE)
        sets = [s for s in z.ras if s.kind in kinds]
        if not sets:
            self._none_found(name, z, ("ecc_errors",), "RAS error set")
            return False
        totals = {"corrected": 0.0, "uncorrected": 0.0}
        # code -> (new errors, categories)
        events: dict[str, tuple[int, set[str]]] = {}
        for s in sets:
            state = zes.ZesRasState(stype=zes.ZES_STRUCTURE_TYPE_RAS_STATE)
            if not self._zes(
                name, z, ("ecc_errors",), "zesRasGetState", s.handle, 0, ctypes.pointer(state)
            ):
                return False
            correctable = s.kind == zes.ZES_RAS_ERROR_TYPE_CORRECTABLE
            for cat in range(zes.ZES_MAX_RAS_ERROR_CATEGORY_COUNT):
                count = int(state.category[cat])
                if cat in _HARDWARE_CATEGORIES:
                    totals["corrected" if correctable else "uncorrected"] += count
                before = z.ras_previous.get((s.handle, cat))
                z.ras_previous[(s.handle, cat)] = count
                # The first poll is the baseline: errors from before the exporter
                # started are in the ECC totals, not replayed as new faults. A count
                # that went down was cleared by someone; it is the new baseline.
                if before is None or count <= before:
                    continue
                code = ras_code(cat, correctable)
                n, cats = events.get(code, (0, set()))
                cats.add(_CATEGORY_NAMES[cat])
                events[code] = (n + count - before, cats)
        r.ecc_errors = totals
        for code, (n, cats) in sorted(events.items()):
            where = ",".join(sorted(cats))
            r.fault_events.append(FaultEvent(code, f"{n} new error(s) in categories: {where}"))
        return True


def ras_code(category: int, correctable: bool) -> str:
    """The fault event code of new errors in one RAS category (``exporter.faults``)."""
    if category in _HARDWARE_CATEGORIES:
        return "ras_correctable" if correctable else "ras_uncorrectable"
    return {
        zes.ZES_RAS_ERROR_CAT_RESET: "ras_engine_reset",
        zes.ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS: "ras_programming",
        zes.ZES_RAS_ERROR_CAT_DRIVER_ERRORS: "ras_driver",
        zes.ZES_RAS_ERROR_CAT_DISPLAY_ERRORS: "ras_display",
    }[category]
