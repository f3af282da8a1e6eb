"""The processes on an NVIDIA GPU or MIG instance, for the per-pod figures.

Why it is built this way:

* **Memory** per process comes from ``nvmlDeviceGetComputeRunningProcesses``
  (``usedGpuMemory``), merged with ``nvmlDeviceGetMPSComputeRunningProcesses`` where
  the driver has it, so MPS clients are listed beside the MPS server. On a MIG
  instance the instance's own handle lists the instance's processes; the GPU's handle
  would list every instance's, so a GPU in MIG mode lists none itself and the parts
  are never counted twice.
* **Utilization** per process comes from NVML's process utilization samples:
  ``nvmlDeviceGetProcessesUtilizationInfo`` (R550 and newer), else
  ``nvmlDeviceGetProcessUtilization``. Both return ``smUtil`` per process with a CPU
  timestamp in microseconds, only for samples newer than the ``timeStamp`` given, and
  only for processes with non-zero use; so the last timestamp seen is kept per device,
  a listed process without a sample was idle (0), and ``NotFound`` (no sample newer)
  means every process was idle. When a process has several samples, their mean is
  its figure for the period.
* NVML gives no per-process utilization on a MIG-enabled GPU (``NotSupported``), nor
  on an older driver (``FunctionNotFound``): then the processes carry memory only, the
  answer is remembered (a MIG instance is not even asked), and the renderer gives a
  MIG instance's utilization to its one container when only one holds it.
* What cannot be read leaves its reason under ``PROCESS_FIELDS`` (``processes``,
  ``process_utilization``), so ``bench/nvml_check.py`` shows on a real GPU whether
  the per-pod figures have their inputs there, and why not.
* A GPU that is lost raises ``DeviceLostError`` through ``NvmlCalls`` like every
  other read; any other failure leaves the process list out for this poll.
"""

from __future__ import annotations

from typing import Any

from exporter.backends.nvidia.calls import NvmlCalls, codes
from exporter.backends.nvidia.device import PROCESS_FIELDS, Gpu
from exporter.model import ProcessUsage, Reading

# The process-utilization functions, newest first.
UTIL_FUNCTIONS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
# At most this many processes per device are taken from one answer.
MAX_PROCESSES = 1024


def read(calls: NvmlCalls, gpu: Gpu, r: Reading) -> None:
    """Fills ``r.processes`` for ``gpu`` (a whole GPU or a MIG instance); what it
    cannot fill has its reason under ``PROCESS_FIELDS`` in ``calls.missing``."""
    if gpu.children:
        reason = "MIG mode: each MIG instance lists its own processes"
        calls.missing.note(gpu.name, PROCESS_FIELDS, reason, gpu.static)
        return
    if "processes" in gpu.static:
        return  # NVML cannot list them here; the reason is copied at every read
    memory = _running(calls, gpu)
    if memory is None:
        return
    util = _utilization(calls, gpu)
    pids = list(memory) + [p for p in (util or {}) if p not in memory]
    r.processes = [
        ProcessUsage(
            pid=pid,
            utilization=None if util is None else util.get(pid, 0.0),
            memory_used_bytes=memory.get(pid),
        )
        for pid in pids[:MAX_PROCESSES]
    ]
    r.processes_listed = True


def _running(calls: NvmlCalls, gpu: Gpu) -> dict[int, float | None] | None:
    """pid -> bytes (None where the driver cannot say) of the processes with a compute
    context, MPS clients included; None when NVML cannot list them."""
    nvml = calls.nvml
    procs, err = calls.attempt(gpu, "nvmlDeviceGetComputeRunningProcesses", gpu.handle)
    if err is not None:
        calls.record(gpu, PROCESS_FIELDS, err, static_ok=True)
        return None
    found: list[Any] = list(procs or [])
    if gpu.mps_api:
        mps, err = calls.attempt(gpu, "nvmlDeviceGetMPSComputeRunningProcesses", gpu.handle)
        if err is not None and err.value in codes(
            nvml, "NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NO_PERMISSION"
        ):
            gpu.mps_api = False
        elif mps:
            found.extend(mps)
    out: dict[int, float | None] = {}
    for p in found[:MAX_PROCESSES]:
        pid = _int(getattr(p, "pid", None))
        if pid is None or pid <= 0:
            continue
        used = _int(getattr(p, "usedGpuMemory", None))
        before = out.get(pid)
        # A process listed twice (a context of its own and an MPS one) holds what
        # the larger figure says, not the sum.
        out[pid] = float(max(used, before or 0)) if used is not None else before
    return out


def _utilization(calls: NvmlCalls, gpu: Gpu) -> dict[int, float] | None:
    """pid -> share of the device (0-1) over the period since the last read; None when
    NVML gives no per-process utilization for this device."""
    nvml, key = calls.nvml, ("process_utilization",)
    if key[0] in gpu.static:
        return None
    while gpu.proc_util_api < len(UTIL_FUNCTIONS):
        fn = UTIL_FUNCTIONS[gpu.proc_util_api]
        try:
            samples, err = calls.attempt(gpu, fn, gpu.handle, gpu.proc_util_seen)
        except AttributeError:  # an older pynvml without the newer function
            samples, err = None, nvml.NVMLError(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if err is None:
            return _shares(gpu, samples or [])
        if err.value in codes(nvml, "NOT_FOUND"):
            return {}  # no sample newer than the last: every process was idle
        if err.value in codes(nvml, "FUNCTION_NOT_FOUND", "ARGUMENT_VERSION_MISMATCH"):
            gpu.proc_util_api += 1
            continue
        calls.record(gpu, key, err, static_ok=True)
        return None
    reason = f"this driver has neither {' nor '.join(UTIL_FUNCTIONS)}"
    calls.missing.note(gpu.name, key, reason, gpu.static)
    return None


def _shares(gpu: Gpu, samples: list[Any]) -> dict[int, float]:
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for s in samples[: MAX_PROCESSES * 8]:
        pid, sm, stamp = _int(s.pid), _int(s.smUtil), _int(s.timeStamp)
        if pid is None or sm is None or stamp is None:
            continue
        gpu.proc_util_seen = max(gpu.proc_util_seen, stamp)
        sums[pid] = sums.get(pid, 0.0) + min(sm, 100) / 100.0
        counts[pid] = counts.get(pid, 0) + 1
    return {pid: sums[pid] / counts[pid] for pid in sums}


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
