"""What each vendor prescribes for a fault, in one vocabulary, and what each vendor's
devices allow the node agent to do.

A severity (``fatal``, ``recoverable``, ``info``) says how bad a fault is; it does not
say what fixes it. NVIDIA's Xid catalog gives every Xid a resolution bucket
(RESTART_APP, RESET_GPU, RESTART_BM, ...), AMD's GPU Operator and the amdgpu RAS
documentation say when a GPU must be reset or retired, Huawei's MindCluster gives
every NPU fault code a handling level (RestartBusiness, ResetChip, SeparateNPU, ...).
The exporter grades every fault code into one of the classes below and publishes
the class as the ``action`` label of ``accel_fault_events_total``; the shipped rules
enter their ladders at the step the class calls for, and the simulator decides from
the class which repair fixes which fault.

This module sits in ``accel_common`` because three programs read it: the exporter
(the label), the controller and the simulator (which repair can work), and the node
agent. Which vendors the agent can reset, and how, is declared once in
``accel_common.agentsupport`` (re-exported here as ``RESETTABLE_VENDORS``,
``can_reset`` and ``UNSUPPORTED_REASON``), so that the agent's answer, the
controller's expectation and the simulator's model cannot drift apart.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from accel_common.agentsupport import RESETTABLE_VENDORS, UNSUPPORTED_REASON, can_reset

# The classes, gentlest first. ``ignore``: nothing to do (informational, or an event
# the vendor tells operators to ignore). ``app``: the application faulted; restart
# the job, the device is fine. ``watch``: count it and look if it recurs; no action
# yet. ``reset_when_idle``: a repair is pending that a device reset applies (a row
# remap, a row replacement); keep new work off and reset once the device is idle,
# without forcing jobs off. ``reset``: move the jobs and reset the device.
# ``reboot``: the device cannot be reset from the running OS (fallen off the bus);
# move the jobs and reboot the node. ``isolate``: the part must be returned (field
# diagnostics or replacement); take it out of service for good.
ActionClass = Literal["ignore", "app", "watch", "reset_when_idle", "reset", "reboot", "isolate"]
ACTION_CLASSES: Final[tuple[ActionClass, ...]] = get_args(ActionClass)

# A class's rank: a fault that needs more wins when two classes meet (the driver's
# live verdict against the static table, two events in one poll).
RANK: Final[dict[ActionClass, int]] = {c: i for i, c in enumerate(ACTION_CLASSES)}

# The class of a fault code that no table knows. Not ``ignore`` (an unknown code
# might be serious) and not ``reset`` (an unknown, perhaps harmless, code would then
# drain and reset devices fleet-wide after a driver update): ``watch`` counts it, a
# rule can single it out by its code, and the recurrence rules notice it repeating.
UNKNOWN_CLASS: Final[ActionClass] = "watch"

# The code every backend reports when a device stops answering, whatever the
# vendor and whenever it was lost (before the exporter started included).
LOST_CODE: Final = "lost"


def stronger(a: ActionClass, b: ActionClass) -> ActionClass:
    """The class that asks for more of the two."""
    return a if RANK[a] >= RANK[b] else b


# What the node agent can do per vendor is declared in ``accel_common.agentsupport``;
# these names stay here for the readers that import them with the classes.
__all__ = [
    "ACTION_CLASSES",
    "LOST_CODE",
    "RANK",
    "RESETTABLE_VENDORS",
    "UNKNOWN_CLASS",
    "UNSUPPORTED_REASON",
    "ActionClass",
    "can_reset",
    "stronger",
]
