"""How the NVIDIA GPUs of a host are joined, as NVML sees it: NVLink peers, and the
PCIe path for every pair that NVLink does not join.

Why it is built this way:

* Links that end on an NVSwitch (HGX boards) connect the GPU to every other
  switch-attached GPU, as ``nvidia-smi topo -m`` shows them (NV18 between every pair
  of an 8-GPU H100 board).
* The PCIe path comes from ``nvmlDeviceGetTopologyCommonAncestor`` (what
  ``nvidia-smi topo -m`` prints): NVML knows the tree even where sysfs is hidden from
  the container. A pair NVML cannot place is left out, and the distance matrix
  (``exporter.topology``) then places it by NUMA node.
* Topology is best effort: no failure here may fail discovery or a poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exporter.backends.nvidia.device import Gpu, normalize_bus_id
from exporter.model import Link


def links(nvml: Any, gpus: Sequence[Gpu]) -> list[Link]:
    """NVLink peers, then the PCIe path of every pair without NVLink, in GPU order."""
    by_bus = {g.info.pci_bus_id: g for g in gpus}
    direct: dict[tuple[str, str], int] = {}
    switched: dict[str, int] = {}
    switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for gpu in gpus:
        for link in gpu.links:
            try:
                if not nvml.nvmlDeviceGetNvLinkState(gpu.handle, link):
                    continue
                remote = normalize_bus_id(
                    nvml.nvmlDeviceGetNvLinkRemotePciInfo(gpu.handle, link).busId
                )
            except nvml.NVMLError:
                continue  # topology is best effort: it must never fail discovery
            peer = by_bus.get(remote)
            if peer is not None and peer is not gpu:
                key = (gpu.name, peer.name)
                direct[key] = direct.get(key, 0) + 1
                continue
            try:
                kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(gpu.handle, link)
            except (nvml.NVMLError, AttributeError):
                continue
            if kind == switch_type:
                switched[gpu.name] = switched.get(gpu.name, 0) + 1
    nvlinks = dict(direct)
    for a, na in switched.items():
        for b, nb in switched.items():
            if a != b:
                nvlinks[(a, b)] = nvlinks.get((a, b), 0) + min(na, nb)
    order = {g.name: g.index for g in gpus}
    typed: dict[tuple[str, str], tuple[str, int]] = {
        pair: ("nvlink", n) for pair, n in nvlinks.items()
    }
    typed.update(_pcie_links(nvml, gpus, set(nvlinks)))
    return [
        Link(a, b, kind, n)
        for (a, b), (kind, n) in sorted(
            typed.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]])
        )
    ]


def _pcie_links(
    nvml: Any, gpus: Sequence[Gpu], nvlinked: set[tuple[str, str]]
) -> dict[tuple[str, str], tuple[str, int]]:
    """The PCIe path between every pair of GPUs that NVLink does not join."""
    levels = _topology_levels(nvml)
    out: dict[tuple[str, str], tuple[str, int]] = {}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            if (a.name, b.name) in nvlinked or (b.name, a.name) in nvlinked:
                continue
            try:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(a.handle, b.handle)
            except (nvml.NVMLError, AttributeError):
                continue  # an old driver, or a GPU gone: best effort, never fatal
            kind = levels.get(int(level))
            if kind is not None:
                out[(a.name, b.name)] = (kind, 1)
                out[(b.name, a.name)] = (kind, 1)
    return out


def _topology_levels(nvml: Any) -> dict[int, str]:
    """NVML_TOPOLOGY_* level -> the catalogue's link type. INTERNAL (two GPUs of one
    board), SINGLE and MULTIPLE (one or more PCIe switches) are all "behind a common
    switch"; NODE was called CPU in older bindings, and both name the same value."""
    names = (
        ("NVML_TOPOLOGY_INTERNAL", "pcie_switch"),
        ("NVML_TOPOLOGY_SINGLE", "pcie_switch"),
        ("NVML_TOPOLOGY_MULTIPLE", "pcie_switch"),
        ("NVML_TOPOLOGY_HOSTBRIDGE", "pcie_hostbridge"),
        ("NVML_TOPOLOGY_NODE", "pcie_numa"),
        ("NVML_TOPOLOGY_CPU", "pcie_numa"),
        ("NVML_TOPOLOGY_SYSTEM", "system"),
    )
    return {int(v): kind for n, kind in names if (v := getattr(nvml, n, None)) is not None}
