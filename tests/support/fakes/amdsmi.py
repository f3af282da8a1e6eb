"""A fake ``amdsmi`` module: the real package's functions, on a GPU table held in memory.

Why it is built this way:

* It is handed to ``AmdBackend(options, amdsmi=fake)`` in place of the module, so the
  backend runs its real code path. Each function has the real name, the real parameter
  names and defaults, validates its arguments the way the real wrapper does (a handle
  that is not an ``amdsmi_processor_handle``, a memory type that is not an
  ``AmdSmiMemoryType``: ``AmdSmiParameterException``) and returns the real dict shapes,
  with the library's ``"N/A"`` where a value is not available.
* The real package cannot even be imported on a host without ROCm (its wrapper loads
  ``libamd_smi.so`` at import), so ``tests/exporter/test_amd.py`` checks this fake against the
  installed package's *source*: function names and parameters, enum members and values,
  ``AMDSMI_STATUS_*`` numbers, and that every dict key returned here is one the real
  function builds.
* It fails the ways the library fails: ``AmdSmiLibraryException`` with the status codes
  of ``amdsmi_wrapper`` (``NOT_SUPPORTED`` per GPU and function, or per temperature
  sensor / clock domain as ``"amdsmi_get_temp_metric:EDGE"``), ``NOT_INIT`` before
  ``amdsmi_init``, an ``init_status`` for a driver that is not loaded, and ``lose()``:
  every later call on that GPU answers a status (``NOT_FOUND`` by default).
* Counters move only by ``advance()``: energy, xGMI data and the throttle residencies
  grow at the rates set per GPU, so rates are exact in tests.
"""

from __future__ import annotations

import ctypes
import types
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NoReturn

# amdsmi_wrapper's status numbers (amdsmi.h's amdsmi_status_t).
STATUS: dict[str, int] = {
    "AMDSMI_STATUS_SUCCESS": 0,
    "AMDSMI_STATUS_INVAL": 1,
    "AMDSMI_STATUS_NOT_SUPPORTED": 2,
    "AMDSMI_STATUS_NOT_YET_IMPLEMENTED": 3,
    "AMDSMI_STATUS_FAIL_LOAD_MODULE": 4,
    "AMDSMI_STATUS_FAIL_LOAD_SYMBOL": 5,
    "AMDSMI_STATUS_DRM_ERROR": 6,
    "AMDSMI_STATUS_API_FAILED": 7,
    "AMDSMI_STATUS_TIMEOUT": 8,
    "AMDSMI_STATUS_RETRY": 9,
    "AMDSMI_STATUS_NO_PERM": 10,
    "AMDSMI_STATUS_INTERRUPT": 11,
    "AMDSMI_STATUS_IO": 12,
    "AMDSMI_STATUS_FILE_ERROR": 14,
    "AMDSMI_STATUS_BUSY": 30,
    "AMDSMI_STATUS_NOT_FOUND": 31,
    "AMDSMI_STATUS_NOT_INIT": 32,
    "AMDSMI_STATUS_DRIVER_NOT_LOADED": 34,
    "AMDSMI_STATUS_NO_DATA": 40,
    "AMDSMI_STATUS_UNEXPECTED_DATA": 43,
    "AMDSMI_STATUS_FILE_NOT_FOUND": 52,
}

amdsmi_wrapper = types.SimpleNamespace(
    amdsmi_processor_handle=ctypes.POINTER(None),  # ctypes.c_void_p, as in the wrapper
    **STATUS,
)


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8
    INIT_AMD_APUS = 3


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    CRITICAL = 5


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5
    VCLK0 = 6
    VCLK1 = 7
    DCLK0 = 8
    DCLK1 = 9


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        name = next((k for k, v in STATUS.items() if v == err_code), "AMDSMI_STATUS_UNKNOWN")
        self.err_info = name

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(STATUS["AMDSMI_STATUS_RETRY"])


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(STATUS["AMDSMI_STATUS_TIMEOUT"])


class AmdSmiParameterException(AmdSmiException):
    # The wrapper's own (camelCase) parameter names.
    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.actualType = type(receivedValue)
        self.expectedType = expectedType
        self.err_msg = msg or f"Invalid parameter: {type(receivedValue)}, expected {expectedType}"

    def __str__(self) -> str:
        return self.err_msg


def _names(member: IntEnum | None) -> set[str]:
    """Every name of an enum value: the real enums have aliases (GFX is SYS's value,
    JUNCTION is HOTSPOT's), and a member only knows its first name."""
    if member is None:
        return set()
    return {n for n, m in type(member).__members__.items() if m == member}


