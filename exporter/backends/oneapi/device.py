"""What every telemetry source of the oneAPI backend shares: the field keys a reading
is checked against, and how a source says that its device is gone.

Level Zero Sysman and the i915/xe sysfs files fill one ``Reading`` together (sysfs
fills what Sysman could not give), so both report under the same ``FIELDS`` keys and
both end a read the same way, with ``Lost``; this module sits below both, so that
neither imports the other or the backend class.
"""

from __future__ import annotations

from exporter.model import Reading

INTEL_PCI_VENDOR = 0x8086

# Every field this backend can report, by the key that ``missing`` uses: after a
# read, each is either in the Reading or has a reason in ``missing``.
FIELDS: tuple[str, ...] = (
    "utilization",
    "memory_used_bytes",
    "memory_total_bytes",
    "memory_bandwidth_utilization",
    "ecc_errors",
    "fault_events",
    "temperatures",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    "clocks_hz.graphics",
    "clocks_hz.memory",
    "throttle",
)


class Lost(Exception):
    """The device stopped answering; ``code`` is the fault event to count
    (``lost``, or ``reset_required``)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def found_fields(reading: Reading) -> set[str]:
    """The ``FIELDS`` keys a reading has a value for (``fault_events`` aside: no
    events is a value only when a source could look for them)."""
    out: set[str] = set()
    for key in (
        "utilization",
        "memory_used_bytes",
        "memory_total_bytes",
        "memory_bandwidth_utilization",
        "power_watts",
        "power_limit_watts",
        "energy_joules",
    ):
        if getattr(reading, key) is not None:
            out.add(key)
    if reading.ecc_errors:
        out.add("ecc_errors")
    if reading.temperatures:
        out.add("temperatures")
    if reading.throttle:
        out.add("throttle")
    out.update(f"clocks_hz.{k}" for k in reading.clocks_hz)
    return out
