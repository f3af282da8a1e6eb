"""The tpu backend: Google TPU chips, from sysfs and libtpu's runtime metrics service.

Why it behaves as it does:

* **Discovery** lists the chips sysfs shows (``chips.find_chips``: PCI vendor 0x1ae0,
  the generation from the PCI device id, in device node order) and asks the runtime
  metrics service (``runtime.RuntimeClient``) which chips it reports. Chip ``i`` in
  node order is the runtime's chip id ``i``, as ``tpu-info`` presents them; a chip
  the runtime reports beyond what sysfs shows (a container without ``/sys/bus/pci``)
  is a device with the runtime's id and no PCI identity. Neither source: the backend
  is unavailable, in one log line that names both.
* **Telemetry** is libtpu's: duty cycle as utilization, HBM used and total, HBM
  bandwidth utilization where the libtpu has it. The service lives in the workload's
  process, so a chip with no workload has none: its reading is identity-only
  (``telemetry_source`` ``none``, every field left out with the reason), never an
  idle 0. The runtime is asked once per poll (the first read of a poll fetches every
  chip's values; each call has a deadline) and asked again the next poll, so a
  workload that starts is seen at once.
* **Loss**: a chip whose PCI function is gone from sysfs, whose driver says DEAD, or
  that the runtime stops reporting while it still reports the others, is ``accel_up
  0`` with its identity kept; the poll where that happens counts one fatal fault
  (``lost``, ``driver_dead``), the later ones are plain ``DeviceLostError``.
* **Faults**: growth of the chip's PCIe AER totals (``pcie_fatal``, ``pcie_nonfatal``,
  ``pcie_correctable``), an accel-class chip's driver turning LAMED or resetting it
  (``driver_lamed``, ``chip_reset``; the first poll is the baseline of all these),
  and a core that the runtime's ``GetTpuRuntimeStatus`` reports with a new error
  message (``core_error``). Their severities are ``exporter.faults.TPU_EVENTS``.
* **Topology**: PCIe placement between chips (``exporter.pcitopo``). ICI, the chips'
  own interconnect, is not exported: neither libtpu's public runtime metrics nor
  sysfs describe ICI links (docs/vendors/tpu.md).
"""

from __future__ import annotations

import logging
import uuid

from accel_common.readfile import FieldError, read_text
from exporter.backends.base import Backend, BackendOptions, MissingFields
from exporter.backends.tpu import chips as sysfs_chips
from exporter.backends.tpu.chips import Chip
from exporter.backends.tpu.runtime import (
    DUTY_CYCLE,
    HBM_BANDWIDTH,
    HBM_TOTAL,
    HBM_USED,
    RuntimeClient,
    RuntimeDown,
    RuntimeSnapshot,
)
from exporter.model import (
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    FaultEvent,
    Link,
    Reading,
)
from exporter.pcitopo import cpu_affinity, numa_node, pcie_links

log = logging.getLogger("accel_exporter.tpu")

VENDOR = "tpu"
# How long one runtime call may take. libtpu answers from memory; longer means the
# runtime is busy or wedged, and the chips are better reported identity-only than
# the poll left to its timeout (a poll makes at most five calls).
RPC_TIMEOUT_SECONDS = 1.0
RUNTIME_SOURCE = "libtpu runtime metrics service"
BANDWIDTH_SOURCE = f"libtpu {HBM_BANDWIDTH}"
# The fields the runtime gives, with the metric each comes from.
FIELDS: dict[str, str] = {
    "utilization": DUTY_CYCLE,
    "memory_used_bytes": HBM_USED,
    "memory_total_bytes": HBM_TOTAL,
    "memory_bandwidth_utilization": HBM_BANDWIDTH,
}
# The namespace of the chips' synthetic UUIDs (a TPU shows no serial or UUID in sysfs).
_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://accel-fleet/exporter/tpu")
_PLACEHOLDER_UUIDS = frozenset({"", "00000000-0000-0000-0000-000000000000"})


