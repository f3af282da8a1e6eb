"""NVML GPM (GPU Performance Monitoring, Hopper and newer): memory bandwidth for a
whole GPU, and utilization and bandwidth for each MIG GPU instance.

Why it is built this way:

* GPM figures are rates between two samples, so each GPU (and each MIG GPU instance)
  keeps two sample buffers used in turn, the previous one and the one being taken;
  the figure covers the whole poll interval instead of a short window, and the first
  poll reports nothing (``FIRST_SAMPLE``) rather than a made-up 0.
* Memory bandwidth is ``DRAM_BW_UTIL``, a fraction of peak DRAM bandwidth. Older GPUs
  only have NVML's "memory utilization", the fraction of time the memory controller
  was busy; the source is named in the metric's HELP text so that nobody compares
  the two as if they were one figure.
* In MIG mode NVML has no utilization at all but GPM's: each GPU instance is sampled
  through the parent's handle (``nvmlGpmMigSampleGet``) for ``GRAPHICS_UTIL`` (what
  NVML's whole-GPU utilization and DCGM's GR_ENGINE_ACTIVE measure, so a MIG
  instance and a whole GPU read alike) and ``DRAM_BW_UTIL``.
"""

from __future__ import annotations

import logging
from typing import Any

from exporter.backends.base import FIRST_SAMPLE
from exporter.backends.nvidia.calls import NvmlCalls, quietly
from exporter.backends.nvidia.device import GPM_SOURCE, UTILIZATION_SOURCE, Gpu
from exporter.model import Reading

log = logging.getLogger("accel_exporter.nvidia")


def discover(nvml: Any, gpu: Gpu) -> None:
    """Allocates the GPU's two samples where it supports GPM, then its MIG GPU
    instances'. Called last in a GPU's discovery: a failure before it would leak
    what it allocates."""
    reason = ""
    try:
        supported = bool(nvml.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice)
        if supported:
            for _ in range(2):
                gpu.gpm_samples.append(nvml.nvmlGpmSampleAlloc())
        else:
            reason = "GPM not supported by this GPU (Hopper and newer)"
    except nvml.NVMLError as e:
        reason = f"GPM: {type(e).__name__}"
    except AttributeError:
        reason = "this pynvml has no GPM functions"
    if reason:
        free(nvml, gpu)
        log.debug("%s: memory bandwidth from NVML memory utilization: %s", gpu.name, reason)
        return
    _discover_mig(nvml, gpu)


def _discover_mig(nvml: Any, gpu: Gpu) -> None:
    """Two GPM samples per MIG GPU instance, the only per-instance utilization NVML
    has (nvmlDeviceGetUtilizationRates answers NotSupported in MIG mode). GPM
    measures a GPU instance, so a GPU instance split into several compute
    instances keeps no figure: giving each compute instance the whole GPU
    instance's activity would count the same work twice."""
    for child in gpu.children:
        if sum(c.gpu_instance == child.gpu_instance for c in gpu.children) > 1:
            reason = "GPM measures the GPU instance, which is split in compute instances"
            child.static["utilization"] = child.static["memory_bandwidth_utilization"] = reason
            continue
        try:
            for _ in range(2):
                child.gpm_samples.append(nvml.nvmlGpmSampleAlloc())
        except nvml.NVMLError as e:
            free(nvml, child)
            log.debug("%s: no GPM samples: %s", child.name, type(e).__name__)
            continue
        child.static.pop("utilization", None)
        child.static.pop("memory_bandwidth_utilization", None)


def free(nvml: Any, gpu: Gpu) -> None:
    """Releases the GPU's samples (not its children's)."""
    for sample in gpu.gpm_samples:
        quietly(nvml.nvmlGpmSampleFree, sample)
    gpu.gpm_samples = []


def _request(nvml: Any, gpu: Gpu, previous: Any, current: Any, metrics: tuple[Any, ...]) -> Any:
    """The GPU's reusable nvmlGpmMetricsGet_t, set to compute ``metrics`` between
    ``previous`` and ``current``."""
    if gpu.gpm_request is None:
        gpu.gpm_request = nvml.c_nvmlGpmMetricsGet_t()
    req = gpu.gpm_request
    req.version = nvml.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(metrics)
    req.sample1 = previous  # the older sample first: NVML divides by sample2 - sample1
    req.sample2 = current
    for i, metric in enumerate(metrics):
        req.metrics[i].metricId = metric
    return req


