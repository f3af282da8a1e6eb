"""The driver's live verdict on a GPU: NVML's GPU recovery action, as an action class.

Why it is built this way:

* NVIDIA's driver states what a faulted GPU needs (none, drain P2P, drain and reset,
  GPU reset, node reboot, and on newer drivers IMEX-domain recovery, bus reset,
  system reboot), published through the field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``,
  the recovery-action event type and Xid 154. It is more precise than the static
  catalogue (an NVLink Xid whose class depends on a payload NVML does not give), so
  every Xid the backend hands over carries it as ``FaultEvent.action`` and the
  poller takes the stronger of the two.
* Older drivers and older pynvml lack the field: then there is no verdict (None),
  never an exception; an answer that cannot change (NotSupported,
  FunctionNotFound) is remembered per GPU and not asked again. It is not a metric,
  so it stays out of the missing-field record (``FIELDS``).
* Drain P2P is ``reset_when_idle``: NVIDIA's guide asks to stop the peer-to-peer
  work using the GPU and start no new such work, not to reset it at once; keeping
  new work off and resetting once idle does that and clears the state. A bus reset
  is ``reboot`` (the node agent has no bus reset), IMEX-domain recovery ``watch``
  (it is not a device repair).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Final

from accel_common.remedies import ActionClass, stronger
from exporter.backends.nvidia.calls import STATIC, NvmlCalls, codes, field_value
from exporter.backends.nvidia.device import Gpu
from exporter.model import FaultEvent

# nvmlDeviceGpuRecoveryAction_t by its constant's name (values are the C enum's).
RECOVERY_CLASSES: Final[Mapping[str, ActionClass]] = MappingProxyType(
    {
        "NVML_GPU_RECOVERY_ACTION_NONE": "ignore",
        "NVML_GPU_RECOVERY_ACTION_GPU_RESET": "reset",
        "NVML_GPU_RECOVERY_ACTION_NODE_REBOOT": "reboot",
        "NVML_GPU_RECOVERY_ACTION_DRAIN_P2P": "reset_when_idle",
        "NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET": "reset",
        "NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN": "watch",
        "NVML_GPU_RECOVERY_ACTION_BUS_RESET": "reboot",
        "NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT": "reboot",
    }
)
# The C enum's values, for a pynvml too old to name them.
_VALUES: Final = {
    "NVML_GPU_RECOVERY_ACTION_NONE": 0,
    "NVML_GPU_RECOVERY_ACTION_GPU_RESET": 1,
    "NVML_GPU_RECOVERY_ACTION_NODE_REBOOT": 2,
    "NVML_GPU_RECOVERY_ACTION_DRAIN_P2P": 3,
    "NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET": 4,
    "NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN": 5,
    "NVML_GPU_RECOVERY_ACTION_BUS_RESET": 6,
    "NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT": 7,
}
FIELD: Final = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"


def action_class(nvml: Any, value: int) -> tuple[str, ActionClass | None]:
    """The name of a recovery action value and its class; an unknown value (a newer
    driver's) has no class: the catalogue's stands."""
    for name, cls in RECOVERY_CLASSES.items():
        if int(getattr(nvml, name, _VALUES[name])) == value:
            return name.removeprefix("NVML_GPU_RECOVERY_ACTION_").lower(), cls
    return f"unknown({value})", None


def read(calls: NvmlCalls, gpu: Gpu) -> ActionClass | None:
    """The GPU's current recovery action as a class; None where NVML has none."""
    nvml = calls.nvml
    fid = getattr(nvml, FIELD, None)
    if fid is None or gpu.parent is not None or gpu.no_recovery_action:
        return None
    values, err = calls.attempt(gpu, "nvmlDeviceGetFieldValues", gpu.handle, [fid])
    code = getattr(err, "value", None) if err is not None else None
    if not values:
        if code in codes(nvml, *STATIC):
            gpu.no_recovery_action = type(err).__name__
        return None
    fv = values[0]
    if fv.nvmlReturn != nvml.NVML_SUCCESS:
        if fv.nvmlReturn in codes(nvml, *STATIC):
            gpu.no_recovery_action = f"field answers {int(fv.nvmlReturn)}"
        return None
    return action_class(nvml, int(field_value(nvml, fv)))[1]


def apply(events: list[FaultEvent], verdict: ActionClass | None) -> list[FaultEvent]:
    """The events with the driver's verdict as their live class (the stronger one,
    where an event already carries one, as a recovery-action event does)."""
    if verdict is None:
        return events
    return [
        replace(e, action=verdict if e.action is None else stronger(e.action, verdict))
        for e in events
    ]