def _raise(status: str) -> NoReturn:
    raise AmdSmiLibraryException(STATUS[f"AMDSMI_STATUS_{status}"])


NA = "N/A"


@dataclass
class FakeAmdProcess:
    """One process with a context on the GPU: what amdsmi_get_gpu_process_list lists."""

    pid: int
    vram: int  # bytes of VRAM it holds
    # Share of the GPU's graphics/compute engine it keeps busy (0-1): its
    # engine_usage.gfx total grows by this many seconds per second of advance().
    gfx_busy: float = 0.0
    gfx_ns: int = 0  # engine_usage.gfx, a running total in ns
    name: str = "python3"


@dataclass
class FakeAmdGpu:
    bdf: str  # as amdsmi_get_gpu_device_bdf formats it: "0000:0c:00.0"
    uuid: str  # as amdsmi_get_gpu_device_uuid returns it
    serial: int  # the ASIC serial (sysfs unique_id)
    market_name: str
    device_id: int
    driver_version: str = "6.10.5"
    gfx_activity: int | str = 0
    umc_activity: int | str = 0
    vram_total: int = 0
    vram_used: int = 0
    # correctable, uncorrectable, deferred
    ecc: tuple[int, int, int] = (0, 0, 0)
    # AmdSmiTemperatureType name -> °C; a sensor not listed answers NOT_SUPPORTED.
    temperatures: dict[str, int] = field(default_factory=dict)
    current_socket_power: int | str = NA
    average_socket_power: int | str = NA
    power_cap_uw: int = 0
    # energy_accumulator ticks of counter_resolution µJ, and the power behind them
    energy_ticks: int = 0
    counter_resolution: float = 15.3
    power_for_energy_w: float = 0.0
    # AmdSmiClkType name -> MHz
    clocks_mhz: dict[str, int] = field(default_factory=dict)
    # gpu_metrics (what amdsmi_get_gpu_metrics_info reports) and how it moves per second
    metrics_revision: tuple[int, int] = (1, 6)
    xgmi_link_width: int | str = NA
    xgmi_read_kb: list[int | str] = field(default_factory=list)
    xgmi_write_kb: list[int | str] = field(default_factory=list)
    xgmi_read_kb_per_s: list[int] = field(default_factory=list)
    xgmi_write_kb_per_s: list[int] = field(default_factory=list)
    # residency accumulator name (and "accumulation_counter") -> value, and growth per s
    residencies: dict[str, int] = field(default_factory=dict)
    residencies_per_s: dict[str, int] = field(default_factory=dict)
    # Function names (or "fn:ENUM_NAME") that answer NOT_SUPPORTED on this GPU.
    unsupported: set[str] = field(default_factory=set)
    # Function name -> status name it answers (a transient or odd failure).
    errors: dict[str, str] = field(default_factory=dict)
    lost_status: str | None = None
    # The processes on the GPU (amdsmi_get_gpu_process_list).
    processes: list[FakeAmdProcess] = field(default_factory=list)


