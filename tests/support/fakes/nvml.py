"""A fake NVML: the real ``pynvml`` module's functions, on a device table held in memory.

Why it is built this way:

* It is handed to ``NvidiaBackend(options, nvml=fake)`` in place of the module, so the
  backend runs its real code. Every function here has the real name and the real
  parameter names (a test compares them with ``inspect.signature`` of ``pynvml``), and
  returns what the real binding returns: the real ctypes structures (``c_nvmlMemory_t``,
  ``c_nvmlUtilization_t``, ``nvmlPciInfo_t``, ``c_nvmlFieldValue_t`` arrays,
  ``c_nvmlEventData_t``), device handles that are real ``c_nvmlDevice_t`` pointers, and
  plain ``str`` where ``pynvml`` decodes bytes.
* Constants, structure classes and exception classes are the real module's (looked up
  through ``__getattr__``), and errors are raised the way ``pynvml`` raises them,
  ``NVMLError(code)``, which picks the subclass (``NVMLError_NotSupported``...). A real
  ``pynvml`` function that the fake does not implement is *not* passed through: asking
  for it raises AttributeError, so a backend cannot quietly call something the fake
  never checked.
* It keeps NVML's own arithmetic so a backend cannot cheat: v1 memory "used" includes
  the driver's reservation and v2 does not; volatile and aggregate ECC counts differ;
  NVLink throughput is a cumulative KiB counter with a microsecond timestamp; GPM
  figures exist only between two samples of the same GPU (or the same MIG GPU
  instance, through ``nvmlGpmMigSampleGet``) taken in order; Xid events
  reach only event sets the GPU was registered in. Time moves only by ``advance()``,
  so rates are exact in tests.
* It fails the ways NVML fails: ``lose()`` (every later call on the GPU and its MIG
  instances answers ``GpuIsLost``, optionally after a number of calls, i.e. in the
  middle of a read), ``unsupported`` per GPU (function names, ``NVML_FI_*`` field names
  and ``NVML_NVLINK_ERROR_*`` counter names), ``missing_functions`` (an older driver:
  ``FunctionNotFound``), a missing library or driver at ``nvmlInit``, and ``hang()``
  (a call blocks until ``release()``, bounded so a forgotten release cannot hang the
  test run), and ``errors`` per GPU for any other answer (``Unknown``, ``Timeout``).
"""

from __future__ import annotations

import ctypes
import inspect
import threading
import uuid
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pynvml

from tests.support.fakes.nvml_mig import MigManagementMixin
from tests.support.fakes.nvml_procs import ProcessesMixin
from tests.support.fakes.nvml_reset import ResetMixin

GIB = 1024**3
MIB = 1024**2

# Handles hold synthetic addresses; nothing ever dereferences them.
_GPU_BASE = 0x7F00_0010_0000
_GPU_STRIDE = 0x1000
_MIG_OFFSET = 0x100
_MIG_STRIDE = 0x10
# A hung call gives up after this long, so that a test that forgets release() fails
# instead of hanging the whole run at interpreter exit.
HANG_LIMIT_SECONDS = 20.0

_XID = pynvml.nvmlEventTypeXidCriticalError
_RECOVERY = pynvml.nvmlEventTypeGpuRecoveryAction
_ANY = pynvml.NVML_GPU_INSTANCE_ID_ANY


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)


def _address(pointer: Any) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


@dataclass
class FakeMig:
    """One MIG device (a compute instance inside a GPU instance)."""

    slot: int  # its index for nvmlDeviceGetMigDeviceHandleByIndex
    gpu_instance: int
    compute_instance: int
    profile: str  # "1g.10gb"
    uuid: str  # "MIG-..."
    memory_total: int
    memory_used: int
    memory_reserved: int = 0
    # What GPM measures inside this GPU instance (nvmlGpmMigSampleGet), in percent.
    graphics_util_percent: float = 0.0
    dram_bw_util_percent: float = 0.0
    # -- state the fake moves: integrals of the percents over seconds --
    graphics_busy: float = 0.0
    dram_busy: float = 0.0


