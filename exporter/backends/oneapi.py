"""Intel devices through oneAPI: discovery by ``dpctl``, telemetry by Level Zero Sysman
(ctypes on ``libze_loader``) where it is present, else by the i915/xe driver's sysfs.

Why it is built this way:

* **Discovery is dpctl's**, because a device that SYCL cannot see cannot run oneAPI
  work, whatever sysfs says. It runs once, in a child process (``python -m
  exporter.backends.oneapi``, which prints the list as JSON and doubles as an
  operator's "what does SYCL see here?"): importing dpctl and initialising the SYCL
  and OpenCL runtimes grows a process by about 130 MiB (11 to 144 MiB RSS on the
  development machine), which the exporter would then carry for its whole life, and
  a runtime that crashes or hangs takes only the child with it (bounded by
  ``DISCOVERY_TIMEOUT_SECONDS``). A host without dpctl loses this backend only, with
  one clear reason. Tests hand in a fake dpctl module through the constructor; it is
  listed in-process by the same code.
* **One device per card**: the SYCL devices of the ``level_zero`` and ``opencl``
  backends are listed, and a GPU that both list is kept once, from Level Zero. dpctl
  0.22 exposes neither a PCI address nor a UUID, so the two lists are matched by
  (name, device type, PCI device id from ``dpctl.utils.intel_device_info``) as
  multisets: identical cards are interchangeable in dpctl's eyes, and every fact
  dpctl gives about them (name, driver, memory size) is the same for each of them.
  In Level Zero's FLAT hierarchy a multi-tile card is listed once per tile; its
  ``composite_device`` is exported instead, so a card is one device, as the kubelet
  assigns it.
* **Which devices**: those an Intel runtime drives (the SYCL device's vendor string
  names Intel). That includes this machine's AMD EPYC seen through Intel's OpenCL CPU
  runtime, and excludes NVIDIA and AMD GPUs that their own OpenCL ICDs list (the
  ``nvidia`` and ``amd`` backends own those) and emulated devices (the FPGA emulator),
  which are not hardware.
* **The vendor label is ``oneapi``** for every device of this backend: it names the
  stack the device is seen through, as ``nvidia`` and ``amd`` do, and it is the key of
  Intel's fault catalogue in ``exporter.faults`` and the vendor the sim backend uses.
  dpctl's own vendor string is the runtime's (``Intel(R) Corporation`` even for the
  AMD CPU here), so exporting it would call an AMD CPU Intel. The device ids are
  ``oneapi0``, ``oneapi1``..., GPUs and accelerators first, then CPUs; within a kind,
  in PCI address order where it is known, else in dpctl's order.
* **Identity**: ``model`` is dpctl's device name; ``profile`` is the SYCL device type
  (``gpu``, ``cpu``, ``accelerator``), so a dashboard can leave out CPUs that the
  ``cpu`` backend already exports; ``driver_version`` is dpctl's; ``pci_bus_id`` and
  ``numa_node`` come from Sysman or the matched sysfs card. ``uuid`` is the device's
  Level Zero UUID when Sysman gives one, else a synthetic name-based (version 5) UUID
  of the machine's DMI UUID (when readable), the device type, the name and the PCI
  address (or the device's place among devices of the same name): stable across
  restarts, and marked as synthetic by its version nibble.
* **Telemetry**, where it exists, else nothing: ``accel_memory_total_bytes`` from
  dpctl's ``global_mem_size`` is always a true fact; every other field comes from a
  real counter or is left out with its reason in ``self.missing[device][field]``
  (nvidia's habit), never exported as 0. A device with no source at all (a CPU as an
  OpenCL device) exports its identity, ``accel_up`` and its memory size;
  ``self.sources[device]`` says ``none``.
* **Level Zero Sysman** is called through ctypes on the real C ABI: structures laid
  out as in ``zes_api.h`` with ``stype``/``pNext`` set, counts and handle arrays passed
  by pointer, so ``tests/fakes/level_zero.py`` (which writes results at the header's
  byte offsets) runs this very code. Rates come from the driver's own counters and
  timestamps between two polls (engine activity, memory bandwidth, energy), so the
  first poll reports none rather than a made-up 0. Where a card has tiles and no
  device-level domain, utilization is the mean of the tiles, memory and energy are
  their sum, temperatures the hottest sensor of each kind, and clocks tile 0's.
* **RAS**: hardware-error categories (compute, fixed-function, cache) of the
  correctable and uncorrectable error sets are ``accel_ecc_errors_total`` (corrected,
  uncorrected). New errors since the previous poll become one fault event per kind
  and poll (``ras_correctable``, ``ras_uncorrectable``, ``ras_engine_reset``,
  ``ras_programming``, ``ras_driver``, ``ras_display``), classified by
  ``exporter.faults``; counts that were already there when the exporter started are
  not replayed as new faults. ``zesDeviceGetState`` asking for a reset is
  ``reset_required``.
* **A lost device** (``ZE_RESULT_ERROR_DEVICE_LOST``, a reset required, or its sysfs
  card gone) is down: the first read that finds it returns ``Reading(up=False)``
  carrying one ``lost`` (or ``reset_required``) fault event, so the fatal fault is
  counted when it happens; later reads raise ``DeviceLostError`` until it answers.
  Answers that cannot change while the driver is loaded (unsupported feature,
  insufficient permissions) are remembered, so such a field is not asked again.
* **sysfs** (through ``--path.sysfs``): ``class/drm/card*/device`` with vendor 0x8086
  and driver i915 or xe, matched to a dpctl device by PCI address when Sysman gave
  one, else by PCI device id. hwmon ``energy1_input`` (µJ; xe's package channel
  ``energy2_input`` where there is no card channel) is the energy counter and power is
  its delta over the time between two polls; ``power1_max`` (PL1, µW, 0 = disabled),
  else ``power1_crit``, is the power limit; the graphics clock is i915's
  ``gt/gt0/rps_act_freq_mhz`` (``gt_act_freq_mhz`` on older kernels) or xe's
  ``device/tile0/gt0/freq0/act_freq``, in MHz; xe's ``temp2_input``/``temp3_input``
  are the package and VRAM temperatures. With Sysman present, sysfs fills only the
  fields Sysman could not give.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
from exporter.pcitopo import cpu_affinity, pcie_links

log = logging.getLogger("accel_exporter.oneapi")

VENDOR = "oneapi"
SYSMAN = "Level Zero Sysman"
# The name the sim backend gives the same figure, so the HELP text reads alike.
BANDWIDTH_SOURCE = "Level Zero memory bandwidth counters"
FIRST_SAMPLE = "first sample taken; a rate needs two polls"
NO_SOURCE = "none"
SYCL_BACKENDS = ("level_zero", "opencl")
# How long the child process that lists the SYCL devices may take (runtimes JIT and
# probe devices on first use; a hung one must not keep the backend from trying again).
DISCOVERY_TIMEOUT_SECONDS = 60.0
INTEL_PCI_VENDOR = 0x8086

# Every field this backend can report, by the key that ``missing`` uses: after a
# read, each is either in the Reading or has a reason in ``missing``.
FIELDS: tuple[str, ...] = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_bandwidth_utilization",
    "ecc_errors",
    "fault_events",
    "temperatures",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    "clocks_hz.graphics",
    "clocks_hz.memory",
    "throttle",
)

# -- Level Zero: constants from ze_api.h / zes_api.h ------------------------------------

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

# Engine groups that stand for "the whole device is busy", in order of preference.
_ENGINE_GROUPS = (
    ZES_ENGINE_GROUP_ALL,
    ZES_ENGINE_GROUP_COMPUTE_ALL,
    ZES_ENGINE_GROUP_RENDER_ALL,
    ZES_ENGINE_GROUP_3D_RENDER_COMPUTE_ALL,
)
_FREQ_CLOCKS = {ZES_FREQ_DOMAIN_GPU: "graphics", ZES_FREQ_DOMAIN_MEMORY: "memory"}
# The *_MIN sensors (3..5) report minimums, which no rule reads; they are skipped.
_TEMP_SENSORS = {
    ZES_TEMP_SENSORS_GLOBAL: "global",
    ZES_TEMP_SENSORS_GPU: "gpu",
    ZES_TEMP_SENSORS_MEMORY: "memory",
}
# Vendor-neutral throttle reasons (the sim's power_cap and thermal, and the rest as
# Level Zero names them).
_THROTTLE: tuple[tuple[str, int], ...] = (
    (
        "power_cap",
        ZES_FREQ_THROTTLE_REASON_FLAG_AVE_PWR_CAP | ZES_FREQ_THROTTLE_REASON_FLAG_BURST_PWR_CAP,
    ),
    ("current_limit", ZES_FREQ_THROTTLE_REASON_FLAG_CURRENT_LIMIT),
    ("thermal", ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT),
    ("psu_alert", ZES_FREQ_THROTTLE_REASON_FLAG_PSU_ALERT),
    ("sw_range", ZES_FREQ_THROTTLE_REASON_FLAG_SW_RANGE),
    ("hw_range", ZES_FREQ_THROTTLE_REASON_FLAG_HW_RANGE),
)
# RAS categories that count errors in the hardware itself: what ECC and parity catch.
_HARDWARE_CATEGORIES = (
    ZES_RAS_ERROR_CAT_COMPUTE_ERRORS,
    ZES_RAS_ERROR_CAT_NON_COMPUTE_ERRORS,
    ZES_RAS_ERROR_CAT_CACHE_ERRORS,
)
_CATEGORY_NAMES = {
    ZES_RAS_ERROR_CAT_RESET: "reset",
    ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS: "programming",
    ZES_RAS_ERROR_CAT_DRIVER_ERRORS: "driver",
    ZES_RAS_ERROR_CAT_COMPUTE_ERRORS: "compute",
    ZES_RAS_ERROR_CAT_NON_COMPUTE_ERRORS: "non_compute",
    ZES_RAS_ERROR_CAT_CACHE_ERRORS: "cache",
    ZES_RAS_ERROR_CAT_DISPLAY_ERRORS: "display",
}
# Answers that stay true while the driver is loaded: the field is asked no more.
_STATIC_RESULTS = frozenset(
    {
        ZE_RESULT_ERROR_UNSUPPORTED_FEATURE,
        ZE_RESULT_ERROR_UNSUPPORTED_VERSION,
        ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION,
        ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS,
    }
)


def result_name(code: int) -> str:
    return RESULT_NAMES.get(code, f"ze_result_t 0x{code:08x}")


# -- Level Zero: structures, laid out as in zes_api.h ---------------------------------


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
_H = ctypes.c_void_p  # every Level Zero handle is a pointer to an opaque struct
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


class _ZeError(Exception):
    def __init__(self, fn: str, code: int) -> None:
        super().__init__(f"{fn}: {result_name(code)}")
        self.fn = fn
        self.code = code


class _Lost(Exception):
    """The device stopped answering; ``code`` is the fault event to count."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


