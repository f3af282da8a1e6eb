"""NVIDIA's fault codes: the Xid events NVML's event set delivers, and the states the
NVIDIA backend turns into events of its own (the row-remapper's pending and failure
flags, NVML's GPU recovery action).

Each Xid's class follows the "Resolution Bucket (Immediate Action)" column of
NVIDIA's Xid catalog for Ampere and newer GPUs (the Xid errors documentation,
"Analyzing Xid Errors with the Xid Catalog", and its downloadable workbook):
RESTART_APP is ``app``, RESET_GPU is ``reset``, RESTART_BM is ``reboot``, IGNORE is
``ignore``. Where the bucket is a workflow (WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR,
WORKFLOW_NVLINK5_ERR) the entry says which step of the workflow it takes and why.
The remap flags follow NVIDIA's GPU memory error management guide ("Error
Recovery and Response Flags", "RMA Policy Thresholds for Row-Remapping").

The NVLink Xids 74 and 144–150 are decoded, in NVIDIA's workflows, from register
fields printed in the kernel log message (``intrInfo``/``errorStatus`` for the
NVLink5 codes). NVML's event data carries the Xid number only, so the backend reads
the kernel log beside NVML (``--path.kmsg``, ``exporter.backends.nvidia.kmsg``) and
decodes the line of each event (``exporter.backends.nvidia.linkpayload``). The
class below is the default for an event whose payload is unknown (no readable
kernel log, a payload that does not decode); a decoded payload replaces it
(``NVLINK_PAYLOAD_CODES``, ``Catalogue.action``), and the driver's own verdict,
NVML's GPU recovery action that the backend reads with every Xid
(``exporter.backends.nvidia.verdicts``), raises either when the driver asks for
more.
"""

from __future__ import annotations

from typing import Final

from accel_common.remedies import ActionClass
from exporter.faults.base import FaultCode, Severity, catalogue, lost

XID_CATALOG: Final = "NVIDIA Xid catalog, Immediate Action"

# The Xids whose class the event's payload decides; the table's class is the
# default when no payload was decoded.
NVLINK_PAYLOAD_CODES: Final = frozenset({"74", *(str(c) for c in range(144, 151))})
MEMORY_GUIDE: Final = "NVIDIA GPU memory error management"


def _xid(
    code: str, severity: Severity, name: str, reason: str, action: ActionClass, bucket: str
) -> FaultCode:
    # A helper keeps each entry to its facts; the catalogue's column is in ``source``.
    return FaultCode(code, severity, name, reason, action, f"{XID_CATALOG}: {bucket}")