@dataclass
class FakeGPU:
    uuid: str
    name: str
    bus_id: str  # as NVML writes it: "00000000:1B:00.0"
    memory_total: int
    memory_used: int  # as v2 counts it, without the reservation
    memory_reserved: int = 0
    utilization_gpu: int = 0  # percent
    utilization_memory: int = 0  # percent
    ecc_enabled: bool = True
    # NVML_MEMORY_ERROR_TYPE_* -> count
    ecc_volatile: dict[int, int] = field(default_factory=dict)
    ecc_aggregate: dict[int, int] = field(default_factory=dict)
    # NVML_PAGE_RETIREMENT_CAUSE_* -> page addresses
    retired_pages: dict[int, list[int]] = field(default_factory=dict)
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: an nvmlDeviceGpuRecoveryAction_t value
    # (NVML_GPU_RECOVERY_ACTION_NONE unless a test sets the driver's verdict).
    recovery_action: int = 0
    temperature_gpu: int = 40
    # None: a board without a memory sensor, which answers success with 0.
    temperature_memory: int | None = None
    power_mw: int = 100_000
    power_limit_mw: int = 300_000
    energy_mj: float = 0.0
    # NVML_CLOCK_* -> MHz
    clocks_mhz: dict[int, int] = field(default_factory=dict)
    clocks_event_reasons: int = 0
    pcie_rx_kbs: int = 0
    pcie_tx_kbs: int = 0
    # Per link: (remote bus id as NVML writes it, NVML_NVLINK_DEVICE_TYPE_*).
    nvlink_remote: list[tuple[str, int]] = field(default_factory=list)
    nvlink_active: list[bool] = field(default_factory=list)
    nvlink_rx_kib_per_s: list[float] = field(default_factory=list)
    nvlink_tx_kib_per_s: list[float] = field(default_factory=list)
    nvlink_rx_kib: list[float] = field(default_factory=list)
    nvlink_tx_kib: list[float] = field(default_factory=list)
    # (link, NVML_NVLINK_ERROR_DL_*) -> count
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    # Where the GPU hangs in the PCIe tree, from the top: (NUMA node, host bridge,
    # switch, ...), for nvmlDeviceGetTopologyCommonAncestor; empty: NVML cannot say.
    pcie_path: tuple[str, ...] = ()
    mig_capable: bool = False
    mig_enabled: bool = False
    migs: list[FakeMig] = field(default_factory=list)
    gpm: bool = False
    dram_bw_util_percent: float = 0.0
    # Function names, NVML_FI_* names and NVML_NVLINK_ERROR_* names that answer
    # NotSupported on this GPU.
    unsupported: set[str] = field(default_factory=set)
    # Function name -> NVML_ERROR_* code it answers (a transient or odd failure).
    errors: dict[str, int] = field(default_factory=dict)
    # -- state the fake moves --
    lost: bool = False
    lose_after: int | None = None
    lose_xid: int | None = None
    dram_busy: float = 0.0  # integral of DRAM_BW_UTIL percent over seconds
    graphics_busy: float = 0.0  # integral of utilization_gpu percent over seconds

    def __post_init__(self) -> None:
        n = len(self.nvlink_remote)
        for name in (
            "nvlink_active",
            "nvlink_rx_kib_per_s",
            "nvlink_tx_kib_per_s",
            "nvlink_rx_kib",
            "nvlink_tx_kib",
        ):
            values = getattr(self, name)
            if not values:
                default: Any = True if name == "nvlink_active" else 0.0
                setattr(self, name, [default] * n)
            assert len(getattr(self, name)) == n, f"{name} needs one value per link"


@dataclass
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # gpu index -> event types
    # (gpu index, event type, event data, gpu instance, compute instance)
    queue: deque[tuple[int, int, int, int, int]] = field(default_factory=deque)


@dataclass(frozen=True)
class _Sample:
    gpu: int
    time: float
    dram_busy: float
    graphics_busy: float = 0.0
    # The GPU instance of a nvmlGpmMigSampleGet sample; None for the whole GPU.
    gpu_instance: int | None = None


