"""Which of our devices a Dynamic Resource Allocation device is.

The kubelet's PodResources API names a device that DRA gave a container by the
triplet its driver published in a ResourceSlice: driver, pool and device name
(``gpu.nvidia.com``, ``node-1``, ``gpu-0``). Our devices are named by vendor
libraries (UUIDs, PCI addresses). This module joins the two, in two steps, so that
the renderer's one matcher (UUID or PCI address) serves both the device plugins and
DRA:

1. **On the poll thread** (``exporter.backends.kubelet``), ``reference`` turns the
   triplet into the best identity the node offers, put in the ``PodAssignment``'s
   ``device_id``:

   * the device's ``uuid`` attribute in the node's ResourceSlices (NVIDIA GPUs and
     MIG devices; read only with ``--dra.resource-slices``), else the standard
     ``resource.kubernetes.io/pciBusID`` attribute, else the AMD driver's
     ``pciAddr`` (a whole GPU) or ``parentPciAddr`` and ``renderIndex`` (a compute
     partition: ``<pci>/<k>``, the k-th partition of that GPU);
   * without slices, the AMD driver's name ``gpu-<card>-<renderD minor>`` through the
     amdkfd topology in sysfs, which ties each render minor to its GPU's PCI address
     (the same facts the AMD backend's partitions come from);
   * else the DRA device name itself.

2. **At render time** (``exporter.render``), ``resolve`` maps what is left to a device
   by the drivers' documented naming: ``<pci>/<k>`` to the k-th child of the GPU at
   ``<pci>``; NVIDIA's ``gpu-<N>`` to ``nvidia<N>`` and ``gpu-<N>-mig-<profile>-
   <profile id>-<placement start>`` to the one MIG instance of ``nvidia<N>`` with that
   profile. The NVIDIA driver's N is the GPU's minor number (``/dev/nvidiaN``), ours
   NVML's index: they agree on usual hosts but need not, and a MIG profile that
   several instances of one GPU share names none of them, so the exact answer needs
   the ResourceSlices (docs/exporter/pods.md).

The drivers' naming, as their sources have it (NVIDIA/k8s-dra-driver-gpu
``cmd/gpu-kubelet-plugin``, ROCm/k8s-gpu-dra-driver ``cmd/gpu-kubeletplugin``): NVIDIA
names a GPU ``gpu-<minor>`` and a MIG device ``gpu-<parent minor>-mig-<profile, lower
case, dots removed>-<GI profile id>-<placement start>``, each with a ``uuid``
attribute; AMD names a GPU or partition ``gpu-<card index>-<render minor>``, with
``type`` ``amdgpu`` (attribute ``pciAddr``) or ``amdgpu-partition`` (``parentPciAddr``,
``renderIndex``), and no UUID.

Everything here is total on hostile input: slices, names and sysfs files of any shape
give an answer (possibly "no device"), never an exception, and every walk is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any

from accel_common.names import DRA_AMD_GPU, DRA_NVIDIA_GPU, DRA_PCI_BUS_ID_ATTRIBUTE
from accel_common.readfile import FieldError, parse_int, read_text
from exporter.model import DeviceInfo, PodAssignment

# The API server's own bounds (resource/v1): devices per slice, attributes and
# capacities per device; names are DNS labels or subdomains. Slices per node: no
# limit in the API, a generous one here (a node has one pool per driver, a pool a few
# slices).
MAX_SLICES = 1024
MAX_SLICE_DEVICES = 128
MAX_ATTRIBUTES = 32
MAX_NAME = 253
MAX_POOL = 1024
MAX_VALUE = 1024
# KFD topology nodes: one per CPU socket and one per GPU partition (8 per MI300X).
MAX_KFD_NODES = 1024

AMD_GPU_TYPE = "amdgpu"
AMD_PARTITION_TYPE = "amdgpu-partition"

_NVIDIA_GPU = re.compile(r"^gpu-(\d{1,6})$")
_NVIDIA_MIG = re.compile(r"^gpu-(\d{1,6})-mig-(.+)-(\d{1,6})-(\d{1,6})$")
_AMD = re.compile(r"^gpu-(\d{1,6})-(\d{1,6})$")
_PCI = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_PARTITION_REF = re.compile(r"^(.{1,64})/(\d{1,4})$")


@dataclass(frozen=True)
class DraDevice:
    """One device as DRA names it: ``<driver>/<pool>/<device>``."""

    driver: str
    pool: str
    device: str


def pci_address(value: Any) -> str:
    """A PCI address in the form slices and sysfs write it (``0000:c1:00.0``), from
    any case and domain width; "" for anything else."""
    if not isinstance(value, str):
        return ""
    m = _PCI.match(value.strip())
    if m is None:
        return ""
    domain, bus, dev, fn = m.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}.{fn}"


def mig_profile_key(profile: str) -> str:
    """A MIG profile as the NVIDIA DRA driver writes it in a device name: lower
    case, dots removed, anything outside ``[a-z0-9-.]`` a dash, dashes trimmed
    (``1g.10gb+me`` -> ``1g10gb-me``)."""
    name = re.sub(r"[^a-z0-9.-]", "-", profile.replace(".", "").lower())
    return name.strip("-")


# -- ResourceSlices --------------------------------------------------------------


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any, limit: int) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value[:limit] if isinstance(item, Mapping)]


def _name(value: Any, limit: int = MAX_NAME) -> str:
    return value if isinstance(value, str) and 0 < len(value) <= limit else ""


def _attribute(attrs: Mapping[str, Any], driver: str, name: str) -> Any:
    """A device attribute's value (``string``, ``int``, ``bool`` or ``version``); an
    unqualified name is in the driver's own domain, so either spelling is found."""
    for key in (name, f"{driver}/{name}"):
        value = _dict(attrs.get(key))
        for kind in ("string", "int", "bool", "version"):
            v = value.get(kind)
            if v is not None and not isinstance(v, Mapping | list):
                return v
    return None


