"""The fault codes of AMD, Intel (oneAPI Level Zero and Gaudi) and Google TPU
devices.

These drivers report RAS blocks, event bits or states rather than one numbered code
space, so the codes are the exporter's names for what each backend can observe; each
entry's ``source`` names the driver interface or document its class comes from, or
"exporter" where no vendor states an action and the grading is the project's.
A repair that a reset applies (Intel's REPAIR reset reason, Gaudi's pending row
replacement) is ``reset_when_idle``; a part that must be returned (AMD's bad page
threshold) is ``isolate``.
"""

from __future__ import annotations

from exporter.faults.base import FaultCode, catalogue, lost

# AMD and Intel events are named by the exporter, since their drivers report RAS
# blocks rather than a single numbered code space. The backends that read them map
# their sources onto these names.
AMD_RAS: dict[str, FaultCode] = catalogue(
    FaultCode(
        "ras_uncorrectable",
        "fatal",
        "Uncorrectable RAS error",
        "An uncorrectable error in a RAS block (UMC, GFX, SDMA, XGMI...): the driver schedules a "
        "GPU reset.",
        "reset",
        "amdgpu RAS documentation: an uncorrectable error triggers a GPU reset; AMD GPU Operator "
        "auto-remediation",
    ),
    FaultCode(
        "ras_deferred",
        "recoverable",
        "Deferred RAS error",
        "A poisoned value was contained; the consumer process is affected.",
        "app",
        "amdgpu RAS documentation: poison consumption ends the consuming process",
    ),
    FaultCode(
        "ras_correctable",
        "info",
        "Correctable RAS error",
        "Corrected by hardware; counted in accel_ecc_errors_total as well.",
        "watch",
        "amdgpu RAS documentation: corrected errors are counted",
    ),
    FaultCode(
        "gpu_reset",
        "fatal",
        "GPU reset",
        "The driver reset the GPU after a hang or fatal error; running work on it was lost.",
        "app",
        "exporter: the driver already reset the GPU; the jobs on it restart",
    ),
    lost(
        "Device lost",
        "The device stopped answering.",
        "exporter: the device left sysfs or amdsmi; a GPU gone from the bus needs a reboot",
    ),
    FaultCode(
        "vm_fault",
        "info",
        "GPU VM fault",
        "An application accessed memory it does not own; the device is fine.",
        "app",
        "exporter: the application's own fault",
    ),
    FaultCode(
        "bad_page_threshold",
        "fatal",
        "Bad page threshold exceeded",
        "The GPU's retired (bad) pages passed amdgpu's bad_page_threshold: the driver "
        "marks the board as needing replacement, and it must not return to service. The "
        "amd backends do not detect it themselves (amdgpu computes the threshold at load "
        "and publishes it only in debugfs, and refuses to initialise such a GPU, which "
        "then counts as lost); the code is graded for a table or an event source that "
        "names it.",
        "isolate",
        "amdgpu RAS documentation: bad_page_threshold (RMA)",
    ),
)


