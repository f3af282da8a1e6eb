"""Where a PCI device sits in the host, read from sysfs: its CPU affinity and the PCIe
path between two devices.

Why it is built this way:

* Every backend that knows a device's PCI address can place it the same way, so the
  PCIe part of ``exporter.topology``'s distance scale is computed once, here, rather
  than once per vendor with three slightly different answers.
* The kernel already resolves the PCIe tree: ``bus/pci/devices/<addr>`` is a link into
  ``devices/pci<domain>:<bus>/<root port>/<switch ports>.../<addr>``, so the common
  prefix of two such paths is their closest common ancestor, and no config space has
  to be read (which would need root).
* Everything is best effort: a missing file or link leaves the answer empty and the
  pair is then placed by NUMA node, never guessed closer than it is.
* The device's own attributes (``numa_node``, ``local_cpulist``) are read once, at
  discovery, through the bounded reader (``accel_common.readfile``). One that is there
  but unusable (not UTF-8, too big, not the kernel's format) leaves its label empty
  with one warning; it never costs the device its identity, since every vendor backend
  names its devices with what it reads here.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

from accel_common.readfile import FieldError, read_text
from exporter.model import DeviceInfo, Link

log = logging.getLogger("accel_exporter.pcitopo")

# The kernel's CPU list format (``0-31,64-95``); anything else is not a CPU list.
_CPU_LIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
# A NUMA node number as the kernel writes it; -1 is "the platform does not say".
_NUMA_NODE = re.compile(r"^-?\d{1,5}$")


def _pci_dir(sysfs: Path, pci: str) -> Path:
    return sysfs / "bus" / "pci" / "devices" / pci


def attribute(path: Path, form: re.Pattern[str], what: str) -> str:
    """A one-line identity attribute of a device, stripped, when it has the kernel's
    ``form``; empty when the file is absent, and empty with one warning (the file and
    why) when it is there but unusable."""
    try:
        text = read_text(path).strip()
    except FieldError as e:
        if e.absent:
            return ""
        reason = e.reason
    else:
        if not text or form.match(text):
            return text
        reason = f"not a {what}: {text[:40]!r}"
    log.warning("%s: %s; left empty", path, reason)
    return ""


def cpu_affinity(sysfs: Path, pci: str) -> str:
    """The CPUs local to the device (``local_cpulist``, e.g. ``0-31,64-95``), so a
    job can be pinned next to its accelerator; empty when sysfs does not say."""
    if not pci:
        return ""
    return attribute(_pci_dir(sysfs, pci) / "local_cpulist", _CPU_LIST, "CPU list")


def numa_node_at(path: Path) -> str:
    """A ``numa_node`` file's node, empty when the platform does not say."""
    node = attribute(path, _NUMA_NODE, "NUMA node")
    # The kernel writes -1 when the platform does not say (single-socket hosts, VMs).
    return "" if node.startswith("-") else node


def numa_node(sysfs: Path, pci: str) -> str:
    """The NUMA node of the PCI device at ``pci``, empty when unknown."""
    if not pci:
        return ""
    return numa_node_at(_pci_dir(sysfs, pci) / "numa_node")


def pci_path(sysfs: Path, pci: str) -> tuple[str, ...]:
    """The device's place in the PCIe tree, from the host bridge down:
    ``("pci0000:00", "0000:00:01.1", "0000:01:00.0", ...)``; empty when unknown."""
    if not pci:
        return ()
    link = _pci_dir(sysfs, pci)
    if not link.exists():
        return ()
    real = Path(os.path.realpath(link))
    parts = real.parts
    for i, part in enumerate(parts):
        if part.startswith("pci") and ":" in part:
            return tuple(parts[i:])
    return ()


def pcie_link_type(a: Sequence[str], b: Sequence[str], numa_a: str, numa_b: str) -> str:
    """The catalogue's link type for two devices, from their ``pci_path``\\ s.

    Below the same root port means behind a common PCIe switch (nvidia-smi's PIX/PXB);
    the same ``pciDDDD:BB`` host bridge but different root ports is PHB; anything else
    is placed by NUMA node, and an unknown path or node is never placed closer than
    across sockets."""
    if a and b:
        common = 0
        for x, y in zip(a[:-1], b[:-1], strict=False):
            if x != y:
                break
            common += 1
        if common >= 2:
            return "pcie_switch"
        if common == 1:
            return "pcie_hostbridge"
    if numa_a and numa_a == numa_b:
        return "pcie_numa"
    return "system"


def pcie_links(sysfs: Path, devices: Sequence[DeviceInfo]) -> list[Link]:
    """One PCIe link for every ordered pair of whole devices whose place in the PCI
    tree sysfs shows, in the order of ``devices``. A device sysfs does not show (a
    container without ``/sys/bus/pci``) gets no link: the link series says what was
    read, and the distance matrix places such a pair by NUMA node anyway."""
    paths = {
        d.device: pci_path(sysfs, d.pci_bus_id) for d in devices if not d.parent and d.pci_bus_id
    }
    whole = [d for d in devices if paths.get(d.device)]
    out: list[Link] = []
    for a in whole:
        for b in whole:
            if a.device == b.device:
                continue
            kind = pcie_link_type(paths[a.device], paths[b.device], a.numa_node, b.numa_node)
            out.append(Link(a.device, b.device, kind))
    return out
