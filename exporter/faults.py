"""The fault catalogue: one vendor-neutral severity for every vendor fault code.

A remediation rule says ``accel_fault_events_total{severity="fatal"}`` and must not
need to know that an NVIDIA Xid 79, an AMD uncorrectable RAS event and an Intel
fatal RAS error mean the same thing to the node. This module is the only place that
decides it; backends report raw codes and the poller asks here.

Severities:

``fatal``
    The device cannot be trusted to run work until it is reset, repaired or replaced
    (it fell off the bus, memory was corrupted beyond correction, the GPU's own
    firmware stopped). The right response is to move jobs off the device.
``recoverable``
    The device corrected or contained the fault and keeps working, but something is
    wearing out or wants a reset at a convenient time (a row was marked for
    remapping, a high corrected-error rate, an error contained to one process).
``info``
    The event concerns one application (it crashed, faulted on its own memory, was
    killed) or is purely informational. The device is healthy; draining a node for
    it would punish every other job for one job's bug.

A code that is not in the catalogue is ``recoverable``: counting it as fatal would
let an unknown, perhaps harmless code drain nodes fleet-wide; counting it as info
would hide it. Its own code label still lets a rule single it out.

NVIDIA's classification follows the "Resolution Bucket (Immediate Action)" column
of NVIDIA's Xid catalog (Xid errors documentation for Ampere and newer): codes
whose immediate action is RESTART_APP are ``info``; RESET_GPU, RESTART_BM/VM and
CONTACT_SUPPORT after a hardware fault are ``fatal``; IGNORE with a watch-and-wait
investigatory action is ``recoverable``. The reason is written beside each code.

Intel Gaudi codes are the exporter's names for HLML's event types (hlml.h
``HLML_EVENT_*``): a double-bit ECC or HBM error, a critical device error and a lost
device are ``fatal``; a single-bit ECC or HBM error is ``recoverable``; a clock rate
change is ``info``.

Google TPU codes are the exporter's names for what the tpu backend can observe (libtpu's
runtime metrics service has no error code space): a lost chip, a chip its driver
reports DEAD and a PCIe AER fatal error are ``fatal``; an AER non-fatal error, a LAMED
chip, a driver reset and a core error from the runtime's status are ``recoverable``; a
corrected PCIe error is ``info``.

Huawei Ascend codes are DCMI's own: the chip's health state (minor alarm
``recoverable``; major and critical alarms ``fatal``) and the 32-bit fault codes of
dcmi_get_device_errorcode_v2, graded by the handling level Huawei's MindCluster
gives each (isolate or reset the chip: ``fatal``; restart on persistence or
sub-health: ``recoverable``; no handling: ``info``); HBM multi-bit ECC is ``fatal``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["fatal", "recoverable", "info"]
UNKNOWN_SEVERITY: Severity = "recoverable"


@dataclass(frozen=True)
class FaultCode:
    code: str
    severity: Severity
    name: str
    reason: str


def _catalogue(*codes: FaultCode) -> dict[str, FaultCode]:
    return {c.code: c for c in codes}


NVIDIA_XID: dict[str, FaultCode] = _catalogue(
    FaultCode(
        "8",
        "info",
        "GPU stopped processing",
        "A channel idle timeout; NVIDIA's immediate action is RESTART_APP.",
    ),
    FaultCode(
        "13",
        "info",
        "Graphics Engine Exception",
        "Usually an out-of-range access by the application; RESTART_APP.",
    ),
    FaultCode(
        "31",
        "info",
        "GPU memory page fault",
        "The application touched memory it does not own (an MMU fault); the "
        "device is fine; RESTART_APP.",
    ),
    FaultCode(
        "32",
        "recoverable",
        "Invalid or corrupted push buffer stream",
        "Can be a driver or PCIe corruption; watch for repeats.",
    ),
    FaultCode(
        "38",
        "recoverable",
        "Driver firmware error",
        "Reported by the driver, which recovers the channel; repeated events want a reset.",
    ),
    FaultCode(
        "43",
        "info",
        "GPU stopped processing",
        "A user application hit a software-induced fault; RESTART_APP.",
    ),
    FaultCode(
        "45",
        "info",
        "Preemptive cleanup, due to previous errors",
        "The driver killed a process (often on Ctrl-C or after another Xid); "
        "by itself it says nothing about the device.",
    ),
    FaultCode(
        "46",
        "fatal",
        "GPU stopped processing",
        "The GPU stopped processing outside any application; RESET_GPU.",
    ),
    FaultCode(
        "48",
        "fatal",
        "Double Bit ECC Error",
        "An uncorrectable (DBE) memory error: data in device memory is "
        "corrupt; the page must be retired and the GPU reset.",
    ),
    FaultCode(
        "61",
        "recoverable",
        "Internal micro-controller breakpoint/warning",
        "A PMU warning; the GPU usually continues but should be reset soon.",
    ),
    FaultCode(
        "62",
        "fatal",
        "Internal micro-controller halt",
        "The PMU halted; the GPU will not recover without RESET_GPU.",
    ),
    FaultCode(
        "63",
        "recoverable",
        "ECC page retirement or row remapping recording event",
        "A row was marked for remapping (or a page for retirement); it takes "
        "effect at the next GPU reset and the GPU keeps working until then.",
    ),
    FaultCode(
        "64",
        "fatal",
        "ECC page retirement or row remapper recording failure",
        "The GPU could not record the remapping of a failing row: the bad "
        "memory stays in use; RESET_GPU, then check remapping failures.",
    ),
    FaultCode(
        "68",
        "recoverable",
        "NVDEC0 Exception",
        "A video decoder engine error; the decoder recovers per stream.",
    ),
    FaultCode(
        "69",
        "recoverable",
        "Graphics Engine class error",
        "Usually application-triggered; the engine recovers.",
    ),
    FaultCode(
        "74",
        "fatal",
        "NVLink Error",
        "An NVLink fatal error: multi-GPU jobs over this link cannot proceed "
        "until the GPU is reset; RESET_GPU.",
    ),
    FaultCode(
        "79",
        "fatal",
        "GPU has fallen off the bus",
        "The GPU no longer answers on PCIe; it needs a reset or a reboot.",
    ),
    FaultCode(
        "92",
        "recoverable",
        "High single-bit ECC error rate",
        "Corrected errors at a high rate: the device still works, but the "
        "memory is degrading; watch and plan service.",
    ),
    FaultCode(
        "94",
        "recoverable",
        "Contained ECC error",
        "An uncorrectable error contained to the process that used the "
        "memory (Ampere+): RESTART_APP; other work continues; reset when "
        "convenient so the row is remapped.",
    ),
    FaultCode(
        "95",
        "fatal",
        "Uncontained ECC error",
        "An uncorrectable error that could not be contained: every process "
        "on the GPU is affected; RESET_GPU.",
    ),
    FaultCode(
        "109",
        "recoverable",
        "Context Switch Timeout Error",
        "Usually a misbehaving application; the driver recovers.",
    ),
    FaultCode(
        "119", "fatal", "GSP RPC Timeout", "The GPU System Processor stopped answering; RESET_GPU."
    ),
    FaultCode("120", "fatal", "GSP Error", "The GPU System Processor failed; RESET_GPU."),
    FaultCode(
        "121",
        "info",
        "C2C link corrected error",
        "A corrected chip-to-chip link error; informational.",
    ),
    FaultCode(
        "140",
        "fatal",
        "Unrecovered ECC Error",
        "Device memory holds an error that was neither corrected nor contained; RESET_GPU.",
    ),
    FaultCode(
        "143",
        "fatal",
        "GPU Initialization Failure",
        "The GPU failed to initialise; it cannot run work.",
    ),
)

# AMD and Intel events are named by the exporter, since their drivers report RAS
# blocks rather than a single numbered code space. The backends that read them map
# their sources onto these names.
AMD_RAS: dict[str, FaultCode] = _catalogue(
    FaultCode(
        "ras_uncorrectable",
        "fatal",
        "Uncorrectable RAS error",
        "An uncorrectable error in a RAS block (UMC, GFX, SDMA, XGMI...): the "
        "driver schedules a GPU reset.",
    ),
    FaultCode(
        "ras_deferred",
        "recoverable",
        "Deferred RAS error",
        "A poisoned value was contained; the consumer process is affected.",
    ),
    FaultCode(
        "ras_correctable",
        "info",
        "Correctable RAS error",
        "Corrected by hardware; counted in accel_ecc_errors_total as well.",
    ),
    FaultCode(
        "gpu_reset",
        "fatal",
        "GPU reset",
        "The driver reset the GPU after a hang or fatal error; running work on it was lost.",
    ),
    FaultCode("lost", "fatal", "Device lost", "The device stopped answering."),
    FaultCode(
        "vm_fault",
        "info",
        "GPU VM fault",
        "An application accessed memory it does not own; the device is fine.",
    ),
)

# Intel's codes are named by the exporter from Level Zero Sysman: the category of a RAS
# error set (ZES_RAS_ERROR_CAT_*) whose counter grew, zesDeviceGetState's reset
# reasons, and ZE_RESULT_ERROR_DEVICE_LOST. The oneapi backend emits one event per
# code and poll in which the driver's counter grew.
INTEL_RAS: dict[str, FaultCode] = _catalogue(
    FaultCode(
        "ras_fatal",
        "fatal",
        "Fatal RAS error",
        "Level Zero ZES_RAS_ERROR_TYPE_UNCORRECTABLE with a reset required.",
    ),
    FaultCode(
        "ras_uncorrectable",
        "fatal",
        "Uncorrectable RAS error",
        "An uncorrectable error in the compute, fixed-function or cache hardware "
        "(ZES_RAS_ERROR_TYPE_UNCORRECTABLE): data on the device may be corrupt.",
    ),
    FaultCode(
        "ras_correctable",
        "info",
        "Correctable RAS error",
        "Corrected by hardware; also counted as corrected ECC.",
    ),
    FaultCode(
        "ras_engine_reset",
        "recoverable",
        "Accelerator engine reset",
        "The driver reset a hung engine (ZES_RAS_ERROR_CAT_RESET): the work on it "
        "was lost, the device carries on; repeated resets want a look.",
    ),
    FaultCode(
        "ras_programming",
        "info",
        "Programming error",
        "A hardware exception caused by how a workload programmed the device "
        "(ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS): the application's fault.",
    ),
    FaultCode(
        "ras_driver",
        "recoverable",
        "Driver error",
        "Low-level driver communication errors (ZES_RAS_ERROR_CAT_DRIVER_ERRORS): the "
        "driver carries on, but repeats point at firmware or driver trouble.",
    ),
    FaultCode(
        "ras_display",
        "info",
        "Display error",
        "An error in the display engine (ZES_RAS_ERROR_CAT_DISPLAY_ERRORS); compute "
        "work does not use it.",
    ),
    FaultCode(
        "reset_required",
        "fatal",
        "Device reset required",
        "zesDeviceGetState reports that the device needs a reset (wedged, or to "
        "finish a repair), or a call answered ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET.",
    ),
    FaultCode(
        "lost",
        "fatal",
        "Device lost",
        "The device stopped answering (ZE_RESULT_ERROR_DEVICE_LOST, or its sysfs card is gone).",
    ),
)

# Google TPU codes are named by the exporter: libtpu's runtime metrics service
# (tpu_metric_service.proto, RuntimeMetricService) has no numbered error space, so the
# tpu backend names what it can observe: a chip gone from the PCI bus or from a
# runtime that still serves its siblings, the Linux PCIe AER counters of the chip's
# function (sysfs aer_dev_fatal/_nonfatal/_correctable, whose meaning is the
# kernel's, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats), the status
# and reset count that the gasket driver framework of accel-class chips (v2-v4)
# publishes (gasket_core.c), and a core that GetTpuRuntimeStatus reports with an
# error_message.
TPU_EVENTS: dict[str, FaultCode] = _catalogue(
    FaultCode(
        "lost",
        "fatal",
        "Chip lost",
        "The chip's PCI function or device node is gone, or the libtpu runtime "
        "stopped reporting it while it still reports the other chips: work on it "
        "cannot continue until the VM or chip is repaired.",
    ),
    FaultCode(
        "pcie_fatal",
        "fatal",
        "PCIe uncorrectable fatal error",
        "AER TOTAL_ERR_FATAL grew: the chip's PCIe link is unreliable and the "
        "kernel resets it; transfers in flight were lost and the chip needs a reset.",
    ),
    FaultCode(
        "pcie_nonfatal",
        "recoverable",
        "PCIe uncorrectable non-fatal error",
        "AER TOTAL_ERR_NONFATAL grew: one transaction was lost but the link "
        "works; repeats point at the chip's slot or link.",
    ),
    FaultCode(
        "pcie_correctable",
        "info",
        "PCIe correctable error",
        "AER TOTAL_ERR_COR grew: corrected by the link layer; nothing was lost.",
    ),
    FaultCode(
        "driver_dead",
        "fatal",
        "Driver reports the chip DEAD",
        "gasket's status is DEAD: the driver found the chip's hardware not working; "
        "it needs a reset or repair before it runs work again.",
    ),
    FaultCode(
        "driver_lamed",
        "recoverable",
        "Driver reports the chip LAMED",
        "gasket's status turned LAMED: the chip is alive but not fully working; plan a reset.",
    ),
    FaultCode(
        "chip_reset",
        "recoverable",
        "Chip reset by the driver",
        "gasket's reset_count grew: the work on the chip was lost, the chip carries "
        "on; repeated resets want a look.",
    ),
    FaultCode(
        "core_error",
        "recoverable",
        "Runtime reports a core error",
        "GetTpuRuntimeStatus gave a core of this chip an error_message. The "
        "public proto does not say whether the program or the chip caused it, "
        "so it is not fatal by itself; its code label lets a rule single it out.",
    ),
)

# Intel Gaudi codes are named by the exporter from HLML's event set (hlml.h:
# hlml_device_register_events / hlml_event_set_wait, whose hlml_event_data_t carries a
# bit mask of HLML_EVENT_* types; the bits as the Gaudi software 1.24 headers define
# them) and from HLML_ERROR_AIP_IS_LOST. The gaudi backend emits one event per bit set
# in a delivered event.
GAUDI_EVENTS: dict[str, FaultCode] = _catalogue(
    FaultCode(
        "ecc_double_bit",
        "fatal",
        "Double-bit ECC error (HLML_EVENT_ECC_DERR)",
        "An uncorrectable memory error: data on the device is corrupt; HLML marks "
        "the row for replacement (HLML_ROW_REPLACEMENT_CAUSE_DOUBLE_BIT_ECC_ERROR), "
        "which takes effect only after the device is reset.",
    ),
    FaultCode(
        "dram_double_bit",
        "fatal",
        "Double-bit DRAM (HBM) error (HLML_EVENT_DRAM_DERR, once HLML_EVENT_DRAM_ERR)",
        "An uncorrectable error in the device's HBM: data in device memory is "
        "corrupt until the row is replaced at the next reset.",
    ),
    FaultCode(
        "ecc_single_bit",
        "recoverable",
        "Single-bit ECC error (HLML_EVENT_ECC_SERR)",
        "Corrected by hardware, the device keeps working; repeated single-bit errors "
        "on a row make HLML replace it at the next reset "
        "(HLML_ROW_REPLACEMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS): plan service.",
    ),
    FaultCode(
        "dram_single_bit",
        "recoverable",
        "Single-bit DRAM (HBM) error (HLML_EVENT_DRAM_SERR)",
        "Corrected in the device's HBM; repeats on a row lead to its replacement at "
        "the next reset, as for ecc_single_bit.",
    ),
    FaultCode(
        "critical_error",
        "fatal",
        "Critical device error (HLML_EVENT_CRITICAL_ERR)",
        "HLML reports a critical error on the device (the driver's critical "
        "hardware or firmware error notification): the device must be reset "
        "before it runs work again.",
    ),
    FaultCode(
        "clock_rate",
        "info",
        "Clock rate change (HLML_EVENT_CLOCK_RATE)",
        "The device changed its clock (power or thermal throttling, see "
        "hlml_device_get_current_clocks_throttle_reasons); informational.",
    ),
    FaultCode(
        "lost",
        "fatal",
        "Device lost (HLML_ERROR_AIP_IS_LOST)",
        "The device stopped answering HLML (the AIP is lost): it needs a reset or a reboot.",
    ),
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
ASCEND_ALARMS: dict[str, FaultCode] = _catalogue(
    FaultCode(
        "health_minor",
        "recoverable",
        "Minor (general) alarm",
        "dcmi_get_device_health reports 1, a general alarm: the chip keeps working; "
        "the active error codes say what is wearing or wants attention.",
    ),
    FaultCode(
        "health_major",
        "fatal",
        "Major alarm",
        "dcmi_get_device_health reports 2, an important alarm: the chip is not "
        "healthy enough to schedule on (MindCluster's device plugin reports it "
        "unhealthy); move work off and reset it.",
    ),
    FaultCode(
        "health_critical",
        "fatal",
        "Critical alarm",
        "dcmi_get_device_health reports 3, an urgent alarm: the chip needs a reset "
        "or repair before it runs work again.",
    ),
    FaultCode(
        "lost",
        "fatal",
        "Device lost",
        "DCMI answers DCMI_ERR_CODE_NOT_REDAY (-8012) or DEVICE_NOT_EXIST (-8008) for "
        "a chip it listed, or health 0xFFFFFFFF: MindCluster treats this as a card "
        "drop (fault code 0x40F84E00).",
    ),
    FaultCode(
        "0x40F84E00",
        "fatal",
        "Card drop",
        "The chip dropped off the bus (MindCluster CardDropFaultCode); RestartNPU.",
    ),
    FaultCode(
        "0x80E01801",
        "fatal",
        "HBM multi-bit ECC error",
        "An uncorrectable error in on-chip memory (HBM): data on the chip is "
        "corrupt; Huawei advises a memory stress test; the process must restart.",
    ),
    FaultCode(
        "0x80E18402",
        "fatal",
        "HBM multi-bit ECC, isolated rows reached 64",
        "On-chip memory has no isolation left: Huawei advises replacing the part; "
        "SeparateNPU in MindCluster's default fault configuration.",
    ),
    FaultCode(
        "0x80C98009",
        "recoverable",
        "AI Core bus access error",
        "RestartRequest in MindCluster's default fault configuration: the task "
        "fails and the chip is reset only if the fault persists.",
    ),
    FaultCode(
        "0x80CB8009",
        "recoverable",
        "AI Vector core bus access error",
        "RestartRequest in MindCluster's default fault configuration: the task "
        "fails and the chip is reset only if the fault persists.",
    ),
    FaultCode(
        "0x80CB800A",
        "recoverable",
        "AI Vector operator timeout",
        "RestartRequest: the operator timed out and the chip was warm-reset; "
        "Huawei advises a stress test if it repeats.",
    ),
    FaultCode(
        "0x81078603",
        "recoverable",
        "Parameter-plane network link down",
        "The chip's RoCE port lost its link (MindCluster LinkDownFaultCode): the chip "
        "works, but jobs spanning nodes through it stall until the link returns.",
    ),
    FaultCode(
        "0x80E21007",
        "info",
        "dmp_daemon node status detection abnormal",
        "NotHandle in MindCluster's default fault configuration: a management daemon "
        "report that does not affect work on the chip.",
    ),
    FaultCode(
        "0x8C1F8608",
        "info",
        "Device CQE error",
        "NotHandle in MindCluster's default fault configuration: a completion "
        "error reported to the communication library, which retries.",
    ),
)

# The simulated and CPU backends reuse their vendor's catalogue.
CATALOGUES: dict[str, dict[str, FaultCode]] = {
    "nvidia": NVIDIA_XID,
    "amd": AMD_RAS,
    "oneapi": INTEL_RAS,
    "gaudi": GAUDI_EVENTS,
    "tpu": TPU_EVENTS,
    "ascend": ASCEND_ALARMS,
}


def lookup(vendor: str, code: str) -> FaultCode | None:
    return CATALOGUES.get(vendor, {}).get(code)


def classify(vendor: str, code: str) -> Severity:
    """The severity of one vendor fault code; unknown codes are ``recoverable``."""
    found = lookup(vendor, code)
    return found.severity if found is not None else UNKNOWN_SEVERITY
