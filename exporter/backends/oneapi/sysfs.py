"""Intel GPUs through the i915 and xe drivers' sysfs files: what the oneAPI backend
reads where Level Zero Sysman is absent, or could not give a field.

Why it is built this way:

* Everything is read under ``--path.sysfs``: ``class/drm/card*/device`` with vendor
  0x8086 and driver i915 or xe. The backend matches a card to a dpctl device by PCI
  address when Sysman gave one, else by PCI device id.
* hwmon ``energy1_input`` (µJ; xe's package channel ``energy2_input`` where there is
  no card channel) is the energy counter, and power is its delta over the time between
  two polls, so the first poll has none; ``power1_max`` (PL1, µW, 0 = disabled), else
  ``power1_crit``, is the power limit. The graphics clock is i915's
  ``gt/gt0/rps_act_freq_mhz`` (``gt_act_freq_mhz`` on older kernels) or xe's
  ``device/tile0/gt0/freq0/act_freq``, in MHz; xe's ``temp2_input``/``temp3_input``
  are the package and VRAM temperatures.
* It fills only the fields the reading does not have yet: with Sysman present, sysfs
  is the fallback, not a second opinion.
* Every file goes through the bounded reader (``accel_common.readfile``): a file that
  is not a regular file, over its cap, not UTF-8 or not a 64-bit number is a field
  left out (with its reason in ``missing`` where the read has one), never a device
  lost.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from accel_common.readfile import FieldError, parse_int, read_text
from exporter.backends.base import FIRST_SAMPLE
from exporter.backends.oneapi.device import INTEL_PCI_VENDOR, Lost
from exporter.model import Reading

_CARD = re.compile(r"^card\d+$")


def read_quiet(path: Path) -> str | None:
    """The file's text, or None when it is absent or unusable (``readfile``'s bounds)."""
    try:
        return read_text(path)
    except FieldError:
        return None


def _read_int(
    path: Path, base: int = 10, missing: dict[str, str] | None = None, key: str = ""
) -> int | None:
    """A file holding one number; None when absent or unusable, the reason of an
    unusable one kept under ``key`` in ``missing`` when given."""
    try:
        return parse_int(read_text(path), base, path)
    except FieldError as e:
        if missing is not None and key and not e.absent:
            missing[key] = f"{path.name}: {e.reason}"
        return None


def _uevent(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (read_quiet(path) or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


@dataclass
class Card:
    """An i915 or xe DRM card in sysfs."""

    path: Path  # class/drm/cardN
    driver: str  # i915 | xe
    pci: str
    device_id: int | None
    hwmon: Path | None
    previous_energy: tuple[float, float] | None = None  # (joules, clock seconds)

    @property
    def name(self) -> str:
        return self.path.name


def discover_cards(sysfs: Path) -> list[Card]:
    """The i915 and xe cards under ``class/drm``, in PCI address order."""
    cards: list[Card] = []
    for path in sorted(sysfs.joinpath("class", "drm").glob("card*")):
        if not _CARD.match(path.name):
            continue  # connectors (card0-DP-1) and the like
        dev = path / "device"
        if _read_int(dev / "vendor", 16) != INTEL_PCI_VENDOR:
            continue
        uevent = _uevent(dev / "uevent")
        driver = uevent.get("DRIVER", "")
        if not driver:
            try:
                driver = os.path.basename(os.readlink(dev / "driver"))
            except OSError:
                driver = ""
        if driver not in ("i915", "xe"):
            continue
        pci = uevent.get("PCI_SLOT_NAME") or os.path.basename(os.path.realpath(dev))
        device_id = _read_int(dev / "device", 16)
        hwmon = next(
            (
                h
                for h in sorted(dev.glob("hwmon/hwmon*"))
                if (read_quiet(h / "name") or "").strip() == driver
            ),
            None,
        )
        cards.append(Card(path, driver, pci.lower(), device_id, hwmon))
    return sorted(cards, key=lambda c: c.pci)


def read_card(card: Card, r: Reading, missing: dict[str, str], clock: Callable[[], float]) -> None:
    """Fills what ``r`` lacks from the card's files; ``Lost`` when the card is gone.
    ``clock`` times the energy counter (power is its delta over elapsed time)."""
    if not card.path.joinpath("device").exists():
        raise Lost(f"{card.name} ({card.pci}) is gone from sysfs", "lost")
    if card.hwmon is not None:
        _card_power(card, card.hwmon, r, missing, clock)
    if "graphics" not in r.clocks_hz:
        mhz = _card_clock(card)
        if mhz is not None:
            r.clocks_hz["graphics"] = mhz * 1e6
    if card.driver == "xe" and card.hwmon is not None:
        for channel, sensor in ((2, "package"), (3, "memory")):
            milli = _read_int(
                card.hwmon / f"temp{channel}_input", missing=missing, key="temperatures"
            )
            if milli is not None and sensor not in r.temperatures:
                r.temperatures[sensor] = milli / 1000.0


def _card_power(
    card: Card, hwmon: Path, r: Reading, missing: dict[str, str], clock: Callable[[], float]
) -> None:
    # Channel 1 is the card; xe on some platforms has only channel 2, the package.
    channel = 1 if (hwmon / "energy1_input").exists() or (hwmon / "power1_max").exists() else 2
    if r.energy_joules is None:
        uj = _read_int(hwmon / f"energy{channel}_input", missing=missing, key="energy_joules")
        if uj is not None:
            joules = uj / 1e6
            now = clock()
            before = card.previous_energy
            card.previous_energy = (joules, now)
            r.energy_joules = joules
            if before is None:
                missing["power_watts"] = FIRST_SAMPLE
            elif now <= before[1] or joules < before[0]:
                missing["power_watts"] = "the energy counter went back (driver reload)"
            else:
                r.power_watts = (joules - before[0]) / (now - before[1])
    if r.power_limit_watts is None:
        for name in (f"power{channel}_max", f"power{channel}_crit"):
            uw = _read_int(hwmon / name, missing=missing, key="power_limit_watts")
            if uw is not None and uw > 0:
                r.power_limit_watts = uw / 1e6
                return
            if uw == 0:
                # 0 means the limit is disabled: no limit, not a limit of 0 W.
                missing["power_limit_watts"] = f"{name} is 0: the limit is disabled"


def _card_clock(card: Card) -> float | None:
    if card.driver == "xe":
        paths = [card.path / "device" / "tile0" / "gt0" / "freq0" / "act_freq"]
    else:
        paths = [card.path / "gt" / "gt0" / "rps_act_freq_mhz", card.path / "gt_act_freq_mhz"]
    for p in paths:
        value = _read_int(p)
        if value is not None:
            return float(value)
    return None
