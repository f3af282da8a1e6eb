"""Huawei Ascend's fault codes, and MindCluster's handling levels as action classes.

Two DCMI sources: dcmi_get_device_health gives the chip's overall state (0 normal,
1 general/minor alarm, 2 major alarm, 3 critical alarm; the ascend backend emits
health_minor/_major/_critical when the state rises to that level), and
dcmi_get_device_errorcode_v2 lists the chip's active 32-bit fault codes (written
here as 0x%08X; each counts once when it appears).

A code's class follows the handling level Huawei's MindCluster gives it in its
default fault configuration (the ascend-device-plugin's faultCode.json, one list of
codes per level; "Fault Handling" in the MindCluster documentation), mapped by
``LEVEL_CLASSES``. An operator's copy of that file can be loaded at start
(``--fault-table ascend=FILE``) so that codes a newer release adds need no
release of the exporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from accel_common.remedies import ActionClass
from exporter.faults.base import FaultCode, catalogue, lost

# MindCluster's handling levels. NotHandleFault: nothing to do. RestartBusiness:
# restart the job (the chip is fine). RestartRequest: the task fails and the chip is
# reset if the fault persists; RestartNPU and FreeRestartNPU: reset the chip (the
# latter once it is free). SeparateNPU: the fault cannot be rectified, isolate the
# chip. PreSeparateNPU: running work is not affected, no new job is scheduled to the
# chip; that is reset_when_idle (keep new work off, act once idle). SubHealthFault:
# handled per the job's subHealthyStrategy; the exporter watches it.
LEVEL_CLASSES: Final[Mapping[str, ActionClass]] = MappingProxyType(
    {
        "NotHandleFault": "ignore",
        "RestartBusiness": "app",
        "RestartRequest": "reset",
        "RestartNPU": "reset",
        "FreeRestartNPU": "reset",
        "SeparateNPU": "isolate",
        "PreSeparateNPU": "reset_when_idle",
        "SubHealthFault": "watch",
    }
)

# Huawei Ascend codes come from two DCMI sources. dcmi_get_device_health gives the
# chip's overall state (0 normal, 1 general/minor alarm, 2 major alarm, 3 critical
# alarm: the worst alarm present; DCMI API reference, dcmi_get_device_health); the
# ascend backend emits health_minor/_major/_critical when the state rises to that
# level. dcmi_get_device_errorcode_v2 lists the chip's active fault codes (32-bit,
# written here as 0x%08X); each code counts once when it appears. Their severities
# follow the handling level Huawei's MindCluster gives them in its default fault
# configuration (ascend-device-plugin faultCode.json; "Chip faults" in the MindCluster
# docs): SeparateNPU (isolate the chip) and RestartNPU/FreeRestartNPU (reset the chip)
# are ``fatal``; RestartRequest and SubHealth are ``recoverable``; NotHandle is
# ``info``. HBM multi-bit ECC is ``fatal`` like every vendor's uncorrectable memory
# error, although MindCluster can retry a step after isolating the bad page.
ASCEND_ALARMS: dict[str, FaultCode] = catalogue(
    FaultCode(
        "health_minor",
        "recoverable",
        "Minor (general) alarm",
        "dcmi_get_device_health reports 1, a general alarm: the chip keeps working; the active "
        "error codes say what is wearing or wants attention.",
        "watch",
        "DCMI dcmi_get_device_health: 1 (general alarm)",
    ),
    FaultCode(
        "health_major",
        "fatal",
        "Major alarm",
        "dcmi_get_device_health reports 2, an important alarm: the chip is not healthy enough to "
        "schedule on (MindCluster's device plugin reports it unhealthy); move work off and reset "
        "it.",
        "reset",
        "DCMI dcmi_get_device_health: 2 (major alarm); the device plugin reports it unhealthy",
    ),
    FaultCode(
        "health_critical",
        "fatal",
        "Critical alarm",
        "dcmi_get_device_health reports 3, an urgent alarm: the chip needs a reset or repair "
        "before it runs work again.",
        "reset",
        "DCMI dcmi_get_device_health: 3 (critical alarm)",
    ),
    lost(
        "Device lost",
        "DCMI answers DCMI_ERR_CODE_NOT_REDAY (-8012) or DEVICE_NOT_EXIST (-8008) for a chip it "
        "listed, or health 0xFFFFFFFF: MindCluster treats this as a card drop (fault code "
        "0x40F84E00).",
        "exporter: DCMI answers NOT_READY / DEVICE_NOT_EXIST for a listed chip",
    ),
    FaultCode(
        "0x40F84E00",
        "fatal",
        "Card drop",
        "The chip dropped off the bus (MindCluster CardDropFaultCode); MindCluster resets the chip"
        " (RestartNPU), which the node agent cannot do for Ascend, so the ladder goes on to its "
        "next step.",
        "reset",
        "MindCluster faultCode.json: RestartNPU",
    ),
    FaultCode(
        "0x80E01801",
        "recoverable",
        "HBM multi-bit ECC error",
        "An uncorrectable error in on-chip memory (HBM): MindCluster isolates the page and "
        "restarts the job (RestartBusiness); Huawei advises a memory stress test if it repeats.",
        "app",
        "MindCluster faultCode.json: RestartBusiness",
    ),
    FaultCode(
        "0x80E18402",
        "fatal",
        "HBM multi-bit ECC, isolated rows reached 64",
        "On-chip memory has no isolation left: Huawei advises replacing the part; SeparateNPU in "
        "MindCluster's default fault configuration.",
        "isolate",
        "MindCluster faultCode.json: SeparateNPU",
    ),
    FaultCode(
        "0x80C98009",
        "recoverable",
        "AI Core bus access error",
        "RestartRequest in MindCluster's default fault configuration: the task fails and "
        "MindCluster resets the chip if the fault persists.",
        "reset",
        "MindCluster faultCode.json: RestartRequest",
    ),
    FaultCode(
        "0x80CB8009",
        "recoverable",
        "AI Vector core bus access error",
        "RestartRequest in MindCluster's default fault configuration: the task fails and "
        "MindCluster resets the chip if the fault persists.",
        "reset",
        "MindCluster faultCode.json: RestartRequest",
    ),
    FaultCode(
        "0x80CB800A",
        "recoverable",
        "AI Vector operator timeout",
        "RestartRequest: the operator timed out and the chip was warm-reset; Huawei advises a "
        "stress test if it repeats.",
        "reset",
        "MindCluster faultCode.json: RestartRequest",
    ),
    FaultCode(
        "0x81078603",
        "recoverable",
        "Parameter-plane network link down",
        "The chip's RoCE port lost its link (MindCluster LinkDownFaultCode): the chip works, but "
        "jobs spanning nodes through it stall until the link returns.",
        "watch",
        "exporter: MindCluster LinkDownFaultCode (a network fault, not the chip)",
    ),
    FaultCode(
        "0x80E21007",
        "info",
        "dmp_daemon node status detection abnormal",
        "NotHandle in MindCluster's default fault configuration: a management daemon report that "
        "does not affect work on the chip.",
        "ignore",
        "MindCluster faultCode.json: NotHandleFault",
    ),
    FaultCode(
        "0x8C1F8608",
        "info",
        "Device CQE error",
        "NotHandle in MindCluster's default fault configuration: a completion error reported to "
        "the communication library, which retries.",
        "ignore",
        "MindCluster faultCode.json: NotHandleFault",
    ),
)