NVIDIA_XID: dict[str, FaultCode] = catalogue(
    _xid(
        "8",
        "info",
        "GPU stopped processing",
        "A channel idle timeout in one application's work.",
        "app",
        "RESTART_APP",
    ),
    _xid(
        "13",
        "info",
        "Graphics Engine Exception",
        "Usually an out-of-range access by the application. NVIDIA's investigatory "
        "workflow treats repeats on one GPU as a possible hardware fault; the code "
        "label lets a rule count them.",
        "app",
        "RESTART_APP",
    ),
    _xid(
        "31",
        "info",
        "GPU memory page fault",
        "The application touched memory it does not own (an MMU fault); the device "
        "is fine. Repeats on one GPU are a possible hardware fault "
        "(WORKFLOW_XID_31).",
        "app",
        "RESTART_APP",
    ),
    FaultCode(
        "32",
        "recoverable",
        "Invalid or corrupted push buffer stream",
        "Can be a driver or PCIe corruption; watched for repeats.",
        "watch",
    ),
    FaultCode(
        "38",
        "recoverable",
        "Driver firmware error",
        "Reported by the driver, which recovers the channel; watched for repeats.",
        "watch",
    ),
    _xid(
        "43",
        "info",
        "GPU stopped processing",
        "A user application hit a software-induced fault; the driver cleaned up and "
        "the GPU is fine.",
        "ignore",
        "IGNORE",
    ),
    _xid(
        "45",
        "info",
        "Preemptive cleanup, due to previous errors",
        "The driver killed a process (often on Ctrl-C or after another Xid); with "
        "other Xids it is sympathetic and says nothing by itself.",
        "ignore",
        "WORKFLOW_XID_45 (with other Xids: IGNORE)",
    ),
    _xid(
        "46",
        "fatal",
        "GPU stopped processing",
        "The GPU stopped processing outside any application.",
        "reset",
        "RESET_GPU",
    ),
    _xid(
        "48",
        "fatal",
        "Double Bit ECC Error",
        "An uncorrectable (DBE) memory error: data in device memory is corrupt; the "
        "workflow drains and resets the GPU (a following Xid 63 or 64 says whether "
        "the row was remapped).",
        "reset",
        "WORKFLOW_XID_48 (drain and reset)",
    ),
    _xid(
        "61",
        "fatal",
        "Internal micro-controller breakpoint/warning",
        "On current GPUs the GPU's internal micro-controller stopped at a breakpoint; "
        "work on the GPU does not continue until it is reset.",
        "reset",
        "RESET_GPU",
    ),
    _xid(
        "62",
        "fatal",
        "Internal micro-controller halt",
        "The micro-controller halted; the GPU will not recover without a reset.",
        "reset",
        "RESET_GPU",
    ),
    FaultCode(
        "63",
        "recoverable",
        "Row remapping event",
        "A row was marked for remapping (or a page for retirement); it takes effect "
        "at the next GPU reset and the GPU keeps working until then. The catalog "
        "says IGNORE for the event itself; the pending remap wants a reset once "
        "the GPU is idle.",
        "reset_when_idle",
        f"{MEMORY_GUIDE}: row-remapping pending flag",
    ),
    FaultCode(
        "64",
        "fatal",
        "Row remapping failure",
        "The GPU could not remap a failing row (no spare rows left): the bad memory "
        "stays in use and the part meets NVIDIA's RMA policy for row remapping.",
        "isolate",
        f"{MEMORY_GUIDE}: RMA policy thresholds for row-remapping",
    ),
    _xid(
        "68",
        "info",
        "NVDEC0 Exception",
        "A video decoder engine error in one application's stream.",
        "app",
        "RESTART_APP",
    ),
    _xid(
        "69",
        "info",
        "Graphics Engine class error",
        "Usually application-triggered; the engine recovers.",
        "app",
        "RESTART_APP",
    ),
    _xid(
        "74",
        "fatal",
        "NVLink Error",
        "An NVLink error. NVIDIA's workflow decodes register fields of the kernel "
        "message to tell ignorable, sympathetic and fatal events apart; the exporter "
        "decodes them from the kernel log (Hopper): ignorable bits only is ignore, "
        "sympathetic or ECC-threshold bits only is watch; without a decodable payload "
        "the GPU is reset.",
        "reset",
        "WORKFLOW_NVLINK_ERR (default without payload: RESET_GPU)",
    ),
    _xid(
        "79",
        "fatal",
        "GPU has fallen off the bus",
        "The GPU no longer answers on PCIe; only a reboot of the node brings it back "
        "(a GPU reset cannot reach it).",
        "reboot",
        "RESTART_BM",
    ),
    _xid(
        "92",
        "recoverable",
        "High single-bit ECC error rate",
        "Corrected errors at a high rate: the device still works, but the memory is "
        "degrading; watched (investigatory: contact support).",
        "watch",
        "IGNORE (investigatory CONTACT_SUPPORT)",
    ),
    FaultCode(
        "94",
        "recoverable",
        "Contained ECC error",
        "An uncorrectable error contained to the process that used the memory: "
        "that job restarts (RESTART_APP), other work continues, and the row is "
        "remapped at the next reset, wanted once the GPU is idle.",
        "reset_when_idle",
        f"{XID_CATALOG}: RESTART_APP; {MEMORY_GUIDE}: row-remapping pending flag",
    ),
    _xid(
        "95",
        "fatal",
        "Uncontained ECC error",
        "An uncorrectable error that could not be contained: every process on the GPU is affected.",
        "reset",
        "RESET_GPU",
    ),
    _xid(
        "109",
        "fatal",
        "Context Switch Timeout Error",
        "The GPU hung switching contexts; the driver does not recover it without a reset.",
        "reset",
        "RESET_GPU",
    ),
    _xid(
        "110",
        "fatal",
        "Security Fault Error",
        "The GPU reported a security fault; it needs a reset.",
        "reset",
        "RESET_GPU",
    ),
    _xid(
        "119",
        "fatal",
        "GSP RPC Timeout",
        "The GPU System Processor stopped answering.",
        "reset",
        "RESET_GPU",
    ),
    _xid("120", "fatal", "GSP Error", "The GPU System Processor failed.", "reset", "RESET_GPU"),
    FaultCode(
        "121",
        "info",
        "C2C link corrected error",
        "A corrected chip-to-chip link error; watched for a rising rate.",
        "watch",
    ),
    _xid(
        "136",
        "fatal",
        "NVLink ALI training failed",
        "A link failed its training; the GPU needs a reset (and the link a look).",
        "reset",
        "RESET_GPU",
    ),
    _xid(
        "140",
        "fatal",
        "Unrecovered ECC Error",
        "Device memory holds an error that was neither corrected nor contained.",
        "reset",
        "RESET_GPU",
    ),
    _xid(
        "143",
        "fatal",
        "GPU Initialization Failure",
        "The GPU failed to initialise; it cannot run work until reset.",
        "reset",
        "RESET_GPU",
    ),
    *(
        _xid(
            str(code),
            "recoverable",
            f"NVLink5 error ({unit})",
            "An NVLink5 error whose class NVIDIA's workflow decodes from the message's "
            "intrInfo/errorStatus fields (ignorable, sympathetic or reset). The "
            "exporter reads the driver's Fatal/Nonfatal word from the kernel log: "
            "Fatal is reset; otherwise it is watched until the driver's recovery "
            "action (Xid 154 linkage) asks for more.",
            "watch",
            "WORKFLOW_NVLINK5_ERR (default without payload: watch)",
        )
        for code, unit in (
            (144, "SAW"),
            (145, "RLW"),
            (146, "TLW"),
            (147, "TREX"),
            (148, "NVLPW_CTRL"),
            (149, "NETIR"),
            (150, "MSE"),
        )
    ),
    FaultCode(
        "154",
        "recoverable",
        "GPU recovery action changed",
        "The driver's statement of the action the GPU needs (none, drain P2P, drain "
        "and reset, GPU reset, node reboot). The backend reads it through "
        "nvmlDeviceGetGpuRecoveryAction and it raises this event's class; without it "
        "the event is watched.",
        "watch",
        "NVML recovery action (the Xid 154 payload)",
    ),
    _xid("155", "fatal", "Xid 155", "NVIDIA marks it RESET_GPU.", "reset", "RESET_GPU"),
    _xid("156", "fatal", "Xid 156", "NVIDIA marks it RESET_GPU.", "reset", "RESET_GPU"),
    _xid(
        "158",
        "fatal",
        "GPU fatal timeout",
        "The GPU stopped answering within the driver's fatal timeout.",
        "reset",
        "RESET_GPU",
    ),
    FaultCode(
        "recovery_action",
        "recoverable",
        "GPU recovery action (NVML event)",
        "NVML's recovery-action event or a change of "
        "nvmlDeviceGetGpuRecoveryAction: the event carries the driver's verdict "
        "(the live class); the code alone is watched.",
        "watch",
        f"{MEMORY_GUIDE}: recovery action flag",
    ),
    FaultCode(
        "remap_pending",
        "recoverable",
        "Row remapping pending",
        "nvmlDeviceGetRemappedRows says a remap waits for the next GPU reset. "
        "Unaffected work can go on and new work may start, but the repair is "
        "applied only by a reset: reset once the GPU is idle.",
        "reset_when_idle",
        f"{MEMORY_GUIDE}: row-remapping pending flag",
    ),
    FaultCode(
        "remap_failure",
        "fatal",
        "Row remapping failure",
        "nvmlDeviceGetRemappedRows says a remap failed: the GPU meets NVIDIA's RMA "
        "policy and must be returned, not returned to service.",
        "isolate",
        f"{MEMORY_GUIDE}: row-remapping failure flag",
    ),
    lost(
        "Device lost",
        "NVML answers GPU_IS_LOST (or no longer knows the GPU), with or without an Xid 79 first.",
        f"{XID_CATALOG}: RESTART_BM (as Xid 79)",
    ),
)
