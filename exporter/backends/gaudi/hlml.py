"""HLML, Intel Gaudi's management library, through ctypes: the C API of ``hlml.h``.

Why it is built this way:

* This is the way to HLML where Intel's ``pyhlml`` binding is not installed, or is
  the archived release that drops errors (``exporter.backends.gaudi.binding``): the C
  API is small and stable, so it is declared once, here, from ``hlml.h`` and the
  1.24 headers, with the same method for each call as the binding's adapter has.
* Everything goes through one function table (``lib``): the ``CDLL`` of the real
  library, or the fake's table of ctypes callbacks in the tests, so the tests run the
  same argument conversions and out-parameters as production.
* A failed call raises ``HlmlError`` with HLML's return code; a function the loaded
  library lacks (an older driver) raises it with ``FUNCTION_NOT_FOUND``, a code that
  is the exporter's own, so the caller treats it like ``HLML_ERROR_NOT_SUPPORTED``.
* Loading never raises anything but ``HlmlUnavailable``: a host without the library
  loses this backend only, with one reason.

Units, as ``hlml.h`` and the binding's docstrings give them: memory in bytes, power
in milliwatts, energy in millijoules, temperature in degrees Celsius, clocks in MHz,
utilization in percent.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

# hlml_return_t (hlml.h).
SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_ALREADY_INITIALIZED = 5
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_AIP_IS_LOST = 15
ERROR_MEMORY = 20
ERROR_NO_DATA = 21
ERROR_UNKNOWN = 49
# Not HLML's: the loaded library has no such symbol (a driver older than the call).
FUNCTION_NOT_FOUND = -1

RETURN_NAMES: dict[int, str] = {
    SUCCESS: "SUCCESS",
    ERROR_UNINITIALIZED: "UNINITIALIZED",
    ERROR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
    ERROR_NOT_SUPPORTED: "NOT_SUPPORTED",
    ERROR_ALREADY_INITIALIZED: "ALREADY_INITIALIZED",
    ERROR_NOT_FOUND: "NOT_FOUND",
    ERROR_INSUFFICIENT_SIZE: "INSUFFICIENT_SIZE",
    ERROR_DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED",
    ERROR_TIMEOUT: "TIMEOUT",
    ERROR_AIP_IS_LOST: "AIP_IS_LOST",
    ERROR_MEMORY: "MEMORY",
    ERROR_NO_DATA: "NO_DATA",
    ERROR_UNKNOWN: "UNKNOWN",
    FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
}

# Event type bits (hlml.h of the Gaudi software 1.24). ECC_DERR is bit 0, the old
# HLML_EVENT_ECC_ERR, which the header keeps for double-bit errors only; DRAM_DERR is
# bit 3, the old HLML_EVENT_DRAM_ERR; DRAM_SERR (bit 5) is the newest.
EVENT_ECC_DERR = 1 << 0
EVENT_CRITICAL_ERR = 1 << 1
EVENT_CLOCK_RATE = 1 << 2
EVENT_DRAM_DERR = 1 << 3
EVENT_ECC_SERR = 1 << 4
EVENT_DRAM_SERR = 1 << 5

# Clock throttle reason bits.
THROTTLE_POWER = 1 << 0
THROTTLE_THERMAL = 1 << 1

# Enumerations passed by value.
CLOCK_SOC = 0
CLOCK_IC = 1
CLOCK_MME = 2
CLOCK_TPC = 3
TEMPERATURE_ON_AIP = 0
TEMPERATURE_ON_BOARD = 1
TEMPERATURE_HBM = 3
FEATURE_ENABLED = 1
MEMORY_ERROR_CORRECTED = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
PCIE_TX_BYTES = 0
PCIE_RX_BYTES = 1
ROW_CAUSE_MULTIPLE_SINGLE_BIT = 0
ROW_CAUSE_DOUBLE_BIT = 1

# PCI_DOMAIN_LEN + 10: the domain is 5 characters in the published hlml.h, 9 in the
# 1.24 headers; the longer field holds either (bus_id is read up to its NUL).
PCI_ADDR_LEN = 19
PCI_LINK_INFO_LEN = 10
HL_FIELD_MAX_SIZE = 32
# hlml_get_mac_addr_info fills two 64-bit words of port bits (PORTS_ARR_SIZE).
PORTS_ARR_SIZE = 2
# Long enough for any UUID, serial, name or version string HLML writes.
STRING_SIZE = 256


# Structures HLML fills grow between releases: the 1.24 headers (and the C API
# reference) add link_max_speed and link_max_width to hlml_pci_cap_t, pci_rev and
# pci_subsys_id to hlml_pci_info_t and memory to hlml_utilization_t, after the members
# of the published hlml.h; they are declared here as 1.24 lays them out. Every
# structure the library writes into also ends in spare room, so that a newer library
# writing more members than declared writes into the buffer, never past it; the
# members read (bus_id, aip, the memory sizes, the event's device and type) stay
# where every release puts them.
_SPARE = ("_spare", ctypes.c_ubyte * 256)


class PciCap(ctypes.Structure):
    _fields_ = [
        ("link_speed", ctypes.c_char * PCI_LINK_INFO_LEN),
        ("link_width", ctypes.c_char * PCI_LINK_INFO_LEN),
        ("link_max_speed", ctypes.c_char * PCI_LINK_INFO_LEN),
        ("link_max_width", ctypes.c_char * PCI_LINK_INFO_LEN),
    ]


class PciInfo(ctypes.Structure):
    _fields_ = [
        ("bus", ctypes.c_uint),
        ("bus_id", ctypes.c_char * PCI_ADDR_LEN),
        ("device", ctypes.c_uint),
        ("domain", ctypes.c_uint),
        ("pci_device_id", ctypes.c_uint),
        ("caps", PciCap),
        ("pci_rev", ctypes.c_uint),
        ("pci_subsys_id", ctypes.c_uint),
        _SPARE,
    ]


class Utilization(ctypes.Structure):
    _fields_ = [("aip", ctypes.c_uint), ("memory", ctypes.c_uint), _SPARE]


class Memory(ctypes.Structure):
    _fields_ = [
        ("free", ctypes.c_ulonglong),
        ("total", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
        _SPARE,
    ]


class EventData(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("event_type", ctypes.c_ulonglong), _SPARE]


_H = ctypes.c_void_p
_UINT = ctypes.POINTER(ctypes.c_uint)
_ULL = ctypes.POINTER(ctypes.c_ulonglong)
_INT = ctypes.POINTER(ctypes.c_int)
_U64 = ctypes.POINTER(ctypes.c_uint64)

# name -> argument types, as declared in hlml.h; every function returns hlml_return_t.
PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "hlml_init": (),
    "hlml_shutdown": (),
    "hlml_get_driver_version": (ctypes.c_char_p, ctypes.c_uint),
    "hlml_device_get_count": (_UINT,),
    "hlml_device_get_handle_by_index": (ctypes.c_uint, ctypes.POINTER(_H)),
    "hlml_device_get_name": (_H, ctypes.c_char_p, ctypes.c_uint),
    "hlml_device_get_uuid": (_H, ctypes.c_char_p, ctypes.c_uint),
    "hlml_device_get_serial": (_H, ctypes.c_char_p, ctypes.c_uint),
    "hlml_device_get_pci_info": (_H, ctypes.POINTER(PciInfo)),
    "hlml_device_get_utilization_rates": (_H, ctypes.POINTER(Utilization)),
    "hlml_device_get_memory_info": (_H, ctypes.POINTER(Memory)),
    "hlml_device_get_temperature": (_H, ctypes.c_int, _UINT),
    "hlml_device_get_power_usage": (_H, _UINT),
    "hlml_device_get_power_management_limit": (_H, _UINT),
    "hlml_device_get_power_management_default_limit": (_H, _UINT),
    "hlml_device_get_total_energy_consumption": (_H, _ULL),
    "hlml_device_get_clock_info": (_H, ctypes.c_int, _UINT),
    "hlml_device_get_ecc_mode": (_H, _INT, _INT),
    "hlml_device_get_total_ecc_errors": (_H, ctypes.c_int, ctypes.c_int, _ULL),
    "hlml_device_get_replaced_rows": (_H, ctypes.c_int, _UINT, ctypes.c_void_p),
    "hlml_device_get_replaced_rows_pending_status": (_H, _INT),
    "hlml_device_get_current_clocks_throttle_reasons": (_H, _ULL),
    "hlml_device_get_pcie_throughput": (_H, ctypes.c_int, _UINT),
    "hlml_get_mac_addr_info": (
        _H,
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64),
    ),
    "hlml_nic_get_link": (_H, ctypes.c_uint32, ctypes.POINTER(ctypes.c_bool)),
    "hlml_event_set_create": (ctypes.POINTER(_H),),
    "hlml_event_set_free": (_H,),
    "hlml_device_register_events": (_H, ctypes.c_ulonglong, _H),
    "hlml_event_set_wait": (_H, ctypes.POINTER(EventData), ctypes.c_uint),
}

# Where the library is looked for: the loader's path first, then where the Gaudi
# software stack installs it (the path the pyhlml binding hard-codes).
LIBRARY_PATHS: tuple[str, ...] = ("libhlml.so", "/usr/lib/habanalabs/libhlml.so")


class HlmlError(Exception):
    """An HLML call that did not return HLML_SUCCESS."""

    def __init__(self, function: str, code: int) -> None:
        self.function = function
        self.code = code
        self.reason = f"HLML_ERROR_{RETURN_NAMES.get(code, str(code))}"
        super().__init__(f"{function}: {self.reason}")


class HlmlUnavailable(Exception):
    """libhlml.so could not be loaded."""


def load(paths: Sequence[str] = LIBRARY_PATHS) -> Hlml:
    """The library at the first of ``paths`` that loads."""
    failures: list[str] = []
    for path in paths:
        try:
            return Hlml(ctypes.CDLL(path))
        except OSError as e:
            failures.append(str(e))
    raise HlmlUnavailable("; ".join(failures) or "no library path given")


def _text(raw: Any) -> str:
    """A C string (a string buffer, or a char array field, which ctypes reads as
    bytes up to the first NUL) as text."""
    data = raw if isinstance(raw, bytes) else raw.value
    return bytes(data).decode("utf-8", "replace").strip()


class Hlml:
    """HLML's calls, typed: each returns plain Python values or raises HlmlError."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._fns: dict[str, Any] = {}

    def _fn(self, name: str) -> Any:
        fn = self._fns.get(name)
        if fn is None:
            try:
                fn = getattr(self._lib, name)
            except AttributeError:
                raise HlmlError(name, FUNCTION_NOT_FOUND) from None
            fn.argtypes = PROTOTYPES[name]
            fn.restype = ctypes.c_int
            self._fns[name] = fn
        return fn

    def _call(self, name: str, *args: Any) -> None:
        rc = int(self._fn(name)(*args))
        if rc != SUCCESS:
            raise HlmlError(name, rc)

    def _uint(self, name: str, *args: Any) -> int:
        out = ctypes.c_uint()
        self._call(name, *args, ctypes.byref(out))
        return int(out.value)

    def _ull(self, name: str, *args: Any) -> int:
        out = ctypes.c_ulonglong()
        self._call(name, *args, ctypes.byref(out))
        return int(out.value)

    def _string(self, name: str, *args: Any) -> str:
        buf = ctypes.create_string_buffer(STRING_SIZE)
        self._call(name, *args, buf, STRING_SIZE)
        return _text(buf)

    # -- library --------------------------------------------------------------

    def init(self) -> None:
        self._call("hlml_init")

    def shutdown(self) -> None:
        self._call("hlml_shutdown")

    def driver_version(self) -> str:
        return self._string("hlml_get_driver_version")

    def device_count(self) -> int:
        return self._uint("hlml_device_get_count")

    def handle(self, index: int) -> int:
        out = ctypes.c_void_p()
        self._call("hlml_device_get_handle_by_index", index, ctypes.byref(out))
        return int(out.value or 0)

    # -- identity -------------------------------------------------------------

    def name(self, h: int) -> str:
        return self._string("hlml_device_get_name", _H(h))

    def uuid(self, h: int) -> str:
        return self._string("hlml_device_get_uuid", _H(h))

    def serial(self, h: int) -> str:
        return self._string("hlml_device_get_serial", _H(h))

    def pci_bus_id(self, h: int) -> str:
        info = PciInfo()
        self._call("hlml_device_get_pci_info", _H(h), ctypes.byref(info))
        return _text(info.bus_id)

    # -- telemetry ------------------------------------------------------------

    def utilization(self, h: int) -> int:
        out = Utilization()
        self._call("hlml_device_get_utilization_rates", _H(h), ctypes.byref(out))
        return int(out.aip)

    def memory(self, h: int) -> tuple[int, int]:
        """(used, total) in bytes."""
        out = Memory()
        self._call("hlml_device_get_memory_info", _H(h), ctypes.byref(out))
        return int(out.used), int(out.total)

    def temperature(self, h: int, sensor: int) -> int:
        return self._uint("hlml_device_get_temperature", _H(h), sensor)

    def power_mw(self, h: int) -> int:
        return self._uint("hlml_device_get_power_usage", _H(h))

    def power_limit_mw(self, h: int) -> int:
        return self._uint("hlml_device_get_power_management_limit", _H(h))

    def power_default_limit_mw(self, h: int) -> int:
        return self._uint("hlml_device_get_power_management_default_limit", _H(h))

    def energy_mj(self, h: int) -> int:
        return self._ull("hlml_device_get_total_energy_consumption", _H(h))

    def clock_mhz(self, h: int, clock: int) -> int:
        return self._uint("hlml_device_get_clock_info", _H(h), clock)

    def ecc_enabled(self, h: int) -> bool:
        current, pending = ctypes.c_int(), ctypes.c_int()
        self._call("hlml_device_get_ecc_mode", _H(h), ctypes.byref(current), ctypes.byref(pending))
        return current.value == FEATURE_ENABLED

    def ecc_errors(self, h: int, error_type: int) -> int:
        return self._ull("hlml_device_get_total_ecc_errors", _H(h), error_type, VOLATILE_ECC)

    def replaced_rows(self, h: int, cause: int) -> int:
        # A NULL address array asks for the count only.
        out = ctypes.c_uint()
        self._call("hlml_device_get_replaced_rows", _H(h), cause, ctypes.byref(out), None)
        return int(out.value)

    def replaced_rows_pending(self, h: int) -> bool:
        out = ctypes.c_int()
        self._call("hlml_device_get_replaced_rows_pending_status", _H(h), ctypes.byref(out))
        return out.value == FEATURE_ENABLED

    def throttle_reasons(self, h: int) -> int:
        return self._ull("hlml_device_get_current_clocks_throttle_reasons", _H(h))

    def pcie_throughput(self, h: int, counter: int) -> int:
        return self._uint("hlml_device_get_pcie_throughput", _H(h), counter)

    # -- RoCE ports -----------------------------------------------------------

    def port_masks(self, h: int) -> tuple[int, int]:
        """(ports, external ports) as bit masks over port numbers 0..127."""
        mask = (ctypes.c_uint64 * PORTS_ARR_SIZE)()
        ext = (ctypes.c_uint64 * PORTS_ARR_SIZE)()
        self._call("hlml_get_mac_addr_info", _H(h), mask, ext)
        return (
            sum(int(w) << (64 * i) for i, w in enumerate(mask)),
            sum(int(w) << (64 * i) for i, w in enumerate(ext)),
        )

    def port_up(self, h: int, port: int) -> bool:
        out = ctypes.c_bool()
        self._call("hlml_nic_get_link", _H(h), port, ctypes.byref(out))
        return bool(out.value)

    # -- events ---------------------------------------------------------------

    def event_set_create(self) -> int:
        out = ctypes.c_void_p()
        self._call("hlml_event_set_create", ctypes.byref(out))
        return int(out.value or 0)

    def event_set_free(self, event_set: int) -> None:
        self._call("hlml_event_set_free", _H(event_set))

    def register_events(self, h: int, types: int, event_set: int) -> None:
        self._call("hlml_device_register_events", _H(h), types, _H(event_set))

    def event_set_wait(self, event_set: int, timeout_ms: int) -> tuple[int, int]:
        """(device handle, event type bits) of one event; HLML_ERROR_TIMEOUT when none."""
        data = EventData()
        self._call("hlml_event_set_wait", _H(event_set), ctypes.byref(data), timeout_ms)
        return int(data.device or 0), int(data.event_type)
