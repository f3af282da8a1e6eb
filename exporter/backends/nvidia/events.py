"""Xid events through one NVML event set for the whole backend.

Why it is built this way:

* One set for every GPU, drained without blocking at every ``read()``: the poller
  reads devices one after the other, and a blocking wait would stall them all.
* Events for other devices than the one being read are kept until their own read,
  so nothing is lost whatever order the poller reads devices in; both a drain and
  the backlog of an unread device are bounded, so that an event storm cannot keep a
  read from finishing or grow without end.
* An event names its GPU by handle (and, in MIG mode, its GPU and compute instance
  ids); it is counted on the one MIG instance it names, else on the GPU.
* A GPU whose events cannot be registered carries the reason under
  ``fault_events``: it has no Xid counter, which is not the same as no Xids.
"""

from __future__ import annotations

import logging
from typing import Any

from exporter.backends.base import MissingFields
from exporter.backends.nvidia import verdicts
from exporter.backends.nvidia.calls import quietly
from exporter.backends.nvidia.device import Gpu, address
from exporter.model import FaultEvent

log = logging.getLogger("accel_exporter.nvidia")

# Sentinel NVML puts in nvmlEventData_t.gpuInstanceId / computeInstanceId when an
# event is not attributable to one MIG instance (NVML_GPU_INSTANCE_ID_ANY).
_INSTANCE_ANY = 0xFFFFFFFF
# An event set is drained at every read; this bounds one drain so that an event storm
# cannot keep a read from finishing.
_MAX_EVENTS_PER_DRAIN = 1024
# Events buffered for a device that is not being read (its backend hung, say).
_MAX_PENDING_EVENTS = 1024


class XidEvents:
    """The backend's NVML event set and the Xid events not yet handed to a read."""

    def __init__(self, nvml: Any, missing: MissingFields) -> None:
        self._nvml = nvml
        self._missing = missing
        self._set: Any = None
        # Why the set could not be created ("" when it was).
        self._reason = ""
        self._gpus: list[Gpu] = []
        self._by_address: dict[int, Gpu] = {}
        self._pending: dict[str, list[FaultEvent]] = {}

    def open(self) -> None:
        """Creates the event set; without one, every GPU's ``fault_events`` says why."""
        nvml = self._nvml
        try:
            self._set = nvml.nvmlEventSetCreate()
            self._reason = ""
        except nvml.NVMLError as e:
            self._set = None
            self._reason = f"nvmlEventSetCreate: {type(e).__name__}"

    def watch(self, gpu: Gpu) -> None:
        """Registers a physical GPU (and so its MIG instances) for Xid events."""
        nvml = self._nvml
        self._gpus.append(gpu)
        self._by_address[address(gpu.handle)] = gpu
        reason = self._reason
        if not reason:
            try:
                nvml.nvmlDeviceRegisterEvents(
                    gpu.handle, nvml.nvmlEventTypeXidCriticalError, self._set
                )
                gpu.events_registered = True
            except nvml.NVMLError as e:
                reason = f"nvmlDeviceRegisterEvents: {type(e).__name__}"
        recovery = getattr(nvml, "nvmlEventTypeGpuRecoveryAction", None)
        if not reason and recovery is not None:
            # The driver's own statement of the action a GPU needs; a driver or
            # pynvml without the event type leaves the verdict to the field read
            # with each Xid (``verdicts``).
            try:
                nvml.nvmlDeviceRegisterEvents(gpu.handle, recovery, self._set)
            except nvml.NVMLError as e:
                log.debug("%s: no recovery-action events: %s", gpu.name, type(e).__name__)
        if reason:
            for d in (gpu, *gpu.children):
                d.static["fault_events"] = reason

    def take(self, device: str) -> list[FaultEvent]:
        """The events for ``device`` since its previous read, after draining the set."""
        self._drain()
        return self._pending.pop(device, [])

    def close(self) -> None:
        if self._set is not None:
            quietly(self._nvml.nvmlEventSetFree, self._set)
            self._set = None

    def _drain(self) -> None:
        nvml = self._nvml
        if self._set is None:
            return
        for _ in range(_MAX_EVENTS_PER_DRAIN):
            try:
                data = nvml.nvmlEventSetWait(self._set, 0)
            except nvml.NVMLError as e:
                if e.value != nvml.NVML_ERROR_TIMEOUT:  # Timeout: nothing more queued
                    name = type(e).__name__
                    self._missing.warn_once(("", "events", name), "NVML event set: %s", name)
                return
            self._attribute(data)

    def _attribute(self, data: Any) -> None:
        nvml = self._nvml
        recovery = getattr(nvml, "nvmlEventTypeGpuRecoveryAction", 0)
        if recovery and data.eventType & recovery:
            self._recovery(data)
            return
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return
        gpu = self._by_address.get(address(data.device))
        if gpu is None:
            try:
                uuid = str(nvml.nvmlDeviceGetUUID(data.device))
            except nvml.NVMLError:
                uuid = ""
            gpu = next((g for g in self._gpus if g.info.uuid == uuid), None)
        code = str(int(data.eventData))
        if gpu is None:
            log.warning("Xid %s on a GPU this exporter does not know; not counted", code)
            return
        target, detail = gpu, ""
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        if gi != _INSTANCE_ANY:
            detail = f"gpu_instance={gi}" + (
                f" compute_instance={ci}" if ci != _INSTANCE_ANY else ""
            )
            matches = [
                c
                for c in gpu.children
                if c.gpu_instance == gi and (ci == _INSTANCE_ANY or c.compute_instance == ci)
            ]
            # One instance matches: it is that instance's fault. None or several (an
            # event for a whole GPU instance split in compute instances): the GPU's.
            if len(matches) == 1:
                target = matches[0]
        self._queue(target, FaultEvent(code=code, detail=detail))

    def _recovery(self, data: Any) -> None:
        """A recovery-action event: the driver's verdict, counted as an event of its
        own (code ``recovery_action``) whose live class is the verdict."""
        gpu = self._by_address.get(address(data.device))
        if gpu is None:
            log.warning("a recovery-action event on a GPU this exporter does not know")
            return
        name, cls = verdicts.action_class(self._nvml, int(data.eventData))
        if cls is None or cls == "ignore":
            return  # "none" (a verdict cleared) or a value this exporter cannot grade
        self._queue(gpu, FaultEvent("recovery_action", f"action={name}", cls))

    def _queue(self, target: Gpu, event: FaultEvent) -> None:
        pending = self._pending.setdefault(target.name, [])
        if len(pending) >= _MAX_PENDING_EVENTS:
            log.warning(
                "%s: more than %d Xid events unread; dropping %s",
                target.name,
                _MAX_PENDING_EVENTS,
                event.code,
            )
            return
        pending.append(event)
