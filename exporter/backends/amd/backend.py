"""The AMD backend (Instinct first): AMD SMI where it works, else the amdgpu driver's
sysfs files, in one vocabulary.

Why it is built this way:

* **Two sources, one vocabulary.** ``amdsmi`` is used when it imports *and*
  initialises with at least one GPU (``exporter.backends.amd.smi``); otherwise the
  backend reads what amdgpu itself publishes under ``--path.sysfs``
  (``exporter.backends.amd.sysfs``). Both name devices in PCI bus order and compute
  the same ``uuid``, so a host that gains or loses ROCm keeps its series; which source
  is used, and why AMD SMI is not, is kept in ``source`` and ``amdsmi_reason``.
* **Partitions** (MI300 DPX/QPX/CPX) are child devices found in sysfs
  (``exporter.backends.amd.partitions``); **topology** is xGMI from the KFD topology
  (``exporter.backends.amd.kfd``) and the PCIe path for the other pairs, read from
  sysfs for either source, since amdgpu publishes both without ROCm.
* **Unsupported is not zero.** After every read, each of ``FIELDS`` is either in the
  reading or has its reason in ``self.missing``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

from exporter.backends.amd import partitions
from exporter.backends.amd.device import FIELDS, Gpu
from exporter.backends.amd.kfd import xgmi_links
from exporter.backends.amd.smi import SmiReader, load_amdsmi
from exporter.backends.amd.sysfs import SysfsReader
from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.model import DeviceInfo, DeviceLostError, Link, Reading
from exporter.pcitopo import pcie_links

log = logging.getLogger("accel_exporter.amd")


def _reading_has(r: Reading, key: str) -> bool:
    if "." in key:
        name, sub = key.split(".", 1)
        return sub in getattr(r, name)
    value = getattr(r, key)
    return bool(value) if isinstance(value, dict) else value is not None


class AmdBackend(Backend):
    name: ClassVar[str] = "amd"

    def __init__(
        self,
        options: BackendOptions,
        amdsmi: Any | None = None,
        use_amdsmi: bool = True,
        loader: Callable[[], tuple[Any | None, str]] = load_amdsmi,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(options)
        self._given_smi = amdsmi
        self._use_amdsmi = use_amdsmi
        self._loader = loader
        self._clock = clock
        self._smi: SmiReader | None = None
        self._gpus: dict[str, Gpu] = {}
        # "amdsmi" or "sysfs" once discovered; why AMD SMI is not used, if it is not.
        self.source = ""
        self.amdsmi_reason = ""
        # device -> field key -> why the last read of that device has no value for it.
        self.missing = MissingFields(log)
        self._sysfs = SysfsReader(options, self.missing)
        # Each GPU's partition modes as discovered (``_layout``).
        self._modes: dict[str, tuple[str, str]] = {}

    # -- discovery ---------------------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        self.close()
        self._smi = None
        self._gpus = {}
        self.missing.clear()
        if self._use_amdsmi:
            smi, reason = (self._given_smi, "") if self._given_smi is not None else self._loader()
            if smi is not None:
                reader = SmiReader(smi, self.options, self.missing, self._clock)
                gpus, reason = reader.discover()
                if gpus:
                    self._smi = reader
                    self._gpus = {g.name: g for g in gpus}
            self.amdsmi_reason = reason
        else:
            self.amdsmi_reason = "AMD SMI disabled"
        if self._gpus:
            self.source = "amdsmi"
            log.info("amd: %d GPUs through AMD SMI", len(self._gpus))
            self._modes = self._layout()
            return [g.info for g in self._gpus.values()]
        self.source = "sysfs"
        gpus = self._sysfs.discover(self.amdsmi_reason)
        self._gpus = {g.name: g for g in gpus}
        devices = [g.info for g in gpus]
        self._modes = self._layout()
        log.info(
            "amd: %d GPUs from amdgpu sysfs under %s (%s)",
            len(devices),
            self.options.sysfs / "class" / "drm",
            self.amdsmi_reason,
        )
        return devices

    def _layout(self) -> dict[str, tuple[str, str]]:
        """The compute and memory partition modes of each GPU, from sysfs."""
        return {
            g.name: (
                partitions.read_mode(g.device_dir, "compute"),
                partitions.read_mode(g.device_dir, "memory"),
            )
            for g in self._gpus.values()
            if g.device_dir is not None and not g.info.parent
        }

    def layout_changed(self) -> bool:
        """A GPU switched partition modes since discovery (the node agent's layouts)."""
        try:
            now = self._layout()
        except Exception:  # never the reason a poll fails
            return False
        # A GPU whose mode cannot be read now (gone from sysfs) is lost, not relaid.
        return any(mode[0] and mode != self._modes.get(name) for name, mode in now.items())

    # -- topology ----------------------------------------------------------------------

    def topology(self) -> list[Link]:
        """xGMI links from the KFD topology (read from sysfs for either source, since
        amdgpu publishes it without ROCm), and the PCIe path for every pair of GPUs
        that xGMI does not join, so every pair has a place on the distance scale."""
        devices = [g.info for g in self._gpus.values()]
        links = xgmi_links(self.options.sysfs, devices, self.missing)
        joined = {(link.device, link.peer_device) for link in links}
        links += [
            link
            for link in pcie_links(self.options.sysfs, devices)
            if (link.device, link.peer_device) not in joined
        ]
        return links

    # -- reading -----------------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        gpu = self._gpus.get(device.device)
        if gpu is None:
            raise DeviceLostError(f"{device.device} is not known to this backend")
        self.missing.begin(gpu.name, gpu.static)
        if gpu.info.parent:
            reading = partitions.read(gpu)
        elif gpu.handle is not None and self._smi is not None:
            reading = self._smi.read(gpu)
        else:
            reading = self._sysfs.read(gpu)
        found = {key for key in FIELDS if _reading_has(reading, key)}
        self.missing.settle(gpu.name, FIELDS, found, "not reported by this GPU")
        return reading

    def close(self) -> None:
        if self._smi is not None:
            self._smi.close()
