"""The oneAPI backend: Intel devices found by ``dpctl``, with telemetry from Level Zero
Sysman where it is present, else from the i915/xe driver's sysfs.

Why it is built this way:

* **Discovery is SYCL's** (``exporter.backends.oneapi.sycl``): a device that SYCL
  cannot see cannot run oneAPI work, whatever sysfs says. Each SYCL device is then
  paired with its Sysman device (``sysman``) and its DRM card (``sysfs``) where they
  exist: by PCI address when Sysman gave one, else by PCI device id.
* **The vendor label is ``oneapi``** for every device of this backend: it names the
  stack the device is seen through, as ``nvidia`` and ``amd`` do, and it is the key of
  Intel's fault catalogue in ``exporter.faults`` and the vendor the sim backend uses.
  dpctl's own vendor string is the runtime's (``Intel(R) Corporation`` even for the
  AMD CPU here), so exporting it would call an AMD CPU Intel. The device ids are
  ``oneapi0``, ``oneapi1``..., GPUs and accelerators first, then CPUs; within a kind,
  in PCI address order where it is known, else in dpctl's order.
* **GPUs and accelerators only, by default**: an OpenCL CPU runtime lists the host's
  CPU as a SYCL device too, and the ``cpu`` backend already exports it, so by default
  it would be listed twice (``cpu0`` and ``oneapi0``). It is published only with
  ``BackendOptions.oneapi_include_cpu`` (``--oneapi.include-cpu``), which the tests
  use: on a machine without an Intel GPU it is the one real SYCL device there is.
* **Identity**: ``model`` is dpctl's device name; ``profile`` is the SYCL device type
  (``gpu``, ``cpu``, ``accelerator``), so a dashboard can leave out CPUs that the
  ``cpu`` backend already exports; ``driver_version`` is dpctl's; ``pci_bus_id`` and
  ``numa_node`` come from Sysman or the matched sysfs card. ``uuid`` is the device's
  Level Zero UUID when Sysman gives one, else a synthetic name-based (version 5) UUID
  of the machine's DMI UUID (when readable), the device type, the name and the PCI
  address (or the device's place among devices of the same name): stable across
  restarts, and marked as synthetic by its version nibble.
* **Telemetry**, where it exists, else nothing: ``accel_memory_total_bytes`` from
  dpctl's ``global_mem_size`` is always a true fact; every other field comes from a
  real counter or is left out with its reason in ``self.missing[device][field]``,
  never exported as 0. A device with no source at all (a CPU as an OpenCL device)
  exports its identity, ``accel_up`` and its memory size; ``self.sources[device]``
  says ``none``. With Sysman present, sysfs fills only the fields Sysman could not
  give.
* **A lost device** (Sysman says lost or reset required, or its sysfs card is gone)
  is down: the first read that finds it returns ``Reading(up=False)`` carrying one
  ``lost`` (or ``reset_required``) fault event, so the fatal fault is counted when it
  happens; later reads raise ``DeviceLostError`` until it answers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.backends.oneapi.device import FIELDS, Lost, found_fields
from exporter.backends.oneapi.sycl import Sycl, list_devices
from exporter.backends.oneapi.sysfs import Card, discover_cards, read_card, read_quiet
from exporter.backends.oneapi.sysman import Sysman, SysmanReader
from exporter.backends.oneapi.zes import LevelZeroUnavailable, load_level_zero
from exporter.model import (
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    FaultEvent,
    Link,
    Reading,
)
from exporter.pcitopo import cpu_affinity, pcie_links

log = logging.getLogger("accel_exporter.oneapi")

VENDOR = "oneapi"
SYSMAN = "Level Zero Sysman"
NO_SOURCE = "none"

# SMBIOS says all-zero is "not present" and all-F "not set": neither tells machines apart.
_PLACEHOLDER_UUIDS = frozenset(
    {"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"}
)
# The namespace of the synthetic UUIDs (uuid5 of the URL naming this backend).
_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://accel-fleet/exporter/oneapi")
_TYPE_RANK = {"gpu": 0, "accelerator": 1, "custom": 2, "cpu": 3}


@dataclass
class Device:
    """One exported device: its SYCL identity and the telemetry sources paired with it."""

    info: DeviceInfo
    sycl: Sycl
    sysman: Sysman | None = None
    card: Card | None = None
    lost: bool = False


class OneapiBackend(Backend):
    name: ClassVar[str] = "oneapi"

    def __init__(
        self,
        options: BackendOptions,
        dpctl: Any | None = None,
        level_zero: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(options)
        self._given_dpctl = dpctl
        self._given_level_zero = level_zero
        # Power from sysfs energy is a delta over elapsed time; tests pass a fake clock.
        self._clock = clock
        self._sysman: SysmanReader | None = None
        self._devices: dict[str, Device] = {}
        # Why Level Zero Sysman is not used on this host ("" when it is).
        self.level_zero_reason = ""
        # device -> field -> why the last read has no value for it.
        self.missing = MissingFields(log)
        # device -> where its telemetry comes from ("none" for identity only).
        self.sources: dict[str, str] = {}

    # -- discovery ---------------------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        self.close()
        sycl, skipped = list_devices(self._given_dpctl)
        if not self.options.oneapi_include_cpu:
            skipped += [
                f"{s.name} ({s.backend}): a CPU, which the cpu backend exports "
                "(--oneapi.include-cpu publishes it here too)"
                for s in sycl
                if s.device_type == "cpu"
            ]
            sycl = [s for s in sycl if s.device_type != "cpu"]
        if not sycl:
            why = f" (skipped: {'; '.join(skipped)})" if skipped else ""
            raise BackendUnavailableError(
                "dpctl found no Intel SYCL device on the level_zero or opencl backends"
                f"{why}: is a Level Zero GPU driver or an OpenCL runtime installed, and "
                "does OCL_ICD_FILENAMES (or /etc/OpenCL/vendors) name its ICD?"
            )
        for reason in skipped:
            log.info("oneapi: skipped %s", reason)
        sysman = self._discover_sysman()
        cards = discover_cards(self.options.sysfs)
        devices = self._pair(sycl, sysman, cards)
        self._devices = {d.info.device: d for d in devices}
        for d in devices:
            self.sources[d.info.device] = _source(d)
            log.info(
                "%s: %s (%s, %s), telemetry: %s",
                d.info.device,
                d.info.model,
                d.sycl.device_type,
                d.sycl.backend,
                self.sources[d.info.device],
            )
        return [d.info for d in devices]

    def _discover_sysman(self) -> list[Sysman]:
        if self._given_level_zero is not None:
            lib = self._given_level_zero
        else:
            try:
                lib = load_level_zero()
            except LevelZeroUnavailable as e:
                self.level_zero_reason = str(e)
                return []
        self._sysman = SysmanReader(lib, self.missing)
        found, self.level_zero_reason = self._sysman.discover()
        return found

    def _pair(self, sycl: list[Sycl], sysman: list[Sysman], cards: list[Card]) -> list[Device]:
        unused_sysman = list(sysman)
        unused_cards = list(cards)
        paired: list[tuple[Sycl, Sysman | None, Card | None, int]] = []
        for index, s in enumerate(sycl):
            zes: Sysman | None = None
            card: Card | None = None
            if s.device_type in ("gpu", "accelerator"):
                zes = next((z for z in unused_sysman if _same_device(s, z)), None)
                if zes is not None:
                    unused_sysman.remove(zes)
                    card = next((c for c in unused_cards if c.pci == zes.pci), None)
                elif s.device_id is not None:
                    card = next((c for c in unused_cards if c.device_id == s.device_id), None)
                if card is not None:
                    unused_cards.remove(card)
            paired.append((s, zes, card, index))
        for z in unused_sysman:
            log.info(
                "oneapi: Level Zero device %s at %s has no SYCL device; not exported", z.name, z.pci
            )
        for c in unused_cards:
            log.info(
                "oneapi: %s (%s at %s) has no SYCL device; not exported", c.name, c.driver, c.pci
            )

        def pci_of(p: tuple[Sycl, Sysman | None, Card | None, int]) -> str:
            _, zes, card, _ = p
            return (zes.pci if zes is not None else "") or (card.pci if card is not None else "")

        paired.sort(key=lambda p: (_TYPE_RANK.get(p[0].device_type, 9), pci_of(p) or "~", p[3]))
        machine = self._machine_uuid()
        ordinals: dict[tuple[str, str], int] = {}
        out: list[Device] = []
        for n, p in enumerate(paired):
            s, zes, card, _ = p
            pci = pci_of(p)
            ordinal = ordinals.get((s.device_type, s.name), 0)
            ordinals[(s.device_type, s.name)] = ordinal + 1
            uid = zes.uuid if zes is not None and zes.uuid else ""
            if not uid:
                key = f"{machine}|{s.device_type}|{s.name}|{pci or ordinal}"
                uid = str(uuid.uuid5(_UUID_NAMESPACE, key))
            info = DeviceInfo(
                device=f"oneapi{n}",
                vendor=VENDOR,
                uuid=uid,
                model=s.name,
                pci_bus_id=pci,
                driver_version=s.driver_version,
                numa_node=self._numa_node(pci, card),
                cpu_affinity=cpu_affinity(self.options.sysfs, pci),
                profile=s.device_type,
            )
            out.append(Device(info, s, zes, card))
        return out

    def _machine_uuid(self) -> str:
        text = read_quiet(self.options.sysfs / "class" / "dmi" / "id" / "product_uuid")
        value = (text or "").strip().lower()
        return value if value and value not in _PLACEHOLDER_UUIDS else ""

    def _numa_node(self, pci: str, card: Card | None) -> str:
        if card is not None:
            path = card.path / "device" / "numa_node"
        elif pci:
            path = self.options.sysfs / "bus" / "pci" / "devices" / pci / "numa_node"
        else:
            return ""
        node = (read_quiet(path) or "").strip()
        # The kernel writes -1 when the platform does not say.
        return "" if node in ("", "-1") else node

    # -- topology ----------------------------------------------------------------------

    def topology(self) -> list[Link]:
        """The PCIe path between every two devices with a PCI address, from the
        kernel's PCI tree. Xe Link is not read: Sysman's fabric ports would need a
        multi-card host to check against, and a PCIe link is never closer than the
        truth, so a scheduler is at worst cautious."""
        return pcie_links(self.options.sysfs, [d.info for d in self._devices.values()])

    # -- reading -----------------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        d = self._devices[device.device]
        missing = self.missing.begin(device.device, d.sysman.static if d.sysman is not None else {})
        r = Reading()
        faults_read = False
        try:
            if d.sysman is not None:
                assert self._sysman is not None  # paired only when Sysman listed it
                faults_read = self._sysman.read(device.device, d.sysman, r, missing)
            if d.card is not None:
                read_card(d.card, r, missing, self._clock)
        except Lost as e:
            first = not d.lost
            d.lost = True
            if first:
                return Reading(
                    up=False,
                    down_reason=str(e),
                    fault_events=[FaultEvent(e.code, str(e))],
                )
            raise DeviceLostError(str(e)) from e
        d.lost = False
        r.telemetry_source = self.sources[device.device]
        if r.memory_total_bytes is None and d.sycl.memory_bytes:
            # A true fact whatever else is known: the memory SYCL can allocate.
            r.memory_total_bytes = float(d.sycl.memory_bytes)
            missing.pop("memory_total_bytes", None)
        have = found_fields(r)
        if faults_read:
            have.add("fault_events")
        elif d.card is not None and d.sysman is None:
            missing["fault_events"] = f"{d.card.driver} sysfs has no RAS counters"
        self.missing.settle(device.device, FIELDS, have, self._no_source(d))
        return r

    def _no_source(self, d: Device) -> str:
        if d.sycl.device_type == "cpu":
            return "a CPU seen through SYCL: the cpu backend exports its telemetry"
        if d.sysman is None and d.card is None:
            why = self.level_zero_reason or "not a Level Zero Sysman device"
            return f"no telemetry source: no Level Zero Sysman ({why}) and no i915/xe card"
        return f"not available from {_source(d)}"

    # -- shutdown ----------------------------------------------------------------------

    def close(self) -> None:
        # Level Zero has no Sysman shutdown call, and dpctl's objects are released with
        # their references; forgetting them is all there is to do.
        self._devices = {}
        self._sysman = None
        self.level_zero_reason = ""
        self.missing.clear()
        self.sources = {}


def _same_device(s: Sycl, z: Sysman) -> bool:
    if s.device_id is not None:
        return s.device_id == z.device_id
    return s.name == z.name


def _source(d: Device) -> str:
    parts = []
    if d.sysman is not None:
        parts.append(SYSMAN)
    if d.card is not None:
        parts.append(f"{d.card.driver} sysfs")
    return " + ".join(parts) or NO_SOURCE
