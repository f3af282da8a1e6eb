"""A fake Level Zero loader: the Sysman functions of ``libze_loader``, on a device
table held in memory.

Why it is built this way:

* It stands where the ``ctypes.CDLL`` stands: ``OneapiBackend(options,
  level_zero=fake)``. Every function has the C name and the C argument conventions:
  handles (``c_void_p`` or int), a pointer to a ``uint32_t`` count, an array of handles,
  a pointer to a structure that it fills, ``NULL`` as ``None``. It returns
  ``ze_result_t`` codes, never raises for a driver-side failure.
* It never imports the backend's ctypes classes. It writes each result at the byte
  offsets of ``zes_api.h``, computed here from its own transcription of the header
  (``struct`` in native alignment is C's layout), and reads ``stype`` and ``pNext``
  from the caller's memory the same way. A backend structure with a field missing,
  misordered or mistyped reads the wrong bytes and the tests fail, as it would on a
  real GPU.
* It checks what a real driver relies on: the ``stype`` of every structure that has
  one (``ZE_RESULT_ERROR_INVALID_ARGUMENT`` otherwise), ``NULL`` pointers, unknown
  handles, calls before ``zesInit``; the count-then-fill protocol of the ``zes*Get``
  and ``zesDeviceEnum*`` functions; and the ``pNext`` chain of
  ``zes_device_properties_t`` (``zes_device_ext_properties_t`` carries the UUID).
* It fails the ways the real one does: no driver (``zesInit`` answers
  ``ZE_RESULT_ERROR_UNINITIALIZED``), ``unsupported`` function names per device
  (``ZE_RESULT_ERROR_UNSUPPORTED_FEATURE``), any other code per function in
  ``errors``, ``lose()`` (every call on the device and its components answers
  ``ZE_RESULT_ERROR_DEVICE_LOST``, optionally after some calls, i.e. in the middle of a
  read) and ``needs_reset`` (``ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET``).
* Counters move only with ``advance()``: engine active time, energy, memory traffic
  and the microsecond timestamps grow at each component's configured rate, so the
  rates a backend computes are exact in tests.
"""

from __future__ import annotations

import ctypes
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3

# ze_result_t (ze_api.h)
SUCCESS = 0
ERROR_DEVICE_LOST = 0x70000001
ERROR_DEVICE_REQUIRES_RESET = 0x70000006
ERROR_INSUFFICIENT_PERMISSIONS = 0x70010000
ERROR_UNINITIALIZED = 0x78000001
ERROR_UNSUPPORTED_FEATURE = 0x78000003
ERROR_INVALID_ARGUMENT = 0x78000004
ERROR_INVALID_NULL_HANDLE = 0x78000005
ERROR_INVALID_NULL_POINTER = 0x78000007
ERROR_UNKNOWN = 0x7FFFFFFE

# Enumerations (zes_api.h)
ENGINE_GROUP_ALL = 0
ENGINE_GROUP_COMPUTE_ALL = 1
ENGINE_GROUP_MEDIA_ALL = 2
ENGINE_GROUP_COPY_ALL = 3
MEM_TYPE_HBM = 0
MEM_TYPE_GDDR6 = 17
MEM_LOC_SYSTEM = 0
MEM_LOC_DEVICE = 1
MEM_HEALTH_OK = 1
FREQ_DOMAIN_GPU = 0
FREQ_DOMAIN_MEMORY = 1
TEMP_SENSORS_GLOBAL = 0
TEMP_SENSORS_GPU = 1
TEMP_SENSORS_MEMORY = 2
TEMP_SENSORS_GLOBAL_MIN = 3
RAS_CORRECTABLE = 0
RAS_UNCORRECTABLE = 1
RAS_CAT_RESET = 0
RAS_CAT_PROGRAMMING_ERRORS = 1
RAS_CAT_DRIVER_ERRORS = 2
RAS_CAT_COMPUTE_ERRORS = 3
RAS_CAT_NON_COMPUTE_ERRORS = 4
RAS_CAT_CACHE_ERRORS = 5
RAS_CAT_DISPLAY_ERRORS = 6
RESET_REASON_WEDGED = 1 << 0
RESET_REASON_REPAIR = 1 << 1
THROTTLE_AVE_PWR_CAP = 1 << 0
THROTTLE_THERMAL_LIMIT = 1 << 3
DEVICE_TYPE_GPU = 1

