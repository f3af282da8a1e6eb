"""Ascend NPUs through DCMI: discovery, one poll of one chip, and the HCCS topology.

Why it is built this way:

* **Identity first, kept.** A chip is named at discovery from its card and chip ids,
  with its model (``dcmi_get_device_chip_info``), its VDie ID as the UUID
  (``dcmi_get_device_die_v2``: MindCluster uses it as the chip's unique id), its PCI
  address and the driver version; a field DCMI will not give leaves that label empty
  (the UUID then falls back to the PCI address), never the chip unnamed.
* **One rule per return code** (``dcmi.DcmiError.kind``): NOT_READY or
  DEVICE_NOT_EXIST from any call is a lost chip; NOT_SUPPORT and no permission are
  remembered and not asked again; a timeout, an upgrade or a busy chip leaves the
  field out of this poll quietly; anything else leaves it out with one warning.
* **A lost chip is reported once with its fault** (``Reading(up=False)`` carrying a
  ``lost`` event, so the fatal fault is counted as it happens), then as
  ``DeviceLostError`` until it answers again.
* **Topology** is DCMI's own answer for each pair (``dcmi_get_topo_info_by_device_id``):
  HCCS, HCCS through a switch, and SIO (the die-to-die bus of a dual-die package) are
  ``hccs`` links; the PCIe answers map onto the PCIe rungs of the distance scale. A
  library without that function leaves the PCIe path from sysfs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from exporter.backends.ascend import dcmi
from exporter.backends.ascend.device import (
    MIB,
    VENDOR,
    Npu,
    die_uuid,
    model_name,
)
from exporter.backends.base import BackendOptions, MissingFields
from exporter.model import DeviceInfo, DeviceLostError, FaultEvent, Link, Reading
from exporter.pcitopo import cpu_affinity, numa_node, pcie_links

log = logging.getLogger("accel_exporter.ascend")

T = TypeVar("T")

DCMI_SOURCE = "DCMI"
HBM_BANDWIDTH_SOURCE = "DCMI dcmi_get_device_hbm_info bandwith_util_rate"

# dcmi_get_topo_info_by_device_id's answer -> the link type of the distance scale.
TOPO_LINKS: dict[int, str] = {
    dcmi.TOPO_HCCS: "hccs",
    dcmi.TOPO_HCCS_SW: "hccs",
    dcmi.TOPO_SIO: "hccs",
    dcmi.TOPO_PIX: "pcie_switch",
    dcmi.TOPO_PXB: "pcie_switch",
    dcmi.TOPO_PHB: "pcie_hostbridge",
    dcmi.TOPO_SYS: "system",
}


class _Lost(Exception):
    """A call answered that the chip is gone."""


class DcmiReader:
    """One initialised DCMI library: discovers its chips, reads them, maps their links."""

    def __init__(self, lib: Any, options: BackendOptions, missing: MissingFields) -> None:
        self.dcmi = dcmi.Dcmi(lib)
        self.options = options
        self.missing = missing

    # -- discovery ---------------------------------------------------------------------

    def discover(self) -> tuple[list[Npu], str]:
        """Initialises DCMI and lists its NPU chips in (card, chip) order; or none, and
        why DCMI is not a source here."""
        try:
            self.dcmi.init()
            cards = sorted(self.dcmi.card_list())
        except dcmi.DcmiError as e:
            return [], f"DCMI is not usable: {e}"
        chips: list[tuple[int, int]] = []
        for card in cards:
            # One card that does not answer (dropped before the exporter started)
            # costs only its own chips, not the library as a source.
            try:
                chips += [(card, chip) for chip in range(self.dcmi.device_count(card))]
            except dcmi.DcmiError as e:
                log.warning("ascend: card %d left out: %s", card, e)
        if not chips:
            return [], "DCMI found no NPU"
        try:
            driver = self.dcmi.driver_version()
        except dcmi.DcmiError as e:
            log.debug("ascend: no driver version: %s", e)
            driver = ""
        npus = [
            Npu(self._identity(index, card, chip, driver), card, chip)
            for index, (card, chip) in enumerate(chips)
        ]
        return npus, ""

    def _identity(self, index: int, card: int, chip: int, driver: str) -> DeviceInfo:
        name = f"{VENDOR}{index}"
        model = "Ascend"
        try:
            chip_type, chip_name, _ = self.dcmi.chip_info(card, chip)
            model = model_name(chip_type, chip_name)
        except dcmi.DcmiError as e:
            log.debug("%s: no chip info: %s", name, e)
        pci = ""
        try:
            pci = self.dcmi.pci_bus_id(card, chip)
        except dcmi.DcmiError as e:
            log.debug("%s: no PCIe info: %s", name, e)
        uuid = ""
        try:
            words = self.dcmi.vdie_id(card, chip)
            uuid = die_uuid(words) if any(words) else ""
        except dcmi.DcmiError as e:
            log.debug("%s: no VDie ID: %s", name, e)
        return DeviceInfo(
            device=name,
            vendor=VENDOR,
            uuid=uuid or pci or f"{VENDOR}-card{card}-chip{chip}",
            model=model,
            pci_bus_id=pci,
            driver_version=driver,
            numa_node=numa_node(self.options.sysfs, pci),
            cpu_affinity=cpu_affinity(self.options.sysfs, pci),
        )

    # -- reading -----------------------------------------------------------------------

    def read(self, npu: Npu) -> Reading:
        try:
            reading = self._read(npu)
        except _Lost as e:
            if npu.lost:
                raise DeviceLostError(str(e)) from e
            npu.lost = True
            return Reading(
                up=False,
                down_reason=f"device lost: {e}",
                fault_events=[FaultEvent("lost", str(e))],
            )
        npu.lost = False
        return reading

    def _read(self, npu: Npu) -> Reading:
        d, c, n = self.dcmi, npu.card, npu.chip
        r = Reading(telemetry_source=DCMI_SOURCE)
        health = self._get(npu, "health", lambda: d.health(c, n))
        if health == dcmi.HEALTH_NO_DEVICE:
            raise _Lost("dcmi_get_device_health: this device does not exist")
        codes = self._get(npu, "fault_codes", lambda: d.error_codes(c, n))
        r.fault_events.extend(npu.alarms.observe(health, codes))

        aicore = self._get(npu, "utilization", lambda: d.utilization(c, n, dcmi.UTIL_AICORE))
        r.utilization = _ratio(aicore)

        hbm = self._get(
            npu,
            ("memory_total_bytes", "memory_used_bytes", "memory_bandwidth_utilization"),
            lambda: d.hbm_info(c, n),
        )
        if hbm is not None and hbm.memory_size > 0:
            r.memory_total_bytes = float(hbm.memory_size * MIB)
            if hbm.memory_usage <= hbm.memory_size:
                r.memory_used_bytes = float(hbm.memory_usage * MIB)
            bandwidth = _ratio(hbm.bandwith_util_rate)
            if bandwidth is not None:
                r.memory_bandwidth_utilization = bandwidth
                r.memory_bandwidth_source = HBM_BANDWIDTH_SOURCE
            r.temperatures["memory"] = float(hbm.temp)
            if hbm.freq:
                r.clocks_hz["memory"] = hbm.freq * 1e6
        elif hbm is None and "memory_total_bytes" in npu.static:
            # No HBM (Ascend 310P): the chip's DDR, from the memory call.
            self._ddr(npu, r)

        temp = self._get(npu, "temperatures", lambda: d.temperature(c, n))
        if temp is not None:
            # The chip's sensor is "gpu" for every vendor, so that one rule reads all.
            r.temperatures["gpu"] = float(temp)
        power = self._get(npu, "power_watts", lambda: d.power_decawatts(c, n))
        if power is not None and power >= 0:
            r.power_watts = power / 10  # DCMI reports 0.1 W units
        mhz = self._get(npu, "clocks_hz", lambda: d.frequency_mhz(c, n, dcmi.FREQ_AICORE_CURRENT))
        if mhz:
            r.clocks_hz["aicore"] = mhz * 1e6

        ecc = self._get(npu, ("ecc_errors", "retired_pages"), lambda: d.ecc_info(c, n))
        if ecc is not None:
            if ecc.enable_flag:
                r.ecc_errors = {
                    "corrected": float(ecc.total_single_bit_error_cnt),
                    "uncorrected": float(ecc.total_double_bit_error_cnt),
                }
                r.retired_pages = {"double_bit_ecc": float(ecc.double_bit_isolated_pages_cnt)}
            else:
                self.missing.note(
                    npu.name,
                    ("ecc_errors", "retired_pages"),
                    "HBM ECC detection is disabled (enable_flag 0)",
                )
        return r

    def _ddr(self, npu: Npu, r: Reading) -> None:
        d, c, n = self.dcmi, npu.card, npu.chip
        mem = self._get(
            npu, ("memory_total_bytes", "memory_used_bytes"), lambda: d.memory_info(c, n), "ddr"
        )
        if mem is not None and mem.memory_size > 0:
            r.memory_total_bytes = float(mem.memory_size * MIB)
            if mem.memory_available <= mem.memory_size:
                r.memory_used_bytes = float((mem.memory_size - mem.memory_available) * MIB)

    def _get(
        self,
        npu: Npu,
        keys: str | Sequence[str],
        call: Callable[[], T],
        static_key: str = "",
    ) -> T | None:
        """One DCMI call for the fields ``keys``: its answer, or None with the reason
        noted. A chip that is gone raises ``_Lost``. ``static_key`` names the memo of
        a call whose fields share another call's keys (the DDR fallback)."""
        keys = (keys,) if isinstance(keys, str) else tuple(keys)
        memo = static_key or keys[0]
        if memo in npu.static:
            if memo != keys[0]:
                self.missing.note(npu.name, keys, npu.static[memo])
            return None
        try:
            return call()
        except dcmi.DcmiError as e:
            if e.kind == "lost":
                raise _Lost(str(e)) from e
            reason = str(e)
            if e.kind == "static":
                npu.static[memo] = reason
                for key in keys:
                    npu.static.setdefault(key, reason)
            self.missing.note(npu.name, keys, reason)
            if e.kind == "error":
                self.missing.warn_once(
                    (npu.name, reason), "%s: DCMI call failed: %s", npu.name, reason
                )
            return None

    # -- topology ----------------------------------------------------------------------

    def topology(self, npus: Sequence[Npu]) -> list[Link]:
        """DCMI's relation for every pair of chips; the PCIe path from sysfs where the
        library cannot say."""
        links: list[Link] = []
        for i, a in enumerate(npus):
            for b in npus[i + 1 :]:
                try:
                    kind = self.dcmi.topology((a.card, a.chip), (b.card, b.chip))
                except dcmi.DcmiError as e:
                    if e.kind == "static":
                        log.info("ascend: no DCMI topology (%s); PCIe path from sysfs", e)
                        return pcie_links(self.options.sysfs, [n.info for n in npus])
                    log.debug("ascend: topology of %s and %s: %s", a.name, b.name, e)
                    continue
                link_type = TOPO_LINKS.get(kind)
                if link_type is not None:
                    links.append(Link(a.name, b.name, link_type))
        return links


def _ratio(percent: int | None) -> float | None:
    """A DCMI percentage as a ratio; None for nothing or an impossible value."""
    if percent is None or not 0 <= percent <= 100:
        return None
    return percent / 100
