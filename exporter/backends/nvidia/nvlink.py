"""NVLink of one NVIDIA GPU: which links exist, their error counters, and their
throughput, with NVML's field values (memory temperature rides in the same call).

Why it is built this way:

* Which links exist is found once, at discovery: links past the GPU's own count
  answer InvalidArgument, and asking all NVML_NVLINK_MAX_LINKS on every poll would
  be wasted calls.
* Throughput is a rate between consecutive polls of NVML's cumulative KiB counters,
  over NVML's own timestamps, so the figure covers the whole poll interval; the
  first poll reports nothing (``FIRST_SAMPLE``) rather than a made-up 0.
* Every field-value metric of a GPU is fetched by one ``nvmlDeviceGetFieldValues``
  call: one driver round trip per poll instead of one per link and direction.
"""

from __future__ import annotations

import time
from typing import Any

from exporter.backends.base import FIRST_SAMPLE
from exporter.backends.nvidia.calls import LOST, NvmlCalls, codes, field_value
from exporter.backends.nvidia.device import KIB, LINK_ERRORS, LINK_KEYS, LINK_THROUGHPUT, Gpu
from exporter.model import Reading


def discover(nvml: Any, gpu: Gpu) -> None:
    """Finds the GPU's links; a GPU without any carries the reason for its link
    fields for good."""
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            nvml.nvmlDeviceGetNvLinkState(gpu.handle, link)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_INVALID_ARGUMENT:
                continue  # no such link on this GPU
            if e.value in codes(nvml, *LOST):
                raise
            if not gpu.links:
                reason = f"no NVLink: {type(e).__name__}"
                for key in LINK_KEYS:
                    gpu.static[key] = reason
            break
        gpu.links.append(link)
    if not gpu.links and not any(k in gpu.static for k in LINK_KEYS):
        for key in LINK_KEYS:
            gpu.static[key] = "no NVLink links on this GPU"


def read_errors(calls: NvmlCalls, gpu: Gpu, r: Reading) -> list[int]:
    """Error counters of the active links; returns them for the throughput read."""
    nvml = calls.nvml
    active: list[int] = []
    for link in gpu.links:
        state = calls.call(gpu, "nvlink_state", "nvmlDeviceGetNvLinkState", gpu.handle, link)
        if not state:
            continue
        active.append(link)
        for kind, counter in LINK_ERRORS:
            n = calls.call(
                gpu,
                f"link_errors.{kind}",
                "nvmlDeviceGetNvLinkErrorCounter",
                gpu.handle,
                link,
                getattr(nvml, counter),
            )
            if n is not None:
                r.link_errors[(str(link), kind)] = float(n)
    missing = calls.missing[gpu.name]
    missing.pop("nvlink_state", None)  # an internal key, not a catalogue field
    if gpu.links and not active:
        for key in LINK_KEYS:
            missing.setdefault(key, "no NVLink link is active")
    return active


def read_field_values(calls: NvmlCalls, gpu: Gpu, r: Reading, active: list[int]) -> None:
    """One nvmlDeviceGetFieldValues call for every field-value metric: memory
    temperature and the per-link NVLink throughput counters (KiB, cumulative)."""
    nvml = calls.nvml
    missing = calls.missing[gpu.name]
    wanted: list[tuple[str, int, int]] = []  # (key, field id, scope id)
    if "temperatures.memory" not in gpu.static:
        wanted.append(("temperatures.memory", nvml.NVML_FI_DEV_MEMORY_TEMP, 0))
    for link in active:
        for direction, fid in LINK_THROUGHPUT:
            key = f"link_bytes_per_second.{direction}"
            if key not in gpu.static:
                wanted.append((key, getattr(nvml, fid), link))
    if not wanted:
        return
    keys = tuple(dict.fromkeys(k for k, _, _ in wanted))
    values = calls.call(
        gpu, keys, "nvmlDeviceGetFieldValues", gpu.handle, [(f, s) for _, f, s in wanted]
    )
    if values is None:
        return
    now_us = time.time() * 1e6
    # direction -> why no rate came out this poll, if none did
    no_rate: dict[str, str] = {}
    for (key, _fid, scope), fv in zip(wanted, values, strict=True):
        if fv.nvmlReturn != nvml.NVML_SUCCESS:
            calls.record(gpu, (key,), nvml.NVMLError(fv.nvmlReturn), static_ok=True)
            continue
        value = field_value(nvml, fv)
        if key == "temperatures.memory":
            # Boards without a memory sensor answer success with 0 °C.
            if value > 0:
                r.temperatures["memory"] = value
            else:
                missing[key] = "NVML returned 0 (no memory temperature sensor)"
            continue
        direction = key.rsplit(".", 1)[1]
        stamp = float(fv.timestamp) or now_us
        previous = gpu.link_previous.get((scope, direction))
        gpu.link_previous[(scope, direction)] = (value, stamp)
        if previous is None:
            no_rate[direction] = FIRST_SAMPLE
            continue
        kib, then = previous
        if stamp <= then:
            no_rate[direction] = "no time passed since the previous sample"
            continue
        if value < kib:
            no_rate[direction] = "the counter went back (reset); the rate resumes next poll"
            continue
        r.link_bytes_per_second[(str(scope), direction)] = (
            (value - kib) * KIB / ((stamp - then) / 1e6)
        )
    for direction, reason in no_rate.items():
        if not any(d == direction for _, d in r.link_bytes_per_second):
            missing.setdefault(f"link_bytes_per_second.{direction}", reason)