class TpuBackend(Backend):
    name = "tpu"

    def __init__(self, options: BackendOptions, timeout: float = RPC_TIMEOUT_SECONDS) -> None:
        super().__init__(options)
        self.client = RuntimeClient(options.tpu_runtime_address, timeout)
        self.missing = MissingFields(log)
        # device -> where its last reading's telemetry came from
        self.sources: dict[str, str] = {}
        self._devices: list[DeviceInfo] = []
        self._chip: dict[str, Chip | None] = {}
        self._index: dict[str, int] = {}
        self._snap: RuntimeSnapshot | None = None
        self._down = ""
        self._served: set[str] = set()
        # Chip ids the runtime has reported since it came up: one that it then stops
        # reporting, while it reports others, is lost.
        self._reported: set[int] = set()
        self._lost: set[str] = set()
        self._aer: dict[str, dict[str, int]] = {}
        # device -> the driver's last status and reset count (accel-class chips)
        self._status: dict[str, str] = {}
        self._resets: dict[str, int] = {}
        # global core id -> the error message last counted for it
        self._core_errors: dict[int, str] = {}

    # -- discovery ----------------------------------------------------------------

    def discover(self) -> list[DeviceInfo]:
        sysfs = self.options.sysfs
        found = sysfs_chips.find_chips(sysfs)
        self._served.clear()
        # Quiet: discovery says in one line (or the unavailable error) what it found.
        self._fetch(quiet=True)
        ids = self._snap.chips() if self._snap is not None else []
        if not found and not ids:
            raise BackendUnavailableError(
                f"no TPU chip under {sysfs}/bus/pci/devices (PCI vendor "
                f"{sysfs_chips.GOOGLE_PCI_VENDOR}) and no chip from the "
                + (self._down or f"runtime metrics service at {self.client.address}")
            )
        machine = self._machine_uuid()
        self._devices, self._chip, self._index = [], {}, {}
        self._lost.clear()
        self._aer.clear()
        self._status.clear()
        self._resets.clear()
        self.missing.clear()
        for i in sorted(set(range(len(found))) | set(ids)):
            chip = found[i] if i < len(found) else None
            model = chip.generation.model if chip is not None else ""
            pci = chip.pci if chip is not None else ""
            key = f"{machine}|{model}|{pci or f'runtime chip {i}'}"
            info = DeviceInfo(
                device=f"tpu{i}",
                vendor=VENDOR,
                uuid=str(uuid.uuid5(_UUID_NAMESPACE, key)),
                model=model,
                pci_bus_id=pci,
                driver_version=sysfs_chips.driver_version(chip) if chip is not None else "",
                numa_node=numa_node(sysfs, pci),
                cpu_affinity=cpu_affinity(sysfs, pci),
            )
            self._devices.append(info)
            self._chip[info.device] = chip
            self._index[info.device] = i
        models = sorted({d.model or "unknown model" for d in self._devices})
        runtime = (
            f"runtime metrics service at {self.client.address} reports {len(ids)}"
            if self._snap is not None
            else self._down
        )
        log.info(
            "TPU: %d chips (%s), %d in sysfs; %s",
            len(self._devices),
            ", ".join(models),
            len(found),
            runtime,
        )
        return list(self._devices)

    def _machine_uuid(self) -> str:
        try:
            text = read_text(self.options.sysfs / "class" / "dmi" / "id" / "product_uuid")
        except FieldError:
            return ""
        value = text.strip().lower()
        return value if value not in _PLACEHOLDER_UUIDS else ""

    # -- the runtime, once per poll -------------------------------------------------

    def _fetch(self, quiet: bool = False) -> None:
        try:
            snap = self.client.snapshot()
        except RuntimeDown as e:
            # Said when telemetry goes away, not every poll it stays away.
            if self._snap is not None and not quiet:
                log.info("TPU telemetry off: %s", e)
            self._snap, self._down = None, str(e)
            # A workload that comes next may hold other chips.
            self._reported.clear()
            self._core_errors.clear()
            return
        if self._snap is None and self._down and not quiet:
            log.info("TPU telemetry on: %s answers", self.client.address)
        self._snap, self._down = snap, ""
        self._reported.update(snap.chips())

    def _snapshot_for(self, device: str) -> RuntimeSnapshot | None:
        """The runtime's values for this poll: fetched at the first read of a poll,
        which is any read of a device already read since the last fetch."""
        if device in self._served:
            self._served.clear()
            self._fetch()
        self._served.add(device)
        return self._snap

    # -- reading --------------------------------------------------------------------

    def read(self, device: DeviceInfo) -> Reading:
        if device.device not in self._index:
            raise DeviceLostError(f"{device.device} is not a TPU this backend discovered")
        snap = self._snapshot_for(device.device)
        i = self._index[device.device]
        chip = self._chip[device.device]
        reasons = self.missing.begin(device.device, {})
        if chip is not None and not sysfs_chips.present(self.options.sysfs, chip):
            return self._lose(device, f"{chip.pci} is gone from {self.options.sysfs}")
        status = sysfs_chips.driver_status(chip) if chip is not None else ""
        if status == "DEAD":
            return self._lose(device, "the chip's driver reports it DEAD", "driver_dead")
        r = Reading()
        if snap is None:
            self.missing.note(device.device, FIELDS, self._down)
        elif i not in snap.values.get(DUTY_CYCLE, {}):
            if i in self._reported and snap.chips():
                return self._lose(
                    device, f"the libtpu runtime stopped reporting chip {i} (still reports others)"
                )
            self.missing.note(
                device.device, FIELDS, f"the libtpu runtime reports no chip {i} (not held?)"
            )
        else:
            self._fill(r, snap, i, chip, reasons)
        self._lost.discard(device.device)
        answered = snap is not None and r.utilization is not None
        r.telemetry_source = RUNTIME_SOURCE if answered else "none"
        self.sources[device.device] = r.telemetry_source
        if chip is not None:
            r.fault_events.extend(self._aer_events(device.device, chip))
            r.fault_events.extend(self._driver_events(device.device, chip, status))
        if snap is not None:
            r.fault_events.extend(self._core_events(snap, i))
        self.missing.settle(device.device, FIELDS, self._found(r), "not reported")
        return r

    def _lose(self, device: DeviceInfo, why: str, code: str = "lost") -> Reading:
        if device.device in self._lost:
            raise DeviceLostError(why)
        self._lost.add(device.device)
        self.sources[device.device] = "none"
        return Reading(up=False, down_reason=why, fault_events=[FaultEvent(code, why)])

    def _fill(
        self, r: Reading, snap: RuntimeSnapshot, i: int, chip: Chip | None, reasons: dict[str, str]
    ) -> None:
        r.utilization = snap.values[DUTY_CYCLE][i] / 100
        per_chip = chip.generation.devices_per_chip if chip is not None else _per_chip(snap)
        ids = range(i * per_chip, (i + 1) * per_chip)
        for key, name in FIELDS.items():
            if key == "utilization":
                continue
            if name in snap.missing:
                reasons[key] = snap.missing[name]
                continue
            values = snap.values.get(name, {})
            if not all(d in values for d in ids):
                reasons[key] = f"the runtime's {name} has no device {', '.join(map(str, ids))}"
                continue
            if key == "memory_bandwidth_utilization":
                r.memory_bandwidth_utilization = sum(values[d] for d in ids) / per_chip / 100
                r.memory_bandwidth_source = BANDWIDTH_SOURCE
            elif key == "memory_used_bytes":
                r.memory_used_bytes = sum(values[d] for d in ids)
            else:
                r.memory_total_bytes = sum(values[d] for d in ids)

    @staticmethod
    def _found(r: Reading) -> set[str]:
        return {k for k in FIELDS if getattr(r, k) is not None}

    def _aer_events(self, device: str, chip: Chip) -> list[FaultEvent]:
        now = sysfs_chips.aer_totals(self.options.sysfs, chip)
        before = self._aer.get(device)
        self._aer[device] = now
        if before is None:
            return []
        return [
            FaultEvent(code, f"AER {code} total {before[code]} -> {total}")
            for code, total in now.items()
            if code in before and total > before[code]
        ]

    def _driver_events(self, device: str, chip: Chip, status: str) -> list[FaultEvent]:
        """A chip whose driver turns LAMED (alive, not fully working), and resets the
        driver made since the last poll; the first poll is the baseline of both."""
        events: list[FaultEvent] = []
        before = self._status.get(device)
        self._status[device] = status
        if status == "LAMED" and before is not None and before != "LAMED":
            events.append(FaultEvent("driver_lamed", f"driver status {before} -> LAMED"))
        resets = sysfs_chips.reset_count(chip)
        last = self._resets.get(device)
        if resets is not None:
            self._resets[device] = resets
            if last is not None and resets > last:
                events.append(FaultEvent("chip_reset", f"reset_count {last} -> {resets}"))
        return events

    def _core_events(self, snap: RuntimeSnapshot, i: int) -> list[FaultEvent]:
        events: list[FaultEvent] = []
        for core, (chip_id, message) in sorted(snap.core_errors.items()):
            if chip_id == i and self._core_errors.get(core) != message:
                self._core_errors[core] = message
                events.append(FaultEvent("core_error", f"core {core}: {message}"))
        # A core that recovered may fail again with the same message: count it then.
        for core in [c for c in self._core_errors if c not in snap.core_errors]:
            del self._core_errors[core]
        return events

    def topology(self) -> list[Link]:
        return pcie_links(self.options.sysfs, self._devices)

    def close(self) -> None:
        self.client.close()


def _per_chip(snap: RuntimeSnapshot) -> int:
    """Devices per chip where sysfs does not say: the HBM points per duty cycle point."""
    chips = len(snap.values.get(DUTY_CYCLE, {}))
    devices = len(snap.values.get(HBM_TOTAL, {}))
    if chips and devices % chips == 0 and devices >= chips:
        return devices // chips
    return 1
