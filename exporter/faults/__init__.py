"""The fault catalogue: for every vendor fault code, how bad it is (a severity) and
what fixes it (an action class, ``accel_common.remedies``), each with the vendor
document that says so.

A remediation rule says ``accel_fault_events_total{action="reboot"}`` and must not
need to know that an NVIDIA Xid 79, an AMD device loss and a Gaudi AIP loss call for
the same step. This package is the only place that decides it; backends report raw
codes (and, where the driver states one, its live verdict, ``FaultEvent.action``)
and the poller asks here.

Severities:

``fatal``
    The device cannot be trusted to run work until it is reset, repaired or replaced
    (it fell off the bus, memory was corrupted beyond correction, the GPU's own
    firmware stopped).
``recoverable``
    The device corrected or contained the fault and keeps working, but something is
    wearing out or wants a reset at a convenient time (a row was marked for
    remapping, a high corrected-error rate).
``info``
    The event concerns one application (it crashed, faulted on its own memory, was
    killed) or is purely informational. The device is healthy.

The action class says which step of a ladder the fault needs first: ``ignore``,
``app`` (restart the job), ``watch``, ``reset_when_idle``, ``reset``, ``reboot`` or
``isolate`` (return the part); ``accel_common.remedies`` defines them. A severity
and a class are graded separately because they answer different questions: Xid 79
and Xid 95 are both ``fatal``, but a reset fixes one and never the other.

A code that no table knows is ``recoverable`` with the class ``watch``
(``UNKNOWN_CLASS``): counting it as fatal, or as ``reset``, would let an unknown and
perhaps harmless code drain nodes fleet-wide after a driver update; counting it as
info would hide it. Its code label still lets a rule single it out, and an
operator can load the vendor's newer table at start (``--fault-table``,
``exporter.faults.tables``).

The per-vendor tables live beside this module (``nvidia``, ``vendors`` for AMD,
Intel, Gaudi and TPU, ``ascend``); every entry names its source. The vendor pages
of the documentation (docs/vendors/) are generated from these tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from accel_common.remedies import LOST_CODE, UNKNOWN_CLASS, ActionClass, stronger
from exporter.faults.ascend import ASCEND_ALARMS
from exporter.faults.base import (
    SEVERITY_OF_CLASS,
    UNKNOWN_SEVERITY,
    FaultCode,
    Severity,
    catalogue,
    lost,
)
from exporter.faults.nvidia import NVIDIA_XID, NVLINK_PAYLOAD_CODES
from exporter.faults.vendors import AMD_RAS, GAUDI_EVENTS, INTEL_RAS, TPU_EVENTS

_SEVERITY_RANK: Final[dict[str, int]] = {"info": 0, "recoverable": 1, "fatal": 2}

# The loss of a device of a vendor without a table of its own.
LOST: Final = lost(
    "Device lost",
    "The device stopped answering its backend.",
    "exporter: a device gone from the bus needs a reboot",
)


@dataclass(frozen=True)
class Catalogue:
    """The tables in force: the built-in ones, with an operator's tables (if any)
    laid over them at start. Immutable once built, so the poller's thread and the
    event loop can share it."""

    tables: Mapping[str, Mapping[str, FaultCode]]

    def lookup(self, vendor: str, code: str) -> FaultCode | None:
        found = self.tables.get(vendor, {}).get(code)
        # A lost device is a lost device whatever the vendor (the CPU backend's, a
        # vendor without a table of its own).
        return LOST if found is None and code == LOST_CODE else found

    def classify(self, vendor: str, code: str) -> Severity:
        """The severity of one vendor fault code; unknown codes are ``recoverable``."""
        found = self.lookup(vendor, code)
        return found.severity if found is not None else UNKNOWN_SEVERITY

    def severity(
        self,
        vendor: str,
        code: str,
        live: ActionClass | None = None,
        decoded: ActionClass | None = None,
    ) -> Severity:
        """The severity of one fault: the catalogue's (or, for a code decoded by its
        payload, the one its decoded class implies), raised to what the driver's
        live verdict implies (a GPU the driver says must be reset is ``fatal``
        whatever event said so), so that a rule by severity sees it too."""
        static = self.classify(vendor, code)
        if decoded is not None and code in PAYLOAD_DECODED.get(vendor, ()):
            static = SEVERITY_OF_CLASS[decoded]
        if live is None:
            return static
        implied = SEVERITY_OF_CLASS[live]
        return implied if _SEVERITY_RANK[implied] > _SEVERITY_RANK[static] else static

    def action(
        self,
        vendor: str,
        code: str,
        live: ActionClass | None = None,
        decoded: ActionClass | None = None,
    ) -> ActionClass:
        """The class of one fault: the catalogue's (``UNKNOWN_CLASS`` for an unknown
        code), raised to the driver's live verdict when it states a stronger one. A
        live verdict never lowers the class: a driver that says "no action" after
        Xid 79 has not made the GPU answer again.

        One narrow exception: for the codes in ``PAYLOAD_DECODED`` (NVIDIA's NVLink
        Xids 74 and 144-150) the catalogue's class is only a default for an event
        whose payload is unknown, so a class decoded from the event's own payload
        (``FaultEvent.decoded``) replaces it, lower (an ignorable or sympathetic
        NVLink event) or higher. The live verdict still only raises the result."""
        found = self.lookup(vendor, code)
        static = found.action if found is not None else UNKNOWN_CLASS
        if decoded is not None and code in PAYLOAD_DECODED.get(vendor, ()):
            static = decoded
        return static if live is None else stronger(static, live)

    def pairs(self, vendor: str) -> list[tuple[Severity, ActionClass]]:
        """Every (severity, class) pair the vendor's table can yield, the unknown
        code's and the lost device's included: the fault counters a device shows at
        0 from the start, so that ``increase()`` sees the first event."""
        found = {(c.severity, c.action) for c in self.tables.get(vendor, {}).values()}
        found |= {(UNKNOWN_SEVERITY, UNKNOWN_CLASS), ("fatal", "reboot")}
        # Every severity keeps a series, as before there were classes, so that a rule
        # or a dashboard by severity alone sees a 0 rather than nothing.
        for severity in ("fatal", "recoverable", "info"):
            if not any(s == severity for s, _ in found):
                found.add((severity, UNKNOWN_CLASS))
        return sorted(found)

    def overlay(self, vendor: str, entries: Iterable[FaultCode]) -> Catalogue:
        """A catalogue with ``entries`` replacing or adding to ``vendor``'s table."""
        merged = {k: dict(v) for k, v in self.tables.items()}
        table = merged.setdefault(vendor, {})
        for e in entries:
            table[e.code] = e
        return Catalogue(merged)