def bandwidth(calls: NvmlCalls, gpu: Gpu, r: Reading, util: Any) -> None:
    """A whole GPU's memory bandwidth: GPM DRAM_BW_UTIL between this poll's sample
    and the previous one, else NVML's memory utilization (``util``)."""
    key = "memory_bandwidth_utilization"
    missing = calls.missing[gpu.name]
    if not gpu.gpm_samples:
        if util is not None:
            r.memory_bandwidth_utilization = util.memory / 100.0
            r.memory_bandwidth_source = UTILIZATION_SOURCE
        else:
            missing.setdefault(key, missing.get("utilization", "no utilization from NVML"))
        return
    nvml = calls.nvml
    current = gpu.gpm_samples[gpu.gpm_next]
    previous = gpu.gpm_samples[gpu.gpm_next ^ 1]
    _, err = calls.attempt(gpu, "nvmlGpmSampleGet", gpu.handle, current)
    if err is not None:
        gpu.gpm_have_previous = False
        calls.record(gpu, (key,), err)
        return
    had_previous = gpu.gpm_have_previous
    gpu.gpm_have_previous = True
    gpu.gpm_next ^= 1
    if not had_previous:
        missing[key] = FIRST_SAMPLE
        return
    req = _request(nvml, gpu, previous, current, (nvml.NVML_GPM_METRIC_DRAM_BW_UTIL,))
    _, err = calls.attempt(gpu, "nvmlGpmMetricsGet", req)
    if err is None and req.metrics[0].nvmlReturn != nvml.NVML_SUCCESS:
        err = nvml.NVMLError(req.metrics[0].nvmlReturn)
    if err is not None:
        calls.record(gpu, (key,), err)
        return
    r.memory_bandwidth_utilization = req.metrics[0].value / 100.0
    r.memory_bandwidth_source = GPM_SOURCE


def read_mig(calls: NvmlCalls, gpu: Gpu, r: Reading) -> None:
    """GPM of one MIG GPU instance between this poll's sample and the previous one:
    GRAPHICS_UTIL and DRAM_BW_UTIL. NVML samples a GPU instance through the parent
    GPU's handle and the GPU instance id."""
    keys = ("utilization", "memory_bandwidth_utilization")
    if not gpu.gpm_samples or gpu.parent is None or gpu.gpu_instance is None:
        return
    if all(k in gpu.static for k in keys):  # NotSupported once: not asked again
        return
    nvml = calls.nvml
    current = gpu.gpm_samples[gpu.gpm_next]
    previous = gpu.gpm_samples[gpu.gpm_next ^ 1]
    _, err = calls.attempt(gpu, "nvmlGpmMigSampleGet", gpu.parent.handle, gpu.gpu_instance, current)
    if err is not None:
        gpu.gpm_have_previous = False
        calls.record(gpu, keys, err, static_ok=True)
        return
    had_previous = gpu.gpm_have_previous
    gpu.gpm_have_previous = True
    gpu.gpm_next ^= 1
    if not had_previous:
        for key in keys:
            calls.missing[gpu.name][key] = FIRST_SAMPLE
        return
    metrics = (nvml.NVML_GPM_METRIC_GRAPHICS_UTIL, nvml.NVML_GPM_METRIC_DRAM_BW_UTIL)
    req = _request(nvml, gpu, previous, current, metrics)
    _, err = calls.attempt(gpu, "nvmlGpmMetricsGet", req)
    if err is not None:
        calls.record(gpu, keys, err)
        return
    for i, key in enumerate(keys):
        metric = req.metrics[i]
        if metric.nvmlReturn != nvml.NVML_SUCCESS:
            calls.record(gpu, (key,), nvml.NVMLError(metric.nvmlReturn))
            continue
        if key == "utilization":
            r.utilization = metric.value / 100.0
        else:
            r.memory_bandwidth_utilization = metric.value / 100.0
            r.memory_bandwidth_source = GPM_SOURCE