def _string(attrs: Mapping[str, Any], driver: str, name: str) -> str:
    v = _attribute(attrs, driver, name)
    return v if isinstance(v, str) and 0 < len(v) <= MAX_VALUE else ""


def _int(attrs: Mapping[str, Any], driver: str, name: str) -> int | None:
    v = _attribute(attrs, driver, name)
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 else None


def slice_references(slices: Iterable[Any], node: str) -> dict[DraDevice, str]:
    """The ``device_id`` each DRA device of ``node``'s ResourceSlices stands for: a
    UUID, a PCI address, or ``<pci>/<k>`` for the k-th compute partition (by render
    minor, the AMD driver's and the kernel's order) of the GPU at ``<pci>``. A pool
    published in several generations counts only in its newest. Devices without any
    of these attributes are left out (``reference`` then falls back to names)."""
    kept: list[tuple[str, str, int, Mapping[str, Any]]] = []
    newest: dict[tuple[str, str], int] = {}
    for obj in _items(list(islice(slices, MAX_SLICES)), MAX_SLICES):
        spec = _dict(obj.get("spec"))
        pool = _dict(spec.get("pool"))
        driver, pool_name = _name(spec.get("driver")), _name(pool.get("name"), MAX_POOL)
        if not driver or not pool_name or spec.get("nodeName") != node:
            continue
        gen = pool.get("generation")
        gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
        newest[(driver, pool_name)] = max(gen, newest.get((driver, pool_name), gen))
        kept.append((driver, pool_name, gen, spec))
    out: dict[DraDevice, str] = {}
    partitions: dict[tuple[str, str, str], list[tuple[int, DraDevice]]] = {}
    for driver, pool_name, gen, spec in kept:
        if gen != newest[(driver, pool_name)]:
            continue
        for dev in _items(spec.get("devices"), MAX_SLICE_DEVICES):
            name = _name(dev.get("name"))
            if not name:
                continue
            raw = dev.get("attributes")
            attrs = dict(islice(raw.items(), MAX_ATTRIBUTES)) if isinstance(raw, Mapping) else {}
            ref = DraDevice(driver, pool_name, name)
            uuid = _string(attrs, driver, "uuid")
            kind = _string(attrs, driver, "type")
            if uuid:
                out[ref] = uuid
            elif kind == AMD_PARTITION_TYPE:
                parent = pci_address(_string(attrs, driver, "parentPciAddr")) or pci_address(
                    _string(attrs, driver, "pciAddr")
                )
                render = _int(attrs, driver, "renderIndex")
                if parent and render is not None:
                    partitions.setdefault((driver, pool_name, parent), []).append((render, ref))
            else:
                pci = pci_address(_string(attrs, "", DRA_PCI_BUS_ID_ATTRIBUTE)) or pci_address(
                    _string(attrs, driver, "pciAddr")
                )
                if pci:
                    out[ref] = pci
    for (_, _, parent), members in partitions.items():
        for k, (_, ref) in enumerate(sorted(members, key=lambda m: (m[0], m[1].device))):
            out[ref] = f"{parent}/{k}"
    return out


