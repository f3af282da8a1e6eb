"""Processes on the fake NVML's GPUs: running compute processes, MPS clients and
per-process utilization samples.

Why it is built this way:

* It is a mixin of ``FakeNVML`` (its bases line), with the real ``pynvml`` names and
  parameters (the signature test covers it through ``implemented()``), returning what
  the binding returns: ``nvmlDeviceGetComputeRunningProcesses`` and
  ``nvmlDeviceGetMPSComputeRunningProcesses`` give friendly objects with ``pid``,
  ``usedGpuMemory`` (None where the driver reports NVML_VALUE_NOT_AVAILABLE),
  ``gpuInstanceId`` and ``computeInstanceId``; the two utilization calls give the real
  ctypes structures (``c_nvmlProcessUtilizationSample_t``,
  ``c_nvmlProcessUtilizationInfo_v1_t``).
* It keeps NVML's rules, so a backend cannot cheat: utilization samples are per
  process with non-zero use, stamped with the CPU time in microseconds, and only
  those newer than ``timeStamp`` come back; none newer answers ``NotFound``. On a
  GPU in MIG mode, or on a MIG device handle, process utilization answers
  ``NotSupported`` (NVML: "On MIG-enabled GPUs, querying process utilization is not
  currently supported"). The processes of a MIG device handle are those of its GPU
  and compute instance; the GPU's own handle lists them all.
* The table lives in the mixin's own dict keyed by GPU index (``processes``); tests
  set it with ``run_processes()`` and time moves with ``FakeNVML.advance()``: a sample exists
  for a process once time has passed since the last one was read.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn

import pynvml

if TYPE_CHECKING:
    from tests.support.fakes.nvml import FakeGPU, FakeMig


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)


@dataclass
class FakeProcess:
    """One process with a CUDA context on a GPU."""

    pid: int
    # Device memory it holds; None: the driver cannot say (WDDM, some vGPU).
    memory: int | None
    # SM utilization it causes, in percent of the GPU (or of its MIG instance).
    sm_util: float = 0.0
    # An MPS client (listed by nvmlDeviceGetMPSComputeRunningProcesses) rather than a
    # process with its own context.
    mps_client: bool = False
    gpu_instance: int | None = None
    compute_instance: int | None = None


class ProcessesMixin:
    """The process functions of ``pynvml``; see the module docstring."""

    if TYPE_CHECKING:
        gpus: list[FakeGPU]
        now: float

        def _enter(
            self, fn: str, handle: Any = None, *, mig_ok: bool = False, symbol: str = ""
        ) -> tuple[FakeGPU, FakeMig | None, int]: ...

    # -- what tests set -----------------------------------------------------------------

    @property
    def processes(self) -> dict[int, list[FakeProcess]]:
        """GPU index -> its processes."""
        table: dict[int, list[FakeProcess]] = self.__dict__.setdefault("_processes", {})
        return table

    def run_processes(self, index: int, *procs: FakeProcess) -> None:
        """``procs`` run on GPU ``index`` (in addition to those already there)."""
        self.processes.setdefault(index, []).extend(procs)

    # -- internals ----------------------------------------------------------------------

    def _procs_on(self, index: int, mig: FakeMig | None) -> list[FakeProcess]:
        procs = self.processes.get(index, [])
        if mig is None:
            return list(procs)
        return [
            p
            for p in procs
            if p.gpu_instance == mig.gpu_instance and p.compute_instance == mig.compute_instance
        ]

    @staticmethod
    def _proc_info(p: FakeProcess) -> Any:
        # pynvml's nvmlStructToFriendlyObject: attribute access by field name.
        na = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        return SimpleNamespace(
            pid=p.pid,
            usedGpuMemory=p.memory,
            gpuInstanceId=na if p.gpu_instance is None else p.gpu_instance,
            computeInstanceId=na if p.compute_instance is None else p.compute_instance,
        )

    def _proc_samples(self, fn: str, handle: Any, timeStamp: int) -> tuple[list[FakeProcess], int]:
        g, _mig, index = self._enter(fn, handle)
        if g.mig_enabled:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        now_us = int(self.now * 1_000_000)
        busy = [p for p in self._procs_on(index, None) if p.sm_util > 0]
        if now_us <= timeStamp or not busy:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return busy, now_us

    # -- pynvml's functions ---------------------------------------------------------------

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        _g, mig, index = self._enter(
            "nvmlDeviceGetComputeRunningProcesses",
            handle,
            mig_ok=True,
            symbol="nvmlDeviceGetComputeRunningProcesses_v3",
        )
        return [self._proc_info(p) for p in self._procs_on(index, mig) if not p.mps_client]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[Any]:
        _g, mig, index = self._enter(
            "nvmlDeviceGetMPSComputeRunningProcesses",
            handle,
            mig_ok=True,
            symbol="nvmlDeviceGetMPSComputeRunningProcesses_v3",
        )
        return [self._proc_info(p) for p in self._procs_on(index, mig) if p.mps_client]

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        busy, now_us = self._proc_samples("nvmlDeviceGetProcessUtilization", handle, timeStamp)
        out = []
        for p in busy:
            s = pynvml.c_nvmlProcessUtilizationSample_t()
            s.pid, s.timeStamp, s.smUtil = p.pid, now_us, round(p.sm_util)
            out.append(s)
        return out

    def nvmlDeviceGetProcessesUtilizationInfo(self, handle: Any, timeStamp: int) -> list[Any]:
        busy, now_us = self._proc_samples(
            "nvmlDeviceGetProcessesUtilizationInfo", handle, timeStamp
        )
        out = []
        for p in busy:
            s = pynvml.c_nvmlProcessUtilizationInfo_v1_t()
            s.pid, s.timeStamp, s.smUtil = p.pid, now_us, round(p.sm_util)
            out.append(s)
        return out
