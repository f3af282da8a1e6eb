"""A fake ``libhlml.so``: Intel Gaudi's HLML at its own C interface.

Why it is built this way:

* The gaudi backend calls HLML through ctypes, so the fake is a table of ctypes
  callbacks with ``hlml.h``'s names and C signatures (``FakeHLML.table``). The
  backend sets its own argument types on them and calls them exactly as it calls the
  real library: out-parameters are written through real pointers, strings into real
  buffers, structures field by field. The signatures here are written from
  ``hlml.h`` on their own, not imported from the backend, so a wrong declaration in
  the backend is not mirrored by the fake (``test_gaudi`` compares the two).
* It fails the ways HLML fails: ``HLML_ERROR_UNINITIALIZED`` before ``hlml_init``
  or after ``uninitialize()``; ``HLML_ERROR_AIP_IS_LOST`` for every call about a lost
  device (``lose``); ``HLML_ERROR_DRIVER_NOT_LOADED`` from ``hlml_init``; any code
  from any one function (``fail``); a function missing from an older library
  (``absent``); and a call that blocks (``hang``) past the poller's timeout until
  ``release()``, as a call stuck in the driver does.
* Events are queued per event set for the devices registered on it, delivered by
  ``hlml_event_set_wait`` one at a time, then ``HLML_ERROR_TIMEOUT``, as HLML does.
* ``binding()`` is Intel's ``pyhlml.main`` (habana-pyhlml 1.24) over the same table:
  its function names, arguments and return types, calling the C functions as the
  binding does and raising its ``HLMLError``, so the backend's binding path meets
  the same devices and the same failures as its ctypes path.
* The structures are laid out as the 1.24 headers have them (a 19-character bus id,
  the PCI capabilities' maxima, the utilization's memory member).
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

GIB = 1 << 30

# hlml_return_t
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
AIP_IS_LOST = 15
UNKNOWN = 49

# Event bits
ECC_DERR = 1 << 0
CRITICAL_ERR = 1 << 1
CLOCK_RATE = 1 << 2
DRAM_DERR = 1 << 3
ECC_SERR = 1 << 4
DRAM_SERR = 1 << 5


# The structures as the Gaudi software 1.24 headers lay them out (PCI_DOMAIN_LEN 9,
# the PCI capabilities' maxima, the revision and subsystem ids, memory utilization).
class _PciCap(ctypes.Structure):
    _fields_ = [
        ("link_speed", ctypes.c_char * 10),
        ("link_width", ctypes.c_char * 10),
        ("link_max_speed", ctypes.c_char * 10),
        ("link_max_width", ctypes.c_char * 10),
    ]


class _PciInfo(ctypes.Structure):
    _fields_ = [
        ("bus", ctypes.c_uint),
        ("bus_id", ctypes.c_char * 19),
        ("device", ctypes.c_uint),
        ("domain", ctypes.c_uint),
        ("pci_device_id", ctypes.c_uint),
        ("caps", _PciCap),
        ("pci_rev", ctypes.c_uint),
        ("pci_subsys_id", ctypes.c_uint),
    ]


class _Utilization(ctypes.Structure):
    _fields_ = [("aip", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [
        ("free", ctypes.c_ulonglong),
        ("total", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class _EventData(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("event_type", ctypes.c_ulonglong)]


_R = ctypes.c_int
_H = ctypes.c_void_p
_STR = ctypes.POINTER(ctypes.c_char)
_UINT = ctypes.POINTER(ctypes.c_uint)
_ULL = ctypes.POINTER(ctypes.c_ulonglong)
_INT = ctypes.POINTER(ctypes.c_int)
_U64 = ctypes.POINTER(ctypes.c_uint64)

# hlml.h's declarations: name -> argument types (all return hlml_return_t).
SIGNATURES: dict[str, tuple[Any, ...]] = {
    "hlml_init": (),
    "hlml_shutdown": (),
    "hlml_get_driver_version": (_STR, ctypes.c_uint),
    "hlml_device_get_count": (_UINT,),
    "hlml_device_get_handle_by_index": (ctypes.c_uint, ctypes.POINTER(_H)),
    "hlml_device_get_name": (_H, _STR, ctypes.c_uint),
    "hlml_device_get_uuid": (_H, _STR, ctypes.c_uint),
    "hlml_device_get_serial": (_H, _STR, ctypes.c_uint),
    "hlml_device_get_pci_info": (_H, ctypes.POINTER(_PciInfo)),
    "hlml_device_get_utilization_rates": (_H, ctypes.POINTER(_Utilization)),
    "hlml_device_get_memory_info": (_H, ctypes.POINTER(_Memory)),
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
    "hlml_get_mac_addr_info": (_H, _U64, _U64),
    "hlml_nic_get_link": (_H, ctypes.c_uint32, ctypes.POINTER(ctypes.c_bool)),
    "hlml_event_set_create": (ctypes.POINTER(_H),),
    "hlml_event_set_free": (_H,),
    "hlml_device_register_events": (_H, ctypes.c_ulonglong, _H),
    "hlml_event_set_wait": (_H, ctypes.POINTER(_EventData), ctypes.c_uint),
}


def _is_pointer(t: Any) -> bool:
    return hasattr(t, "contents")


def _abi(t: Any) -> Any:
    """The callback's parameter type for a declared one: a pointer is taken as a plain
    address, as a C library takes whatever its caller passes (the binding's own
    structures, ``byref`` of a string buffer, the exporter's declarations), and typed
    inside the callback."""
    return ctypes.c_void_p if _is_pointer(t) else t


@dataclass
class FakeGaudi:
    """One device's answers, in HLML's units (bytes, mW, mJ, MHz, percent, C, KB/s)."""

    index: int
    uuid: str
    serial: str
    name: str = "HL-325L"
    bus_id: str = "0000:19:00.0"
    utilization: int = 0
    memory_used: int = 0
    memory_total: int = 128 * GIB
    temp_aip: int = 40
    temp_board: int = 35
    temp_hbm: int = 45
    power_mw: int = 200_000
    power_limit_mw: int = 850_000
    power_default_limit_mw: int = 900_000
    energy_mj: int = 0
    soc_mhz: int = 1600
    ecc_enabled: bool = True
    # None: HLML_ERROR_NOT_SUPPORTED (hlml.h marks corrected counts "Not supported").
    ecc_corrected: int | None = None
    ecc_uncorrected: int = 0
    rows_single_bit: int = 0
    rows_double_bit: int = 0
    rows_pending: bool = False
    throttle: int = 0
    pcie_tx_kbs: int = 0
    pcie_rx_kbs: int = 0
    # RoCE ports: every enabled port, and the external ones; ports whose link is down.
    ports: int = (1 << 24) - 1
    external_ports: int = (1 << 8) | (1 << 22) | (1 << 23)
    ports_down: set[int] = field(default_factory=set)
    lost: bool = False

    @property
    def handle(self) -> int:
        return 0x1000 + 0x10 * self.index


class FakeHLML:
    def __init__(
        self,
        devices: list[FakeGaudi],
        driver_version: str = "1.21.0-555b6b4",
        driver_not_loaded: bool = False,
        absent: tuple[str, ...] = (),
        refuse_event_types: int = 0,
    ) -> None:
        self.devices = devices
        self.driver_version = driver_version
        self.driver_not_loaded = driver_not_loaded
        # Event types hlml_device_register_events refuses (an older driver's).
        self.refuse_event_types = refuse_event_types
        self.initialized = False
        self.calls: Counter[str] = Counter()
        self.failures: dict[tuple[str, int | None], int] = {}
        self._hang: tuple[str, float] | None = None
        self.hanging = threading.Event()
        self._released = threading.Event()
        self._sets: dict[int, deque[tuple[int, int]]] = {}
        self._registered: dict[int, list[tuple[int, int]]] = {}
        self._next_set = 0x9000
        self._by_handle = {d.handle: d for d in devices}
        impl = {name: getattr(self, "_" + name) for name in SIGNATURES}
        # The callbacks must live as long as the table; ctypes holds no reference.
        self._callbacks = {
            name: ctypes.CFUNCTYPE(_R, *map(_abi, SIGNATURES[name]))(self._wrap(name, fn))
            for name, fn in impl.items()
            if name not in absent
        }
        self.table = SimpleNamespace(**self._callbacks)

    # -- fixtures --------------------------------------------------------------------

    @classmethod
    def gaudi3_node(cls, **kwargs: Any) -> FakeHLML:
        """An HLS-Gaudi3 node: 8 HL-325L all-to-all over 21 internal RoCE ports each."""
        buses = ["19", "1a", "33", "34", "9a", "9b", "b3", "b4"]
        devices = [
            FakeGaudi(
                index=i,
                uuid=f"01P0-HL3090A0-18-U4V193-22-07-0{i}",
                serial=f"N4BD1{i:02d}",
                bus_id=f"0000:{bus}:00.0",
                utilization=10 * i + 5,
                memory_used=(i + 1) * 8 * GIB,
                temp_aip=40 + i,
                temp_board=33 + i,
                power_mw=300_000 + 25_000 * i,
                energy_mj=1_000_000 * (i + 1),
                soc_mhz=1600,
                ecc_uncorrected=1 if i == 2 else 0,
                rows_single_bit=2 if i == 2 else 0,
                rows_pending=i == 2,
                throttle=0b01 if i == 7 else 0,
                pcie_tx_kbs=1000 * (i + 1),
                pcie_rx_kbs=2000 * (i + 1),
            )
            for i, bus in enumerate(buses)
        ]
        return cls(devices, **kwargs)

    # -- failure controls ------------------------------------------------------------

    def lose(self, index: int) -> None:
        self.devices[index].lost = True

    def recover(self, index: int) -> None:
        self.devices[index].lost = False

    def uninitialize(self) -> None:
        """As if hlml_shutdown ran under the caller: every call is UNINITIALIZED."""
        self.initialized = False
        self._sets.clear()
        self._registered.clear()

    def fail(self, function: str, code: int, index: int | None = None) -> None:
        """``function`` returns ``code`` (for device ``index``, or every call)."""
        self.failures[(function, index)] = code

    def hang(self, function: str, seconds: float) -> None:
        """The next calls of ``function`` block for up to ``seconds`` or until release()."""
        self._released.clear()
        self._hang = (function, seconds)

    def release(self) -> None:
        self._hang = None
        self._released.set()

    def inject(self, index: int, types: int) -> int:
        """Queues one event of ``types`` bits for a device; returns how many sets got it."""
        handle = self.devices[index].handle
        got = 0
        for set_id, regs in self._registered.items():
            for h, mask in regs:
                if h == handle and types & mask:
                    self._sets[set_id].append((handle, types & mask))
                    got += 1
        return got

    # -- the table ---------------------------------------------------------------------

    def _wrap(self, name: str, fn: Any) -> Any:
        declared = SIGNATURES[name]

        def call(*raw: Any) -> int:
            # A pointer arrives as the address the C ABI passes; typed here.
            args = tuple(
                ctypes.cast(a, t) if _is_pointer(t) else a
                for a, t in zip(raw, declared, strict=True)
            )
            self.calls[name] += 1
            hang = self._hang
            if hang is not None and hang[0] == name:
                self.hanging.set()
                self._released.wait(hang[1])
            if name != "hlml_init" and not self.initialized:
                return UNINITIALIZED
            dev = None
            if (
                args
                and SIGNATURES[name]
                and SIGNATURES[name][0] is _H
                and name.startswith(("hlml_device_", "hlml_get_mac", "hlml_nic_"))
            ):
                dev = self._by_handle.get(int(args[0] or 0))
                if dev is None:
                    return INVALID_ARGUMENT
                if dev.lost:
                    return AIP_IS_LOST
            code = self.failures.get((name, dev.index if dev else None))
            if code is None:
                code = self.failures.get((name, None))
            if code is not None:
                return code
            return int(fn(dev, *args[1:]) if dev is not None else fn(*args))

        return call

    @staticmethod
    def _write(buf: Any, size: int, text: str) -> int:
        data = text.encode() + b"\0"
        if len(data) > size:
            return 7  # HLML_ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buf, data, len(data))
        return SUCCESS

    def _hlml_init(self) -> int:
        if self.driver_not_loaded:
            return DRIVER_NOT_LOADED
        self.initialized = True
        return SUCCESS

    def _hlml_shutdown(self) -> int:
        self.uninitialize()
        return SUCCESS

    def _hlml_get_driver_version(self, buf: Any, size: int) -> int:
        return self._write(buf, size, self.driver_version)

    def _hlml_device_get_count(self, out: Any) -> int:
        out[0] = len(self.devices)
        return SUCCESS

    def _hlml_device_get_handle_by_index(self, index: int, out: Any) -> int:
        if index >= len(self.devices):
            return INVALID_ARGUMENT
        out[0] = self.devices[index].handle
        return SUCCESS

    def _hlml_device_get_name(self, d: FakeGaudi, buf: Any, size: int) -> int:
        return self._write(buf, size, d.name)

    def _hlml_device_get_uuid(self, d: FakeGaudi, buf: Any, size: int) -> int:
        return self._write(buf, size, d.uuid)

    def _hlml_device_get_serial(self, d: FakeGaudi, buf: Any, size: int) -> int:
        return self._write(buf, size, d.serial)

    def _hlml_device_get_pci_info(self, d: FakeGaudi, out: Any) -> int:
        # HLML writes the bus id in upper case, as lspci -D does not.
        out[0].bus_id = d.bus_id.upper().encode()
        out[0].pci_device_id = 0x10601DA3  # device 0x1060 (Gaudi 3), vendor 0x1da3
        out[0].domain = int(d.bus_id.split(":")[0], 16)
        out[0].bus = int(d.bus_id.split(":")[1], 16)
        return SUCCESS

    def _hlml_device_get_utilization_rates(self, d: FakeGaudi, out: Any) -> int:
        out[0].aip = d.utilization
        out[0].memory = d.utilization // 2
        return SUCCESS

    def _hlml_device_get_memory_info(self, d: FakeGaudi, out: Any) -> int:
        out[0].total = d.memory_total
        out[0].used = d.memory_used
        out[0].free = d.memory_total - d.memory_used
        return SUCCESS

    def _hlml_device_get_temperature(self, d: FakeGaudi, sensor: int, out: Any) -> int:
        # ON_AIP, ON_BOARD, OTHER, HBM, VRM, CTEMP; this board reads the first, second
        # and fourth.
        values = {0: d.temp_aip, 1: d.temp_board, 3: d.temp_hbm}
        if sensor not in values:
            return INVALID_ARGUMENT if sensor > 5 else NOT_SUPPORTED
        out[0] = values[sensor]
        return SUCCESS

    def _hlml_device_get_power_usage(self, d: FakeGaudi, out: Any) -> int:
        out[0] = d.power_mw
        return SUCCESS

    def _hlml_device_get_power_management_limit(self, d: FakeGaudi, out: Any) -> int:
        out[0] = d.power_limit_mw
        return SUCCESS

    def _hlml_device_get_power_management_default_limit(self, d: FakeGaudi, out: Any) -> int:
        out[0] = d.power_default_limit_mw
        return SUCCESS

    def _hlml_device_get_total_energy_consumption(self, d: FakeGaudi, out: Any) -> int:
        out[0] = d.energy_mj
        return SUCCESS

    def _hlml_device_get_clock_info(self, d: FakeGaudi, clock: int, out: Any) -> int:
        if clock != 0:  # IC, MME and TPC clocks are Goya's
            return NOT_SUPPORTED
        out[0] = d.soc_mhz
        return SUCCESS

    def _hlml_device_get_ecc_mode(self, d: FakeGaudi, current: Any, pending: Any) -> int:
        current[0] = pending[0] = int(d.ecc_enabled)
        return SUCCESS

    def _hlml_device_get_total_ecc_errors(
        self, d: FakeGaudi, error_type: int, counter: int, out: Any
    ) -> int:
        if counter not in (0, 1) or error_type not in (0, 1):
            return INVALID_ARGUMENT
        value = d.ecc_corrected if error_type == 0 else d.ecc_uncorrected
        if value is None:
            return NOT_SUPPORTED
        out[0] = value
        return SUCCESS

    def _hlml_device_get_replaced_rows(
        self, d: FakeGaudi, cause: int, count: Any, addresses: Any
    ) -> int:
        if addresses:  # the exporter asks for the count only
            return INVALID_ARGUMENT
        count[0] = d.rows_single_bit if cause == 0 else d.rows_double_bit
        return SUCCESS

    def _hlml_device_get_replaced_rows_pending_status(self, d: FakeGaudi, out: Any) -> int:
        out[0] = int(d.rows_pending)
        return SUCCESS

    def _hlml_device_get_current_clocks_throttle_reasons(self, d: FakeGaudi, out: Any) -> int:
        out[0] = d.throttle
        return SUCCESS

    def _hlml_device_get_pcie_throughput(self, d: FakeGaudi, counter: int, out: Any) -> int:
        out[0] = d.pcie_tx_kbs if counter == 0 else d.pcie_rx_kbs
        return SUCCESS

    def _hlml_get_mac_addr_info(self, d: FakeGaudi, mask: Any, ext: Any) -> int:
        for i in range(2):
            mask[i] = (d.ports >> (64 * i)) & ((1 << 64) - 1)
            ext[i] = (d.external_ports >> (64 * i)) & ((1 << 64) - 1)
        return SUCCESS

    def _hlml_nic_get_link(self, d: FakeGaudi, port: int, up: Any) -> int:
        if not d.ports >> port & 1:
            return INVALID_ARGUMENT
        up[0] = port not in d.ports_down
        return SUCCESS

    def _hlml_event_set_create(self, out: Any) -> int:
        self._next_set += 1
        self._sets[self._next_set] = deque()
        self._registered[self._next_set] = []
        out[0] = self._next_set
        return SUCCESS

    def _hlml_event_set_free(self, set_id: int | None) -> int:
        if self._sets.pop(int(set_id or 0), None) is None:
            return INVALID_ARGUMENT
        self._registered.pop(int(set_id or 0), None)
        return SUCCESS

    def _hlml_device_register_events(self, d: FakeGaudi, types: int, set_id: int | None) -> int:
        regs = self._registered.get(int(set_id or 0))
        if regs is None or types & self.refuse_event_types:
            return INVALID_ARGUMENT
        regs.append((d.handle, types))
        return SUCCESS

    def _hlml_event_set_wait(self, set_id: int | None, out: Any, timeout_ms: int) -> int:
        queue = self._sets.get(int(set_id or 0))
        if queue is None:
            return INVALID_ARGUMENT
        if not queue:
            return TIMEOUT
        handle, types = queue.popleft()
        out[0].device = handle
        out[0].event_type = types
        return SUCCESS

    # -- the pyhlml binding over the same table ----------------------------------------

    def binding(self) -> FakePyhlml:
        """``pyhlml.main`` of the habana-pyhlml 1.2x releases, calling this table."""
        return FakePyhlml(self.table)


class FakeHLMLError(Exception):
    """pyhlml's HLMLError: ``value`` is HLML's return code."""

    def __init__(self, value: int) -> None:
        super().__init__(f"HLML Error with code {value}")
        self.value = value


class FakePyhlml:
    """The functions of ``pyhlml.main`` (habana-pyhlml 1.24) that the exporter calls, with
    the binding's names, arguments and return types, each calling the C table the way
    the binding does: ctypes out-parameters passed by reference, ``HLMLError`` raised
    for any code but HLML_SUCCESS."""

    HLMLError = FakeHLMLError

    def __init__(self, table: Any) -> None:
        self._t = table

    @staticmethod
    def check_return(ret: int) -> int:
        if ret != SUCCESS:
            raise FakeHLMLError(ret)
        return ret

    def _c(self, name: str, *args: Any) -> None:
        fn = getattr(self._t, name, None)
        if fn is None:  # the binding's answer for a symbol its library lacks
            raise FakeHLMLError(INVALID_ARGUMENT)
        self.check_return(fn(*args))

    def _uint(self, name: str, *args: Any) -> int:
        out = ctypes.c_uint()
        self._c(name, *args, ctypes.byref(out))
        return out.value

    def _string(self, name: str, *args: Any) -> bytes:
        buf = ctypes.create_string_buffer(64)
        self._c(name, *args, buf, ctypes.c_uint(64))
        return buf.value

    def hlmlInit(self) -> None:
        self._c("hlml_init")

    def hlmlShutdown(self) -> None:
        self._c("hlml_shutdown")

    def hlmlGetDriverVersion(self) -> bytes:
        return self._string("hlml_get_driver_version")

    def hlmlDeviceGetCount(self) -> int:
        return self._uint("hlml_device_get_count")

    def hlmlDeviceGetHandleByIndex(self, index: int) -> ctypes.c_void_p:
        device = ctypes.c_void_p()
        self._c("hlml_device_get_handle_by_index", index, ctypes.byref(device))
        return device

    def hlmlDeviceGetName(self, device: Any) -> bytes:
        return self._string("hlml_device_get_name", device)

    def hlmlDeviceGetUUID(self, device: Any) -> bytes:
        return self._string("hlml_device_get_uuid", device)

    def hlmlDeviceGetSerial(self, device: Any) -> bytes:
        return self._string("hlml_device_get_serial", device)

    def hlmlDeviceGetPCIInfo(self, device: Any) -> _PciInfo:
        info = _PciInfo()
        self._c("hlml_device_get_pci_info", device, ctypes.byref(info))
        return info

    def hlmlDeviceGetUtilizationRates(self, device: Any) -> _Utilization:
        util = _Utilization()
        self._c("hlml_device_get_utilization_rates", device, ctypes.byref(util))
        return util

    def hlmlDeviceGetMemoryInfo(self, device: Any) -> _Memory:
        mem = _Memory()
        self._c("hlml_device_get_memory_info", device, ctypes.byref(mem))
        return mem

    def hlmlDeviceGetTemperature(self, device: Any, sensor_type: int) -> int:
        return self._uint("hlml_device_get_temperature", device, sensor_type)

    def hlmlDeviceGetPowerUsage(self, device: Any) -> int:
        return self._uint("hlml_device_get_power_usage", device)

    def hlmlDeviceGetPowerManagementLimit(self, device: Any) -> int:
        return self._uint("hlml_device_get_power_management_limit", device)

    def hlmlDeviceGetPowerManagementDefaultLimit(self, device: Any) -> int:
        return self._uint("hlml_device_get_power_management_default_limit", device)

    def hlmlDeviceGetTotalEnergyConsumption(self, device: Any) -> int:
        out = ctypes.c_ulonglong()
        self._c("hlml_device_get_total_energy_consumption", device, ctypes.byref(out))
        return out.value

    def hlmlDeviceGetClockInfo(self, device: Any, clock_type: int = 0) -> int:
        return self._uint("hlml_device_get_clock_info", device, clock_type)

    def hlmlDeviceGetECCMode(self, device: Any) -> SimpleNamespace:
        current, pending = ctypes.c_int(), ctypes.c_int()
        self._c("hlml_device_get_ecc_mode", device, ctypes.byref(current), ctypes.byref(pending))
        return SimpleNamespace(current=current, pending=pending)

    def hlmlDeviceGetTotalECCErrors(self, device: Any, error_type: int, counter_type: int) -> int:
        out = ctypes.c_ulonglong()
        self._c(
            "hlml_device_get_total_ecc_errors", device, error_type, counter_type, ctypes.byref(out)
        )
        return out.value

    def hlmlDeviceGetReplacedRowsCount(self, device: Any, cause: int) -> int:
        out = ctypes.c_uint()
        self._c("hlml_device_get_replaced_rows", device, cause, ctypes.byref(out), None)
        return out.value

    def hlmlDeviceGetReplacedRowsPendingStatus(self, device: Any) -> int:
        out = ctypes.c_int()
        self._c("hlml_device_get_replaced_rows_pending_status", device, ctypes.byref(out))
        return out.value

    def hlmlDeviceGetCurrentClocksThrottleReasons(self, device: Any) -> int:
        out = ctypes.c_ulonglong()
        self._c("hlml_device_get_current_clocks_throttle_reasons", device, ctypes.byref(out))
        return out.value

    def hlmlDeviceGetPCIEThroughput(self, device: Any, counter_type: int) -> int:
        return self._uint("hlml_device_get_pcie_throughput", device, counter_type)

    def hlmlDeviceGetMacAddrInfo(self, device: Any) -> tuple[tuple[int, int], tuple[int, int]]:
        mask, ext = (ctypes.c_uint64 * 2)(), (ctypes.c_uint64 * 2)()
        self._c("hlml_get_mac_addr_info", device, mask, ext)
        return (mask[0], mask[1]), (ext[0], ext[1])

    def hlmlDeviceNicGetLink(self, device: Any, port: int) -> bool:
        up = ctypes.c_bool()
        self._c("hlml_nic_get_link", device, ctypes.c_uint32(port), ctypes.byref(up))
        return up.value

    def hlmlEventSetCreate(self) -> ctypes.c_void_p:
        st = ctypes.c_void_p()
        self._c("hlml_event_set_create", ctypes.byref(st))
        return st

    def hlmlEventSetFree(self, st: Any) -> None:
        self._c("hlml_event_set_free", st)

    def hlmlDeviceRegisterEvents(self, device: Any, event_types: int, st: Any) -> None:
        self._c("hlml_device_register_events", device, event_types, st)

    def hlmlEventSetWait(self, st: Any, timeout: int) -> _EventData:
        data = _EventData()
        self._c("hlml_event_set_wait", st, ctypes.byref(data), timeout)
        return data
