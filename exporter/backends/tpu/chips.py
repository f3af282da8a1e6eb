"""TPU chips as the kernel shows them: PCI functions of Google's vendor id in sysfs.

Why it is built this way:

* A TPU VM shows every chip as a PCI device of vendor ``0x1ae0`` (Google) under
  ``bus/pci/devices``, whether or not a framework holds it, so sysfs is what tells
  "no TPU here" from "TPUs, but no workload" (when libtpu's runtime metrics service,
  which lives inside the workload's process, is not there). The device id names the
  generation; the ids are the ones Google's ``tpu-info`` uses (``tpu_info/device.py``:
  v2 and v3 share ``0x0027`` and differ by subsystem device ``0x004e``/``0x004f``;
  v4 ``0x005e``, v5p ``0x0062``, v5e ``0x0063``, v6e ``0x006f``, 7x ``0x0076``).
  Google's other PCI devices (the gVNIC network card, ``0x0042``) are not chips.
* Functions of one PCI slot (``domain:bus:device``) are one chip, as ``tpu-info``
  groups them: a chip with two TensorCores per device may show one function per
  core. The chip's ``pci_bus_id`` is its lowest function.
* The device node: v2, v3 and v4 chips are ``/dev/accelN``, whose class device is
  ``<function>/accel/accelN`` (``class/accel/accelN`` links there; gVisor's sysfs for
  TPU sandboxes, pkg/sentry/fsimpl/sys/pci.go, mirrors exactly this); v5e, v5p, v6e
  and 7x are bound to vfio-pci and are ``/dev/vfio/G`` for the function's IOMMU
  group ``G`` (``iommu_group`` links to ``kernel/iommu_groups/G``). Chips are
  ordered by that node's number, as ``tpu-info`` orders them, so ``tpu0`` is the
  chip a framework and ``tpu-info`` call chip 0; a chip whose node sysfs does not
  show sorts after the others, by PCI address.
* The accel class device carries the Linux gasket framework's attributes (the
  files gVisor passes through for it are gasket's: ``status``, ``reset_count``,
  ``driver_version``...): ``status`` is ``ALIVE``, ``LAMED``, ``DEAD`` or
  ``DRIVER_EXITING`` (gasket_core.c's status table) and ``reset_count`` counts the
  driver's resets of the chip. vfio chips have no driver of their own, so none.
* PCIe AER counters (``aer_dev_fatal``, ``aer_dev_nonfatal``, ``aer_dev_correctable``,
  Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats) are the one fault
  source the kernel gives for any PCI device; the ``TOTAL_ERR_*`` line of each is
  read.
* Every file goes through the bounded reader; a file that is absent or unusable
  leaves its field empty, never costs a chip its identity.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from accel_common.readfile import FieldError, read_text

GOOGLE_PCI_VENDOR = "0x1ae0"


@dataclass(frozen=True)
class Generation:
    """One TPU generation: its name, how many runtime devices (TensorCores that
    libtpu reports HBM for) one chip holds, and its device node's kind."""

    model: str
    devices_per_chip: int
    node: str  # "accel" or "vfio"


V2 = Generation("TPU v2", 2, "accel")
V3 = Generation("TPU v3", 2, "accel")
GENERATIONS: dict[str, Generation] = {
    "0x005e": Generation("TPU v4", 1, "accel"),
    "0x0062": Generation("TPU v5p", 1, "vfio"),
    "0x0063": Generation("TPU v5e", 1, "vfio"),
    "0x006f": Generation("TPU v6e", 1, "vfio"),
    "0x0076": Generation("TPU7x", 2, "vfio"),
}
# v2 and v3 share a device id; the subsystem device tells them apart.
_SHARED_ID = "0x0027"
_SHARED: dict[str, Generation] = {"0x004e": V2, "0x004f": V3}

_PCI_ADDR = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_AER_TOTAL = re.compile(r"^TOTAL_ERR_\w+\s+(\d{1,20})$", re.MULTILINE)
# The AER files, each with the catalogue code its growth is counted as.
AER_FILES: tuple[tuple[str, str], ...] = (
    ("aer_dev_fatal", "pcie_fatal"),
    ("aer_dev_nonfatal", "pcie_nonfatal"),
    ("aer_dev_correctable", "pcie_correctable"),
)


@dataclass(frozen=True)
class Chip:
    """One chip found in sysfs."""

    pci: str  # the lowest function's address, e.g. 0000:00:04.0
    functions: tuple[str, ...]
    generation: Generation
    # The device node, e.g. /dev/vfio/3 or /dev/accel0, and its number for ordering.
    node: str
    node_index: int
    # The accel class device's directory (v2-v4), where the driver's attributes are.
    class_dir: Path | None = None


def _quiet(path: Path) -> str:
    try:
        return read_text(path).strip()
    except FieldError:
        return ""