# The simulated and CPU backends reuse their vendor's catalogue.
CATALOGUES: dict[str, dict[str, FaultCode]] = {
    "nvidia": NVIDIA_XID,
    "amd": AMD_RAS,
    "oneapi": INTEL_RAS,
    "gaudi": GAUDI_EVENTS,
    "tpu": TPU_EVENTS,
    "ascend": ASCEND_ALARMS,
}

BUILTIN: Final = Catalogue(CATALOGUES)

# Per vendor, the codes whose catalogue class is a default that a class decoded from
# the event's payload replaces (``Catalogue.action``).
PAYLOAD_DECODED: Final[Mapping[str, frozenset[str]]] = {"nvidia": NVLINK_PAYLOAD_CODES}


def lookup(vendor: str, code: str) -> FaultCode | None:
    return BUILTIN.lookup(vendor, code)


def classify(vendor: str, code: str) -> Severity:
    """The severity of one vendor fault code in the built-in tables."""
    return BUILTIN.classify(vendor, code)


def action(vendor: str, code: str, live: ActionClass | None = None) -> ActionClass:
    """The action class of one fault in the built-in tables (``Catalogue.action``)."""
    return BUILTIN.action(vendor, code, live)


__all__ = [
    "AMD_RAS",
    "ASCEND_ALARMS",
    "BUILTIN",
    "CATALOGUES",
    "GAUDI_EVENTS",
    "INTEL_RAS",
    "NVIDIA_XID",
    "PAYLOAD_DECODED",
    "SEVERITY_OF_CLASS",
    "TPU_EVENTS",
    "UNKNOWN_SEVERITY",
    "Catalogue",
    "FaultCode",
    "Severity",
    "action",
    "catalogue",
    "classify",
    "lookup",
    "lost",
]
