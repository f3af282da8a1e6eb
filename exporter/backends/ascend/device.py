"""What the ascend backend knows of one NPU chip, whichever source reads it (DCMI or
``npu-smi``): its state between polls, the field keys, and the rules both sources
share (names, the model string, health and fault-code events).

Both sources list chips in (card id, chip id) order and name them ``ascend0``,
``ascend1``... in that order, so a host that gains or loses the DCMI library keeps its
device names; that is why these pieces live here, below both sources.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.model import DeviceInfo, FaultEvent

VENDOR = "ascend"
MIB = 1024 * 1024  # DCMI and npu-smi say "MB" for 2**20 bytes (a 64 GB HBM is 65536 MB)

# Every catalogue field this backend can report: after a read each key is either in
# the reading or has a reason in ``missing``.
FIELDS: tuple[str, ...] = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_bandwidth_utilization",
    "ecc_errors",
    "retired_pages",
    "temperatures",
    "power_watts",
    "clocks_hz",
)

# dcmi_get_device_health's states, and the event each rise to it is counted as.
HEALTH_EVENTS: dict[int, str] = {1: "health_minor", 2: "health_major", 3: "health_critical"}
# npu-smi prints the same states as words (OK, Warning, Alarm, Critical).
NPU_SMI_HEALTH: dict[str, int] = {"ok": 0, "warning": 1, "alarm": 2, "critical": 3}


class AlarmTracker:
    """Turns the chip's health state and its list of active fault codes, polled, into
    fault events: a health state counts when the state rises to it, a fault code when
    it appears in the list.

    What the first poll finds is held back and counted on the second one: the
    ``accel_fault_events_total`` series is then exported at 0 first, so a rule's
    ``increase()`` sees a chip that was already in alarm when the exporter started
    (Prometheus cannot see the first sample of a series born at 1)."""

    def __init__(self) -> None:
        self._health = 0
        self._codes: frozenset[int] = frozenset()
        self._first = True
        self._held: list[FaultEvent] = []

    def observe(
        self, health: int | None, codes: Iterable[int] | None, source: str = "DCMI"
    ) -> list[FaultEvent]:
        """The events of this poll. ``None`` means "not known this poll": the previous
        state is kept, and nothing is counted for that source."""
        events: list[FaultEvent] = []
        if health is not None and health in HEALTH_EVENTS:
            if health > self._health:
                events.append(FaultEvent(HEALTH_EVENTS[health], f"health={health}"))
            self._health = health
        elif health == 0:
            self._health = 0
        if codes is not None:
            now = frozenset(c & 0xFFFFFFFF for c in codes)
            events.extend(
                FaultEvent(fault_code(c), f"{source} error code") for c in sorted(now - self._codes)
            )
            self._codes = now
        if self._first:
            self._first = False
            self._held = events
            return []
        held, self._held = self._held, []
        return held + events


@dataclass
class Npu:
    """One NPU chip and what the backend keeps about it between polls."""

    info: DeviceInfo
    card: int
    chip: int
    # Reasons that stay true while the driver is loaded (DCMI NOT_SUPPORT): not asked
    # again, copied into ``missing`` at every read.
    static: dict[str, str] = field(default_factory=dict)
    alarms: AlarmTracker = field(default_factory=AlarmTracker)
    # Set once the chip's loss was reported (with its fault event); later polls only
    # say it is still down.
    lost: bool = False

    @property
    def name(self) -> str:
        return self.info.device


def model_name(chip_type: str, chip_name: str) -> str:
    """ "Ascend910B3" from DCMI's ("Ascend", "910B3") or npu-smi's Name "910B3"."""
    name = chip_name.strip()
    kind = chip_type.strip() or "Ascend"
    if not name:
        return kind
    return name if name.lower().startswith(kind.lower()) else f"{kind}{name}"


def die_uuid(words: Iterable[int]) -> str:
    """The chip's VDie ID (five 32-bit words) as one stable hex string."""
    return "-".join(f"{w & 0xFFFFFFFF:08x}" for w in words)


def fault_code(code: int) -> str:
    """A DCMI fault code as the catalogue spells it: ``0x80E01801``."""
    return f"0x{code & 0xFFFFFFFF:08X}"
