"""The types of the fault catalogue, apart from the tables so that each vendor's
table module can import them without importing the others (``exporter.faults``
explains the severities and classes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from accel_common.remedies import LOST_CODE, UNKNOWN_CLASS, ActionClass

Severity = Literal["fatal", "recoverable", "info"]
UNKNOWN_SEVERITY: Final[Severity] = "recoverable"

# The severity a code gets when only its class is known (an operator's table names
# a code the built-in table lacks): what the class implies about the device.
SEVERITY_OF_CLASS: Final[Mapping[ActionClass, Severity]] = MappingProxyType(
    {
        "ignore": "info",
        "app": "info",
        "watch": "recoverable",
        "reset_when_idle": "recoverable",
        "reset": "fatal",
        "reboot": "fatal",
        "isolate": "fatal",
    }
)


@dataclass(frozen=True)
class FaultCode:
    """One vendor fault code: its severity and action class, a short name, why it is
    graded so, and ``source``: the vendor document (and column or level) that gives
    the class, or "exporter" where no vendor states one and the grading is ours."""

    code: str
    severity: Severity
    name: str
    reason: str
    action: ActionClass = UNKNOWN_CLASS
    source: str = "exporter"


def catalogue(*codes: FaultCode) -> dict[str, FaultCode]:
    """A vendor table keyed by code; a code listed twice is a mistake in the table."""
    out: dict[str, FaultCode] = {}
    for c in codes:
        if c.code in out:
            raise ValueError(f"fault code {c.code} is catalogued twice")
        out[c.code] = c
    return out


def lost(name: str, reason: str, source: str) -> FaultCode:
    """The ``lost`` entry every vendor has: the poller emits it once per loss, and a
    device that stopped answering needs the node rebooted (no vendor documents an
    in-OS recovery of a device gone from the bus; NVIDIA's Xid 79 is RESTART_BM)."""
    return FaultCode(LOST_CODE, "fatal", name, reason, "reboot", source)
