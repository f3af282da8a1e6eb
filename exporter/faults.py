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

# The simulated and CPU backends reuse their vendor's catalogue.
CATALOGUES: dict[str, dict[str, FaultCode]] = {
    "nvidia": NVIDIA_XID,
    "amd": AMD_RAS,
    "oneapi": INTEL_RAS,
}


def lookup(vendor: str, code: str) -> FaultCode | None:
    return CATALOGUES.get(vendor, {}).get(code)


def classify(vendor: str, code: str) -> Severity:
    """The severity of one vendor fault code; unknown codes are ``recoverable``."""
    found = lookup(vendor, code)
    return found.severity if found is not None else UNKNOWN_SEVERITY