# zes_structure_type_t / ze_structure_type_t
_STYPE = {
    "zes_device_properties_t": 0x1,
    "zes_pci_properties_t": 0x2,
    "zes_engine_properties_t": 0x5,
    "zes_freq_properties_t": 0x9,
    "zes_mem_properties_t": 0xB,
    "zes_power_properties_t": 0xD,
    "zes_ras_properties_t": 0xF,
    "zes_temp_properties_t": 0x14,
    "zes_device_state_t": 0x15,
    "zes_freq_state_t": 0x1B,
    "zes_mem_state_t": 0x1E,
    "zes_ras_state_t": 0x22,
    "zes_device_ext_properties_t": 0x2D,
}
ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3

# The structures, field by field in header order, as struct codes. Native alignment
# ("@") pads exactly as a C compiler does on the ABI this runs on; nested structures
# are spelled out in place (each starts at an offset their own alignment allows).
LAYOUTS: dict[str, list[tuple[str, str]]] = {
    "zes_device_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("core.stype", "I"),
        ("core.pNext", "P"),
        ("core.type", "I"),
        ("core.vendorId", "I"),
        ("core.deviceId", "I"),
        ("core.flags", "I"),
        ("core.subdeviceId", "I"),
        ("core.coreClockRate", "I"),
        ("core.maxMemAllocSize", "Q"),
        ("core.maxHardwareContexts", "I"),
        ("core.maxCommandQueuePriority", "I"),
        ("core.numThreadsPerEU", "I"),
        ("core.physicalEUSimdWidth", "I"),
        ("core.numEUsPerSubslice", "I"),
        ("core.numSubslicesPerSlice", "I"),
        ("core.numSlices", "I"),
        ("core.timerResolution", "Q"),
        ("core.timestampValidBits", "I"),
        ("core.kernelTimestampValidBits", "I"),
        ("core.uuid", "16s"),
        ("core.name", "256s"),
        ("numSubdevices", "I"),
        ("serialNumber", "64s"),
        ("boardNumber", "64s"),
        ("brandName", "64s"),
        ("modelName", "64s"),
        ("vendorName", "64s"),
        ("driverVersion", "64s"),
    ],
    "zes_device_ext_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("uuid", "16s"),
        ("type", "I"),
        ("flags", "I"),
    ],
    "zes_device_state_t": [("stype", "I"), ("pNext", "P"), ("reset", "I"), ("repaired", "I")],
    "zes_pci_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("address.domain", "I"),
        ("address.bus", "I"),
        ("address.device", "I"),
        ("address.function", "I"),
        ("maxSpeed.gen", "i"),
        ("maxSpeed.width", "i"),
        ("maxSpeed.maxBandwidth", "q"),
        ("haveBandwidthCounters", "B"),
        ("havePacketCounters", "B"),
        ("haveReplayCounters", "B"),
    ],
    "zes_engine_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("type", "I"),
        ("onSubdevice", "B"),
        ("subdeviceId", "I"),
    ],
    "zes_engine_stats_t": [("activeTime", "Q"), ("timestamp", "Q")],
    "zes_mem_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("type", "I"),
        ("onSubdevice", "B"),
        ("subdeviceId", "I"),
        ("location", "I"),
        ("physicalSize", "Q"),
        ("busWidth", "i"),
        ("numChannels", "i"),
    ],
    "zes_mem_state_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("health", "I"),
        ("free", "Q"),
        ("size", "Q"),
    ],
    "zes_mem_bandwidth_t": [
        ("readCounter", "Q"),
        ("writeCounter", "Q"),
        ("maxBandwidth", "Q"),
        ("timestamp", "Q"),
    ],
    "zes_power_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("onSubdevice", "B"),
        ("subdeviceId", "I"),
        ("canControl", "B"),
        ("isEnergyThresholdSupported", "B"),
        ("defaultLimit", "i"),
        ("minLimit", "i"),
        ("maxLimit", "i"),
    ],
    "zes_power_energy_counter_t": [("energy", "Q"), ("timestamp", "Q")],
    "zes_power_sustained_limit_t": [("enabled", "B"), ("power", "i"), ("interval", "i")],
    "zes_freq_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("type", "I"),
        ("onSubdevice", "B"),
        ("subdeviceId", "I"),
        ("canControl", "B"),
        ("isThrottleEventSupported", "B"),
        ("min", "d"),
        ("max", "d"),
    ],
    "zes_freq_state_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("currentVoltage", "d"),
        ("request", "d"),
        ("tdp", "d"),
        ("efficient", "d"),
        ("actual", "d"),
        ("throttleReasons", "I"),
    ],
    "zes_temp_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("type", "I"),
        ("onSubdevice", "B"),
        ("subdeviceId", "I"),
        ("maxTemperature", "d"),
        ("isCriticalTempSupported", "B"),
        ("isThreshold1Supported", "B"),
        ("isThreshold2Supported", "B"),
    ],
    "zes_ras_properties_t": [
        ("stype", "I"),
        ("pNext", "P"),
        ("type", "I"),
        ("onSubdevice", "B"),
        ("subdeviceId", "I"),
    ],
    "zes_ras_state_t": [("stype", "I"), ("pNext", "P"), ("category", "7Q")],
}


