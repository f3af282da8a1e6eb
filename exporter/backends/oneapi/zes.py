"""Level Zero Sysman's C ABI for ctypes: the constants, structures and function
prototypes of ``ze_api.h``/``zes_api.h`` that the oneAPI backend calls, and the loader.

Why it is built this way:

* Structures are laid out as in ``zes_api.h``, with ``stype``/``pNext`` where the
  header has them, and every function's argument types are declared on the real
  loader; so the fake in ``tests/support/fakes/level_zero.py``, which writes results
  at the header's byte offsets, runs the very code that talks to a driver.
* Nothing here decides what a figure means: ``exporter.backends.oneapi.sysman`` does.
  This module is the header, and only the header, so it can be checked against one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

# -- constants from ze_api.h / zes_api.h ------------------------------------------------

ZE_RESULT_SUCCESS = 0
ZE_RESULT_NOT_READY = 1
ZE_RESULT_ERROR_DEVICE_LOST = 0x70000001
ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY = 0x70000002
ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY = 0x70000003
ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET = 0x70000006
ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE = 0x70000007
ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS = 0x70010000
ZE_RESULT_ERROR_NOT_AVAILABLE = 0x70010001
ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE = 0x70020000
ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001
ZE_RESULT_ERROR_UNSUPPORTED_VERSION = 0x78000002
ZE_RESULT_ERROR_UNSUPPORTED_FEATURE = 0x78000003
ZE_RESULT_ERROR_INVALID_ARGUMENT = 0x78000004
ZE_RESULT_ERROR_INVALID_NULL_HANDLE = 0x78000005
ZE_RESULT_ERROR_INVALID_NULL_POINTER = 0x78000007
ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION = 0x7800000D
ZE_RESULT_ERROR_UNKNOWN = 0x7FFFFFFE

# The codes above by value, for reasons that name what the driver said.
RESULT_NAMES: dict[int, str] = {
    v: k for k, v in dict(globals()).items() if k.startswith("ZE_RESULT_") and isinstance(v, int)
}

ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3
ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x1
ZES_STRUCTURE_TYPE_PCI_PROPERTIES = 0x2
ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES = 0x5
ZES_STRUCTURE_TYPE_FREQ_PROPERTIES = 0x9
ZES_STRUCTURE_TYPE_MEM_PROPERTIES = 0xB
ZES_STRUCTURE_TYPE_POWER_PROPERTIES = 0xD
ZES_STRUCTURE_TYPE_RAS_PROPERTIES = 0xF
ZES_STRUCTURE_TYPE_TEMP_PROPERTIES = 0x14
ZES_STRUCTURE_TYPE_DEVICE_STATE = 0x15
ZES_STRUCTURE_TYPE_FREQ_STATE = 0x1B
ZES_STRUCTURE_TYPE_MEM_STATE = 0x1E
ZES_STRUCTURE_TYPE_RAS_STATE = 0x22
ZES_STRUCTURE_TYPE_DEVICE_EXT_PROPERTIES = 0x2D

ZES_ENGINE_GROUP_ALL = 0
ZES_ENGINE_GROUP_COMPUTE_ALL = 1
ZES_ENGINE_GROUP_3D_RENDER_COMPUTE_ALL = 11
ZES_ENGINE_GROUP_RENDER_ALL = 12
ZES_MEM_LOC_DEVICE = 1
ZES_FREQ_DOMAIN_GPU = 0
ZES_FREQ_DOMAIN_MEMORY = 1
ZES_TEMP_SENSORS_GLOBAL = 0
ZES_TEMP_SENSORS_GPU = 1
ZES_TEMP_SENSORS_MEMORY = 2
ZES_RAS_ERROR_TYPE_CORRECTABLE = 0
ZES_RAS_ERROR_TYPE_UNCORRECTABLE = 1
ZES_MAX_RAS_ERROR_CATEGORY_COUNT = 7
ZES_RAS_ERROR_CAT_RESET = 0
ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS = 1
ZES_RAS_ERROR_CAT_DRIVER_ERRORS = 2
ZES_RAS_ERROR_CAT_COMPUTE_ERRORS = 3
ZES_RAS_ERROR_CAT_NON_COMPUTE_ERRORS = 4
ZES_RAS_ERROR_CAT_CACHE_ERRORS = 5
ZES_RAS_ERROR_CAT_DISPLAY_ERRORS = 6
ZES_RESET_REASON_FLAG_WEDGED = 1 << 0
ZES_RESET_REASON_FLAG_REPAIR = 1 << 1
ZES_FREQ_THROTTLE_REASON_FLAG_AVE_PWR_CAP = 1 << 0
ZES_FREQ_THROTTLE_REASON_FLAG_BURST_PWR_CAP = 1 << 1
ZES_FREQ_THROTTLE_REASON_FLAG_CURRENT_LIMIT = 1 << 2
ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT = 1 << 3
ZES_FREQ_THROTTLE_REASON_FLAG_PSU_ALERT = 1 << 4
ZES_FREQ_THROTTLE_REASON_FLAG_SW_RANGE = 1 << 5
ZES_FREQ_THROTTLE_REASON_FLAG_HW_RANGE = 1 << 6

ZE_MAX_DEVICE_NAME = 256
ZE_MAX_DEVICE_UUID_SIZE = 16
ZES_STRING_PROPERTY_SIZE = 64


def result_name(code: int) -> str:
    return RESULT_NAMES.get(code, f"ze_result_t 0x{code:08x}")


# Every Level Zero handle is a pointer to an opaque struct.
HANDLE = ctypes.c_void_p

# -- structures, laid out as in zes_api.h ---------------------------------------------


class ZeDeviceProperties(ctypes.Structure):
    """ze_device_properties_t (core), embedded in zes_device_properties_t."""

    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("vendorId", ctypes.c_uint32),
        ("deviceId", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("subdeviceId", ctypes.c_uint32),
        ("coreClockRate", ctypes.c_uint32),
        ("maxMemAllocSize", ctypes.c_uint64),
        ("maxHardwareContexts", ctypes.c_uint32),
        ("maxCommandQueuePriority", ctypes.c_uint32),
        ("numThreadsPerEU", ctypes.c_uint32),
        ("physicalEUSimdWidth", ctypes.c_uint32),
        ("numEUsPerSubslice", ctypes.c_uint32),
        ("numSubslicesPerSlice", ctypes.c_uint32),
        ("numSlices", ctypes.c_uint32),
        ("timerResolution", ctypes.c_uint64),
        ("timestampValidBits", ctypes.c_uint32),
        ("kernelTimestampValidBits", ctypes.c_uint32),
        ("uuid", ctypes.c_uint8 * ZE_MAX_DEVICE_UUID_SIZE),
        ("name", ctypes.c_char * ZE_MAX_DEVICE_NAME),
    ]


class ZesDeviceProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("core", ZeDeviceProperties),
        ("numSubdevices", ctypes.c_uint32),
        ("serialNumber", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("boardNumber", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("brandName", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("modelName", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("vendorName", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("driverVersion", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
    ]


class ZesDeviceExtProperties(ctypes.Structure):
    """Chained to zes_device_properties_t through pNext: the UUID's current home
    (the core structure's is deprecated)."""

    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("uuid", ctypes.c_uint8 * ZE_MAX_DEVICE_UUID_SIZE),
        ("type", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


class ZesDeviceState(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("reset", ctypes.c_uint32),
        ("repaired", ctypes.c_uint32),
    ]


class ZesPciAddress(ctypes.Structure):
    _fields_ = [
        ("domain", ctypes.c_uint32),
        ("bus", ctypes.c_uint32),
        ("device", ctypes.c_uint32),
        ("function", ctypes.c_uint32),
    ]


class ZesPciSpeed(ctypes.Structure):
    _fields_ = [
        ("gen", ctypes.c_int32),
        ("width", ctypes.c_int32),
        ("maxBandwidth", ctypes.c_int64),
    ]


class ZesPciProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("address", ZesPciAddress),
        ("maxSpeed", ZesPciSpeed),
        ("haveBandwidthCounters", ctypes.c_uint8),
        ("havePacketCounters", ctypes.c_uint8),
        ("haveReplayCounters", ctypes.c_uint8),
    ]


class ZesEngineProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
    ]