# Intel's codes are named by the exporter from Level Zero Sysman: the category of a RAS
# error set (ZES_RAS_ERROR_CAT_*) whose counter grew, zesDeviceGetState's reset
# reasons, and ZE_RESULT_ERROR_DEVICE_LOST. The oneapi backend emits one event per
# code and poll in which the driver's counter grew.
INTEL_RAS: dict[str, FaultCode] = catalogue(
    FaultCode(
        "ras_fatal",
        "fatal",
        "Fatal RAS error",
        "Level Zero ZES_RAS_ERROR_TYPE_UNCORRECTABLE with a reset required.",
        "reset",
        "Level Zero Sysman: ZES_RAS_ERROR_TYPE_UNCORRECTABLE with a reset required",
    ),
    FaultCode(
        "ras_uncorrectable",
        "fatal",
        "Uncorrectable RAS error",
        "An uncorrectable error in the compute, fixed-function or cache hardware "
        "(ZES_RAS_ERROR_TYPE_UNCORRECTABLE): data on the device may be corrupt.",
        "reset",
        "Level Zero Sysman: ZES_RAS_ERROR_TYPE_UNCORRECTABLE",
    ),
    FaultCode(
        "ras_correctable",
        "info",
        "Correctable RAS error",
        "Corrected by hardware; also counted as corrected ECC.",
        "watch",
        "Level Zero Sysman: ZES_RAS_ERROR_TYPE_CORRECTABLE",
    ),
    FaultCode(
        "ras_engine_reset",
        "recoverable",
        "Accelerator engine reset",
        "The driver reset a hung engine (ZES_RAS_ERROR_CAT_RESET): the work on it was lost, the "
        "device carries on; repeated resets want a look.",
        "app",
        "Level Zero Sysman: ZES_RAS_ERROR_CAT_RESET (the driver reset the engine)",
    ),
    FaultCode(
        "ras_programming",
        "info",
        "Programming error",
        "A hardware exception caused by how a workload programmed the device "
        "(ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS): the application's fault.",
        "app",
        "Level Zero Sysman: ZES_RAS_ERROR_CAT_PROGRAMMING_ERRORS",
    ),
    FaultCode(
        "ras_driver",
        "recoverable",
        "Driver error",
        "Low-level driver communication errors (ZES_RAS_ERROR_CAT_DRIVER_ERRORS): the driver "
        "carries on, but repeats point at firmware or driver trouble.",
        "watch",
        "Level Zero Sysman: ZES_RAS_ERROR_CAT_DRIVER_ERRORS",
    ),
    FaultCode(
        "ras_display",
        "info",
        "Display error",
        "An error in the display engine (ZES_RAS_ERROR_CAT_DISPLAY_ERRORS); compute work does not "
        "use it.",
        "ignore",
        "Level Zero Sysman: ZES_RAS_ERROR_CAT_DISPLAY_ERRORS",
    ),
    FaultCode(
        "reset_required",
        "fatal",
        "Device reset required",
        "A call answered ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET, or zesDeviceGetState asks "
        "for a reset for a reason this exporter does not name.",
        "reset",
        "Level Zero Sysman: ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET",
    ),
    lost(
        "Device lost",
        "The device stopped answering (ZE_RESULT_ERROR_DEVICE_LOST, or its sysfs card is gone).",
        "exporter: ZE_RESULT_ERROR_DEVICE_LOST; a device gone from the bus needs a reboot",
    ),
    FaultCode(
        "reset_wedged",
        "fatal",
        "Device wedged",
        "zesDeviceGetState reports a reset needed because the device is wedged "
        "(ZES_RESET_REASON_FLAG_WEDGED): it runs no work until reset.",
        "reset",
        "Level Zero Sysman: ZES_RESET_REASON_FLAG_WEDGED",
    ),
    FaultCode(
        "reset_repair",
        "recoverable",
        "Repair pending a reset",
        "zesDeviceGetState reports a reset needed to finish a repair "
        "(ZES_RESET_REASON_FLAG_REPAIR): work may go on, the repair is applied at the "
        "next reset, wanted once the device is idle.",
        "reset_when_idle",
        "Level Zero Sysman: ZES_RESET_REASON_FLAG_REPAIR",
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
TPU_EVENTS: dict[str, FaultCode] = catalogue(
    lost(
        "Chip lost",
        "The chip's PCI function or device node is gone, or the libtpu runtime stopped reporting "
        "it while it still reports the other chips: work on it cannot continue until the VM or "
        "chip is repaired.",
        "exporter: a chip gone from the PCI bus or the runtime needs the VM or node restarted",
    ),
    FaultCode(
        "pcie_fatal",
        "fatal",
        "PCIe uncorrectable fatal error",
        "AER TOTAL_ERR_FATAL grew: the chip's PCIe link is unreliable and the kernel resets it; "
        "transfers in flight were lost and the chip needs a reset.",
        "reset",
        "exporter: Linux PCIe AER, TOTAL_ERR_FATAL",
    ),
    FaultCode(
        "pcie_nonfatal",
        "recoverable",
        "PCIe uncorrectable non-fatal error",
        "AER TOTAL_ERR_NONFATAL grew: one transaction was lost but the link works; repeats point "
        "at the chip's slot or link.",
        "watch",
        "exporter: Linux PCIe AER, TOTAL_ERR_NONFATAL",
    ),
    FaultCode(
        "pcie_correctable",
        "info",
        "PCIe correctable error",
        "AER TOTAL_ERR_COR grew: corrected by the link layer; nothing was lost.",
        "ignore",
        "exporter: Linux PCIe AER, TOTAL_ERR_COR",
    ),
    FaultCode(
        "driver_dead",
        "fatal",
        "Driver reports the chip DEAD",
        "gasket's status is DEAD: the driver found the chip's hardware not working; it needs a "
        "reset or repair before it runs work again.",
        "reset",
        "exporter: gasket driver status DEAD",
    ),
    FaultCode(
        "driver_lamed",
        "recoverable",
        "Driver reports the chip LAMED",
        "gasket's status turned LAMED: the chip is alive but not fully working; plan a reset.",
        "reset_when_idle",
        "exporter: gasket driver status LAMED",
    ),
    FaultCode(
        "chip_reset",
        "recoverable",
        "Chip reset by the driver",
        "gasket's reset_count grew: the work on the chip was lost, the chip carries on; repeated "
        "resets want a look.",
        "app",
        "exporter: gasket reset_count (the driver reset the chip)",
    ),
    FaultCode(
        "core_error",
        "recoverable",
        "Runtime reports a core error",
        "GetTpuRuntimeStatus gave a core of this chip an error_message. The public proto does not "
        "say whether the program or the chip caused it, so it is not fatal by itself; its code "
        "label lets a rule single it out.",
        "watch",
        "exporter: GetTpuRuntimeStatus error_message",
    ),
)


# Intel Gaudi codes are named by the exporter from HLML's event set (hlml.h:
# hlml_device_register_events / hlml_event_set_wait, whose hlml_event_data_t carries a
# bit mask of HLML_EVENT_* types; the bits as the Gaudi software 1.24 headers define
# them) and from HLML_ERROR_AIP_IS_LOST. The gaudi backend emits one event per bit set
# in a delivered event.
GAUDI_EVENTS: dict[str, FaultCode] = catalogue(
    FaultCode(
        "ecc_double_bit",
        "fatal",
        "Double-bit ECC error (HLML_EVENT_ECC_DERR)",
        "An uncorrectable memory error: data on the device is corrupt; HLML marks the row for "
        "replacement (HLML_ROW_REPLACEMENT_CAUSE_DOUBLE_BIT_ECC_ERROR), which takes effect only "
        "after the device is reset.",
        "reset",
        "HLML (hlml.h) / habanalabs driver: the row replacement takes effect at the next reset",
    ),
    FaultCode(
        "dram_double_bit",
        "fatal",
        "Double-bit DRAM (HBM) error (HLML_EVENT_DRAM_DERR, once HLML_EVENT_DRAM_ERR)",
        "An uncorrectable error in the device's HBM: data in device memory is corrupt until the "
        "row is replaced at the next reset.",
        "reset",
        "HLML (hlml.h) / habanalabs driver: the row replacement takes effect at the next reset",
    ),
    FaultCode(
        "ecc_single_bit",
        "recoverable",
        "Single-bit ECC error (HLML_EVENT_ECC_SERR)",
        "Corrected by hardware, the device keeps working; repeated single-bit errors on a row make"
        " HLML replace it at the next reset "
        "(HLML_ROW_REPLACEMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS): plan service.",
        "watch",
        "HLML (hlml.h) / habanalabs driver: HLML_EVENT_ECC_SERR, corrected",
    ),
    FaultCode(
        "dram_single_bit",
        "recoverable",
        "Single-bit DRAM (HBM) error (HLML_EVENT_DRAM_SERR)",
        "Corrected in the device's HBM; repeats on a row lead to its replacement at the next "
        "reset, as for ecc_single_bit.",
        "watch",
        "HLML (hlml.h) / habanalabs driver: HLML_EVENT_DRAM_SERR, corrected",
    ),
    FaultCode(
        "critical_error",
        "fatal",
        "Critical device error (HLML_EVENT_CRITICAL_ERR)",
        "HLML reports a critical error on the device (the driver's critical hardware or firmware "
        "error notification): the device must be reset before it runs work again.",
        "reset",
        "HLML (hlml.h) / habanalabs driver: HLML_EVENT_CRITICAL_ERR",
    ),
    FaultCode(
        "clock_rate",
        "info",
        "Clock rate change (HLML_EVENT_CLOCK_RATE)",
        "The device changed its clock (power or thermal throttling, see "
        "hlml_device_get_current_clocks_throttle_reasons); informational.",
        "ignore",
        "HLML (hlml.h) / habanalabs driver: HLML_EVENT_CLOCK_RATE",
    ),
    lost(
        "Device lost (HLML_ERROR_AIP_IS_LOST)",
        "The device stopped answering HLML (the AIP is lost): it needs a reset or a reboot.",
        "exporter: HLML_ERROR_AIP_IS_LOST; a device gone from the bus needs a reboot",
    ),
    FaultCode(
        "remap_pending",
        "recoverable",
        "Row replacement pending",
        "HLML reports rows waiting to be replaced (hlml_device_get_replaced_rows_pending_"
        "status): the replacement is applied at the next device reset, wanted once the "
        "device is idle.",
        "reset_when_idle",
        "HLML (hlml.h): replaced rows pending status",
    ),
)