def offsets(layout: str) -> dict[str, tuple[int, str]]:
    """Field -> (byte offset, struct code) of one structure of ``LAYOUTS``."""
    out: dict[str, tuple[int, str]] = {}
    prefix = "@"
    for name, code in LAYOUTS[layout]:
        out[name] = (struct.calcsize(prefix + code) - struct.calcsize("@" + code), code)
        prefix += code
    return out


def _extent(layout: str) -> int:
    off, code = list(offsets(layout).values())[-1]
    return off + struct.calcsize("@" + code)


def address(arg: Any) -> int:
    """The C address a ctypes argument stands for (0 for NULL)."""
    if arg is None:
        return 0
    if isinstance(arg, int):
        return arg
    if isinstance(arg, ctypes.c_void_p):
        return arg.value or 0
    if isinstance(arg, ctypes._Pointer | ctypes.Array):
        return ctypes.cast(arg, ctypes.c_void_p).value or 0
    raise TypeError(f"the fake takes pointers, arrays and handles, not {type(arg).__name__}")


def _view(addr: int, layout: str) -> Any:
    return (ctypes.c_char * _extent(layout)).from_address(addr)


def write(addr: int, layout: str, **values: Any) -> None:
    """Writes fields of one structure at ``addr`` (dotted names for nested ones)."""
    fields = offsets(layout)
    buf = _view(addr, layout)
    for name, value in values.items():
        off, code = fields[name.replace("__", ".")]
        if code.endswith("s") and isinstance(value, str):
            value = value.encode()
        args = value if isinstance(value, tuple) else (value,)
        struct.pack_into("@" + code, buf, off, *args)


def read_field(addr: int, layout: str, name: str) -> Any:
    off, code = offsets(layout)[name]
    return struct.unpack_from("@" + code, _view(addr, layout), off)[0]


# -- the device table -----------------------------------------------------------------


@dataclass
class Engine:
    kind: int = ENGINE_GROUP_ALL
    subdevice: int | None = None
    busy: float = 0.0  # fraction of time active


@dataclass
class MemoryModule:
    size: int
    free: int
    max_bandwidth: int  # bytes/s
    traffic: float = 0.0  # bytes/s, read + write together
    subdevice: int | None = None
    location: int = MEM_LOC_DEVICE
    kind: int = MEM_TYPE_HBM
    read: int = 0
    written: int = 0


@dataclass
class PowerDomain:
    watts: float
    energy_uj: int = 0
    subdevice: int | None = None
    limit_mw: int = 0
    limit_enabled: bool = True


@dataclass
class FrequencyDomain:
    kind: int
    actual_mhz: float
    subdevice: int | None = None
    throttle: int = 0


@dataclass
class TemperatureSensor:
    kind: int
    celsius: float
    subdevice: int | None = None


@dataclass
class RasSet:
    kind: int
    counts: list[int] = field(default_factory=lambda: [0] * 7)
    subdevice: int | None = None


@dataclass
class FakeDevice:
    name: str
    device_id: int
    pci: tuple[int, int, int, int]
    uuid: bytes
    driver_version: str = "1.3.29735"
    vendor_id: int = 0x8086
    subdevices: int = 0
    engines: list[Engine] = field(default_factory=list)
    memory: list[MemoryModule] = field(default_factory=list)
    power: list[PowerDomain] = field(default_factory=list)
    frequency: list[FrequencyDomain] = field(default_factory=list)
    temperature: list[TemperatureSensor] = field(default_factory=list)
    ras: list[RasSet] = field(default_factory=list)
    # Function names that answer ZE_RESULT_ERROR_UNSUPPORTED_FEATURE on this device.
    unsupported: set[str] = field(default_factory=set)
    # Function name -> any other ze_result_t to answer.
    errors: dict[str, int] = field(default_factory=dict)
    reset_reasons: int = 0
    # A driver older than zes_device_ext_properties_t ignores the pNext chain.
    ext_properties: bool = True
    lost: bool = False
    needs_reset: bool = False
    # Calls that still answer before a pending loss takes effect.
    lose_after: int | None = None
    active_us: dict[int, int] = field(default_factory=dict)