class ZesEngineStats(ctypes.Structure):
    """Both in microseconds: busy time and the time it was sampled."""

    _fields_ = [("activeTime", ctypes.c_uint64), ("timestamp", ctypes.c_uint64)]


class ZesMemProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
        ("location", ctypes.c_uint32),
        ("physicalSize", ctypes.c_uint64),
        ("busWidth", ctypes.c_int32),
        ("numChannels", ctypes.c_int32),
    ]


class ZesMemState(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("health", ctypes.c_uint32),
        ("free", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
    ]


class ZesMemBandwidth(ctypes.Structure):
    """Bytes read and written (cumulative), peak bytes/s, timestamp in µs."""

    _fields_ = [
        ("readCounter", ctypes.c_uint64),
        ("writeCounter", ctypes.c_uint64),
        ("maxBandwidth", ctypes.c_uint64),
        ("timestamp", ctypes.c_uint64),
    ]


class ZesPowerProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
        ("canControl", ctypes.c_uint8),
        ("isEnergyThresholdSupported", ctypes.c_uint8),
        ("defaultLimit", ctypes.c_int32),
        ("minLimit", ctypes.c_int32),
        ("maxLimit", ctypes.c_int32),
    ]


class ZesPowerEnergyCounter(ctypes.Structure):
    """Energy in µJ (cumulative), timestamp in µs."""

    _fields_ = [("energy", ctypes.c_uint64), ("timestamp", ctypes.c_uint64)]