def generation_of(function: Path) -> Generation | None:
    """The generation of one PCI function, None when it is not a TPU chip."""
    if _quiet(function / "vendor").lower() != GOOGLE_PCI_VENDOR:
        return None
    device_id = _quiet(function / "device").lower()
    if device_id == _SHARED_ID:
        return _SHARED.get(_quiet(function / "subsystem_device").lower())
    return GENERATIONS.get(device_id)


def _accel_nodes(sysfs: Path) -> dict[str, tuple[int, Path]]:
    """PCI address -> (N of ``/dev/accelN``, its class device directory)."""
    out: dict[str, tuple[int, Path]] = {}
    cls = sysfs / "class" / "accel"
    try:
        names = os.listdir(cls)
    except OSError:
        return out
    for name in names:
        m = re.fullmatch(r"accel(\d{1,6})", name)
        if m is None:
            continue
        target = os.path.basename(os.path.realpath(cls / name / "device"))
        if _PCI_ADDR.match(target):
            out[target] = (int(m.group(1)), cls / name)
    return out


def _own_accel_node(function: Path) -> tuple[int, Path] | None:
    """The accel class device under the function itself (``accel/accelN``)."""
    try:
        names = sorted(os.listdir(function / "accel"))
    except OSError:
        return None
    for name in names:
        m = re.fullmatch(r"accel(\d{1,6})", name)
        if m is not None:
            return int(m.group(1)), function / "accel" / name
    return None


def _iommu_group(function: Path) -> int | None:
    try:
        target = os.readlink(function / "iommu_group")
    except OSError:
        return None
    name = os.path.basename(target)
    return int(name) if name.isdigit() and len(name) <= 6 else None


def find_chips(sysfs: Path) -> list[Chip]:
    """Every TPU chip under ``sysfs``, in device node order (then PCI address)."""
    root = sysfs / "bus" / "pci" / "devices"
    try:
        addrs = sorted(a for a in os.listdir(root) if _PCI_ADDR.match(a))
    except OSError:
        return []
    slots: dict[str, list[tuple[str, Generation]]] = {}
    for addr in addrs:
        gen = generation_of(root / addr)
        if gen is not None:
            slots.setdefault(addr.rsplit(".", 1)[0], []).append((addr, gen))
    accel = _accel_nodes(sysfs)
    chips: list[Chip] = []
    for functions in slots.values():
        pci, gen = functions[0]
        class_dir: Path | None = None
        if gen.node == "accel":
            found = _own_accel_node(root / pci) or accel.get(pci)
            index, class_dir = found if found is not None else (None, None)
            node = f"/dev/accel{index}" if index is not None else ""
        else:
            index = _iommu_group(root / pci)
            node = f"/dev/vfio/{index}" if index is not None else ""
        chips.append(
            Chip(
                pci=pci,
                functions=tuple(a for a, _ in functions),
                generation=gen,
                node=node,
                node_index=index if index is not None else 1 << 30,
                class_dir=class_dir,
            )
        )
    chips.sort(key=lambda c: (c.node_index, c.pci))
    return chips


def present(sysfs: Path, chip: Chip) -> bool:
    """Whether the chip's PCI function is still there (not removed or fallen off)."""
    return (sysfs / "bus" / "pci" / "devices" / chip.pci / "vendor").exists()


def aer_totals(sysfs: Path, chip: Chip) -> dict[str, int]:
    """Catalogue code -> the kernel's running total of that AER class, summed over
    the chip's functions; a class whose file is absent or unusable is left out."""
    out: dict[str, int] = {}
    for fname, code in AER_FILES:
        total: int | None = None
        for function in chip.functions:
            text = _quiet(sysfs / "bus" / "pci" / "devices" / function / fname)
            m = _AER_TOTAL.search(text)
            if m is not None:
                total = (total or 0) + int(m.group(1))
        if total is not None:
            out[code] = total
    return out


def driver_version(chip: Chip) -> str:
    """The chip driver's version (gasket's ``driver_version``); empty where unknown."""
    if chip.class_dir is None:
        return ""
    text = _quiet(chip.class_dir / "driver_version")
    return text if re.fullmatch(r"[\w.+~-]{1,64}", text) else ""


def driver_status(chip: Chip) -> str:
    """gasket's ``status`` of the chip (ALIVE, LAMED, DEAD, DRIVER_EXITING); empty
    where the chip has no such driver or the file is unusable."""
    if chip.class_dir is None:
        return ""
    text = _quiet(chip.class_dir / "status")
    return text if text in ("ALIVE", "LAMED", "DEAD", "DRIVER_EXITING") else ""


def reset_count(chip: Chip) -> int | None:
    """How many times the driver reset the chip (gasket's ``reset_count``)."""
    if chip.class_dir is None:
        return None
    text = _quiet(chip.class_dir / "reset_count")
    return int(text) if text.isdigit() and len(text) <= 20 else None