_BASE_HANDLE = 0x7E00_0000_1000
_DRIVER = 0x7E00_0000_0100


class FakeLevelZero:
    """The loader and one Sysman driver over ``devices``."""

    def __init__(self, devices: Sequence[FakeDevice] = (), driver: bool = True) -> None:
        self.devices = list(devices)
        self.driver = driver and bool(self.devices)
        self.initialized = False
        self.calls: Counter[str] = Counter()
        self.now_us = 1_000_000_000
        # handle -> (device, component or None for the device itself)
        self._handles: dict[int, tuple[FakeDevice, Any]] = {}
        self._by_object: dict[int, int] = {}
        next_handle = _BASE_HANDLE
        for d in self.devices:
            for obj in (
                d,
                *d.engines,
                *d.memory,
                *d.power,
                *d.frequency,
                *d.temperature,
                *d.ras,
            ):
                self._handles[next_handle] = (d, obj)
                self._by_object[id(obj)] = next_handle
                next_handle += 0x40

    def handle_of(self, obj: Any) -> int:
        return self._by_object[id(obj)]

    # -- test controls ---------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Moves every counter by ``seconds`` at its component's rate."""
        us = round(seconds * 1e6)
        self.now_us += us
        for d in self.devices:
            for e in d.engines:
                h = self.handle_of(e)
                d.active_us[h] = d.active_us.get(h, 0) + round(e.busy * us)
            for m in d.memory:
                moved = round(m.traffic * seconds)
                m.read += moved * 3 // 4
                m.written += moved - moved * 3 // 4
            for p in d.power:
                p.energy_uj += round(p.watts * us)

    def lose(self, device: FakeDevice, after_calls: int | None = None) -> None:
        if after_calls is None:
            device.lost = True
        else:
            device.lose_after = after_calls

    def recover(self, device: FakeDevice) -> None:
        device.lost = False
        device.needs_reset = False
        device.lose_after = None

    # -- the common checks of every call ---------------------------------------------

    def _enter(self, fn: str, handle: Any) -> tuple[int, FakeDevice | None, Any]:
        """(result, device, component); a non-success result ends the call."""
        self.calls[fn] += 1
        if not self.initialized:
            return ERROR_UNINITIALIZED, None, None
        found = self._handles.get(address(handle))
        if found is None:
            return ERROR_INVALID_NULL_HANDLE, None, None
        device, obj = found
        if device.lose_after is not None:
            if device.lose_after <= 0:
                device.lost, device.lose_after = True, None
            else:
                device.lose_after -= 1
        if device.lost:
            return ERROR_DEVICE_LOST, device, obj
        if device.needs_reset:
            return ERROR_DEVICE_REQUIRES_RESET, device, obj
        if fn in device.unsupported:
            return ERROR_UNSUPPORTED_FEATURE, device, obj
        if fn in device.errors:
            return device.errors[fn], device, obj
        return SUCCESS, device, obj

    @staticmethod
    def _out(p: Any, layout: str) -> int:
        """The address of an output structure, 0 if NULL or its stype is wrong."""
        addr = address(p)
        if not addr:
            return 0
        stype = _STYPE.get(layout)
        if stype is not None and read_field(addr, layout, "stype") != stype:
            return -1
        return addr

    def _fill(self, pCount: Any, phHandles: Any, handles: Sequence[int]) -> int:
        """The count-then-fill protocol: a zero count (or NULL array) asks how many."""
        p = address(pCount)
        if not p:
            return ERROR_INVALID_NULL_POINTER
        count = ctypes.c_uint32.from_address(p)
        array = address(phHandles)
        if count.value == 0 or not array:
            count.value = len(handles)
            return SUCCESS
        n = min(count.value, len(handles))
        for i, h in enumerate(handles[:n]):
            ctypes.c_void_p.from_address(array + i * ctypes.sizeof(ctypes.c_void_p)).value = h
        count.value = n
        return SUCCESS

    def _struct_call(
        self, fn: str, handle: Any, p: Any, layout: str, fill: Callable[[int, Any], None]
    ) -> int:
        rc, _device, obj = self._enter(fn, handle)
        if rc != SUCCESS:
            return rc
        addr = self._out(p, layout)
        if addr == 0:
            return ERROR_INVALID_NULL_POINTER
        if addr < 0:
            return ERROR_INVALID_ARGUMENT
        fill(addr, obj)
        return SUCCESS

    # -- driver and device -----------------------------------------------------------

    def zesInit(self, flags: int) -> int:
        self.calls["zesInit"] += 1
        if flags not in (0,):
            return ERROR_INVALID_ARGUMENT
        if not self.driver:
            return ERROR_UNINITIALIZED  # the loader found no Sysman driver
        self.initialized = True
        return SUCCESS

    def zesDriverGet(self, pCount: Any, phDrivers: Any) -> int:
        self.calls["zesDriverGet"] += 1
        if not self.initialized:
            return ERROR_UNINITIALIZED
        return self._fill(pCount, phDrivers, [_DRIVER])

    def zesDeviceGet(self, hDriver: Any, pCount: Any, phDevices: Any) -> int:
        self.calls["zesDeviceGet"] += 1
        if not self.initialized:
            return ERROR_UNINITIALIZED
        if address(hDriver) != _DRIVER:
            return ERROR_INVALID_NULL_HANDLE
        return self._fill(pCount, phDevices, [self.handle_of(d) for d in self.devices])

    def zesDeviceGetProperties(self, hDevice: Any, pProperties: Any) -> int:
        def fill(addr: int, d: FakeDevice) -> None:
            write(
                addr,
                "zes_device_properties_t",
                core__type=DEVICE_TYPE_GPU,
                core__vendorId=d.vendor_id,
                core__deviceId=d.device_id,
                core__uuid=d.uuid,
                core__name=d.name,
                numSubdevices=d.subdevices,
                serialNumber="unknown",
                boardNumber="unknown",
                brandName="Intel(R) Corporation",
                modelName=d.name,
                vendorName="Intel(R) Corporation",
                driverVersion=d.driver_version,
            )
            chained = read_field(addr, "zes_device_properties_t", "pNext")
            if (
                chained
                and d.ext_properties
                and read_field(chained, "zes_device_ext_properties_t", "stype")
                == _STYPE["zes_device_ext_properties_t"]
            ):
                write(
                    chained,
                    "zes_device_ext_properties_t",
                    uuid=d.uuid,
                    type=DEVICE_TYPE_GPU,
                    flags=0,
                )

        return self._struct_call(
            "zesDeviceGetProperties", hDevice, pProperties, "zes_device_properties_t", fill
        )

    def zesDeviceGetState(self, hDevice: Any, pState: Any) -> int:
        return self._struct_call(
            "zesDeviceGetState",
            hDevice,
            pState,
            "zes_device_state_t",
            lambda a, d: write(a, "zes_device_state_t", reset=d.reset_reasons, repaired=0),
        )

    def zesDevicePciGetProperties(self, hDevice: Any, pProperties: Any) -> int:
        def fill(addr: int, d: FakeDevice) -> None:
            domain, bus, dev, fn = d.pci
            write(
                addr,
                "zes_pci_properties_t",
                address__domain=domain,
                address__bus=bus,
                address__device=dev,
                address__function=fn,
                maxSpeed__gen=5,
                maxSpeed__width=16,
                maxSpeed__maxBandwidth=63_000_000_000,
            )

        return self._struct_call(
            "zesDevicePciGetProperties", hDevice, pProperties, "zes_pci_properties_t", fill
        )

    def _enum(self, fn: str, hDevice: Any, pCount: Any, ph: Any, items: Sequence[Any]) -> int:
        rc, device, obj = self._enter(fn, hDevice)
        if rc != SUCCESS:
            return rc
        if obj is not device:
            return ERROR_INVALID_NULL_HANDLE  # a component handle where a device belongs
        return self._fill(pCount, ph, [self.handle_of(i) for i in items])

    def _device(self, hDevice: Any) -> FakeDevice | None:
        found = self._handles.get(address(hDevice))
        return found[0] if found is not None else None

    @staticmethod
    def _location(obj: Any) -> dict[str, Any]:
        sub = obj.subdevice
        return {"onSubdevice": int(sub is not None), "subdeviceId": sub or 0}

    # -- engines ---------------------------------------------------------------------

    def zesDeviceEnumEngineGroups(self, hDevice: Any, pCount: Any, phEngine: Any) -> int:
        d = self._device(hDevice)
        items = d.engines if d else []
        return self._enum("zesDeviceEnumEngineGroups", hDevice, pCount, phEngine, items)

    def zesEngineGetProperties(self, hEngine: Any, pProperties: Any) -> int:
        return self._struct_call(
            "zesEngineGetProperties",
            hEngine,
            pProperties,
            "zes_engine_properties_t",
            lambda a, e: write(a, "zes_engine_properties_t", type=e.kind, **self._location(e)),
        )

    def zesEngineGetActivity(self, hEngine: Any, pStats: Any) -> int:
        def fill(addr: int, e: Engine) -> None:
            d = self._device(hEngine)
            assert d is not None
            active = d.active_us.get(self.handle_of(e), 0)
            write(addr, "zes_engine_stats_t", activeTime=active, timestamp=self.now_us)

        return self._struct_call(
            "zesEngineGetActivity", hEngine, pStats, "zes_engine_stats_t", fill
        )

    # -- memory ----------------------------------------------------------------------

    def zesDeviceEnumMemoryModules(self, hDevice: Any, pCount: Any, phMemory: Any) -> int:
        d = self._device(hDevice)
        items = d.memory if d else []
        return self._enum("zesDeviceEnumMemoryModules", hDevice, pCount, phMemory, items)

    def zesMemoryGetProperties(self, hMemory: Any, pProperties: Any) -> int:
        return self._struct_call(
            "zesMemoryGetProperties",
            hMemory,
            pProperties,
            "zes_mem_properties_t",
            lambda a, m: write(
                a,
                "zes_mem_properties_t",
                type=m.kind,
                location=m.location,
                physicalSize=m.size,
                busWidth=-1,
                numChannels=-1,
                **self._location(m),
            ),
        )

    def zesMemoryGetState(self, hMemory: Any, pState: Any) -> int:
        return self._struct_call(
            "zesMemoryGetState",
            hMemory,
            pState,
            "zes_mem_state_t",
            lambda a, m: write(
                a, "zes_mem_state_t", health=MEM_HEALTH_OK, free=m.free, size=m.size
            ),
        )

    def zesMemoryGetBandwidth(self, hMemory: Any, pBandwidth: Any) -> int:
        return self._struct_call(
            "zesMemoryGetBandwidth",
            hMemory,
            pBandwidth,
            "zes_mem_bandwidth_t",
            lambda a, m: write(
                a,
                "zes_mem_bandwidth_t",
                readCounter=m.read,
                writeCounter=m.written,
                maxBandwidth=m.max_bandwidth,
                timestamp=self.now_us,
            ),
        )

    # -- power -----------------------------------------------------------------------

    def zesDeviceEnumPowerDomains(self, hDevice: Any, pCount: Any, phPower: Any) -> int:
        d = self._device(hDevice)
        items = d.power if d else []
        return self._enum("zesDeviceEnumPowerDomains", hDevice, pCount, phPower, items)

    def zesPowerGetProperties(self, hPower: Any, pProperties: Any) -> int:
        return self._struct_call(
            "zesPowerGetProperties",
            hPower,
            pProperties,
            "zes_power_properties_t",
            lambda a, p: write(
                a,
                "zes_power_properties_t",
                canControl=0,
                isEnergyThresholdSupported=0,
                defaultLimit=p.limit_mw,
                minLimit=-1,
                maxLimit=-1,
                **self._location(p),
            ),
        )

    def zesPowerGetEnergyCounter(self, hPower: Any, pEnergy: Any) -> int:
        return self._struct_call(
            "zesPowerGetEnergyCounter",
            hPower,
            pEnergy,
            "zes_power_energy_counter_t",
            lambda a, p: write(
                a, "zes_power_energy_counter_t", energy=p.energy_uj, timestamp=self.now_us
            ),
        )

    def zesPowerGetLimits(self, hPower: Any, pSustained: Any, pBurst: Any, pPeak: Any) -> int:
        rc, _device, p = self._enter("zesPowerGetLimits", hPower)
        if rc != SUCCESS:
            return rc
        addr = address(pSustained)
        if addr:  # every limit pointer is optional
            write(
                addr,
                "zes_power_sustained_limit_t",
                enabled=int(p.limit_enabled),
                power=p.limit_mw,
                interval=28_000,
            )
        if address(pBurst) or address(pPeak):
            return ERROR_UNSUPPORTED_FEATURE  # not modelled; the backend never asks
        return SUCCESS

    # -- frequency -------------------------------------------------------------------

    def zesDeviceEnumFrequencyDomains(self, hDevice: Any, pCount: Any, phFrequency: Any) -> int:
        d = self._device(hDevice)
        items = d.frequency if d else []
        return self._enum("zesDeviceEnumFrequencyDomains", hDevice, pCount, phFrequency, items)

    def zesFrequencyGetProperties(self, hFrequency: Any, pProperties: Any) -> int:
        return self._struct_call(
            "zesFrequencyGetProperties",
            hFrequency,
            pProperties,
            "zes_freq_properties_t",
            lambda a, f: write(
                a,
                "zes_freq_properties_t",
                type=f.kind,
                canControl=0,
                isThrottleEventSupported=0,
                min=300.0,
                max=1600.0,
                **self._location(f),
            ),
        )

    def zesFrequencyGetState(self, hFrequency: Any, pState: Any) -> int:
        return self._struct_call(
            "zesFrequencyGetState",
            hFrequency,
            pState,
            "zes_freq_state_t",
            lambda a, f: write(
                a,
                "zes_freq_state_t",
                currentVoltage=-1.0,
                request=f.actual_mhz,
                tdp=-1.0,
                efficient=-1.0,
                actual=f.actual_mhz,
                throttleReasons=f.throttle,
            ),
        )

    # -- temperature -----------------------------------------------------------------

    def zesDeviceEnumTemperatureSensors(self, hDevice: Any, pCount: Any, phTemperature: Any) -> int:
        d = self._device(hDevice)
        items = d.temperature if d else []
        return self._enum("zesDeviceEnumTemperatureSensors", hDevice, pCount, phTemperature, items)

    def zesTemperatureGetProperties(self, hTemperature: Any, pProperties: Any) -> int:
        return self._struct_call(
            "zesTemperatureGetProperties",
            hTemperature,
            pProperties,
            "zes_temp_properties_t",
            lambda a, t: write(
                a, "zes_temp_properties_t", type=t.kind, maxTemperature=105.0, **self._location(t)
            ),
        )

    def zesTemperatureGetState(self, hTemperature: Any, pTemperature: Any) -> int:
        rc, _device, t = self._enter("zesTemperatureGetState", hTemperature)
        if rc != SUCCESS:
            return rc
        addr = address(pTemperature)
        if not addr:
            return ERROR_INVALID_NULL_POINTER
        ctypes.c_double.from_address(addr).value = t.celsius
        return SUCCESS

    # -- RAS -------------------------------------------------------------------------

    def zesDeviceEnumRasErrorSets(self, hDevice: Any, pCount: Any, phRas: Any) -> int:
        d = self._device(hDevice)
        items = d.ras if d else []
        return self._enum("zesDeviceEnumRasErrorSets", hDevice, pCount, phRas, items)

    def zesRasGetProperties(self, hRas: Any, pProperties: Any) -> int:
        return self._struct_call(
            "zesRasGetProperties",
            hRas,
            pProperties,
            "zes_ras_properties_t",
            lambda a, s: write(a, "zes_ras_properties_t", type=s.kind, **self._location(s)),
        )

    def zesRasGetState(self, hRas: Any, clear: int, pState: Any) -> int:
        def fill(addr: int, s: RasSet) -> None:
            write(addr, "zes_ras_state_t", category=tuple(s.counts))
            if clear:
                s.counts = [0] * 7

        if clear not in (0, 1):
            return ERROR_INVALID_ARGUMENT
        return self._struct_call("zesRasGetState", hRas, pState, "zes_ras_state_t", fill)

    # -- ready-made nodes ------------------------------------------------------------

    @classmethod
    def implemented(cls) -> list[str]:
        return sorted(n for n in vars(cls) if n.startswith("zes"))