# -- sysfs ------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path, base: int = 10) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def _uevent(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (_read(path) or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


_CARD = re.compile(r"^card\d+$")
# SMBIOS says all-zero is "not present" and all-F "not set": neither tells machines apart.
_PLACEHOLDER_UUIDS = frozenset(
    {"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"}
)
# The namespace of the synthetic UUIDs (uuid5 of the URL naming this backend).
_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://accel-fleet/exporter/oneapi")
_TYPE_RANK = {"gpu": 0, "accelerator": 1, "custom": 2, "cpu": 3}


@dataclass
class _Card:
    """An i915 or xe DRM card in sysfs."""

    path: Path  # class/drm/cardN
    driver: str  # i915 | xe
    pci: str
    device_id: int | None
    hwmon: Path | None
    previous_energy: tuple[float, float] | None = None  # (joules, clock seconds)

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class _Sycl:
    """What dpctl says about one device, as plain values."""

    name: str
    vendor: str
    driver_version: str
    device_type: str
    backend: str
    memory_bytes: int | None
    device_id: int | None

    @property
    def key(self) -> tuple[str, str, int | None]:
        return (self.name, self.device_type, self.device_id)


@dataclass(frozen=True)
class _Domain:
    """One Sysman handle (engine group, power or frequency domain, sensor, error set)
    with what its properties said; ``subdevice`` is None for a device-level one."""

    handle: int
    kind: int
    subdevice: int | None


