"""PCIe throughput of the NVIDIA GPUs, sampled for every GPU of the host at once.

Why it is built this way:

* ``nvmlDeviceGetPcieThroughput`` samples a byte counter over 20 ms inside the driver
  and returns only then. Asked in turn, rx and tx cost 42 ms a GPU: on an H200 that
  was 85% of a whole read (49.5 ms; ``bench/nvml_check.py`` prints where a read's
  time goes). The samples overlap when asked from several threads at once (NVML is
  thread-safe): rx and tx together took 21.4 ms on that H200, four at once 21.7 ms.
* So the first read of a poll (its GPU has no sample waiting) starts the samples of
  every physical GPU, on a small pool, and each GPU's read collects its own: a poll
  of N GPUs waits about 20 ms for PCIe, not 42 ms × N. A sample older than
  ``FRESH_SECONDS`` (a slow poll, or a read that stopped early and never collected)
  is taken again rather than reported.
* Errors are judged where the read is, in the polling thread, by the same rules as
  every other call (``calls``): a lost GPU ends its read, NotSupported is
  remembered, anything else leaves the field out for this poll.
* Not the field values ``NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES``: they are 32-bit
  counters (on an H200, driver 580) that wrap several times a second at PCIe 5
  speeds, so no rate over a poll interval can come from them.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.backends.nvidia.calls import NvmlCalls
from exporter.backends.nvidia.device import KIB, PCIE, Gpu
from exporter.model import Reading

FN = "nvmlDeviceGetPcieThroughput"
KEYS = tuple(f"pcie_bytes_per_second.{key}" for key, _ in PCIE)
# A sample started longer ago than this is not this poll's: dropped, taken again.
FRESH_SECONDS = 1.0
# Threads for the samples: two per GPU, up to this many.
MAX_THREADS = 32
# How long ``close`` waits for samples in flight before NVML is shut down.
CLOSE_WAIT_SECONDS = 1.0

# A sample's outcome: (KB/s, None) or (None, the NVMLError).
Outcome = tuple[Any, Any]


@dataclass
class _Pending:
    started: float
    # One per PCIE key; None where the field is known to be unsupported.
    samples: tuple[concurrent.futures.Future[Outcome] | None, ...]


class PcieSampler:
    """The PCIe samples of one backend's GPUs, taken together, collected per read."""

    def __init__(self, calls: NvmlCalls, clock: Callable[[], float] = time.monotonic) -> None:
        self._calls = calls
        self._clock = clock
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: dict[str, _Pending] = {}

    def read(self, gpus: Sequence[Gpu], gpu: Gpu, r: Reading) -> None:
        """Fills ``r.pcie_bytes_per_second`` for ``gpu``, one of ``gpus`` (the
        backend's physical GPUs); raises DeviceLostError when NVML says it is gone."""
        pending = self._pending.get(gpu.name)
        if pending is None or not self._fresh(pending):
            # None: a poll begins, every GPU's samples start. Stale: this poll is
            # slow, so the GPUs still to be read take theirs again.
            self._start([g for g in gpus if g is not gpu] + [gpu], begins=pending is None)
        pending = self._pending.pop(gpu.name)
        for key, sample in zip(KEYS, pending.samples, strict=True):
            if sample is None:
                continue
            kbs, err = sample.result()
            if err is not None:
                self._calls.record(gpu, (key,), self._calls.judge(gpu, FN, err), static_ok=True)
                continue
            r.pcie_bytes_per_second[key.rsplit(".", 1)[1]] = kbs * KIB

    def _fresh(self, pending: _Pending) -> bool:
        return self._clock() - pending.started <= FRESH_SECONDS

    def _start(self, gpus: Sequence[Gpu], begins: bool) -> None:
        """Starts the samples of each GPU whose sample is stale, and when a poll
        ``begins`` of each that has none; the last of ``gpus`` is the one being read."""
        last = gpus[-1]
        nvml = self._calls.nvml
        fn = getattr(nvml, FN)
        if self._pool is None:
            workers = max(1, min(MAX_THREADS, 2 * len(gpus)))
            self._pool = concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix="nvml-pcie"
            )
        now = self._clock()
        for gpu in gpus:
            have = self._pending.get(gpu.name)
            if gpu is not last:
                if have is None and not begins:
                    continue  # read already in this poll
                if (have is not None and self._fresh(have)) or gpu.lost:
                    continue  # a lost GPU's read ends before it would collect
            samples = tuple(
                None
                if key in gpu.static
                else self._pool.submit(_sample, nvml, fn, gpu.handle, getattr(nvml, counter))
                for key, (_, counter) in zip(KEYS, PCIE, strict=True)
            )
            self._pending[gpu.name] = _Pending(now, samples)

    def close(self) -> None:
        """Drops every sample; waits (bounded) for those in flight, so that NVML is
        not shut down under them."""
        in_flight = [s for p in self._pending.values() for s in p.samples if s is not None]
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        concurrent.futures.wait(in_flight, timeout=CLOSE_WAIT_SECONDS)


def _sample(nvml: Any, fn: Callable[..., Any], handle: Any, counter: int) -> Outcome:
    """One sample, in a pool thread: the error is the polling thread's to judge."""
    try:
        return fn(handle, counter), None
    except nvml.NVMLError as e:
        return None, e