class FakeNVML(MigManagementMixin, ProcessesMixin, ResetMixin):
    """Stands in for the ``pynvml`` module; see the module docstring."""

    def __init__(
        self,
        gpus: Iterable[FakeGPU],
        driver_version: str = "550.90.07",
        *,
        library_missing: bool = False,
        driver_not_loaded: bool = False,
        missing_functions: Iterable[str] = (),
        start_time: float = 1_700_000_000.0,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.library_missing = library_missing
        self.driver_not_loaded = driver_not_loaded
        # C symbols this "driver" lacks: calls answer FunctionNotFound, as pynvml does
        # when the symbol is absent from libnvidia-ml.so.
        self.missing_functions = set(missing_functions)
        self.now = start_time
        self.calls: Counter[str] = Counter()
        self.init_count = 0
        self.hanging = threading.Event()  # set while a call is blocked by hang()
        self._lock = threading.RLock()
        self._hangs: dict[tuple[str, int | None], threading.Event] = {}
        self._event_sets: dict[int, _EventSet] = {}
        self._samples: dict[int, _Sample | None] = {}
        self._keep: dict[int, Any] = {}  # ctypes buffers behind handles we gave out
        # The real driver samples PCIe throughput for 20 ms inside the call; with a
        # meeting set (``pcie_samples_meet``), each sample waits for the others.
        self._pcie_meeting: threading.Barrier | None = None

    # -- the real module's constants, structures and exceptions ----------------------

    def __getattr__(self, name: str) -> Any:
        real = getattr(pynvml, name)
        if inspect.isfunction(real):
            raise AttributeError(f"FakeNVML does not implement pynvml.{name}")
        return real

    # -- building tables ---------------------------------------------------------

    @classmethod
    def h100_node(cls, mig_on: int | None = 3, **kwargs: Any) -> FakeNVML:
        """An 8-GPU HGX H100 SXM board: 80 GB HBM3, 18 NVLinks per GPU to four
        NVSwitches (5+4+4+5), GPM, ECC on; GPU ``mig_on`` in MIG mode with two
        instances (3g.40gb as GPU instance 1, 1g.10gb as GPU instance 9, in MIG slots
        0 and 2: slot 1 is empty, as after an instance was destroyed)."""
        return cls([h100(i, mig=(i == mig_on)) for i in range(8)], **kwargs)

    @classmethod
    def v100_pair(cls, **kwargs: Any) -> FakeNVML:
        """Two V100 SXM2 joined GPU to GPU by 6 NVLinks: no GPM, no MIG, page
        retirement instead of row remapping, no memory temperature sensor."""
        return cls([v100(0, peer=1), v100(1, peer=0)], driver_version="535.183.01", **kwargs)

    @classmethod
    def pcie_node(cls, **kwargs: Any) -> FakeNVML:
        """Five PCIe-only L40S on two sockets, one of each PCIe relation: GPUs 0 and
        1 behind switch A, GPU 2 behind switch B on the same host bridge, GPU 3 on a
        second host bridge of NUMA node 0, GPU 4 on NUMA node 1. Five, because four
        GPUs cannot hold all four relations (NUMA nodes partition the GPUs)."""
        return cls([l40s(i) for i in range(len(PCIE_PATHS))], **kwargs)

    # -- what tests do to the hardware -------------------------------------------

    def advance(self, seconds: float) -> None:
        """Time passes: energy, NVLink counters and GPM's DRAM activity move with it."""
        with self._lock:
            self.now += seconds
            for g in self.gpus:
                g.energy_mj += g.power_mw * seconds
                g.dram_busy += g.dram_bw_util_percent * seconds
                g.graphics_busy += g.utilization_gpu * seconds
                for m in g.migs:
                    m.graphics_busy += m.graphics_util_percent * seconds
                    m.dram_busy += m.dram_bw_util_percent * seconds
                for link, active in enumerate(g.nvlink_active):
                    if active:
                        g.nvlink_rx_kib[link] += g.nvlink_rx_kib_per_s[link] * seconds
                        g.nvlink_tx_kib[link] += g.nvlink_tx_kib_per_s[link] * seconds

    def lose(self, index: int, *, xid: int | None = 79, after_calls: int = 0) -> None:
        """The GPU falls off the bus, now or after ``after_calls`` more calls on it (in
        the middle of a read). The driver reports Xid ``xid`` as it goes."""
        g = self.gpus[index]
        g.lose_after, g.lose_xid = after_calls, xid
        if after_calls == 0:
            self._fall(index)

    def recover(self, index: int) -> None:
        g = self.gpus[index]
        g.lost, g.lose_after = False, None

    def inject_xid(
        self,
        index: int,
        code: int,
        gpu_instance: int | None = None,
        compute_instance: int | None = None,
    ) -> int:
        """Queues an Xid event for every event set the GPU is registered in; returns how
        many sets received it (0: nobody registered for Xid events on this GPU)."""
        gi = _ANY if gpu_instance is None else gpu_instance
        ci = _ANY if compute_instance is None else compute_instance
        reached = 0
        with self._lock:
            for es in self._event_sets.values():
                if es.registered.get(index, 0) & _XID:
                    es.queue.append((index, _XID, code, gi, ci))
                    reached += 1
        return reached

    def set_recovery_action(self, index: int, action: int) -> int:
        """The driver states a new recovery action for the GPU (as after Xid 154):
        ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` answers it from now on, and a
        recovery-action event carrying it goes to every set registered for that type;
        returns how many sets received it."""
        reached = 0
        with self._lock:
            self.gpus[index].recovery_action = action
            for es in self._event_sets.values():
                if es.registered.get(index, 0) & _RECOVERY:
                    es.queue.append((index, _RECOVERY, action, _ANY, _ANY))
                    reached += 1
        return reached

    def pcie_samples_meet(self, parties: int, timeout: float = 5.0) -> None:
        """PCIe throughput calls answer only once ``parties`` of them are in flight
        together: proof that a reader overlaps them, as the driver's 20 ms samples
        allow. Asked one at a time, the first waits ``timeout`` and fails."""
        self._pcie_meeting = threading.Barrier(parties, timeout=timeout)

    def hang(self, function: str, index: int | None = None) -> None:
        """Calls of ``function`` (on GPU ``index``, or on any) block until release()."""
        self._hangs[(function, index)] = threading.Event()

    def release(self) -> None:
        for ev in self._hangs.values():
            ev.set()
        self._hangs.clear()

    # -- internals ----------------------------------------------------------------

    def _fall(self, index: int) -> None:
        g = self.gpus[index]
        g.lost, g.lose_after = True, None
        if g.lose_xid is not None:
            self.inject_xid(index, g.lose_xid)

    def gpu_handle(self, index: int) -> Any:
        return ctypes.cast(ctypes.c_void_p(_GPU_BASE + index * _GPU_STRIDE), pynvml.c_nvmlDevice_t)

    def mig_handle(self, index: int, slot: int) -> Any:
        addr = _GPU_BASE + index * _GPU_STRIDE + _MIG_OFFSET + slot * _MIG_STRIDE
        return ctypes.cast(ctypes.c_void_p(addr), pynvml.c_nvmlDevice_t)

    def _resolve(self, handle: Any) -> tuple[int, FakeMig | None]:
        if not isinstance(handle, pynvml.c_nvmlDevice_t):
            # What ctypes says when a function gets something that is not a handle.
            raise ctypes.ArgumentError(f"expected a c_nvmlDevice_t, got {type(handle)!r}")
        offset = _address(handle) - _GPU_BASE
        index, rest = divmod(offset, _GPU_STRIDE)
        if offset < 0 or index >= len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if rest == 0:
            return index, None
        slot, off = divmod(rest - _MIG_OFFSET, _MIG_STRIDE)
        g = self.gpus[index]
        for m in g.migs:
            if off == 0 and m.slot == slot and g.mig_enabled:
                return index, m
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _enter(
        self, fn: str, handle: Any = None, *, mig_ok: bool = False, symbol: str = ""
    ) -> tuple[FakeGPU, FakeMig | None, int]:
        """Every fake call starts here: counts it, and fails it as NVML would.
        ``symbol`` is the C function the binding calls when it differs from ``fn``
        (``nvmlDeviceGetPciInfo`` calls ``nvmlDeviceGetPciInfo_v3``)."""
        symbol = symbol or fn
        with self._lock:
            self.calls[fn] += 1
        if self.init_count == 0:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)
        if symbol in self.missing_functions:
            _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        index: int | None = None
        mig: FakeMig | None = None
        if handle is not None:
            index, mig = self._resolve(handle)
        ev = self._hangs.get((fn, index)) or self._hangs.get((fn, None))
        if ev is not None:
            self.hanging.set()
            ev.wait(HANG_LIMIT_SECONDS)
        if index is None:
            return _NO_GPU, None, -1
        g = self.gpus[index]
        with self._lock:
            if g.lose_after is not None:
                if g.lose_after == 0:
                    self._fall(index)
                else:
                    g.lose_after -= 1
        if g.lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        if mig is not None and not mig_ok:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if fn in g.unsupported or symbol in g.unsupported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if fn in g.errors:
            _raise(g.errors[fn])
        return g, mig, index

    def _gpu(self, fn: str, handle: Any, symbol: str = "") -> FakeGPU:
        return self._enter(fn, handle, symbol=symbol)[0]

    # -- init and system ----------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.library_missing:
            _raise(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if self.driver_not_loaded:
            _raise(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            # NVML's documented answer for a GPU that has fallen off the bus.
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self.gpu_handle(index)

    # -- identity -----------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        g, mig, _ = self._enter("nvmlDeviceGetUUID", handle, mig_ok=True)
        return mig.uuid if mig is not None else g.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        g, mig, _ = self._enter("nvmlDeviceGetName", handle, mig_ok=True)
        return f"{g.name} MIG {mig.profile}" if mig is not None else g.name

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        g = self._gpu("nvmlDeviceGetPciInfo", handle, "nvmlDeviceGetPciInfo_v3")
        return _pci_info(g.bus_id)

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        """N of the GPU's /dev/nvidiaN: its index here, as on most hosts."""
        return self._enter("nvmlDeviceGetMinorNumber", handle)[2]

    # -- load and memory ----------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        g = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        if g.mig_enabled:  # NVML has no whole-GPU utilization in MIG mode
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = g.utilization_gpu, g.utilization_memory
        return u

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        symbol = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        g, mig, _ = self._enter("nvmlDeviceGetMemoryInfo", handle, mig_ok=True, symbol=symbol)
        src: FakeGPU | FakeMig = mig if mig is not None else g
        total, used, reserved = src.memory_total, src.memory_used, src.memory_reserved
        if not version:
            m = pynvml.c_nvmlMemory_t()
            m.total, m.used, m.free = total, used + reserved, total - used - reserved
            return m
        if version != pynvml.nvmlMemory_v2:
            _raise(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        m2 = pynvml.c_nvmlMemory_v2_t()
        m2.version, m2.total, m2.reserved = version, total, reserved
        m2.used, m2.free = used, total - used - reserved
        return m2

    # -- GPM ------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any:
        g = self._gpu("nvmlGpmQueryDeviceSupport", device)
        s = pynvml.c_nvmlGpmSupport_t()
        s.version, s.isSupportedDevice = pynvml.NVML_GPM_SUPPORT_VERSION, int(g.gpm)
        return s

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        buf = (ctypes.c_uint8 * 64)()
        addr = ctypes.addressof(buf)
        with self._lock:
            self._keep[addr] = buf
            self._samples[addr] = None
        return ctypes.cast(buf, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        addr = _address(gpmSample)
        with self._lock:
            if addr not in self._samples:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            del self._samples[addr]
            del self._keep[addr]

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        g, _, index = self._enter("nvmlGpmSampleGet", device)
        if not g.gpm:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        addr = _address(gpmSample)
        with self._lock:
            if addr not in self._samples:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._samples[addr] = _Sample(index, self.now, g.dram_busy, g.graphics_busy)
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        """A sample of one GPU instance, asked of the parent GPU's handle (NVML takes
        the GPU, not the MIG device, and the GPU instance id)."""
        g, _, index = self._enter("nvmlGpmMigSampleGet", device)
        if not g.gpm:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mig = next((m for m in g.migs if m.gpu_instance == gpuInstanceId), None)
        if not g.mig_enabled or mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        addr = _address(gpmSample)
        with self._lock:
            if addr not in self._samples:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            self._samples[addr] = _Sample(
                index, self.now, mig.dram_busy, mig.graphics_busy, gpu_instance=gpuInstanceId
            )
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            _raise(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        with self._lock:
            s1 = self._samples.get(_address(metricsGet.sample1))
            s2 = self._samples.get(_address(metricsGet.sample2))
        if s1 is None or s2 is None or (s1.gpu, s1.gpu_instance) != (s2.gpu, s2.gpu_instance):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[s1.gpu].lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        if not 0 < metricsGet.numMetrics <= pynvml.NVML_GPM_METRIC_MAX:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        elapsed = s2.time - s1.time
        for i in range(metricsGet.numMetrics):
            m = metricsGet.metrics[i]
            busy = {
                pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: (s1.dram_busy, s2.dram_busy),
                pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: (s1.graphics_busy, s2.graphics_busy),
            }.get(m.metricId)
            if busy is None:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif elapsed <= 0:  # the same instant, or the samples in the wrong order
                m.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
            else:
                m.nvmlReturn = pynvml.NVML_SUCCESS
                m.value = (busy[1] - busy[0]) / elapsed
        return metricsGet

    # -- ECC, retired pages, remapped rows ------------------------------------------

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        g = self._gpu("nvmlDeviceGetEccMode", handle)
        mode = pynvml.NVML_FEATURE_ENABLED if g.ecc_enabled else pynvml.NVML_FEATURE_DISABLED
        return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        g = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if not g.ecc_enabled:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        counts = {
            pynvml.NVML_VOLATILE_ECC: g.ecc_volatile,
            pynvml.NVML_AGGREGATE_ECC: g.ecc_aggregate,
        }.get(counterType)
        if counts is None or errorType not in (
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        ):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return counts.get(errorType, 0)

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        g = self._gpu("nvmlDeviceGetRetiredPages", device)
        if sourceFilter not in (
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        ):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return list(g.retired_pages.get(sourceFilter, []))

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        return self._gpu("nvmlDeviceGetRemappedRows", device).remapped_rows

    # -- temperature, power, clocks ----------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        g = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature_gpu

    def nvmlDeviceGetTemperatureV(
        self, handle: Any, sensor: int, version: int = pynvml.nvmlTemperature_v1
    ) -> int:
        g = self._gpu("nvmlDeviceGetTemperatureV", handle)
        if version != pynvml.nvmlTemperature_v1:
            _raise(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature_gpu

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return int(self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj)

    # `type` shadows the builtin, but it is pynvml's parameter name.
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        g = self._gpu("nvmlDeviceGetClockInfo", handle)
        if type not in g.clocks_mhz:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.clocks_mhz[type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        g = self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return g.clocks_event_reasons

    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        g = self._gpu("nvmlDeviceGetPcieThroughput", device)
        meeting = self._pcie_meeting
        if meeting is not None:
            try:
                meeting.wait()
            except threading.BrokenBarrierError:
                raise AssertionError(
                    f"PCIe samples did not overlap: fewer than {meeting.parties} in flight together"
                ) from None
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return g.pcie_tx_kbs
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return g.pcie_rx_kbs
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    # -- field values -------------------------------------------------------------

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        g = self._gpu("nvmlDeviceGetFieldValues", handle)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        unsupported = {getattr(pynvml, n) for n in g.unsupported if n.startswith("NVML_FI_")}
        stamp = int(self.now * 1e6)
        for i, fid in enumerate(fieldIds):
            v = values[i]
            # The real binding takes a field id or a (field id, scope id) pair.
            try:
                (v.fieldId, v.scopeId) = fid
            except TypeError:
                v.fieldId = fid
            v.timestamp, v.latencyUsec = stamp, 0
            if v.fieldId in unsupported:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif v.fieldId == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
                v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = g.recovery_action
                v.nvmlReturn = pynvml.NVML_SUCCESS
            elif v.fieldId == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = g.temperature_memory or 0
                v.nvmlReturn = pynvml.NVML_SUCCESS
            elif v.fieldId in (
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            ):
                if not g.nvlink_remote:
                    v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                elif v.scopeId >= len(g.nvlink_remote):
                    v.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
                else:
                    rx = v.fieldId == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
                    kib = (g.nvlink_rx_kib if rx else g.nvlink_tx_kib)[v.scopeId]
                    v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                    v.value.ullVal = int(kib)
                    v.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    # -- NVLink -------------------------------------------------------------------

    def _link(self, fn: str, device: Any, link: int, symbol: str = "") -> FakeGPU:
        g = self._gpu(fn, device, symbol)
        if not g.nvlink_remote:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(g.nvlink_remote):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        g = self._link("nvmlDeviceGetNvLinkState", device, link)
        return pynvml.NVML_FEATURE_ENABLED if g.nvlink_active[link] else 0

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        g = self._link("nvmlDeviceGetNvLinkErrorCounter", device, link)
        names = {getattr(pynvml, n): n for n in _LINK_COUNTERS}
        if counter not in names:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if names[counter] in g.unsupported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.nvlink_errors.get((link, counter), 0)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> Any:
        g = self._link(
            "nvmlDeviceGetNvLinkRemotePciInfo", device, link, "nvmlDeviceGetNvLinkRemotePciInfo_v2"
        )
        return _pci_info(g.nvlink_remote[link][0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        g = self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        return g.nvlink_remote[link][1]

    # -- PCIe topology ----------------------------------------------------------------

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        """The deepest level of ``pcie_path`` the two GPUs share, as NVML's levels:
        nothing shared is SYSTEM, the NUMA node only is NODE, the host bridge is
        HOSTBRIDGE, a switch both hang from directly is SINGLE, a deeper one MULTIPLE."""
        a = self._gpu("nvmlDeviceGetTopologyCommonAncestor", device1)
        index, mig = self._resolve(device2)  # one call, counted once
        b = self.gpus[index]
        if mig is not None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if b.lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        if not a.pcie_path or not b.pcie_path:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if a is b:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        common = 0
        for x, y in zip(a.pcie_path, b.pcie_path, strict=False):
            if x != y:
                break
            common += 1
        if common == 0:
            return int(pynvml.NVML_TOPOLOGY_SYSTEM)
        if common == 1:
            return int(pynvml.NVML_TOPOLOGY_NODE)
        if common == 2:
            return int(pynvml.NVML_TOPOLOGY_HOSTBRIDGE)
        if len(a.pcie_path) == len(b.pcie_path) == common:
            return int(pynvml.NVML_TOPOLOGY_SINGLE)
        return int(pynvml.NVML_TOPOLOGY_MULTIPLE)

    # -- MIG ------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        g = self._gpu("nvmlDeviceGetMigMode", device)
        if not g.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if g.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        g = self._gpu("nvmlDeviceGetMaxMigDeviceCount", device)
        if not g.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        g, _, gpu_index = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if not g.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not g.mig_enabled or not 0 <= index < 7:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not any(m.slot == index for m in g.migs):
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return self.mig_handle(gpu_index, index)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        _, mig, _ = self._enter("nvmlDeviceGetGpuInstanceId", device, mig_ok=True)
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        _, mig, _ = self._enter("nvmlDeviceGetComputeInstanceId", device, mig_ok=True)
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        _, mig, index = self._enter(
            "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice, mig_ok=True
        )
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpu_handle(index)

    # -- events ---------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        buf = (ctypes.c_uint8 * 16)()
        addr = ctypes.addressof(buf)
        with self._lock:
            self._keep[addr] = buf
            self._event_sets[addr] = _EventSet()
        return ctypes.cast(buf, pynvml.c_nvmlEventSet_t)

    def _event_set(self, eventSet: Any) -> _EventSet:
        es = self._event_sets.get(_address(eventSet))
        if es is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return es

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        _, _, index = self._enter("nvmlDeviceRegisterEvents", handle)
        es = self._event_set(eventSet)
        if eventTypes & ~(_XID | _RECOVERY):
            # This fake raises Xid and recovery-action events; others are not
            # "supported" here.
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            es.registered[index] = es.registered.get(index, 0) | eventTypes

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        self._enter("nvmlEventSetWait", symbol="nvmlEventSetWait_v2")
        es = self._event_set(eventSet)
        with self._lock:
            item = es.queue.popleft() if es.queue else None
        if item is None:
            _raise(pynvml.NVML_ERROR_TIMEOUT)
        index, kind, code, gi, ci = item
        data = pynvml.c_nvmlEventData_t()
        data.device = self.gpu_handle(index)
        data.eventType, data.eventData = kind, code
        data.gpuInstanceId, data.computeInstanceId = gi, ci
        return data

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")
        addr = _address(eventSet)
        with self._lock:
            if addr not in self._event_sets:
                _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            del self._event_sets[addr]
            del self._keep[addr]

    # -- for tests ------------------------------------------------------------------

    @classmethod
    def implemented(cls) -> list[str]:
        """The pynvml functions this fake implements."""
        # The mixins' functions too (nvml_mig.py and the others on the bases line).
        return sorted(
            {
                n
                for k in cls.__mro__
                for n, v in vars(k).items()
                if n.startswith("nvml") and callable(v)
            }
        )


_LINK_COUNTERS = (
    "NVML_NVLINK_ERROR_DL_REPLAY",
    "NVML_NVLINK_ERROR_DL_RECOVERY",
    "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "NVML_NVLINK_ERROR_DL_CRC_DATA",
    "NVML_NVLINK_ERROR_DL_ECC_DATA",
)
# Returned by _enter for calls that take no device handle; never used for data.
_NO_GPU = FakeGPU(uuid="", name="", bus_id="", memory_total=0, memory_used=0)


def _pci_info(bus_id: str) -> Any:
    domain, bus, rest = bus_id.split(":")
    device = rest.split(".")[0]
    p = pynvml.nvmlPciInfo_t()
    p.busId = bus_id
    p.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}"
    p.domain, p.bus, p.device = int(domain, 16), int(bus, 16), int(device, 16)
    p.pciDeviceId = 0x233010DE
    return p


# -- device tables ---------------------------------------------------------------------

H100_BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)
NVSWITCH_BUS_IDS = (
    "00000000:05:00.0",
    "00000000:06:00.0",
    "00000000:07:00.0",
    "00000000:08:00.0",
)
# HGX H100: 18 links per GPU, 5+4+4+5 to the four NVSwitches.
_H100_SWITCH_OF_LINK = [0] * 5 + [1] * 4 + [2] * 4 + [3] * 5


def fake_uuid(kind: str, key: str) -> str:
    return f"{kind}-{uuid.uuid5(uuid.NAMESPACE_URL, f'accel-fleet/{kind}/{key}')}"


def h100(index: int, mig: bool = False) -> FakeGPU:
    """GPU ``index`` of an HGX H100 board, each with its own plausible load."""
    i = index
    util = [97, 88, 0, 45, 100, 73, 61, 12][i]
    busy = (i + 1) * 1.0
    g = FakeGPU(
        uuid=fake_uuid("GPU", f"h100-{i}"),
        name="NVIDIA H100 80GB HBM3",
        bus_id=H100_BUS_IDS[i],
        memory_total=81559 * MIB,
        memory_used=(10 + 8 * i) * GIB,
        memory_reserved=556 * MIB,
        utilization_gpu=util,
        utilization_memory=[61, 52, 0, 30, 70, 44, 38, 5][i],
        ecc_volatile={
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: 12 if i == 4 else 0,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 0,
        },
        # Aggregate counts survive reboots: never what the exporter should report.
        ecc_aggregate={
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: 1000 + i,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 7,
        },
        remapped_rows={4: (2, 0, 0, 0), 6: (0, 1, 1, 0)}.get(i, (0, 0, 0, 0)),
        temperature_gpu=[41, 44, 33, 39, 52, 47, 45, 36][i],
        temperature_memory=[47, 50, 38, 44, 58, 53, 51, 41][i],
        power_mw=[612_345, 540_000, 71_250, 301_500, 698_000, 455_000, 400_000, 120_000][i],
        power_limit_mw=700_000,
        energy_mj=12_000_000_000.0 + i * 100_000_000,
        clocks_mhz={
            pynvml.NVML_CLOCK_GRAPHICS: 345 if util == 0 else 1980,
            pynvml.NVML_CLOCK_SM: 345 if util == 0 else 1980,
            pynvml.NVML_CLOCK_MEM: 2619,
            pynvml.NVML_CLOCK_VIDEO: 1545,
        },
        clocks_event_reasons={
            2: pynvml.nvmlClocksEventReasonGpuIdle,
            4: pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown,
        }.get(i, 0),
        pcie_rx_kbs=1_200_000 + 1000 * i,
        pcie_tx_kbs=800_000 + 1000 * i,
        nvlink_remote=[
            (NVSWITCH_BUS_IDS[s], pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
            for s in _H100_SWITCH_OF_LINK
        ],
        nvlink_rx_kib_per_s=[busy * 1_000_000 + 1024 * link for link in range(18)],
        nvlink_tx_kib_per_s=[busy * 2_000_000 + 1024 * link for link in range(18)],
        nvlink_rx_kib=[float(1 << 40)] * 18,
        nvlink_tx_kib=[float(1 << 41)] * 18,
        nvlink_errors={
            1: {(3, pynvml.NVML_NVLINK_ERROR_DL_REPLAY): 2},
            5: {(17, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT): 1},
        }.get(i, {}),
        mig_capable=True,
        gpm=True,
        dram_bw_util_percent=[72.5, 64.0, 0.0, 31.25, 80.0, 50.5, 42.0, 7.75][i],
        # Hopper replaced page retirement with row remapping.
        unsupported={"nvmlDeviceGetRetiredPages"},
    )
    if mig:
        g.mig_enabled = True
        g.migs = [
            FakeMig(
                0,
                1,
                0,
                "3g.40gb",
                fake_uuid("MIG", f"h100-{i}-gi1"),
                40_448 * MIB,
                12 * GIB,
                graphics_util_percent=87.5,
                dram_bw_util_percent=40.25,
            ),
            FakeMig(
                2,
                9,
                0,
                "1g.10gb",
                fake_uuid("MIG", f"h100-{i}-gi9"),
                9_984 * MIB,
                2 * GIB,
                graphics_util_percent=12.5,
                dram_bw_util_percent=3.5,
            ),
        ]
    return g


def v100(index: int, peer: int) -> FakeGPU:
    bus_ids = ("00000000:1B:00.0", "00000000:1C:00.0")
    return FakeGPU(
        uuid=fake_uuid("GPU", f"v100-{index}"),
        name="Tesla V100-SXM2-32GB",
        bus_id=bus_ids[index],
        memory_total=32_768 * MIB,
        memory_used=(4 + index) * GIB,
        memory_reserved=0,
        utilization_gpu=50 + index,
        utilization_memory=20 + index,
        ecc_volatile={pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: 3},
        ecc_aggregate={pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: 30},
        retired_pages={
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: [0x1000, 0x2000],
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: [0x3000] if index else [],
        },
        temperature_gpu=50,
        temperature_memory=None,
        power_mw=200_000,
        power_limit_mw=300_000,
        energy_mj=5_000_000.0,
        clocks_mhz={
            pynvml.NVML_CLOCK_GRAPHICS: 1530,
            pynvml.NVML_CLOCK_SM: 1530,
            pynvml.NVML_CLOCK_MEM: 877,
            pynvml.NVML_CLOCK_VIDEO: 1372,
        },
        pcie_rx_kbs=1000,
        pcie_tx_kbs=2000,
        nvlink_remote=[(bus_ids[peer], pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)] * 6,
        nvlink_rx_kib_per_s=[100.0] * 6,
        nvlink_tx_kib_per_s=[200.0] * 6,
        gpm=False,
        unsupported={"nvmlDeviceGetRemappedRows", "NVML_NVLINK_ERROR_DL_CRC_DATA"},
    )


# A PCIe-only node (pcie_node): bus id and (NUMA node, host bridge, switch) per GPU.
PCIE_PATHS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("00000000:1A:00.0", ("node0", "pci0000:17", "switchA")),
    ("00000000:1B:00.0", ("node0", "pci0000:17", "switchA")),
    ("00000000:3D:00.0", ("node0", "pci0000:17", "switchB")),
    ("00000000:5E:00.0", ("node0", "pci0000:5d")),
    ("00000000:AF:00.0", ("node1", "pci0000:ae")),
)


def l40s(index: int) -> FakeGPU:
    """GPU ``index`` of the PCIe-only node: no NVLink, no GPM, no MIG."""
    bus_id, path = PCIE_PATHS[index]
    return FakeGPU(
        uuid=fake_uuid("GPU", f"l40s-{index}"),
        name="NVIDIA L40S",
        bus_id=bus_id,
        memory_total=46_068 * MIB,
        memory_used=(2 + index) * GIB,
        utilization_gpu=10 * index,
        pcie_path=path,
    )
