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
* sysfs has no per-partition utilization or used memory (those are in the binary
  ``gpu_metrics`` table per XCP, or in AMD SMI); what the KFD node does say per
  partition is the size of the memory it allocates from, its memory partition's,
  which in CPX/NPS4 two compute partitions share. GPU-wide figures stay on the parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporter.kfd import node_pci_address, nodes_dir


@dataclass(frozen=True)
class Partition:
    """One compute partition of a GPU, as amdkfd lists it."""

    index: int
    render_minor: int
    # Bytes of the memory partition this compute partition allocates from; None
    # when the KFD node has no memory bank.
    memory_bytes: float | None


def read_mode(device_dir: Path, which: str) -> str:
    """``current_compute_partition`` or ``current_memory_partition`` (``which`` is
    ``compute`` or ``memory``) as the driver writes it, upper case; empty when the
    GPU has no such file (not partitionable) or it cannot be read."""
    try:
        return (device_dir / f"current_{which}_partition").read_text().strip().upper()
    except OSError:
        return ""


def profile(device_dir: Path) -> str:
    """The ``profile`` of a partition of this GPU: ``CPX/NPS4``, or ``CPX`` alone."""
    compute, memory = read_mode(device_dir, "compute"), read_mode(device_dir, "memory")
    return f"{compute}/{memory}" if compute and memory else compute


def _properties(path: Path) -> dict[str, int]:
    """A KFD ``name value`` file; lines that are not ``name int`` are skipped."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1], 0)
            except ValueError:
                continue
    return out


def partitions(sysfs: Path, pci_bus_id: str) -> list[Partition]:
    """The compute partitions of the GPU at ``pci_bus_id``, in the driver's order;
    empty when the GPU is whole (one KFD node) or the KFD topology is absent."""
    try:
        node_dirs = [p for p in nodes_dir(sysfs).iterdir() if p.name.isdigit()]
    except OSError:
        return []
    found: list[tuple[int, float | None]] = []
    for node in node_dirs:
        props = _properties(node / "properties")
        if not props.get("gpu_id") or node_pci_address(props) != pci_bus_id:
            continue
        bank = _properties(node / "mem_banks" / "0" / "properties").get("size_in_bytes")
        found.append((props.get("drm_render_minor", 0), float(bank) if bank else None))
    if len(found) < 2:
        return []
    return [
        Partition(index, minor, memory)
        for index, (minor, memory) in enumerate(sorted(found, key=lambda f: f[0]))
    ]
