"""MIG instances of an NVIDIA GPU, found as child devices (``nvidia3_mig9``).

Why it is built this way:

* A MIG instance is what the kubelet hands a container, so it is a device of its
  own with its own identity and memory; GPU-wide figures (power, clocks, ECC,
  NVLink) stay on the parent, where NVML reports them, and each child field that is
  the parent's carries that as its reason.
* One compute instance per GPU instance is the usual layout, named ``nvidiaN_migGI``;
  a GPU instance split further names each compute instance ``nvidiaN_migGI_ciCI``.
* NVML's only per-instance load figures are GPM's (``exporter.backends.nvidia.gpm``),
  so a child's utilization and bandwidth stay out, with the reason, until GPM
  samples are allocated for it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from exporter.backends.nvidia.device import FIELDS, VENDOR, Gpu
from exporter.model import DeviceInfo

log = logging.getLogger("accel_exporter.nvidia")

# What a MIG instance reports itself; the rest is the parent GPU's.
MIG_OWN = ("memory_used_bytes", "memory_total_bytes", "fault_events", "processes")
_MIG_NAME = re.compile(r"^(?P<model>.*?)\s+MIG\s+(?P<profile>\S+)\s*$")


def discover(nvml: Any, gpu: Gpu) -> list[Gpu]:
    """The MIG instances of ``gpu``; none for a GPU without MIG mode enabled."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(gpu.handle)
    except nvml.NVMLError:
        return []  # not MIG-capable: a whole GPU, which is the common case
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return []
    found: list[tuple[int, int, Any, str, str]] = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
        except nvml.NVMLError as e:
            if e.value in (nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_ERROR_INVALID_ARGUMENT):
                continue  # an empty slot: instances need not be contiguous
            raise
        try:
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
            uuid = str(nvml.nvmlDeviceGetUUID(mig))
            name = str(nvml.nvmlDeviceGetName(mig))
        except nvml.NVMLError as e:
            log.warning("%s: MIG slot %d skipped: %s", gpu.name, slot, type(e).__name__)
            continue
        found.append((gi, ci, mig, uuid, name))
    per_gi: dict[int, int] = {}
    for gi, *_ in found:
        per_gi[gi] = per_gi.get(gi, 0) + 1
    children: list[Gpu] = []
    for gi, ci, mig, uuid, name in found:
        suffix = f"_mig{gi}" + (f"_ci{ci}" if per_gi[gi] > 1 else "")
        m = _MIG_NAME.match(name)
        info = DeviceInfo(
            device=f"{gpu.name}{suffix}",
            vendor=VENDOR,
            uuid=uuid,
            model=m.group("model") if m else gpu.info.model,
            pci_bus_id=gpu.info.pci_bus_id,
            driver_version=gpu.info.driver_version,
            numa_node=gpu.info.numa_node,
            cpu_affinity=gpu.info.cpu_affinity,
            parent=gpu.name,
            profile=m.group("profile") if m else "",
        )
        child = Gpu(info, mig, gpu.index, parent=gpu, gpu_instance=gi, compute_instance=ci)
        for key in FIELDS:
            if key not in MIG_OWN:
                child.static[key] = f"GPU-wide: reported on {gpu.name}"
        # Until GPM samples are allocated for it (``gpm.discover``): NVML's only
        # per-instance load figures are GPM's.
        reason = "no GPM on this GPU: NVML has no other per-MIG-instance load figure"
        child.static["utilization"] = child.static["memory_bandwidth_utilization"] = reason
        # NVML: "On MIG-enabled GPUs, querying process utilization is not currently
        # supported"; the renderer uses the instance's own figure instead.
        child.static["process_utilization"] = (
            "NVML has no per-process utilization on a MIG-enabled GPU"
        )
        children.append(child)
    return children


def layout(nvml: Any, gpus: list[Gpu]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What MIG instances the GPUs have now, by UUID, for telling that a layout
    changed (the node agent made or destroyed instances). A GPU without MIG, or that
    NVML cannot answer for now, has none: a lost GPU is not a layout change."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for gpu in gpus:
        uuids: list[str] = []
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(gpu.handle)
            if current == nvml.NVML_DEVICE_MIG_ENABLE:
                for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
                    try:
                        handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
                    except nvml.NVMLError:
                        continue  # an empty slot
                    uuids.append(str(nvml.nvmlDeviceGetUUID(handle)))
        except nvml.NVMLError:
            uuids = [child.info.uuid for child in gpu.children]  # unknown: as discovered
        out.append((gpu.name, tuple(sorted(uuids))))
    return tuple(out)
