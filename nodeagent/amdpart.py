"""Applying an AMD compute/memory partition layout through amdgpu's sysfs files.

Why it is built this way:

* amdgpu exposes the modes on the GPU's PCI function:
  ``current_compute_partition`` / ``available_compute_partition`` (SPX, DPX, TPX,
  QPX, CPX) and ``current_memory_partition`` / ``available_memory_partition``
  (NPS1, NPS2, NPS4, NPS8). Writing a mode to a ``current_*`` file asks the driver to
  switch; no ROCm library is needed, so the agent works where amdsmi is not installed.
* The memory mode is written before the compute mode: a compute mode is only valid
  with some memory modes (CPX with NPS1 or NPS4), and the driver checks the pair.
* Every write is read back. A mode the driver did not take (a memory mode that
  waits for a driver reload, a mode the GPU does not list as available) is a
  failure that says so, never "applied".
* Modes already in place are not written again, so applying the applied layout
  touches no file.
* The write itself is a parameter (``writer``): on a host it is a plain write to
  sysfs; tests pass a fake amdgpu that also reshapes the KFD topology, as the driver
  does when it switches.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from accel_common.readfile import FieldError, read_text
from exporter.backends.amd.partitions import partitions, read_mode
from nodeagent.layouts import Layout
from nodeagent.mig import ApplyError

log = logging.getLogger("accel_node_agent.amd")

PCI_VENDOR_AMD = "0x1002"
Writer = Callable[[Path, str], None]


def write_sysfs(path: Path, value: str) -> None:
    """A plain sysfs write, as ``echo CPX > current_compute_partition``."""
    with path.open("w", encoding="ascii") as f:
        f.write(value + "\n")


def gpus(sysfs: Path) -> list[tuple[str, Path, str]]:
    """The partitionable AMD GPUs, in PCI order: (PCI address, device dir, model)."""
    found: dict[str, tuple[Path, str]] = {}
    for card in sorted((sysfs / "class" / "drm").glob("card*")):
        device = card / "device"
        if not card.name[4:].isdigit() or not (device / "current_compute_partition").exists():
            continue
        try:
            if read_text(device / "vendor").strip().lower() != PCI_VENDOR_AMD:
                continue
            model = read_text(device / "product_name").strip()
        except FieldError:
            model = ""
        pci = os.path.basename(os.path.realpath(device)).lower()
        found.setdefault(pci, (device, model))
    return [(pci, d, m) for pci, (d, m) in sorted(found.items())]


def _available(device: Path, which: str) -> list[str] | None:
    try:
        text = read_text(device / f"available_{which}_partition")
    except FieldError:
        return None  # an older driver without the list: let the write decide
    return [w.strip().upper() for w in text.split(",") if w.strip()]


def _switch(device: Path, name: str, which: str, want: str, writer: Writer) -> bool:
    if read_mode(device, which) == want:
        return False
    available = _available(device, which)
    if available is not None and want not in available:
        raise ApplyError(
            f"{name}: {which} partition {want} is not available ({', '.join(available)})"
        )
    try:
        writer(device / f"current_{which}_partition", want)
    except OSError as e:
        raise ApplyError(f"{name}: writing {want} to current_{which}_partition: {e}") from e
    now = read_mode(device, which)
    if now != want:
        hint = (
            " (a memory mode switch may need an amdgpu reload or a reboot)"
            if which == "memory"
            else ""
        )
        raise ApplyError(
            f"{name}: {which} partition is {now or 'unknown'} after writing {want}{hint}"
        )
    return True


def _checked(sysfs: Path, layout: Layout) -> list[tuple[str, Path, str]]:
    found = gpus(sysfs)
    if not found:
        raise ApplyError(f"layout {layout.name} is for {layout.model} GPUs; this node has none")
    others = sorted({m or "an unnamed GPU" for _, _, m in found if not layout.matches(m)})
    if others:
        raise ApplyError(
            f"layout {layout.name} is for {layout.model} GPUs; this node has {', '.join(others)}"
        )
    return found


def differs(sysfs: Path, layout: Layout) -> bool:
    """Whether any GPU of the node would change under ``layout`` (reads only)."""
    return any(
        bool(layout.memory and read_mode(device, "memory") != layout.memory)
        or read_mode(device, "compute") != layout.compute
        for _, device, _ in _checked(sysfs, layout)
    )


def apply(sysfs: Path, layout: Layout, writer: Writer = write_sysfs) -> tuple[bool, dict[str, str]]:
    """Applies ``layout`` to every partitionable AMD GPU; all must be of its model.
    Returns (whether anything changed, per-GPU description with the partition count)."""
    found = _checked(sysfs, layout)
    changed, devices = False, {}
    for index, (pci, device, _) in enumerate(found):
        name = f"amd{index}"
        if layout.memory:
            changed |= _switch(device, name, "memory", layout.memory, writer)
        changed |= _switch(device, name, "compute", layout.compute, writer)
        count = max(1, len(partitions(sysfs, pci)))
        devices[name] = f"{layout.describe()}, {count} partition{'s' if count > 1 else ''}"
    if changed:
        log.info("AMD layout %s applied (%s)", layout.name, layout.describe())
    return changed, devices