@dataclass
class _Sysman:
    """One Level Zero Sysman device and its handles, found at discovery."""

    handle: int
    name: str
    device_id: int
    pci: str
    uuid: str
    engines: list[_Domain] = field(default_factory=list)
    memory: list[_Domain] = field(default_factory=list)
    power: list[_Domain] = field(default_factory=list)
    frequency: list[_Domain] = field(default_factory=list)
    temperature: list[_Domain] = field(default_factory=list)
    ras: list[_Domain] = field(default_factory=list)
    # Previous counter samples by handle, for rates between two polls.
    engine_previous: dict[int, tuple[int, int]] = field(default_factory=dict)
    bandwidth_previous: dict[int, tuple[int, int]] = field(default_factory=dict)
    energy_previous: dict[int, tuple[int, int]] = field(default_factory=dict)
    # (handle, category) -> count seen at the previous poll.
    ras_previous: dict[tuple[int, int], int] = field(default_factory=dict)
    reset_reasons: int = 0


@dataclass
class _Device:
    info: DeviceInfo
    sycl: _Sycl
    sysman: _Sysman | None = None
    card: _Card | None = None
    # field -> why the device has nothing to read for it (no such domain, no source).
    static: dict[str, str] = field(default_factory=dict)
    # (function, handle) -> the answer that stays true while the driver is loaded
    # (unsupported, no permission): that call is not made again.
    refused: dict[tuple[str, int], str] = field(default_factory=dict)
    lost: bool = False


def _choose(domains: Iterable[_Domain]) -> list[_Domain]:
    """The device-level handles if there are any, else the per-tile ones."""
    found = list(domains)
    device_level = [d for d in found if d.subdevice is None]
    return device_level or found


def _first(domains: Sequence[_Domain]) -> _Domain:
    """The device-level handle, else tile 0's (the lowest sub-device id)."""
    return min(domains, key=lambda d: -1 if d.subdevice is None else d.subdevice)


def _format_uuid(raw: Sequence[int]) -> str:
    data = bytes(raw)
    if not any(data):
        return ""
    return str(uuid.UUID(bytes=data))


def found_fields(reading: Reading) -> set[str]:
    """The ``FIELDS`` keys a reading has a value for."""
    out: set[str] = set()
    for key in (
        "utilization",
        "memory_used_bytes",
        "memory_total_bytes",
        "memory_bandwidth_utilization",
        "power_watts",
        "power_limit_watts",
        "energy_joules",
    ):
        if getattr(reading, key) is not None:
            out.add(key)
    if reading.ecc_errors:
        out.add("ecc_errors")
    if reading.temperatures:
        out.add("temperatures")
    if reading.throttle:
        out.add("throttle")
    out.update(f"clocks_hz.{k}" for k in reading.clocks_hz)
    return out


