"""One vendor-neutral distance between two devices of a host, computed here only.

A scheduler placing a 4-device job wants "how far apart are these two devices" as
one number whatever the vendor, so NVLink, xGMI, Xe Link, Gaudi's RoCE ports,
Ascend's HCCS and TPU ICI, and the PCIe tree, map onto one scale (lower is closer):

====  ===================  ====================================================
  0   same device          the diagonal
 10   nvlink/xgmi/xelink   a direct device interconnect, or through NVSwitch
 10   roce/hccs/ici        the same for Gaudi, Ascend and TPU
 20   pcie_switch          behind the same PCIe switch (nvidia-smi PIX/PXB)
 30   pcie_hostbridge      under the same host bridge (PHB)
 40   pcie_numa            same NUMA node, different host bridges (NODE)
 50   system               across NUMA nodes / sockets (SYS)
====  ===================  ====================================================

Backends report ``Link``\\ s of these types; a pair with several links takes the
closest. A pair no backend linked (two vendors in one host, or a backend without
topology) is placed by NUMA node: 40 on the same node, 50 otherwise or when a node
is unknown. The matrix covers physical accelerators (not CPU sockets, not
partitions, which share their parent's place), is symmetric, and is 0 on the
diagonal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from exporter.model import DeviceInfo, Link

DISTANCE: dict[str, float] = {
    "nvlink": 10,
    "xgmi": 10,
    "xelink": 10,
    "roce": 10,
    "hccs": 10,
    "ici": 10,
    "pcie_switch": 20,
    "pcie_hostbridge": 30,
    "pcie_numa": 40,
    "system": 50,
}
SAME_NUMA = DISTANCE["pcie_numa"]
ACROSS = DISTANCE["system"]


def placed(devices: Iterable[DeviceInfo]) -> list[DeviceInfo]:
    """The devices the matrix covers: physical accelerators."""
    return [d for d in devices if d.vendor != "cpu" and not d.parent]


def distances(devices: Sequence[DeviceInfo], links: Sequence[Link]) -> list[tuple[str, str, float]]:
    """Every ordered pair (device, peer, distance), diagonal included."""
    devs = placed(devices)
    names = {d.device for d in devs}
    best: dict[tuple[str, str], float] = {}
    for link in links:
        if link.device not in names or link.peer_device not in names:
            continue
        dist = DISTANCE.get(link.link_type)
        if dist is None:
            continue
        for pair in ((link.device, link.peer_device), (link.peer_device, link.device)):
            if dist < best.get(pair, float("inf")):
                best[pair] = dist
    out: list[tuple[str, str, float]] = []
    for a in devs:
        for b in devs:
            if a.device == b.device:
                out.append((a.device, b.device, 0.0))
                continue
            dist = best.get((a.device, b.device))
            if dist is None:
                same = a.numa_node != "" and a.numa_node == b.numa_node
                dist = SAME_NUMA if same else ACROSS
            out.append((a.device, b.device, float(dist)))
    return out