class FakeAmdSmi:
    """Stands in for the ``amdsmi`` module; see the module docstring."""

    amdsmi_wrapper = amdsmi_wrapper
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiMemoryType = AmdSmiMemoryType
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiClkType = AmdSmiClkType
    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiRetryException = AmdSmiRetryException
    AmdSmiTimeoutException = AmdSmiTimeoutException
    AmdSmiParameterException = AmdSmiParameterException

    def __init__(
        self,
        gpus: Iterable[FakeAmdGpu],
        *,
        init_status: str | None = None,
        start_ns: int = 1_731_000_000_000_000_000,
    ) -> None:
        gpus = list(gpus)
        self.gpus = gpus
        self.init_status = init_status
        self.initialized = False
        self.now_ns = start_ns
        self.calls: Counter[str] = Counter()
        # Handles hold synthetic addresses; nothing ever dereferences them.
        self._handles = [ctypes.c_void_p(0x7F00_0020_0000 + 0x1000 * i) for i in range(len(gpus))]

    @staticmethod
    def implemented() -> list[str]:
        return sorted(
            n for n, f in vars(FakeAmdSmi).items() if n.startswith("amdsmi_") and callable(f)
        )

    # -- the fake's own controls ---------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Time passes: energy, xGMI data and residencies grow at their set rates."""
        self.now_ns += int(seconds * 1e9)
        for g in self.gpus:
            g.energy_ticks += round(g.power_for_energy_w * seconds * 1e6 / g.counter_resolution)
            for values, rates in (
                (g.xgmi_read_kb, g.xgmi_read_kb_per_s),
                (g.xgmi_write_kb, g.xgmi_write_kb_per_s),
            ):
                for i, rate in enumerate(rates):
                    if isinstance(values[i], int):
                        values[i] = int(values[i]) + int(rate * seconds)
            for name, rate in g.residencies_per_s.items():
                g.residencies[name] = (g.residencies[name] + int(rate * seconds)) % (1 << 32)
            for p in g.processes:
                p.gfx_ns += round(p.gfx_busy * seconds * 1e9)

    def lose(self, index: int, status: str = "NOT_FOUND") -> None:
        self.gpus[index].lost_status = status

    # -- argument checks, as the wrapper makes them ----------------------------------------

    def _gpu(self, fn: str, handle: Any, detail: IntEnum | None = None) -> FakeAmdGpu:
        self.calls[fn] += 1
        if not isinstance(handle, amdsmi_wrapper.amdsmi_processor_handle):
            raise AmdSmiParameterException(handle, amdsmi_wrapper.amdsmi_processor_handle)
        if not self.initialized:
            _raise("NOT_INIT")
        try:
            g = self.gpus[[h.value for h in self._handles].index(handle.value)]
        except ValueError:
            _raise("INVAL")
        if g.lost_status is not None:
            _raise(g.lost_status)
        if fn in g.errors:
            _raise(g.errors[fn])
        if fn in g.unsupported or any(f"{fn}:{n}" in g.unsupported for n in _names(detail)):
            _raise("NOT_SUPPORTED")
        return g

    @staticmethod
    def _check(value: Any, kind: type[IntEnum]) -> None:
        if not isinstance(value, kind):
            raise AmdSmiParameterException(value, kind)

    # -- the amdsmi functions the backend calls ----------------------------------------------

    def amdsmi_init(self, flag: IntEnum = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.calls["amdsmi_init"] += 1
        self._check(flag, AmdSmiInitFlags)
        if self.init_status is not None:
            _raise(self.init_status)
        self.initialized = True

    def amdsmi_shut_down(self) -> None:
        self.calls["amdsmi_shut_down"] += 1
        if not self.initialized:
            _raise("NOT_INIT")
        self.initialized = False

    def amdsmi_get_processor_handles(self) -> list[Any]:
        self.calls["amdsmi_get_processor_handles"] += 1
        if not self.initialized:
            _raise("NOT_INIT")
        return list(self._handles)

    def amdsmi_get_gpu_device_bdf(self, processor_handle: Any) -> str:
        return self._gpu("amdsmi_get_gpu_device_bdf", processor_handle).bdf

    def amdsmi_get_gpu_device_uuid(self, processor_handle: Any) -> str:
        return self._gpu("amdsmi_get_gpu_device_uuid", processor_handle).uuid

    def amdsmi_get_gpu_asic_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_asic_info", processor_handle)
        return {
            "market_name": g.market_name or NA,
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": hex(g.device_id),
            "rev_id": "0x00",
            "asic_serial": f"0x{g.serial:016X}",
            "oam_id": 0,
            "num_compute_units": 304,
            "target_graphics_version": "gfx942",
            "subsystem_id": "0x74a1",
        }

    def amdsmi_get_gpu_driver_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_driver_info", processor_handle)
        return {
            "driver_name": "amdgpu",
            "driver_version": g.driver_version or NA,
            "driver_date": "2015/01/01 00:00",
        }

    def amdsmi_get_gpu_activity(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_activity", processor_handle)
        return {"gfx_activity": g.gfx_activity, "umc_activity": g.umc_activity, "mm_activity": NA}

    def amdsmi_get_gpu_memory_total(self, processor_handle: Any, mem_type: Any) -> int:
        self._check(mem_type, AmdSmiMemoryType)
        return self._gpu("amdsmi_get_gpu_memory_total", processor_handle).vram_total

    def amdsmi_get_gpu_memory_usage(self, processor_handle: Any, mem_type: Any) -> int:
        self._check(mem_type, AmdSmiMemoryType)
        return self._gpu("amdsmi_get_gpu_memory_usage", processor_handle).vram_used

    def amdsmi_get_gpu_total_ecc_count(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_total_ecc_count", processor_handle)
        ce, ue, de = g.ecc
        return {"correctable_count": ce, "uncorrectable_count": ue, "deferred_count": de}

    def amdsmi_get_temp_metric(self, processor_handle: Any, sensor_type: Any, metric: Any) -> int:
        self._check(sensor_type, AmdSmiTemperatureType)
        self._check(metric, AmdSmiTemperatureMetric)
        g = self._gpu("amdsmi_get_temp_metric", processor_handle, sensor_type)
        found = [c for n, c in g.temperatures.items() if n in _names(sensor_type)]
        if not found or metric != AmdSmiTemperatureMetric.CURRENT:
            _raise("NOT_SUPPORTED")
        return found[0]

    def amdsmi_get_power_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_power_info", processor_handle)
        return {
            "socket_power": g.current_socket_power,
            "current_socket_power": g.current_socket_power,
            "average_socket_power": g.average_socket_power,
            "gfx_voltage": NA,
            "soc_voltage": NA,
            "mem_voltage": NA,
            "power_limit": g.power_cap_uw // 1_000_000 if g.power_cap_uw else NA,
        }

    def amdsmi_get_power_cap_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_power_cap_info", processor_handle)
        return {
            "power_cap": g.power_cap_uw,
            "default_power_cap": g.power_cap_uw,
            "dpm_cap": 0,
            "min_power_cap": 0,
            "max_power_cap": g.power_cap_uw,
        }

    def amdsmi_get_energy_count(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_energy_count", processor_handle)
        return {
            "energy_accumulator": g.energy_ticks,
            "counter_resolution": g.counter_resolution,
            "timestamp": self.now_ns,
        }

    def amdsmi_get_clock_info(self, processor_handle: Any, clock_type: Any) -> dict[str, Any]:
        self._check(clock_type, AmdSmiClkType)
        g = self._gpu("amdsmi_get_clock_info", processor_handle, clock_type)
        found = [mhz for n, mhz in g.clocks_mhz.items() if n in _names(clock_type)]
        if not found:
            _raise("NOT_SUPPORTED")
        return {
            "clk": found[0],
            "min_clk": 500,
            "max_clk": 2100,
            "clk_locked": False,
            "clk_deep_sleep": NA,
        }

    def amdsmi_get_gpu_metrics_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_metrics_info", processor_handle)
        out: dict[str, Any] = {
            "common_header.structure_size": NA,
            "common_header.format_revision": g.metrics_revision[0],
            "common_header.content_revision": g.metrics_revision[1],
            "system_clock_counter": self.now_ns,
            "xgmi_link_width": g.xgmi_link_width,
            "xgmi_link_speed": NA if g.xgmi_link_width == NA else 32,
            "xgmi_read_data_acc": list(g.xgmi_read_kb) or [NA] * 8,
            "xgmi_write_data_acc": list(g.xgmi_write_kb) or [NA] * 8,
            "indep_throttle_status": NA,
        }
        for name in (
            "accumulation_counter",
            "prochot_residency_acc",
            "ppt_residency_acc",
            "socket_thm_residency_acc",
            "vr_thm_residency_acc",
            "hbm_thm_residency_acc",
        ):
            out[name] = g.residencies.get(name, NA)
        return out

    def amdsmi_get_gpu_process_list(self, processor_handle: Any) -> list[dict[str, Any]]:
        g = self._gpu("amdsmi_get_gpu_process_list", processor_handle)
        return [
            {
                "name": p.name,
                "pid": p.pid,
                "mem": p.vram,
                "engine_usage": {"gfx": p.gfx_ns, "enc": 0},
                "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": p.vram},
                "cu_occupancy": NA,
            }
            for p in g.processes
        ]

    # -- reset (the node agent's reset task; nodeagent/reset.py) ------------------------

    @property
    def hives(self) -> dict[int, int]:
        """GPU index -> XGMI hive id (amdsmi_get_xgmi_info); a GPU not listed has none."""
        table: dict[int, int] = self.__dict__.setdefault("_hives", {})
        return table

    @property
    def resets(self) -> list[int]:
        """The GPU indexes amdsmi_reset_gpu reset, in order."""
        done: list[int] = self.__dict__.setdefault("_resets", [])
        return done

    def amdsmi_get_xgmi_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_xgmi_info", processor_handle)
        index = self.gpus.index(g)
        hive = self.hives.get(index, 0)
        return {"xgmi_lanes": 16 if hive else 0, "xgmi_hive_id": hive, "xgmi_node_id": index}

    def amdsmi_reset_gpu(self, processor_handle: Any) -> None:
        """The GPU answers again afterwards (a lost one included) and its odd answers
        are gone, as after the driver re-initialised it."""
        self.calls["amdsmi_reset_gpu"] += 1
        if not isinstance(processor_handle, amdsmi_wrapper.amdsmi_processor_handle):
            raise AmdSmiParameterException(processor_handle, amdsmi_wrapper.amdsmi_processor_handle)
        if not self.initialized:
            _raise("NOT_INIT")
        index = [h.value for h in self._handles].index(processor_handle.value)
        g = self.gpus[index]
        if "amdsmi_reset_gpu" in g.unsupported:
            _raise("NOT_SUPPORTED")
        g.lost_status = None
        g.errors.clear()
        self.resets.append(index)