class ZesPowerSustainedLimit(ctypes.Structure):
    """The sustained (PL1) limit; power in mW."""

    _fields_ = [
        ("enabled", ctypes.c_uint8),
        ("power", ctypes.c_int32),
        ("interval", ctypes.c_int32),
    ]


class ZesFreqProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
        ("canControl", ctypes.c_uint8),
        ("isThrottleEventSupported", ctypes.c_uint8),
        ("min", ctypes.c_double),
        ("max", ctypes.c_double),
    ]


class ZesFreqState(ctypes.Structure):
    """Frequencies in MHz, negative when unknown."""

    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("currentVoltage", ctypes.c_double),
        ("request", ctypes.c_double),
        ("tdp", ctypes.c_double),
        ("efficient", ctypes.c_double),
        ("actual", ctypes.c_double),
        ("throttleReasons", ctypes.c_uint32),
    ]


class ZesTempProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
        ("maxTemperature", ctypes.c_double),
        ("isCriticalTempSupported", ctypes.c_uint8),
        ("isThreshold1Supported", ctypes.c_uint8),
        ("isThreshold2Supported", ctypes.c_uint8),
    ]


class ZesRasProperties(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("onSubdevice", ctypes.c_uint8),
        ("subdeviceId", ctypes.c_uint32),
    ]


class ZesRasState(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("category", ctypes.c_uint64 * ZES_MAX_RAS_ERROR_CATEGORY_COUNT),
    ]


_P = ctypes.POINTER
_H = HANDLE
_U32 = ctypes.c_uint32
# Function name -> argument types, for binding the real loader (the fake takes the
# same arguments without declarations).
PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "zesInit": (_U32,),
    "zesDriverGet": (_P(_U32), _P(_H)),
    "zesDeviceGet": (_H, _P(_U32), _P(_H)),
    "zesDeviceGetProperties": (_H, _P(ZesDeviceProperties)),
    "zesDeviceGetState": (_H, _P(ZesDeviceState)),
    "zesDevicePciGetProperties": (_H, _P(ZesPciProperties)),
    "zesDeviceEnumEngineGroups": (_H, _P(_U32), _P(_H)),
    "zesEngineGetProperties": (_H, _P(ZesEngineProperties)),
    "zesEngineGetActivity": (_H, _P(ZesEngineStats)),
    "zesDeviceEnumMemoryModules": (_H, _P(_U32), _P(_H)),
    "zesMemoryGetProperties": (_H, _P(ZesMemProperties)),
    "zesMemoryGetState": (_H, _P(ZesMemState)),
    "zesMemoryGetBandwidth": (_H, _P(ZesMemBandwidth)),
    "zesDeviceEnumPowerDomains": (_H, _P(_U32), _P(_H)),
    "zesPowerGetProperties": (_H, _P(ZesPowerProperties)),
    "zesPowerGetEnergyCounter": (_H, _P(ZesPowerEnergyCounter)),
    "zesPowerGetLimits": (_H, _P(ZesPowerSustainedLimit), ctypes.c_void_p, ctypes.c_void_p),
    "zesDeviceEnumFrequencyDomains": (_H, _P(_U32), _P(_H)),
    "zesFrequencyGetProperties": (_H, _P(ZesFreqProperties)),
    "zesFrequencyGetState": (_H, _P(ZesFreqState)),
    "zesDeviceEnumTemperatureSensors": (_H, _P(_U32), _P(_H)),
    "zesTemperatureGetProperties": (_H, _P(ZesTempProperties)),
    "zesTemperatureGetState": (_H, _P(ctypes.c_double)),
    "zesDeviceEnumRasErrorSets": (_H, _P(_U32), _P(_H)),
    "zesRasGetProperties": (_H, _P(ZesRasProperties)),
    "zesRasGetState": (_H, ctypes.c_uint8, _P(ZesRasState)),
}


class LevelZeroUnavailable(Exception):
    """Sysman cannot be used here; the message says why (no loader, no driver)."""


def load_level_zero() -> Any:
    """The real loader, with every function this backend calls bound to its C types."""
    name = ctypes.util.find_library("ze_loader") or "libze_loader.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        raise LevelZeroUnavailable(f"the Level Zero loader is not installed ({e})") from e
    for fn, argtypes in PROTOTYPES.items():
        try:
            proc = getattr(lib, fn)
        except AttributeError as e:
            raise LevelZeroUnavailable(
                f"{name} has no {fn}: the loader is older than Level Zero 1.5"
            ) from e
        proc.argtypes = list(argtypes)
        proc.restype = ctypes.c_uint32
    return lib


class ZeError(Exception):
    """A Level Zero call that did not answer ZE_RESULT_SUCCESS."""

    def __init__(self, fn: str, code: int) -> None:
        super().__init__(f"{fn}: {result_name(code)}")
        self.fn = fn
        self.code = code
