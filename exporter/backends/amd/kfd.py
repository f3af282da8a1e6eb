"""AMD GPU links from the amdkfd driver's topology in sysfs, without ROCm.

Why it is built this way:

* ``class/kfd/kfd/topology/nodes/<n>/`` is what the ROCm runtime itself reads (libhsakmt,
  ``rocm-smi --showtopo``), and the amdgpu driver publishes it whether or not any ROCm
  library is installed, so the sysfs path of the AMD backend gets xGMI topology too.
* Each node's ``properties`` file is ``name value`` lines. A GPU node has a non-zero
  ``gpu_id`` and names its PCI function by ``domain`` and ``location_id``
  (``bus << 8 | device << 3 | function``); CPU nodes have ``gpu_id`` 0. That PCI
  address is how a node is matched to our ``amdN`` devices, which are named in PCI
  order by the backend, whatever order the driver numbered its nodes in; the
  partitions module matches its compute partitions the same way.
* ``io_links/<m>/properties`` has ``type`` (``IOLINK_TYPE_XGMI`` = 11,
  ``IOLINK_TYPE_PCIEXPRESS`` = 2), ``node_from``, ``node_to`` and ``weight``. Only
  xGMI links between two GPUs are device links; a PCIe link in KFD joins a GPU to its
  CPU node and says nothing about the GPU-to-GPU path, which ``exporter.pcitopo``
  reads from the PCI tree instead. A peer two hops away in the hive (its ``weight``
  is a multiple of the one-hop weight) is still reached over xGMI, so it is an xgmi
  link too.
* A partitioned GPU (MI300X in CPX mode) has one KFD node per partition, all on one
  PCI function: links between them are inside the device and are not reported, and
  links between two devices are reported once per device pair.
* Files are read through the bounded reader (``accel_common.readfile``). A
  ``properties`` file that is unusable (not UTF-8, over the cap, not a file) reads as
  empty, so that node is not matched to a GPU, with one warning through the
  backend's ``MissingFields``; a value no kernel writes (400 digits) drops that line.
  Neither ever takes the backend or a GPU's identity down.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from accel_common.readfile import FieldError, parse_int, read_text
from exporter.backends.base import MissingFields
from exporter.model import DeviceInfo, Link

IOLINK_TYPE_PCIEXPRESS = 2
IOLINK_TYPE_XGMI = 11


def properties(path: Path, missing: MissingFields | None = None) -> dict[str, int]:
    """A KFD ``properties`` file as name -> integer; lines that are not ``name int``
    (a newer kernel's additions) are skipped rather than failing the whole file. An
    unusable file is empty, said once through ``missing`` when given."""
    try:
        text = read_text(path)
    except FieldError as e:
        if missing is not None and not e.absent:
            missing.warn_once(("kfd", str(e)), "amd: KFD topology: %s; node skipped", e)
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            out[parts[0]] = parse_int(parts[1], 0)
        except FieldError:
            continue
    return out


def node_pci_address(props: dict[str, int]) -> str:
    """The node's PCI function as the kernel writes it (``0000:c1:00.0``); empty for
    a CPU node or a node without a location."""
    location = props.get("location_id")
    if not location:
        return ""
    domain = props.get("domain", 0)
    bus, devfn = location >> 8, location & 0xFF
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"


def nodes_dir(sysfs: Path) -> Path:
    return sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes"


def xgmi_links(
    sysfs: Path, devices: Sequence[DeviceInfo], missing: MissingFields | None = None
) -> list[Link]:
    """xGMI links between the given whole devices, both directions, in device order;
    empty when the KFD topology is absent (amdgpu without KFD, a container without
    that part of sysfs). Unusable files are said once through ``missing``."""
    by_pci = {d.pci_bus_id: d.device for d in devices if d.pci_bus_id and not d.parent}
    root = nodes_dir(sysfs)
    try:
        node_dirs = [p for p in root.iterdir() if p.name.isdigit()]
    except OSError:
        return []
    device_of: dict[int, str] = {}
    for node in node_dirs:
        try:
            text = read_text(node / "gpu_id")
            gpu_id = parse_int(text) if text.strip() else 0
        except FieldError:
            continue
        if gpu_id == 0:
            continue  # a CPU node
        name = by_pci.get(node_pci_address(properties(node / "properties", missing)))
        if name is not None:
            device_of[int(node.name)] = name
    pairs: set[tuple[str, str]] = set()
    for node in node_dirs:
        for link in sorted((node / "io_links").glob("*/properties")):
            props = properties(link, missing)
            if props.get("type") != IOLINK_TYPE_XGMI:
                continue
            a = device_of.get(props.get("node_from", int(node.name)))
            b = device_of.get(props.get("node_to", -1))
            if a is None or b is None or a == b:
                continue
            pairs.update(((a, b), (b, a)))
    order = {d.device: i for i, d in enumerate(devices)}
    return [Link(a, b, "xgmi") for a, b in sorted(pairs, key=lambda p: (order[p[0]], order[p[1]]))]