# -- amdkfd topology -------------------------------------------------------------


def kfd_references(sysfs: Path) -> dict[int, str]:
    """Render minor -> ``device_id`` from the amdkfd topology: the GPU's PCI address
    when it has one KFD node, ``<pci>/<k>`` for the k-th (by render minor) of a
    partitioned GPU's nodes. An unreadable node is skipped."""
    root = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes"
    try:
        nodes = sorted(root.iterdir())[:MAX_KFD_NODES]
    except OSError:
        return {}
    per_gpu: dict[str, list[int]] = {}
    for node in nodes:
        props = _kfd_properties(node / "properties")
        minor, location = props.get("drm_render_minor"), props.get("location_id")
        if not props.get("gpu_id") or minor is None or location is None:
            continue
        pci = (
            f"{props.get('domain', 0):04x}:{(location >> 8) & 0xFF:02x}:"
            f"{(location >> 3) & 0x1F:02x}.{location & 0x7}"
        )
        per_gpu.setdefault(pci, []).append(minor)
    out: dict[int, str] = {}
    for pci, minors in per_gpu.items():
        ordered = sorted(set(minors))
        for k, minor in enumerate(ordered):
            out[minor] = pci if len(ordered) == 1 else f"{pci}/{k}"
    return out


def _kfd_properties(path: Path) -> dict[str, int]:
    try:
        text = read_text(path)
    except FieldError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = parse_int(parts[1])
            except FieldError:
                continue
    return out


# -- the two steps ---------------------------------------------------------------


def reference(
    device: DraDevice,
    slices: Mapping[DraDevice, str],
    kfd: Mapping[int, str] | None = None,
) -> str:
    """Step 1: the ``device_id`` of an allocated DRA device (module docstring)."""
    known = slices.get(device)
    if known:
        return known
    if device.driver == DRA_AMD_GPU and kfd:
        m = _AMD.match(device.device)
        if m is not None:
            return kfd.get(int(m.group(2)), device.device)
    return device.device


def _partition(devices: Sequence[DeviceInfo], ref: str) -> DeviceInfo | None:
    m = _PARTITION_REF.match(ref)
    pci = pci_address(m.group(1)) if m else ""
    if m is None or not pci:
        return None
    whole = next(
        (d for d in devices if not d.parent and pci_address(d.pci_bus_id) == pci),
        None,
    )
    if whole is None:
        return None
    children = [d for d in devices if d.parent == whole.device]
    k = int(m.group(2))
    return children[k] if k < len(children) else None


def _by_name(devices: Sequence[DeviceInfo], driver: str, name: str) -> DeviceInfo | None:
    if driver != DRA_NVIDIA_GPU:
        return None
    m = _NVIDIA_GPU.match(name)
    if m is not None:
        want = f"nvidia{int(m.group(1))}"
        return next((d for d in devices if d.device == want and not d.parent), None)
    m = _NVIDIA_MIG.match(name)
    if m is None:
        return None
    parent, profile = f"nvidia{int(m.group(1))}", m.group(2)
    same = [d for d in devices if d.parent == parent and mig_profile_key(d.profile) == profile]
    # Two instances of one profile on one GPU differ only by placement, which our
    # devices do not carry: naming either would be a guess.
    return same[0] if len(same) == 1 else None


def resolve(devices: Sequence[DeviceInfo], pods: Sequence[PodAssignment]) -> list[PodAssignment]:
    """Step 2: DRA assignments whose ``device_id`` is a partition reference or a
    driver's device name get the matching device's UUID; everything else (device
    plugin IDs, UUIDs and PCI addresses from step 1, names that match nothing) is
    returned as it is, for the renderer's matcher to take or drop."""
    out: list[PodAssignment] = []
    for p in pods:
        if p.claim:
            found = _partition(devices, p.device_id) or _by_name(devices, p.resource, p.device_id)
            if found is not None:
                p = replace(p, device_id=found.uuid)
        out.append(p)
    return out
