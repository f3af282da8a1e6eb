"""Huawei's DCMI library (``libdcmi.so``) through ctypes: the structures, the codes, and
one typed call per DCMI function the ascend backend uses.

Why it is built this way:

* **No vendor Python package.** DCMI is a C library shipped with the NPU driver; its
  API is public (Huawei's "DCMI API reference", and the header that MindCluster
  vendors as ``dcmi_interface_api.h``). The structures below follow that header field
  for field; a structure that is larger than the library writes is harmless, a smaller
  one would be overwritten, so where the header and the reference differ the larger
  form is kept (``dcmi_ecc_info`` has the two ``next_isolated`` counters).
* **One calling convention, so a fake can stand in.** Every call passes inputs as
  Python ints and outputs as ``ctypes.pointer(...)`` to a ctypes value or structure,
  or as a ctypes array, and reads the C return code. The library object is anything
  with the C functions' names: a ``ctypes.CDLL`` in production, or a Python object
  whose methods take the same arguments and write through ``.contents`` / the array
  (``tests/support/fakes/dcmi.py``).
* **Return codes are DCMI's own** (the reference's return-code table): a call that does
  not answer 0 raises ``DcmiError`` carrying the code, and ``kind`` sorts the code into
  what the backend does with it: a lost chip, an answer that stays true while the
  driver is loaded (not supported, not permitted), a transient one (timeout, busy,
  upgrading), or anything else. A function the installed library lacks (an older
  driver) is a ``DcmiError`` with ``MISSING_FUNCTION``, sorted as static.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Literal

# -- return codes (DCMI API reference, "return codes") --------------------------------
OK = 0
ERR_INVALID_PARAMETER = -8001
ERR_OPER_NOT_PERMITTED = -8002
ERR_MEM_OPERATE_FAIL = -8003
ERR_INNER_ERR = -8005
ERR_TIME_OUT = -8006
ERR_INVALID_DEVICE_ID = -8007
ERR_DEVICE_NOT_EXIST = -8008
ERR_IOCTL_FAIL = -8009
ERR_NOT_READY = -8012
ERR_NOT_SUPPORT_IN_CONTAINER = -8013
ERR_IS_UPGRADING = -8017
ERR_RESOURCE_OCCUPIED = -8020
ERR_NOT_SUPPORT = -8255
# Not DCMI's: the installed library has no such function (an older driver).
MISSING_FUNCTION = -1

CODE_NAMES: dict[int, str] = {
    ERR_INVALID_PARAMETER: "DCMI_ERR_CODE_INVALID_PARAMETER",
    ERR_OPER_NOT_PERMITTED: "DCMI_ERR_CODE_OPER_NOT_PERMITTED",
    ERR_MEM_OPERATE_FAIL: "DCMI_ERR_CODE_MEM_OPERATE_FAIL",
    -8004: "DCMI_ERR_CODE_SECURE_FUN_FAIL",
    ERR_INNER_ERR: "DCMI_ERR_CODE_INNER_ERR",
    ERR_TIME_OUT: "DCMI_ERR_CODE_TIME_OUT",
    ERR_INVALID_DEVICE_ID: "DCMI_ERR_CODE_INVALID_DEVICE_ID",
    ERR_DEVICE_NOT_EXIST: "DCMI_ERR_CODE_DEVICE_NOT_EXIST",
    ERR_IOCTL_FAIL: "DCMI_ERR_CODE_IOCTL_FAIL",
    -8010: "DCMI_ERR_CODE_SEND_MSG_FAIL",
    -8011: "DCMI_ERR_CODE_RECV_MSG_FAIL",
    ERR_NOT_READY: "DCMI_ERR_CODE_NOT_REDAY",  # sic: DCMI's own spelling
    ERR_NOT_SUPPORT_IN_CONTAINER: "DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER",
    -8015: "DCMI_ERR_CODE_RESET_FAIL",
    -8016: "DCMI_ERR_CODE_ABORT_OPERATE",
    ERR_IS_UPGRADING: "DCMI_ERR_CODE_IS_UPGRADING",
    ERR_RESOURCE_OCCUPIED: "DCMI_ERR_CODE_RESOURCE_OCCUPIED",
    -8023: "DCMI_ERR_CODE_CONFIG_INFO_NOT_EXIST",
    ERR_NOT_SUPPORT: "DCMI_ERR_CODE_NOT_SUPPORT",
    MISSING_FUNCTION: "function not in this libdcmi",
}

# The chip stopped answering: MindCluster's device plugin takes NOT_READY from
# dcmi_get_device_health as a card drop.
LOST_CODES = frozenset({ERR_NOT_READY, ERR_DEVICE_NOT_EXIST})
# True while the driver is loaded: the field is not asked again.
STATIC_CODES = frozenset(
    {ERR_NOT_SUPPORT, ERR_OPER_NOT_PERMITTED, ERR_NOT_SUPPORT_IN_CONTAINER, MISSING_FUNCTION}
)
# Normal at times: the field is left out of this poll, nothing is logged.
TRANSIENT_CODES = frozenset({ERR_TIME_OUT, ERR_IS_UPGRADING, ERR_RESOURCE_OCCUPIED})

Kind = Literal["lost", "static", "transient", "error"]

# -- enumerations ---------------------------------------------------------------------
# dcmi_get_device_utilization_rate input_type
UTIL_AICORE = 2
UTIL_HBM = 6
UTIL_HBM_BANDWIDTH = 10
UTIL_NPU = 13
# enum dcmi_device_type, for dcmi_get_device_ecc_info (only HBM is supported)
DEVICE_TYPE_HBM = 2
# enum dcmi_die_type: VDIE is the chip's unique die id
VDIE = 1
# enum dcmi_freq_type
FREQ_HBM = 6
FREQ_AICORE_CURRENT = 7
# dcmi_get_topo_info_by_device_id topo_type
TOPO_SELF = 0
TOPO_SYS = 1
TOPO_PHB = 2
TOPO_HCCS = 3
TOPO_PXB = 4
TOPO_PIX = 5
TOPO_SIO = 6
TOPO_HCCS_SW = 7
# dcmi_get_device_health: "this device does not exist"
HEALTH_NO_DEVICE = 0xFFFFFFFF

MAX_CARDS = 64  # dcmi_get_card_list: at most 64 cards
MAX_ERROR_CODES = 128  # dcmi_get_device_errorcode_v2: 0..128 codes
DRIVER_VERSION_LEN = 64  # dcmi_get_driver_version: a 64-byte buffer
MAX_CHIP_NAME_LEN = 32
DIE_ID_COUNT = 5

_u8 = ctypes.c_ubyte
_uint = ctypes.c_uint
_int = ctypes.c_int
_ull = ctypes.c_ulonglong


class ChipInfo(ctypes.Structure):
    _fields_ = (
        ("chip_type", _u8 * MAX_CHIP_NAME_LEN),
        ("chip_name", _u8 * MAX_CHIP_NAME_LEN),
        ("chip_ver", _u8 * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", _uint),
    )


class PcieInfoAll(ctypes.Structure):
    _fields_ = (
        ("venderid", _uint),
        ("subvenderid", _uint),
        ("deviceid", _uint),
        ("subdeviceid", _uint),
        ("domain", _int),
        ("bdf_busid", _uint),
        ("bdf_deviceid", _uint),
        ("bdf_funcid", _uint),
        ("reserve", _u8 * 32),
    )


class DieId(ctypes.Structure):
    _fields_ = (("soc_die", _uint * DIE_ID_COUNT),)


class HbmInfo(ctypes.Structure):
    _fields_ = (
        ("memory_size", _ull),  # MB
        ("freq", _uint),  # MHz
        ("memory_usage", _ull),  # MB
        ("temp", _int),  # Celsius
        ("bandwith_util_rate", _uint),  # sic; percent
    )


class MemoryInfo(ctypes.Structure):
    """dcmi_get_device_memory_info_v3: DDR, for chips without HBM (Ascend 310P)."""

    _fields_ = (
        ("memory_size", _ull),  # MB
        ("memory_available", _ull),  # MB
        ("freq", _uint),
        ("hugepagesize", ctypes.c_ulong),
        ("hugepages_total", ctypes.c_ulong),
        ("hugepages_free", ctypes.c_ulong),
        ("utiliza", _uint),
        ("reserve", _u8 * 60),
    )


class EccInfo(ctypes.Structure):
    _fields_ = (
        ("enable_flag", _int),
        ("single_bit_error_cnt", _uint),
        ("double_bit_error_cnt", _uint),
        ("total_single_bit_error_cnt", _uint),
        ("total_double_bit_error_cnt", _uint),
        ("single_bit_isolated_pages_cnt", _uint),
        ("double_bit_isolated_pages_cnt", _uint),
        ("single_bit_next_isolated_pages_cnt", _uint),
        ("double_bit_next_isolated_pages_cnt", _uint),
    )


_P = ctypes.POINTER
# The prototypes, for a real library (a fake takes the same arguments untyped).
PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "dcmi_init": (),
    "dcmi_get_card_list": (_P(_int), _P(_int), _int),
    "dcmi_get_card_num_list": (_P(_int), _P(_int), _int),
    "dcmi_get_device_num_in_card": (_int, _P(_int)),
    "dcmi_get_device_chip_info": (_int, _int, _P(ChipInfo)),
    "dcmi_get_device_pcie_info_v2": (_int, _int, _P(PcieInfoAll)),
    "dcmi_get_device_die_v2": (_int, _int, _int, _P(DieId)),
    "dcmi_get_driver_version": (ctypes.c_char_p, _uint),
    "dcmi_get_device_utilization_rate": (_int, _int, _int, _P(_uint)),
    "dcmi_get_device_hbm_info": (_int, _int, _P(HbmInfo)),
    "dcmi_get_device_memory_info_v3": (_int, _int, _P(MemoryInfo)),
    "dcmi_get_device_temperature": (_int, _int, _P(_int)),
    "dcmi_get_device_power_info": (_int, _int, _P(_int)),
    "dcmi_get_device_frequency": (_int, _int, _int, _P(_uint)),
    "dcmi_get_device_health": (_int, _int, _P(_uint)),
    "dcmi_get_device_errorcode_v2": (_int, _int, _P(_int), _P(_uint), _uint),
    "dcmi_get_device_ecc_info": (_int, _int, _int, _P(EccInfo)),
    "dcmi_get_topo_info_by_device_id": (_int, _int, _int, _int, _P(_int)),
}

# Where the driver package puts the library when the loader path does not name it
# (the NPU driver's lib64 directories, and the DCMI package's own).
LIBRARY_CANDIDATES: tuple[str, ...] = (
    "libdcmi.so",
    "/usr/local/dcmi/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/common/libdcmi.so",
)


class DcmiError(Exception):
    """A DCMI call that did not answer 0."""

    def __init__(self, function: str, code: int) -> None:
        super().__init__(f"{function}: {code_name(code)}")
        self.function = function
        self.code = code

    @property
    def kind(self) -> Kind:
        if self.code in LOST_CODES:
            return "lost"
        if self.code in STATIC_CODES:
            return "static"
        if self.code in TRANSIENT_CODES:
            return "transient"
        return "error"


def code_name(code: int) -> str:
    name = CODE_NAMES.get(code)
    return f"{name} ({code})" if name else f"DCMI return code {code}"


def load_library(paths: Sequence[str]) -> tuple[Any | None, str]:
    """The first of ``paths`` that loads, with the prototypes of the functions it has;
    or ``(None, why none loaded)``."""
    failures: list[str] = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            failures.append(f"{path}: {e}")
            continue
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = list(argtypes)
                fn.restype = ctypes.c_int
        return lib, ""
    return None, "libdcmi.so not loadable (" + "; ".join(failures) + ")"


def _text(raw: Any) -> str:
    """A fixed-size C char array as text, up to its first NUL."""
    return bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()


class Dcmi:
    """Typed calls on one DCMI library object (a CDLL, or a fake with its names)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def _call(self, function: str, *args: Any) -> None:
        fn = getattr(self.lib, function, None)
        if fn is None:
            raise DcmiError(function, MISSING_FUNCTION)
        code = int(fn(*args))
        if code != OK:
            raise DcmiError(function, code)

    def init(self) -> None:
        self._call("dcmi_init")

    def card_list(self) -> list[int]:
        num = _int(0)
        cards = (_int * MAX_CARDS)()
        try:
            self._call("dcmi_get_card_list", ctypes.pointer(num), cards, MAX_CARDS)
        except DcmiError as e:
            if e.code != MISSING_FUNCTION:
                raise
            # Drivers before dcmi_get_card_list have only the older name.
            self._call("dcmi_get_card_num_list", ctypes.pointer(num), cards, MAX_CARDS)
        return [int(cards[i]) for i in range(max(0, min(num.value, MAX_CARDS)))]

    def device_count(self, card: int) -> int:
        num = _int(0)
        self._call("dcmi_get_device_num_in_card", card, ctypes.pointer(num))
        return max(0, num.value)

    def chip_info(self, card: int, device: int) -> tuple[str, str, str]:
        """(chip_type, chip_name, chip_ver), e.g. ("Ascend", "910B3", "V1")."""
        info = ChipInfo()
        self._call("dcmi_get_device_chip_info", card, device, ctypes.pointer(info))
        return _text(info.chip_type), _text(info.chip_name), _text(info.chip_ver)

    def pci_bus_id(self, card: int, device: int) -> str:
        info = PcieInfoAll()
        self._call("dcmi_get_device_pcie_info_v2", card, device, ctypes.pointer(info))
        return (
            f"{info.domain & 0xFFFF:04x}:{info.bdf_busid & 0xFF:02x}:"
            f"{info.bdf_deviceid & 0x1F:02x}.{info.bdf_funcid & 0x7:x}"
        )

    def vdie_id(self, card: int, device: int) -> tuple[int, ...]:
        die = DieId()
        self._call("dcmi_get_device_die_v2", card, device, VDIE, ctypes.pointer(die))
        return tuple(int(v) for v in die.soc_die)

    def driver_version(self) -> str:
        buf = ctypes.create_string_buffer(DRIVER_VERSION_LEN)
        self._call("dcmi_get_driver_version", buf, DRIVER_VERSION_LEN)
        return _text(buf.raw)

    def utilization(self, card: int, device: int, kind: int) -> int:
        rate = _uint(0)
        self._call("dcmi_get_device_utilization_rate", card, device, kind, ctypes.pointer(rate))
        return int(rate.value)

    def hbm_info(self, card: int, device: int) -> HbmInfo:
        info = HbmInfo()
        self._call("dcmi_get_device_hbm_info", card, device, ctypes.pointer(info))
        return info

    def memory_info(self, card: int, device: int) -> MemoryInfo:
        info = MemoryInfo()
        self._call("dcmi_get_device_memory_info_v3", card, device, ctypes.pointer(info))
        return info

    def temperature(self, card: int, device: int) -> int:
        value = _int(0)
        self._call("dcmi_get_device_temperature", card, device, ctypes.pointer(value))
        return int(value.value)

    def power_decawatts(self, card: int, device: int) -> int:
        """The chip's power in units of 0.1 W."""
        value = _int(0)
        self._call("dcmi_get_device_power_info", card, device, ctypes.pointer(value))
        return int(value.value)

    def frequency_mhz(self, card: int, device: int, kind: int) -> int:
        value = _uint(0)
        self._call("dcmi_get_device_frequency", card, device, kind, ctypes.pointer(value))
        return int(value.value)

    def health(self, card: int, device: int) -> int:
        value = _uint(0)
        self._call("dcmi_get_device_health", card, device, ctypes.pointer(value))
        return int(value.value)

    def error_codes(self, card: int, device: int) -> list[int]:
        count = _int(0)
        codes = (_uint * MAX_ERROR_CODES)()
        self._call(
            "dcmi_get_device_errorcode_v2",
            card,
            device,
            ctypes.pointer(count),
            codes,
            MAX_ERROR_CODES,
        )
        n = max(0, min(count.value, MAX_ERROR_CODES))
        return [int(codes[i]) for i in range(n) if codes[i]]

    def ecc_info(self, card: int, device: int) -> EccInfo:
        info = EccInfo()
        self._call("dcmi_get_device_ecc_info", card, device, DEVICE_TYPE_HBM, ctypes.pointer(info))
        return info

    def topology(self, a: tuple[int, int], b: tuple[int, int]) -> int:
        kind = _int(0)
        self._call("dcmi_get_topo_info_by_device_id", a[0], a[1], b[0], b[1], ctypes.pointer(kind))
        return int(kind.value)
