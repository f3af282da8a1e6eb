"""How the node agent resets each vendor's devices, and how it looks at them
afterwards: one routine of each per reset mechanism that ``accel_common.agentsupport``
declares (``RESETTERS``, ``LOOKS``), so that the table the controller, the simulator
and the docs read is the one the agent carries out.

Why it is built this way:

* **The reset group is given, not chosen here.** ``nodeagent.reset`` decides which
  devices must be free and reset together (NVSwitch boards, NVLink peers, XGMI
  hives); a routine here is handed its mechanism's share of that group and only
  says what went wrong, as one message per failure.
* **NVIDIA** has no public NVML reset: production runs ``nvidia-smi --gpu-reset``
  (``NvidiaSmi``, bounded in time and output, its exit status explained with the
  manual's codes); without ``-i`` on an NVSwitch board, whose GPUs reset together.
  **AMD** resets through ``amdsmi_reset_gpu``, only the GPUs asked for (the rest of
  an XGMI hive only had to be free).
* **After the reset, the vendor library has the last word.** A device that answers
  again is not yet a fixed one. NVML keeps two verdicts across a reset: the row
  remapper (``nvmlDeviceGetRemappedRows``: a remap still pending after the reset
  that should have applied it, or a failed one, which means the GPU must be
  returned) and the driver's recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``,
  r550 and later; read and graded as the exporter does, ``exporter.backends.nvidia.
  verdicts``): one that still asks for a reset, a reboot or more says the reset did
  not fix the GPU. Either makes the look fail, with what NVML said. A library that
  cannot say (``NotSupported``: a GPU without a row remapper, a driver without the
  field) is no evidence, and any other error reading them is not taken for a
  fault: the device answered, and the exporter keeps watching it. amdsmi offers no
  such verdict that this agent reads, so an AMD GPU is looked at only for answering.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from accel_common.agentsupport import ResetMechanism
from exporter.backends.nvidia import verdicts
from exporter.backends.nvidia.calls import field_value
from nodeagent.tasks import AgentContext

log = logging.getLogger("accel_node_agent.reset")

# nvidia-smi's documented exit codes, for the message of a failed reset.
NVIDIA_SMI_EXIT = {
    2: "an argument or flag is invalid",
    3: "the operation is not available on the target device",
    4: "no permission",
    6: "no such device",
    9: "the NVIDIA driver is not loaded",
    15: "the GPU has fallen off the bus or is otherwise inaccessible",
    255: "other error or internal driver error",
}
# A reset takes seconds; one that takes minutes is stuck, and the reboot step is next.
NVIDIA_SMI_TIMEOUT = 300.0
# How much of nvidia-smi's output a message carries.
OUTPUT_LIMIT = 1500


class ResetError(RuntimeError):
    """A reset that could not be carried out; the message says why."""


class NvidiaSmi:
    """The production ``ctx.nvidia_reset``: ``nvidia-smi --gpu-reset [-i ids]``.

    ``command`` is how nvidia-smi is reached: on PATH when the NVIDIA container
    toolkit mounts it into the agent's container, or through the host (for example
    ``("nsenter", "-t", "1", "-m", "--", "nvidia-smi")`` with hostPID). An empty
    ``bus_ids`` resets every GPU (no ``-i``), which NVSwitch boards need."""

    def __init__(
        self, command: Sequence[str] = ("nvidia-smi",), timeout: float = NVIDIA_SMI_TIMEOUT
    ) -> None:
        self.command = tuple(command)
        self.timeout = timeout

    def __call__(self, bus_ids: list[str]) -> None:
        args = [*self.command, "--gpu-reset"]
        if bus_ids:
            args += ["-i", ",".join(bus_ids)]
        shown = " ".join(args)
        try:
            done = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError as e:
            raise ResetError(
                f"{self.command[0]} not found ({e}): mount nvidia-smi into the agent's "
                "container or reach the host's through nsenter"
            ) from e
        except subprocess.TimeoutExpired as e:
            raise ResetError(
                f"{shown} did not finish within {self.timeout:g}s and was killed"
            ) from e
        except OSError as e:
            raise ResetError(f"{shown} could not run: {e}") from e
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode("utf-8", "replace").strip()
            meaning = NVIDIA_SMI_EXIT.get(done.returncode, "unknown exit status")
            raise ResetError(
                f"{shown} exited {done.returncode} ({meaning}): {tail(output) or 'no output'}"
            )


def tail(text: str) -> str:
    return text if len(text) <= OUTPUT_LIMIT else "..." + text[-OUTPUT_LIMIT:]


@dataclass
class Device:
    vendor: str  # "nvidia" or "amd"
    index: int
    uuid: str
    bus_id: str  # as the kernel writes it: 0000:18:00.0
    handle: Any
    children: set[str] = field(default_factory=set)  # MIG device UUIDs
    peer_buses: set[str] = field(default_factory=set)  # direct NVLink peers
    switched: bool = False  # NVLink to an NVSwitch
    hive: int = 0  # AMD XGMI hive id; 0: none
    answering: bool = True  # False: it stopped answering since it was first seen
    minor: int | None = None  # NVIDIA: N of /dev/nvidiaN; None where NVML did not say

    def names(self) -> set[str]:
        return {self.uuid.lower(), self.bus_id, *(c.lower() for c in self.children)}


# The driver's recovery actions that say a reset did not fix the GPU: it still
# wants a reset, or a reboot or more (the classes of exporter.backends.nvidia.verdicts).
UNFIXED_CLASSES: Final = frozenset({"reset", "reboot", "isolate"})

# A mechanism's reset of its share of the group: (its devices, every device the
# node has, the uuids asked for (empty: all), the context) -> what went wrong.
Resetter = Callable[[list[Device], list[Device], set[str], AgentContext], list[str]]
# A mechanism's look at one device that answers again after the reset: why it is
# not fixed, or "" when its library shows nothing wrong.
Look = Callable[[AgentContext, Device], str]


def reset_nvidia(
    group: list[Device], every: list[Device], wanted: set[str], ctx: AgentContext
) -> list[str]:
    """``nvidia-smi --gpu-reset``, without ``-i`` when the group is a whole NVSwitch
    board (nvidia-smi then resets every GPU, as such a board needs)."""
    board = [d for d in every if d.vendor == group[0].vendor]
    whole = any(d.switched for d in group) and len(group) == len(board)
    bus_ids = [] if whole else [d.bus_id for d in group]
    if ctx.nvidia_reset is None:
        return ["no NVIDIA reset is configured in this agent"]
    try:
        ctx.nvidia_reset(bus_ids)
    except Exception as e:
        return [f"NVIDIA reset of {', '.join(d.uuid for d in group)}: {e}"]
    return []


def reset_amd(
    group: list[Device], every: list[Device], wanted: set[str], ctx: AgentContext
) -> list[str]:
    """``amdsmi_reset_gpu`` for each GPU asked for: in an XGMI hive the rest only had
    to be free."""
    errors: list[str] = []
    for d in group:
        if wanted and d.uuid not in wanted:
            continue
        if ctx.amdsmi is None:
            errors.append(f"{d.uuid}: amdsmi is not available in this agent")
            continue
        try:
            ctx.amdsmi.amdsmi_reset_gpu(d.handle)
        except Exception as e:
            errors.append(f"amdsmi_reset_gpu of {d.uuid}: {type(e).__name__}: {e}")
    return errors


def look_nvidia(ctx: AgentContext, d: Device) -> str:
    """What NVML still says is wrong with a GPU that answers after its reset (the
    module docstring); "" when nothing."""
    nvml = ctx.nvml
    if nvml is None:
        return ""
    found: list[str] = []
    try:
        _, _, pending, failed = nvml.nvmlDeviceGetRemappedRows(d.handle)
    except nvml.NVMLError as e:
        _unreadable(nvml, e, d, "nvmlDeviceGetRemappedRows")
    else:
        if failed:
            found.append("its row remapping failed (nvmlDeviceGetRemappedRows): return the GPU")
        elif pending:
            found.append("a row remap is still pending after the reset (nvmlDeviceGetRemappedRows)")
    action = _recovery_action(nvml, d)
    if action:
        found.append(f"the driver's recovery action still asks for {action}")
    return "; ".join(found)


def _recovery_action(nvml: Any, d: Device) -> str:
    """The driver's recovery action when its class says the GPU is not fixed; ""
    otherwise, and where NVML (or this pynvml) has no such field."""
    fid = getattr(nvml, verdicts.FIELD, None)
    if fid is None:
        return ""
    try:
        values = nvml.nvmlDeviceGetFieldValues(d.handle, [fid])
    except nvml.NVMLError as e:
        _unreadable(nvml, e, d, verdicts.FIELD)
        return ""
    if not values or values[0].nvmlReturn != nvml.NVML_SUCCESS:
        return ""  # the field is not supported here: no verdict
    name, cls = verdicts.action_class(nvml, int(field_value(nvml, values[0])))
    return name if cls in UNFIXED_CLASSES else ""


def _unreadable(nvml: Any, e: Exception, d: Device, what: str) -> None:
    if getattr(e, "value", None) != getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", None):
        log.warning("%s of %s after its reset: %s (no verdict)", what, d.uuid, e)


def look_amd(ctx: AgentContext, d: Device) -> str:
    """amdsmi offers no post-reset verdict this agent reads: answering is all."""
    return ""


RESETTERS: Final[Mapping[ResetMechanism, Resetter]] = MappingProxyType(
    {"nvidia-smi": reset_nvidia, "amdsmi": reset_amd}
)
LOOKS: Final[Mapping[ResetMechanism, Look]] = MappingProxyType(
    {"nvidia-smi": look_nvidia, "amdsmi": look_amd}
)

__all__ = [
    "LOOKS",
    "NVIDIA_SMI_EXIT",
    "NVIDIA_SMI_TIMEOUT",
    "RESETTERS",
    "UNFIXED_CLASSES",
    "Device",
    "NvidiaSmi",
    "ResetError",
    "look_amd",
    "look_nvidia",
    "reset_amd",
    "reset_nvidia",
    "tail",
]