def max_1550(pci_bus: int = 0x29, uuid_byte: int = 0x15) -> FakeDevice:
    """A two-tile Data Center GPU Max 1550: every domain is per tile, except one
    device-level power domain (the package) and the RAS sets of the whole card."""
    tiles = (0, 1)
    return FakeDevice(
        name="Intel(R) Data Center GPU Max 1550",
        device_id=0x0BD5,
        pci=(0, pci_bus, 0, 0),
        uuid=bytes([0x86, 0x80, 0xD5, 0x0B, uuid_byte] + [0] * 10 + [pci_bus]),
        subdevices=2,
        engines=[
            Engine(ENGINE_GROUP_ALL, t, busy) for t, busy in zip(tiles, (0.9, 0.5), strict=True)
        ]
        + [Engine(ENGINE_GROUP_MEDIA_ALL, 0, 0.0), Engine(ENGINE_GROUP_COMPUTE_ALL, 0, 0.8)],
        memory=[
            MemoryModule(64 * GIB, 40 * GIB, 1_638_400_000_000, 819_200_000_000, subdevice=0),
            MemoryModule(64 * GIB, 60 * GIB, 1_638_400_000_000, 163_840_000_000, subdevice=1),
            MemoryModule(512 * GIB, 500 * GIB, 0, location=MEM_LOC_SYSTEM),
        ],
        power=[
            PowerDomain(480.0, energy_uj=9_000_000_000, limit_mw=600_000),
            PowerDomain(250.0, energy_uj=4_000_000_000, subdevice=0, limit_mw=300_000),
            PowerDomain(230.0, energy_uj=5_000_000_000, subdevice=1, limit_mw=300_000),
        ],
        frequency=[
            FrequencyDomain(FREQ_DOMAIN_GPU, 1550.0, subdevice=0, throttle=THROTTLE_AVE_PWR_CAP),
            FrequencyDomain(FREQ_DOMAIN_GPU, 1600.0, subdevice=1),
            FrequencyDomain(FREQ_DOMAIN_MEMORY, 3200.0, subdevice=0),
            FrequencyDomain(FREQ_DOMAIN_MEMORY, 3200.0, subdevice=1),
        ],
        temperature=[
            TemperatureSensor(TEMP_SENSORS_GLOBAL, 61.0, subdevice=0),
            TemperatureSensor(TEMP_SENSORS_GLOBAL, 64.0, subdevice=1),
            TemperatureSensor(TEMP_SENSORS_GPU, 58.0, subdevice=0),
            TemperatureSensor(TEMP_SENSORS_GPU, 62.5, subdevice=1),
            TemperatureSensor(TEMP_SENSORS_MEMORY, 52.0, subdevice=0),
            TemperatureSensor(TEMP_SENSORS_MEMORY, 55.0, subdevice=1),
            TemperatureSensor(TEMP_SENSORS_GLOBAL_MIN, 30.0, subdevice=0),
        ],
        ras=[
            RasSet(RAS_CORRECTABLE, [0, 0, 0, 3, 1, 2, 0]),
            RasSet(RAS_UNCORRECTABLE, [1, 0, 0, 0, 0, 0, 0]),
        ],
    )


