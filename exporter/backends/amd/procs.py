"""The processes on an AMD GPU, from AMD SMI, for the per-pod figures.

Why it is built this way:

* ``amdsmi_get_gpu_process_list(handle)`` lists each process that holds the GPU with
  ``memory_usage.vram_mem`` (bytes of VRAM it holds) and ``engine_usage.gfx``: the
  time in nanoseconds it has spent on the graphics/compute engine, a running total
  (what amdgpu's fdinfo ``drm-engine-gfx`` counts). A process's utilization is that
  total's increase over the wall time between two reads, so the first read of a
  process gives its memory only (the renderer counts it idle for that one period
  when others on the device have figures), and a total that went backwards (a new
  process under a reused PID) starts it again. On a GPU whose several XCDs each
  count their time, the figure is capped at 1.
* The sysfs source has no process list (that would need every process's fdinfo, a
  walk of all of ``/proc``): its devices get no per-pod series, which
  docs/vendors/amd.md says.
* AMD SMI answers ``NOT_SUPPORTED`` for the list on some platforms (a guest without
  the interface): remembered, not asked again; any other failure leaves the list out
  for this poll.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from exporter.backends.amd.device import Gpu
from exporter.model import ProcessUsage, Reading

MAX_PROCESSES = 1024


def read(call: Callable[..., Any], gpu: Gpu, r: Reading, now: float) -> None:
    """Fills ``r.processes`` from ``call("amdsmi_get_gpu_process_list")``'s answer
    (None when AMD SMI gave none); ``now`` is the wall time of the read, in seconds."""
    listed = call()
    if not isinstance(listed, list) or (listed and not any(isinstance(p, Mapping) for p in listed)):
        # None (no answer), or an older amdsmi's list of process handles, which would
        # need a call per process: not a list to bill from, rather than "nobody".
        return
    previous, before = gpu.proc_gfx_previous, gpu.proc_read_at
    elapsed_ns = (now - before) * 1e9 if before is not None else 0.0
    totals: dict[int, int] = {}
    procs: list[ProcessUsage] = []
    for p in listed[:MAX_PROCESSES]:
        if not isinstance(p, Mapping):
            continue
        pid = _number(p.get("pid"))
        if pid is None or pid <= 0 or pid in totals:
            continue
        engines = p.get("engine_usage")
        gfx = _number(engines.get("gfx")) if isinstance(engines, Mapping) else None
        memory = p.get("memory_usage")
        vram = _number(memory.get("vram_mem")) if isinstance(memory, Mapping) else None
        if vram is None:
            vram = _number(p.get("mem"))
        util: float | None = None
        if gfx is not None:
            totals[pid] = gfx
            last = previous.get(pid)
            if last is not None and elapsed_ns > 0 and gfx >= last:
                util = min((gfx - last) / elapsed_ns, 1.0)
        procs.append(ProcessUsage(pid, util, float(vram) if vram is not None else None))
    gpu.proc_gfx_previous, gpu.proc_read_at = totals, now
    r.processes = procs
    r.processes_listed = True


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None  # "N/A" and anything else the library did not count
    return value