class OneapiBackend(Backend):
    name: ClassVar[str] = "oneapi"

    def __init__(
        self,
        options: BackendOptions,
        dpctl: Any | None = None,
        level_zero: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(options)
        self._given_dpctl = dpctl
        self._given_level_zero = level_zero
        # Power from sysfs energy is a delta over elapsed time; tests pass a fake clock.
        self._clock = clock
        self._ze: Any = None
        self._devices: dict[str, _Device] = {}
        self._logged: set[tuple[str, str]] = set()
        # Why Level Zero Sysman is not used on this host ("" when it is).
        self.level_zero_reason = ""
        # device -> field -> why the last read has no value for it.
        self.missing: dict[str, dict[str, str]] = {}
        # device -> where its telemetry comes from ("none" for identity only).
        self.sources: dict[str, str] = {}

    # -- discovery ---------------------------------------------------------------------

    def _list_sycl(self) -> tuple[list[_Sycl], list[str]]:
        if self._given_dpctl is not None:
            return _sycl_devices(self._given_dpctl)
        cmd = [sys.executable, "-m", __name__]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_SECONDS
            )
        except subprocess.TimeoutExpired as e:
            raise BackendUnavailableError(
                f"dpctl did not list the SYCL devices within {DISCOVERY_TIMEOUT_SECONDS:g}s "
                "(a hung SYCL or OpenCL runtime?)"
            ) from e
        except OSError as e:
            raise BackendUnavailableError(f"cannot run {' '.join(cmd)}: {e}") from e
        lines = proc.stdout.strip().splitlines()
        try:
            # The last line is ours; a runtime may have printed before it.
            report = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
        except json.JSONDecodeError:
            report = None
        if not isinstance(report, dict):
            how = (
                f"killed by signal {-proc.returncode}"
                if proc.returncode < 0
                else f"exit status {proc.returncode}"
            )
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise BackendUnavailableError(f"listing the SYCL devices failed ({how}): {last}")
        if "error" in report:
            raise BackendUnavailableError(str(report["error"]))
        devices = [_Sycl(**d) for d in report["devices"]]
        return devices, [str(x) for x in report["skipped"]]

    def discover(self) -> list[DeviceInfo]:
        self.close()
        sycl, skipped = self._list_sycl()
        if not sycl:
            why = f" (skipped: {'; '.join(skipped)})" if skipped else ""
            raise BackendUnavailableError(
                "dpctl found no Intel SYCL device on the level_zero or opencl backends"
                f"{why}: is a Level Zero GPU driver or an OpenCL runtime installed, and "
                "does OCL_ICD_FILENAMES (or /etc/OpenCL/vendors) name its ICD?"
            )
        for reason in skipped:
            log.info("oneapi: skipped %s", reason)
        sysman = self._discover_sysman()
        cards = self._discover_cards()
        devices = self._pair(sycl, sysman, cards)
        self._devices = {d.info.device: d for d in devices}
        for d in devices:
            self.sources[d.info.device] = _source(d)
            log.info(
                "%s: %s (%s, %s), telemetry: %s",
                d.info.device,
                d.info.model,
                d.sycl.device_type,
                d.sycl.backend,
                self.sources[d.info.device],
            )
        return [d.info for d in devices]

    def _discover_sysman(self) -> list[_Sysman]:
        if self._given_level_zero is not None:
            lib = self._given_level_zero
        else:
            try:
                lib = load_level_zero()
            except LevelZeroUnavailable as e:
                self.level_zero_reason = str(e)
                return []
        self._ze = lib
        try:
            self._check("zesInit", lib.zesInit(0))
            drivers = self._enum("zesDriverGet", None)
            found: list[_Sysman] = []
            for driver in drivers:
                for handle in self._enum("zesDeviceGet", driver):
                    try:
                        dev = self._sysman_device(handle)
                    except _ZeError as e:
                        # Without its properties and handles there is nothing to read.
                        log.warning("oneapi: a Level Zero device was skipped: %s", e)
                        continue
                    if dev is not None:
                        found.append(dev)
        except _ZeError as e:
            self._ze = None
            if e.code == ZE_RESULT_ERROR_UNINITIALIZED:
                self.level_zero_reason = f"no Level Zero driver answered ({e})"
            else:
                self.level_zero_reason = f"Level Zero Sysman failed: {e}"
            return []
        if not found:
            self.level_zero_reason = "Level Zero Sysman lists no Intel device"
        return sorted(found, key=lambda s: s.pci)

    def _sysman_device(self, handle: int) -> _Sysman | None:
        ext = ZesDeviceExtProperties(stype=ZES_STRUCTURE_TYPE_DEVICE_EXT_PROPERTIES)
        props = ZesDeviceProperties(
            stype=ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES, pNext=ctypes.addressof(ext)
        )
        props.core.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES
        self._check(
            "zesDeviceGetProperties",
            self._ze.zesDeviceGetProperties(_H(handle), ctypes.pointer(props)),
        )
        if props.core.vendorId != INTEL_PCI_VENDOR:
            return None
        pci = ZesPciProperties(stype=ZES_STRUCTURE_TYPE_PCI_PROPERTIES)
        rc = self._ze.zesDevicePciGetProperties(_H(handle), ctypes.pointer(pci))
        address = ""
        if rc == ZE_RESULT_SUCCESS:
            a = pci.address
            address = f"{a.domain:04x}:{a.bus:02x}:{a.device:02x}.{a.function:x}"
        dev = _Sysman(
            handle=handle,
            name=props.core.name.decode(errors="replace").strip(),
            device_id=int(props.core.deviceId),
            pci=address,
            uuid=_format_uuid(ext.uuid) or _format_uuid(props.core.uuid),
        )
        dev.engines = self._domains(
            handle, "zesDeviceEnumEngineGroups", "zesEngineGetProperties", ZesEngineProperties
        )
        dev.memory = self._domains(
            handle, "zesDeviceEnumMemoryModules", "zesMemoryGetProperties", ZesMemProperties
        )
        dev.power = self._domains(
            handle, "zesDeviceEnumPowerDomains", "zesPowerGetProperties", ZesPowerProperties
        )
        dev.frequency = self._domains(
            handle, "zesDeviceEnumFrequencyDomains", "zesFrequencyGetProperties", ZesFreqProperties
        )
        dev.temperature = self._domains(
            handle,
            "zesDeviceEnumTemperatureSensors",
            "zesTemperatureGetProperties",
            ZesTempProperties,
        )
        dev.ras = self._domains(
            handle, "zesDeviceEnumRasErrorSets", "zesRasGetProperties", ZesRasProperties
        )
        return dev

    def _domains(self, device: int, enum_fn: str, props_fn: str, props_type: Any) -> list[_Domain]:
        """Every handle of one kind with its properties; an enumeration the device
        refuses is an empty list (its fields then carry the reason at read time)."""
        try:
            handles = self._enum(enum_fn, device)
        except _ZeError as e:
            if e.code == ZE_RESULT_ERROR_DEVICE_LOST:
                raise
            log.debug("oneapi: %s", e)
            return []
        out: list[_Domain] = []
        stype = {
            ZesEngineProperties: ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES,
            ZesMemProperties: ZES_STRUCTURE_TYPE_MEM_PROPERTIES,
            ZesPowerProperties: ZES_STRUCTURE_TYPE_POWER_PROPERTIES,
            ZesFreqProperties: ZES_STRUCTURE_TYPE_FREQ_PROPERTIES,
            ZesTempProperties: ZES_STRUCTURE_TYPE_TEMP_PROPERTIES,
            ZesRasProperties: ZES_STRUCTURE_TYPE_RAS_PROPERTIES,
        }[props_type]
        for h in handles:
            props = props_type(stype=stype)
            rc = getattr(self._ze, props_fn)(_H(h), ctypes.pointer(props))
            if rc != ZE_RESULT_SUCCESS:
                log.debug("oneapi: %s: %s", props_fn, result_name(rc))
                continue
            # zes_power_properties_t has no type; memory modules are kept by location.
            if props_type is ZesPowerProperties:
                kind = 0
            elif props_type is ZesMemProperties:
                kind = int(props.location)
            else:
                kind = int(props.type)
            sub = int(props.subdeviceId) if props.onSubdevice else None
            out.append(_Domain(h, kind, sub))
        return out

    def _enum(self, fn: str, parent: int | None) -> list[int]:
        """The two-call count-then-fill protocol of every zes*Get / zesDeviceEnum*."""
        proc = getattr(self._ze, fn)
        head = () if parent is None else (_H(parent),)
        count = ctypes.c_uint32(0)
        self._check(fn, proc(*head, ctypes.pointer(count), None))
        if count.value == 0:
            return []
        handles = (ctypes.c_void_p * count.value)()
        self._check(fn, proc(*head, ctypes.pointer(count), handles))
        return [int(h) for h in handles[: count.value] if h]

    @staticmethod
    def _check(fn: str, rc: int) -> None:
        if rc != ZE_RESULT_SUCCESS:
            raise _ZeError(fn, int(rc))

    def _discover_cards(self) -> list[_Card]:
        cards: list[_Card] = []
        for path in sorted(self.options.sysfs.joinpath("class", "drm").glob("card*")):
            if not _CARD.match(path.name):
                continue  # connectors (card0-DP-1) and the like
            dev = path / "device"
            if _read_int(dev / "vendor", 16) != INTEL_PCI_VENDOR:
                continue
            uevent = _uevent(dev / "uevent")
            driver = uevent.get("DRIVER", "")
            if not driver:
                try:
                    driver = os.path.basename(os.readlink(dev / "driver"))
                except OSError:
                    driver = ""
            if driver not in ("i915", "xe"):
                continue
            pci = uevent.get("PCI_SLOT_NAME") or os.path.basename(os.path.realpath(dev))
            device_id = _read_int(dev / "device", 16)
            hwmon = next(
                (
                    h
                    for h in sorted(dev.glob("hwmon/hwmon*"))
                    if (_read(h / "name") or "").strip() == driver
                ),
                None,
            )
            cards.append(_Card(path, driver, pci.lower(), device_id, hwmon))
        return sorted(cards, key=lambda c: c.pci)

    def _pair(self, sycl: list[_Sycl], sysman: list[_Sysman], cards: list[_Card]) -> list[_Device]:
        unused_sysman = list(sysman)
        unused_cards = list(cards)
        paired: list[tuple[_Sycl, _Sysman | None, _Card | None, int]] = []
        for index, s in enumerate(sycl):
            zes: _Sysman | None = None
            card: _Card | None = None
            if s.device_type in ("gpu", "accelerator"):
                zes = next((z for z in unused_sysman if _same_device(s, z)), None)
                if zes is not None:
                    unused_sysman.remove(zes)
                    card = next((c for c in unused_cards if c.pci == zes.pci), None)
                elif s.device_id is not None:
                    card = next((c for c in unused_cards if c.device_id == s.device_id), None)
                if card is not None:
                    unused_cards.remove(card)
            paired.append((s, zes, card, index))
        for z in unused_sysman:
            log.info(
                "oneapi: Level Zero device %s at %s has no SYCL device; not exported", z.name, z.pci
            )
        for c in unused_cards:
            log.info(
                "oneapi: %s (%s at %s) has no SYCL device; not exported", c.name, c.driver, c.pci
            )

        def pci_of(p: tuple[_Sycl, _Sysman | None, _Card | None, int]) -> str:
            _, zes, card, _ = p
            return (zes.pci if zes is not None else "") or (card.pci if card is not None else "")

        paired.sort(key=lambda p: (_TYPE_RANK.get(p[0].device_type, 9), pci_of(p) or "~", p[3]))
        machine = self._machine_uuid()
        ordinals: dict[tuple[str, str], int] = {}
        out: list[_Device] = []
        for n, p in enumerate(paired):
            s, zes, card, _ = p
            pci = pci_of(p)
            ordinal = ordinals.get((s.device_type, s.name), 0)
            ordinals[(s.device_type, s.name)] = ordinal + 1
            uid = zes.uuid if zes is not None and zes.uuid else ""
            if not uid:
                key = f"{machine}|{s.device_type}|{s.name}|{pci or ordinal}"
                uid = str(uuid.uuid5(_UUID_NAMESPACE, key))
            info = DeviceInfo(
                device=f"oneapi{n}",
                vendor=VENDOR,
                uuid=uid,
                model=s.name,
                pci_bus_id=pci,
                driver_version=s.driver_version,
                numa_node=self._numa_node(pci, card),
                cpu_affinity=cpu_affinity(self.options.sysfs, pci),
                profile=s.device_type,
            )
            out.append(_Device(info, s, zes, card))
        return out

    def _machine_uuid(self) -> str:
        text = _read(self.options.sysfs / "class" / "dmi" / "id" / "product_uuid")
        value = (text or "").strip().lower()
        return value if value and value not in _PLACEHOLDER_UUIDS else ""

    def _numa_node(self, pci: str, card: _Card | None) -> str:
        if card is not None:
            path = card.path / "device" / "numa_node"
        elif pci:
            path = self.options.sysfs / "bus" / "pci" / "devices" / pci / "numa_node"
        else:
            return ""
        node = (_read(path) or "").strip()
        # The kernel writes -1 when the platform does not say.
        return "" if node in ("", "-1") else node

    # -- topology ----------------------------------------------------------------------

    def topology(self) -> list[Link]:
        """The PCIe path between every two devices with a PCI address, from the
        kernel's PCI tree. Xe Link is not read: Sysman's fabric ports would need a
        multi-card host to check against, and a PCIe link is never closer than the
        truth, so a scheduler is at worst cautious."""
        return pcie_links(self.options.sysfs, [d.info for d in self._devices.values()])

    # -- reading -----------------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        d = self._devices[device.device]
        missing: dict[str, str] = dict(d.static)
        self.missing[device.device] = missing
        r = Reading()
        faults_read = False
        try:
            if d.sysman is not None:
                faults_read = self._read_sysman(d, r, missing)
            if d.card is not None:
                self._read_card(d, d.card, r, missing)
        except _Lost as e:
            first = not d.lost
            d.lost = True
            if first:
                return Reading(
                    up=False,
                    down_reason=str(e),
                    fault_events=[FaultEvent(e.code, str(e))],
                )
            raise DeviceLostError(str(e)) from e
        d.lost = False
        r.telemetry_source = self.sources[device.device]
        if r.memory_total_bytes is None and d.sycl.memory_bytes:
            # A true fact whatever else is known: the memory SYCL can allocate.
            r.memory_total_bytes = float(d.sycl.memory_bytes)
            missing.pop("memory_total_bytes", None)
        have = found_fields(r)
        if faults_read:
            have.add("fault_events")
        elif d.card is not None and d.sysman is None:
            missing["fault_events"] = f"{d.card.driver} sysfs has no RAS counters"
        for key in have:
            missing.pop(key, None)
        for key in FIELDS:
            if key not in have:
                missing.setdefault(key, self._no_source(d))
        return r

    def _no_source(self, d: _Device) -> str:
        if d.sycl.device_type == "cpu":
            return "a CPU seen through SYCL: the cpu backend exports its telemetry"
        if d.sysman is None and d.card is None:
            why = self.level_zero_reason or "not a Level Zero Sysman device"
            return f"no telemetry source: no Level Zero Sysman ({why}) and no i915/xe card"
        return f"not available from {_source(d)}"

    # Level Zero Sysman

    def _read_sysman(self, d: _Device, r: Reading, missing: dict[str, str]) -> bool:
        """Reads every Sysman field; True when fault events could be looked for (the
        device state or the RAS counters answered)."""
        z = d.sysman
        assert z is not None
        state = self._device_state(d, z, r)
        self._utilization(d, z, r, missing)
        self._memory(d, z, r, missing)
        self._energy(d, z, r, missing)
        self._frequency(d, z, r, missing)
        self._temperatures(d, z, r, missing)
        ras = self._ras(d, z, r)
        return state or ras

    def _zes(self, d: _Device, keys: Sequence[str], fn: str, handle: int, *args: Any) -> bool:
        """Calls one Sysman function on one handle for the fields ``keys``. False
        (with the reason in ``missing``) when it gave nothing; a lost device raises
        ``_Lost``."""
        missing = self.missing[d.info.device]
        refused = d.refused.get((fn, handle))
        if refused is not None:
            for key in keys:
                missing[key] = refused
            return False
        rc = int(getattr(self._ze, fn)(_H(handle), *args))
        if rc == ZE_RESULT_SUCCESS:
            return True
        reason = f"{fn}: {result_name(rc)}"
        if rc == ZE_RESULT_ERROR_DEVICE_LOST:
            raise _Lost(reason, "lost")
        if rc == ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET:
            raise _Lost(reason, "reset_required")
        for key in keys:
            missing[key] = reason
        if rc in _STATIC_RESULTS:
            d.refused[(fn, handle)] = reason
        else:
            mark = (d.info.device, reason)
            if mark not in self._logged:
                self._logged.add(mark)
                log.warning("%s: Level Zero gave no %s: %s", d.info.device, "/".join(keys), reason)
        return False

    def _none_found(self, d: _Device, keys: Sequence[str], what: str) -> None:
        for key in keys:
            d.static[key] = f"Level Zero Sysman lists no {what} on this device"
            self.missing[d.info.device][key] = d.static[key]

    def _device_state(self, d: _Device, z: _Sysman, r: Reading) -> bool:
        state = ZesDeviceState(stype=ZES_STRUCTURE_TYPE_DEVICE_STATE)
        if not self._zes(
            d, ("fault_events",), "zesDeviceGetState", z.handle, ctypes.pointer(state)
        ):
            return False
        reasons = int(state.reset)
        new = reasons & ~z.reset_reasons
        z.reset_reasons = reasons
        if new:
            names = [
                n
                for bit, n in (
                    (ZES_RESET_REASON_FLAG_WEDGED, "wedged"),
                    (ZES_RESET_REASON_FLAG_REPAIR, "repair"),
                )
                if new & bit
            ]
            r.fault_events.append(
                FaultEvent("reset_required", "reset reasons: " + (",".join(names) or hex(new)))
            )
        return True

    def _utilization(self, d: _Device, z: _Sysman, r: Reading, missing: dict[str, str]) -> None:
        key = ("utilization",)
        groups = next(
            (c for t in _ENGINE_GROUPS if (c := _choose(e for e in z.engines if e.kind == t))),
            [],
        )
        if not groups:
            self._none_found(d, key, "engine group covering the whole device")
            return
        ratios: list[float] = []
        first = False
        for g in groups:
            stats = ZesEngineStats()
            if not self._zes(d, key, "zesEngineGetActivity", g.handle, ctypes.pointer(stats)):
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

    def _memory(self, d: _Device, z: _Sysman, r: Reading, missing: dict[str, str]) -> None:
        modules = [m for m in z.memory if m.kind == ZES_MEM_LOC_DEVICE]
        if not modules:
            self._none_found(
                d,
                ("memory_used_bytes", "memory_total_bytes", "memory_bandwidth_utilization"),
                "device memory module",
            )
            return
        size = used = 0
        for m in modules:
            state = ZesMemState(stype=ZES_STRUCTURE_TYPE_MEM_STATE)
            if not self._zes(
                d,
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
        self._bandwidth(d, z, modules, r, missing)

    def _bandwidth(
        self,
        d: _Device,
        z: _Sysman,
        modules: list[_Domain],
        r: Reading,
        missing: dict[str, str],
    ) -> None:
        key = ("memory_bandwidth_utilization",)
        rate = peak = 0.0
        reason = ""
        for m in modules:
            bw = ZesMemBandwidth()
            if not self._zes(d, key, "zesMemoryGetBandwidth", m.handle, ctypes.pointer(bw)):
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

    def _energy(self, d: _Device, z: _Sysman, r: Reading, missing: dict[str, str]) -> None:
        domains = _choose(z.power)
        if not domains:
            self._none_found(
                d, ("energy_joules", "power_watts", "power_limit_watts"), "power domain"
            )
            return
        energy_uj = 0
        watts = 0.0
        reason = ""
        for p in domains:
            counter = ZesPowerEnergyCounter()
            if not self._zes(
                d,
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
            self._none_found(d, ("power_limit_watts",), "device-level power domain")
            return
        limit = ZesPowerSustainedLimit()
        if self._zes(
            d,
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

    def _frequency(self, d: _Device, z: _Sysman, r: Reading, missing: dict[str, str]) -> None:
        for kind, clock in _FREQ_CLOCKS.items():
            key = f"clocks_hz.{clock}"
            keys = (key, "throttle") if clock == "graphics" else (key,)
            domains = [f for f in z.frequency if f.kind == kind]
            if not domains:
                self._none_found(d, keys, f"{clock} frequency domain")
                continue
            state = ZesFreqState(stype=ZES_STRUCTURE_TYPE_FREQ_STATE)
            if not self._zes(
                d, keys, "zesFrequencyGetState", _first(domains).handle, ctypes.pointer(state)
            ):
                continue
            if state.actual >= 0:
                r.clocks_hz[clock] = float(state.actual) * 1e6  # MHz -> Hz
            else:
                missing[key] = "the driver does not know the actual frequency (-1)"
            if clock == "graphics":
                reasons = int(state.throttleReasons)
                for name, bits in _THROTTLE:
                    r.throttle[name] = bool(reasons & bits)

    def _temperatures(self, d: _Device, z: _Sysman, r: Reading, missing: dict[str, str]) -> None:
        sensors = [t for t in z.temperature if t.kind in _TEMP_SENSORS]
        if not sensors:
            self._none_found(d, ("temperatures",), "temperature sensor")
            return
        for t in sensors:
            celsius = ctypes.c_double()
            if not self._zes(
                d,
                ("temperatures",),
                "zesTemperatureGetState",
                t.handle,
                ctypes.pointer(celsius),
            ):
                continue
            name = _TEMP_SENSORS[t.kind]
            # Tiles each have their own sensors: the hottest is the one that throttles.
            r.temperatures[name] = max(celsius.value, r.temperatures.get(name, celsius.value))
        if r.temperatures:
            missing.pop("temperatures", None)

    def _ras(self, d: _Device, z: _Sysman, r: Reading) -> bool:
        kinds = (ZES_RAS_ERROR_TYPE_CORRECTABLE, ZES_RAS_ERROR_TYPE_UNCORRECTABLE)
        sets = [s for s in z.ras if s.kind in kinds]
        if not sets:
            self._none_found(d, ("ecc_errors",), "RAS error set")
            return False
        totals = {"corrected": 0.0, "uncorrected": 0.0}
        # code -> (new errors, categories)
        events: dict[str, tuple[int, set[str]]] = {}
        for s in sets:
            state = ZesRasState(stype=ZES_STRUCTURE_TYPE_RAS_STATE)
            if not self._zes(
                d, ("ecc_errors",), "zesRasGetState", s.handle, 0, ctypes.pointer(state)
            ):
                return False
            correctable = s.kind == ZES_RAS_ERROR_TYPE_CORRECTABLE
            for cat in range(ZES_MAX_RAS_ERROR_CATEGORY_COUNT):
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
                code = _ras_code(cat, correctable)
                n, cats = events.get(code, (0, set()))
                cats.add(_CATEGORY_NAMES[cat])
                events[code] = (n + count - before, cats)
        r.ecc_errors = totals
        for code, (n, cats) in sorted(events.items()):
            where = ",".join(sorted(cats))
            r.fault_events.append(FaultEvent(code, f"{n} new error(s) in categories: {where}"))
        return True

    # i915 / xe sysfs

    def _read_card(self, d: _Device, card: _Card, r: Reading, missing: dict[str, str]) -> None:
        if not card.path.joinpath("device").exists():
            raise _Lost(f"{card.name} ({card.pci}) is gone from sysfs", "lost")
        if card.hwmon is not None:
            self._card_power(card, card.hwmon, r, missing)
        if "graphics" not in r.clocks_hz:
            mhz = self._card_clock(card)
            if mhz is not None:
                r.clocks_hz["graphics"] = mhz * 1e6
        if card.driver == "xe" and card.hwmon is not None:
            for channel, sensor in ((2, "package"), (3, "memory")):
                milli = _read_int(card.hwmon / f"temp{channel}_input")
                if milli is not None and sensor not in r.temperatures:
                    r.temperatures[sensor] = milli / 1000.0

    def _card_power(self, card: _Card, hwmon: Path, r: Reading, missing: dict[str, str]) -> None:
        # Channel 1 is the card; xe on some platforms has only channel 2, the package.
        channel = 1 if (hwmon / "energy1_input").exists() or (hwmon / "power1_max").exists() else 2
        if r.energy_joules is None:
            uj = _read_int(hwmon / f"energy{channel}_input")
            if uj is not None:
                joules = uj / 1e6
                now = self._clock()
                before = card.previous_energy
                card.previous_energy = (joules, now)
                r.energy_joules = joules
                if before is None:
                    missing["power_watts"] = FIRST_SAMPLE
                elif now <= before[1] or joules < before[0]:
                    missing["power_watts"] = "the energy counter went back (driver reload)"
                else:
                    r.power_watts = (joules - before[0]) / (now - before[1])
        if r.power_limit_watts is None:
            for name in (f"power{channel}_max", f"power{channel}_crit"):
                uw = _read_int(hwmon / name)
                if uw is not None and uw > 0:
                    r.power_limit_watts = uw / 1e6
                    return
                if uw == 0:
                    # 0 means the limit is disabled: no limit, not a limit of 0 W.
                    missing["power_limit_watts"] = f"{name} is 0: the limit is disabled"

    def _card_clock(self, card: _Card) -> float | None:
        if card.driver == "xe":
            paths = [card.path / "device" / "tile0" / "gt0" / "freq0" / "act_freq"]
        else:
            paths = [card.path / "gt" / "gt0" / "rps_act_freq_mhz", card.path / "gt_act_freq_mhz"]
        for p in paths:
            value = _read_int(p)
            if value is not None:
                return float(value)
        return None

    def close(self) -> None:
        # Level Zero has no Sysman shutdown call, and dpctl's objects are released with
        # their references; forgetting them is all there is to do.
        self._devices = {}
        self._ze = None
        self.level_zero_reason = ""
        self.missing = {}
        self.sources = {}


def _ras_code(category: int, correctable: bool) -> str:
    if category in _HARDWARE_CATEGORIES:
        return "ras_correctable" if correctable else "ras_uncorrectable"
    return {
        ZES_RAS_ERROR_CAT_RESET: "ras_engine_reset",
        ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS: "ras_programming",
        ZES_RAS_ERROR_CAT_DRIVER_ERRORS: "ras_driver",
        ZES_RAS_ERROR_CAT_DISPLAY_ERRORS: "ras_display",
    }[category]


def _same_device(s: _Sycl, z: _Sysman) -> bool:
    if s.device_id is not None:
        return s.device_id == z.device_id
    return s.name == z.name


def _source(d: _Device) -> str:
    parts = []
    if d.sysman is not None:
        parts.append(SYSMAN)
    if d.card is not None:
        parts.append(f"{d.card.driver} sysfs")
    return " + ".join(parts) or NO_SOURCE


# -- dpctl ---------------------------------------------------------------------------


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    """One dpctl property; a query the runtime refuses is the default."""
    try:
        return getattr(obj, name)
    except Exception:
        return default


def _enum_name(value: Any) -> str:
    return str(_attr(value, "name", value) or "")


def _describe(dpctl: Any, dev: Any, backend: str) -> _Sycl:
    try:
        info = dpctl.utils.intel_device_info(dev)
    except Exception:
        info = {}
    device_id = info.get("device_id") if isinstance(info, dict) else None
    memory = _attr(dev, "global_mem_size")
    return _Sycl(
        name=str(_attr(dev, "name", "") or "").strip(),
        vendor=str(_attr(dev, "vendor", "") or "").strip(),
        driver_version=str(_attr(dev, "driver_version", "") or "").strip(),
        device_type=_enum_name(_attr(dev, "device_type", "")) or "unknown",
        backend=backend,
        memory_bytes=int(memory) if memory else None,
        device_id=int(device_id) if device_id else None,
    )


def _sycl_devices(dpctl: Any) -> tuple[list[_Sycl], list[str]]:
    """The Intel devices SYCL sees, Level Zero first, each physical device once; and
    what was skipped, with why."""
    kept: list[_Sycl] = []
    skipped: list[str] = []
    level_zero: dict[tuple[str, str, int | None], int] = {}
    for backend in SYCL_BACKENDS:
        try:
            found = list(dpctl.get_devices(backend=backend))
        except Exception as e:  # an adapter that fails to load lists nothing
            log.debug("oneapi: dpctl.get_devices(backend=%r): %s", backend, e)
            continue
        composites: list[Any] = []
        for dev in found:
            composite = _attr(dev, "composite_device") if backend == "level_zero" else None
            if composite is not None:
                # One tile of a card in FLAT mode: the card is the device.
                if any(composite == c for c in composites):
                    continue
                composites.append(composite)
                dev = composite
            s = _describe(dpctl, dev, backend)
            if "intel" not in s.vendor.lower():
                skipped.append(f"{s.name} ({backend}, vendor {s.vendor!r}): not an Intel runtime")
                continue
            if _attr(dev, "has_aspect_emulated", False):
                skipped.append(f"{s.name} ({backend}): emulated, not hardware")
                continue
            if backend == "level_zero":
                level_zero[s.key] = level_zero.get(s.key, 0) + 1
            elif level_zero.get(s.key, 0) > 0:
                level_zero[s.key] -= 1  # the same device, already kept from Level Zero
                continue
            kept.append(s)
    return kept, skipped


def main() -> int:
    """``python -m exporter.backends.oneapi``: the Intel SYCL devices dpctl sees, as
    one JSON line (what ``discover()`` reads from its child process)."""
    try:
        import dpctl
        import dpctl.utils  # intel_device_info lives there
    except Exception as e:  # a broken SYCL runtime can fail in other ways than ImportError
        report: dict[str, Any] = {
            "error": f"the dpctl module is not usable ({type(e).__name__}: {e}): "
            "install accel-fleet[oneapi]"
        }
    else:
        devices, skipped = _sycl_devices(dpctl)
        report = {"devices": [dataclasses.asdict(d) for d in devices], "skipped": skipped}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
