"""AMD compute and memory partitions (MI300-series SPX/DPX/QPX/CPX, NPS1/NPS4) from
sysfs, without ROCm.

Why it is built this way:

* The partition *mode* is on the physical GPU's PCI function:
  ``class/drm/cardN/device/current_compute_partition`` (``SPX``, ``DPX``, ``TPX``,
  ``QPX``, ``CPX``) and ``current_memory_partition`` (``NPS1``, ``NPS2``, ``NPS4``,
  ``NPS8``). A GPU without these files is not partitionable.
* The partitions themselves are not PCI functions. In a mode with several compute
  partitions amdgpu keeps partition 0 on the GPU's own card and registers one more
  DRM card per further partition under an ``amdgpu_xcp.K`` platform device (the
  amdxcp helper), so those cards have no PCI ``vendor`` and are not GPUs of their own
  to the AMD backend. The platform device's number says nothing reliable about which
  GPU it belongs to, so the partitions are found where the driver itself ties them
  to their GPU: the amdkfd topology has one node per partition, each with the
  physical GPU's ``domain``/``location_id`` and the partition's own
  ``drm_render_minor``. Sorting a GPU's nodes by render minor gives the partitions
  in the driver's order (partition 0 is the GPU's own card, registered first).
* Each partition becomes a child device ``amdN_pK`` of the physical GPU ``amdN``,
  which keeps its name whatever the mode, so its series do not move when an operator
  switches from SPX to CPX. The ``profile`` label is the compute mode, with the
  memory mode after a slash when the driver reports one (``CPX/NPS4``).
* A partition's utilization comes from the physical GPU's binary ``gpu_metrics``
  table, revision 1.6 and newer: ``xcp_stats[K].gfx_busy_inst`` holds the busy
  percent of each XCD of partition K (the driver's order, the same as the KFD
  nodes'), and the partition's figure is their mean. Older tables have no
  per-partition figure, and the field then says so. No sysfs file gives a
  partition's used memory; what the KFD node does say per partition is the size of
  the memory it allocates from, its memory partition's, which in CPX/NPS4 two
  compute partitions share. GPU-wide figures stay on the parent, and each of a
  partition's other fields carries why it has none.
* A mode file that is there but unusable (not UTF-8, over the bounded reader's cap)
  reads as "not partitioned", with one warning: the GPU stays one whole device rather
  than vanishing with the backend.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from accel_common.readfile import BLOB_LIMIT, FieldError, read_bytes, read_text
from exporter.backends.amd.device import FIELDS, VENDOR, Gpu
from exporter.backends.amd.gpu_metrics import GpuMetricsError, parse_gpu_metrics
from exporter.backends.amd.kfd import node_pci_address, nodes_dir, properties
from exporter.backends.base import MissingFields
from exporter.model import DeviceInfo, DeviceLostError, Reading

log = logging.getLogger("accel_exporter.amd")


@dataclass(frozen=True)
class Partition:
    """One compute partition of a GPU, as amdkfd lists it."""

    index: int
    render_minor: int
    # Bytes of the memory partition this compute partition allocates from; None
    # when the KFD node has no memory bank.
    memory_bytes: float | None


def read_mode(device_dir: Path, which: str, missing: MissingFields | None = None) -> str:
    """``current_compute_partition`` or ``current_memory_partition`` (``which`` is
    ``compute`` or ``memory``) as the driver writes it, upper case; empty when the
    GPU has no such file (not partitionable) or it cannot be read, which is said once
    through ``missing`` when given."""
    try:
        text = read_text(device_dir / f"current_{which}_partition").strip().upper()
    except FieldError as e:
        if missing is not None and not e.absent:
            missing.warn_once(
                ("partition", str(e)), "amd: %s; the GPU is taken as not partitioned", e
            )
        return ""
    # A mode is a short word (SPX, NPS4); anything else is not one the driver wrote.
    if text and (len(text) > 16 or not text.isalnum()):
        if missing is not None:
            missing.warn_once(
                ("partition", str(device_dir), which),
                "amd: %s/current_%s_partition: not a partition mode: %r",
                device_dir,
                which,
                text[:40],
            )
        return ""
    return text


def profile(device_dir: Path, missing: MissingFields | None = None) -> str:
    """The ``profile`` of a partition of this GPU: ``CPX/NPS4``, or ``CPX`` alone."""
    compute = read_mode(device_dir, "compute", missing)
    memory = read_mode(device_dir, "memory", missing)
    return f"{compute}/{memory}" if compute and memory else compute


def partitions(
    sysfs: Path, pci_bus_id: str, missing: MissingFields | None = None
) -> list[Partition]:
    """The compute partitions of the GPU at ``pci_bus_id``, in the driver's order;
    empty when the GPU is whole (one KFD node) or the KFD topology is absent."""
    try:
        node_dirs = [p for p in nodes_dir(sysfs).iterdir() if p.name.isdigit()]
    except OSError:
        return []
    found: list[tuple[int, float | None]] = []
    for node in node_dirs:
        props = properties(node / "properties", missing)
        if not props.get("gpu_id") or node_pci_address(props) != pci_bus_id:
            continue
        bank = properties(node / "mem_banks" / "0" / "properties", missing).get("size_in_bytes")
        found.append((props.get("drm_render_minor", 0), float(bank) if bank else None))
    if len(found) < 2:
        return []
    return [
        Partition(index, minor, memory)
        for index, (minor, memory) in enumerate(sorted(found, key=lambda f: f[0]))
    ]


def children(
    sysfs: Path, parent: DeviceInfo, device_dir: Path, missing: MissingFields | None = None
) -> list[Gpu]:
    """The compute partitions of a GPU in DPX/QPX/CPX mode as child devices
    ``amdN_pK``; none for a whole GPU."""
    if not parent.pci_bus_id or not read_mode(device_dir, "compute", missing):
        return []
    parts = partitions(sysfs, parent.pci_bus_id, missing)
    mode = profile(device_dir, missing)
    out: list[Gpu] = []
    for part in parts:
        info = DeviceInfo(
            device=f"{parent.device}_p{part.index}",
            vendor=VENDOR,
            # The partitions share the ASIC serial; the index tells them apart.
            uuid=f"{parent.uuid}-p{part.index}",
            model=parent.model,
            pci_bus_id=parent.pci_bus_id,
            driver_version=parent.driver_version,
            numa_node=parent.numa_node,
            cpu_affinity=parent.cpu_affinity,
            parent=parent.device,
            profile=mode,
        )
        child = Gpu(info, device_dir=device_dir, card=f"renderD{part.render_minor}")
        child.partition_memory = part.memory_bytes
        child.partition_index = part.index
        for key in FIELDS:
            child.static[key] = f"GPU-wide: reported on {parent.device}"
        for key in ("memory_used_bytes", "memory_bandwidth_utilization"):
            child.static[key] = "amdgpu sysfs has no per-partition figure"
        child.static["utilization"] = (
            "no per-partition figure: gpu_metrics before v1.6 has no xcp_stats, or it "
            "reports none for this partition"
        )
        if part.memory_bytes is not None:
            del child.static["memory_total_bytes"]
        out.append(child)
    if parts:
        log.info("%s: %s, %d partitions", parent.device, mode, len(parts))
    return out


def read(gpu: Gpu) -> Reading:
    """A partition is up while its GPU is; it reports its memory partition's size and,
    where the GPU's gpu_metrics table has per-XCP figures, its utilization."""
    if gpu.device_dir is None or not gpu.device_dir.is_dir():
        raise DeviceLostError(f"{gpu.info.parent} ({gpu.info.pci_bus_id}) left sysfs")
    utilization = None
    if gpu.partition_index is not None:
        try:
            metrics = parse_gpu_metrics(read_bytes(gpu.device_dir / "gpu_metrics", BLOB_LIMIT))
            utilization = metrics.partition_utilization(gpu.partition_index)
        except (FieldError, GpuMetricsError):
            utilization = None  # the parent's read says why its table is unusable
    if utilization is None:
        return Reading(memory_total_bytes=gpu.partition_memory, telemetry_source="none")
    return Reading(
        utilization=utilization,
        memory_total_bytes=gpu.partition_memory,
        telemetry_source="gpu_metrics xcp_stats",
    )
