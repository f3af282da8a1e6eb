"""Critical events through one HLML event set for the whole gaudi backend.

Why it is built this way:

* One set for every device (``hlml_event_set_create``), each device registered for
  the event types of the fault catalogue (``exporter.faults.GAUDI_EVENTS``), drained
  without blocking (a 0 ms ``hlml_event_set_wait``) at every read: the poller reads
  devices one after the other and a blocking wait would stall them all.
* An event carries a bit mask (``hlml_event_data_t.event_type``); each bit set is one
  fault code.
* Events for another device than the one being read are kept until its own read, so
  nothing is lost whatever order the poller reads in; a drain and the backlog of an
  unread device are both bounded, so an event storm cannot stall a read.
* A driver older than the single-bit and DRAM bits refuses them: registration is
  then retried with the original three types. A device whose events cannot be
  registered carries the reason under ``fault_events``: it has no fault counter,
  which is not the same as no faults.
"""

from __future__ import annotations

import logging

from exporter.backends.base import MissingFields
from exporter.backends.gaudi import hlml
from exporter.backends.gaudi.device import Gaudi
from exporter.backends.gaudi.hlml import Hlml, HlmlError
from exporter.model import FaultEvent

log = logging.getLogger("accel_exporter.gaudi")

# Event bit -> fault code (exporter.faults.GAUDI_EVENTS), in the order they are emitted.
CODES: tuple[tuple[int, str], ...] = (
    (hlml.EVENT_ECC_DERR, "ecc_double_bit"),
    (hlml.EVENT_DRAM_DERR, "dram_double_bit"),
    (hlml.EVENT_ECC_SERR, "ecc_single_bit"),
    (hlml.EVENT_DRAM_SERR, "dram_single_bit"),
    (hlml.EVENT_CRITICAL_ERR, "critical_error"),
    (hlml.EVENT_CLOCK_RATE, "clock_rate"),
)
ALL_TYPES = sum(bit for bit, _ in CODES)
# What every HLML release accepts (HLML_EVENT_ECC_ERR, CRITICAL_ERR, CLOCK_RATE).
LEGACY_TYPES = hlml.EVENT_ECC_DERR | hlml.EVENT_CRITICAL_ERR | hlml.EVENT_CLOCK_RATE
_MAX_EVENTS_PER_DRAIN = 1024
_MAX_PENDING_EVENTS = 1024


def decode(types: int) -> list[FaultEvent]:
    """The fault events of one delivered event's type bits."""
    return [FaultEvent(code) for bit, code in CODES if types & bit]


class GaudiEvents:
    """The backend's event set and the events not yet handed to a read."""

    def __init__(self, lib: Hlml, missing: MissingFields) -> None:
        self._lib = lib
        self._missing = missing
        self._set = 0
        self._reason = ""
        self._by_handle: dict[int, Gaudi] = {}
        self._pending: dict[str, list[FaultEvent]] = {}

    def open(self) -> None:
        try:
            self._set = self._lib.event_set_create()
            self._reason = ""
        except HlmlError as e:
            self._set = 0
            self._reason = str(e)

    def renew(self) -> None:
        """A new set after HLML was initialised again; the devices are to be watched
        again, and the events already taken from the old set wait for their reads."""
        self.close()
        self._by_handle.clear()
        self.open()

    def watch(self, gpu: Gaudi) -> None:
        self._by_handle[gpu.handle] = gpu
        reason = self._reason
        if not reason:
            for types in (ALL_TYPES, LEGACY_TYPES):
                try:
                    self._lib.register_events(gpu.handle, types, self._set)
                    gpu.events_registered = True
                    reason = ""
                    break
                except HlmlError as e:
                    reason = str(e)
        if reason:
            gpu.static["fault_events"] = reason

    def take(self, device: str) -> list[FaultEvent]:
        """The events for ``device`` since its previous read, after draining the set."""
        self._drain()
        return self._pending.pop(device, [])

    def close(self) -> None:
        if self._set:
            try:
                self._lib.event_set_free(self._set)
            except HlmlError as e:  # shutting down: nothing useful to do with it
                log.debug("%s", e)
            self._set = 0

    def _drain(self) -> None:
        if not self._set:
            return
        for _ in range(_MAX_EVENTS_PER_DRAIN):
            try:
                handle, types = self._lib.event_set_wait(self._set, 0)
            except HlmlError as e:
                if e.code != hlml.ERROR_TIMEOUT:  # TIMEOUT: nothing more queued
                    self._missing.warn_once(("", "events", e.reason), "HLML event set: %s", e)
                return
            gpu = self._by_handle.get(handle)
            if gpu is None:
                log.warning("HLML event 0x%x on a device this exporter does not know", types)
                continue
            pending = self._pending.setdefault(gpu.name, [])
            for event in decode(types):
                if len(pending) >= _MAX_PENDING_EVENTS:
                    log.warning("%s: too many unread HLML events; dropping", gpu.name)
                    break
                pending.append(event)
