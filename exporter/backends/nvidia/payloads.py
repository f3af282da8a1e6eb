"""NVLink Xid payloads joined to NVML's Xid events: the decoded class becomes the
event's ``FaultEvent.decoded``.

Why it is built this way:

* NVML's event is what is counted, one per Xid; the kernel log only grades it. A
  line is joined to the NVML event of the same GPU (by PCI address) and the same
  code, oldest line first, if it was read at most ``WINDOW_S`` seconds before: so
  one line grades one event, and a line that no event claims (NVML missed the Xid,
  or it is a GPU this exporter does not watch) expires unused. Counting it would
  count the same Xid twice the day NVML's event comes late; not counting it leaves
  the NVML counter exactly one per event.
* The driver prints the line before it posts the event, and the backend reads the
  log just before it drains NVML's event set, so a line is in hand when its event
  is. An event without a line (no log, the line unreadable, or not decodable)
  keeps the catalogue's default class.
* The backlog is bounded (``MAX_PENDING`` lines in all), so a flood of Xid lines
  for a GPU whose events never come cannot grow without end.
* A decoded class replaces the catalogue's default for these codes only
  (``exporter.faults.Catalogue.action``); the driver's recovery action, carried
  as ``FaultEvent.action``, still raises it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Final

from exporter.backends.nvidia import linkpayload
from exporter.backends.nvidia.device import Gpu
from exporter.backends.nvidia.kmsg import KmsgReader
from exporter.backends.nvidia.linkpayload import PAYLOAD_CODES, XidLine
from exporter.model import FaultEvent

log = logging.getLogger("accel_exporter.nvidia")

# How long a line waits for its NVML event (seconds).
WINDOW_S: Final = 30.0
# Lines waiting for their event, all GPUs together.
MAX_PENDING: Final = 1024


def bus_key(pci_bus_id: str) -> str:
    """The kernel's ``dddd:bb:dd`` for a bus id as the backend keeps it
    (``0000:3b:00.0``): the Xid line names no function."""
    return pci_bus_id.lower().rsplit(".", 1)[0]


class Payloads:
    """NVLink Xid lines read from the kernel log, waiting for their NVML event."""

    def __init__(
        self,
        reader: KmsgReader | None,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = reader
        self._window = window_s
        self._clock = clock
        self._pending: deque[tuple[float, XidLine]] = deque()

    def poll(self) -> None:
        """Reads the new kernel log records and keeps the NVLink Xid lines."""
        if self._reader is None:
            return
        now = self._clock()
        for rec in self._reader.read():
            line = linkpayload.parse(rec.message)
            if line is None or line.code not in PAYLOAD_CODES:
                continue
            if len(self._pending) >= MAX_PENDING:
                dropped = self._pending.popleft()[1]
                log.debug("NVLink Xid line backlog full; dropping Xid %s", dropped.code)
            self._pending.append((now, line))

    def apply(self, gpu: Gpu, events: list[FaultEvent]) -> list[FaultEvent]:
        """The events with the class their payload calls for, where one was read."""
        self._expire()
        if not self._pending or not any(e.code in PAYLOAD_CODES for e in events):
            return events
        physical = gpu.parent or gpu
        bus = bus_key(physical.info.pci_bus_id)
        hopper = linkpayload.is_hopper(physical.info.model)
        out: list[FaultEvent] = []
        for e in events:
            line = self._claim(bus, e.code) if e.code in PAYLOAD_CODES else None
            found = linkpayload.decode(line, hopper) if line is not None else None
            if found is None:
                out.append(e)
                continue
            detail = f"{e.detail} {found.why}".strip()
            out.append(replace(e, decoded=found.action, detail=detail))
        return out

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def _claim(self, bus: str, code: str) -> XidLine | None:
        """Takes the oldest waiting line for this GPU and code."""
        for i, (_, line) in enumerate(self._pending):
            if line.bus == bus and line.code == code:
                del self._pending[i]
                return line
        return None

    def _expire(self) -> None:
        limit = self._clock() - self._window
        while self._pending and self._pending[0][0] < limit:
            _, line = self._pending.popleft()
            log.debug("Xid %s line for PCI %s matched no NVML event", line.code, line.bus)