def flex_170(pci_bus: int = 0x4D) -> FakeDevice:
    """A single-tile Data Center GPU Flex 170: device-level domains throughout."""
    return FakeDevice(
        name="Intel(R) Data Center GPU Flex 170",
        device_id=0x56C0,
        pci=(0, pci_bus, 0, 0),
        uuid=bytes([0x86, 0x80, 0xC0, 0x56] + [0] * 11 + [pci_bus]),
        engines=[Engine(ENGINE_GROUP_ALL, None, 0.25), Engine(ENGINE_GROUP_COPY_ALL, None, 1.0)],
        memory=[
            MemoryModule(16 * GIB, 12 * GIB, 576_000_000_000, 57_600_000_000, kind=MEM_TYPE_GDDR6)
        ],
        power=[PowerDomain(95.5, energy_uj=2_500_000_000, limit_mw=150_000)],
        frequency=[
            FrequencyDomain(FREQ_DOMAIN_GPU, 2050.0, throttle=THROTTLE_THERMAL_LIMIT),
            FrequencyDomain(FREQ_DOMAIN_MEMORY, 2250.0),
        ],
        temperature=[
            TemperatureSensor(TEMP_SENSORS_GLOBAL, 71.0),
            TemperatureSensor(TEMP_SENSORS_GPU, 69.0),
        ],
        ras=[RasSet(RAS_CORRECTABLE), RasSet(RAS_UNCORRECTABLE)],
    )
