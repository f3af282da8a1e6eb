"""What the node agent can do to each vendor's devices: reset them (and how, and what
it looks at afterwards), partition them (which kinds), and why not where it cannot.

Why one table: four places must agree on it. The node agent (``nodeagent/reset.py``,
``nodeagent/partition.py``, ``nodeagent/layouts.py``) does the work; the controller's
``reset_devices`` and ``repartition`` skip a step the node cannot perform instead of
draining a node and waiting out the step's timeout; the fleet simulator's agent
(``autoscaler/simulate/repairs.py``) answers as the real one would; and the node
agent's page (``docs/agent.md``, through ``docs/hooks/agent_support.py``) shows the
table itself. Written once here, a vendor the agent learns to reset changes all four
at once, and none of them can promise what another refuses.

The vendors are those of the exporter's device backends and the simulator's pools
(``nvidia``, ``amd``, ``oneapi``, ``gaudi``, ``ascend``, ``tpu``). A vendor outside the
table (``cpu``, a typo) can do nothing: ``support`` answers an entry that says so.

It sits in ``accel_common`` because the node agent, the controller and the simulator
all read it, and ``accel_common`` imports none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, get_args

# How the agent resets: ``nvidia-smi`` runs ``nvidia-smi --gpu-reset [-i <bus ids>]``
# (NVML has no public reset call); ``amdsmi`` calls ``amdsmi_reset_gpu``. The agent
# keeps one reset routine per mechanism (``nodeagent.resetters.RESETTERS``), and a test
# holds the two lists equal.
ResetMechanism = Literal["nvidia-smi", "amdsmi"]
RESET_MECHANISMS: Final[tuple[ResetMechanism, ...]] = get_args(ResetMechanism)

# What a partition layout can set: ``mig`` (NVIDIA Multi-Instance GPU, through NVML),
# ``compute`` and ``memory`` (AMD's compute partition mode SPX..CPX and memory
# partition mode NPS1..NPS8, through amdgpu's sysfs files).
PartitionKind = Literal["mig", "compute", "memory"]
PARTITION_KINDS: Final[tuple[PartitionKind, ...]] = get_args(PartitionKind)

# The ``reason`` of the agent's failed reset answer, and of reset_devices' and
# repartition's skipped outcome, when the device's vendor is one the agent cannot
# act on: a step the node cannot perform, which an escalation ladder skips at once.
UNSUPPORTED_REASON: Final = "unsupported"
# The ``reason`` of the agent's failed answer when the reset ran but the look
# afterwards found the device not fixed (it does not answer, or its vendor library
# still reports the fault): evidence for the ladder's next step, at once.
UNFIXED_REASON: Final = "unfixed"


@dataclass(frozen=True)
class Reset:
    """How the agent resets a vendor's devices."""

    mechanism: ResetMechanism
    how: str  # the call, in words
    together: str  # what must be free, and is reset, with the device asked for
    after: str  # what the agent looks at after the reset to answer done or failed


@dataclass(frozen=True)
class Partitioning:
    """One kind of partition the agent applies from a layout."""

    kind: PartitionKind
    how: str


@dataclass(frozen=True)
class VendorSupport:
    """What the node agent can do to one vendor's devices, and why not where it
    cannot (``no_reset``, ``no_partitions``: "" where it can)."""

    vendor: str  # the exporter's ``vendor`` label
    name: str  # as people write it, for messages and the docs
    reset: Reset | None  # None: the agent cannot reset this vendor's devices
    partitions: tuple[Partitioning, ...]  # empty: no partition layouts
    no_reset: str = ""
    no_partitions: str = ""

    @property
    def can_reset(self) -> bool:
        return self.reset is not None

    @property
    def partition_kinds(self) -> frozenset[PartitionKind]:
        return frozenset(p.kind for p in self.partitions)


# Why the agent drives none of the other vendors' reset paths.
_NOT_DRIVEN = "{tool}, which this agent does not drive: it cannot be exercised here"
_NO_LAYOUTS = "the layouts file has no partition kind for it"

SUPPORT: Final[Mapping[str, VendorSupport]] = MappingProxyType(
    {
        s.vendor: s
        for s in (
            VendorSupport(
                "nvidia",
                "NVIDIA",
                Reset(
                    "nvidia-smi",
                    "nvidia-smi --gpu-reset [-i <bus ids>]",
                    "NVLink peers; every GPU of an NVSwitch board (reset together, without -i)",
                    "the GPU answers NVML again; no row remap still pending or failed "
                    "(nvmlDeviceGetRemappedRows); the driver's recovery action "
                    "(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) asks for nothing more",
                ),
                (Partitioning("mig", "MIG layouts through NVML"),),
            ),
            VendorSupport(
                "amd",
                "AMD",
                Reset(
                    "amdsmi",
                    "amdsmi_reset_gpu",
                    "its XGMI hive must be free (only the GPUs asked for are reset)",
                    "the GPU answers amdsmi again",
                ),
                (
                    Partitioning("compute", "compute partition mode (SPX..CPX), amdgpu sysfs"),
                    Partitioning("memory", "memory partition mode (NPS1..NPS8), amdgpu sysfs"),
                ),
            ),
            VendorSupport(
                "oneapi",
                "Intel oneAPI",
                None,
                (),
                no_reset=_NOT_DRIVEN.format(
                    tool="Level Zero's zesDeviceReset and the xe driver's reset"
                ),
                no_partitions=_NO_LAYOUTS,
            ),
            VendorSupport(
                "gaudi",
                "Intel Gaudi",
                None,
                (),
                no_reset=_NOT_DRIVEN.format(tool="Habana's hl-smi has a reset"),
                no_partitions=_NO_LAYOUTS,
            ),
            VendorSupport(
                "ascend",
                "Huawei Ascend",
                None,
                (),
                no_reset=_NOT_DRIVEN.format(tool="Huawei's npu-smi has a reset"),
                no_partitions=f"{_NO_LAYOUTS} (npu-smi's vNPU split is not driven)",
            ),
            VendorSupport(
                "tpu",
                "Google TPU",
                None,
                (),
                no_reset="a TPU VM has no device reset that this agent drives",
                no_partitions="a TPU slice's shape is set when it is provisioned, not on the node",
            ),
        )
    }
)

# Vendors whose devices the agent can reset from the running OS.
RESETTABLE_VENDORS: Final[frozenset[str]] = frozenset(
    v for v, s in SUPPORT.items() if s.reset is not None
)


def support(vendor: str) -> VendorSupport:
    """The table's entry for ``vendor``; for a vendor it does not know, one that can
    do nothing and says why."""
    found = SUPPORT.get(vendor)
    if found is not None:
        return found
    why = f"not a vendor the node agent knows; it knows {', '.join(SUPPORT)}"
    return VendorSupport(vendor, vendor or "unknown", None, (), no_reset=why, no_partitions=why)


def can_reset(vendor: str) -> bool:
    """Whether the node agent can reset a device of this vendor."""
    return support(vendor).can_reset


def can_partition(vendor: str, kind: PartitionKind | None = None) -> bool:
    """Whether the agent applies partition layouts (of ``kind``, when given) to this
    vendor's devices."""
    kinds = support(vendor).partition_kinds
    return bool(kinds) if kind is None else kind in kinds


def partition_vendor(kind: PartitionKind) -> str:
    """The vendor whose devices take a partition of ``kind`` (a layout's ``mig``
    is NVIDIA's, its ``compute`` AMD's)."""
    for s in SUPPORT.values():
        if kind in s.partition_kinds:
            return s.vendor
    raise KeyError(f"no vendor takes {kind} partitions")


def _listed(entries: list[str]) -> str:
    return entries[0] if len(entries) == 1 else ", ".join(entries[:-1]) + " and " + entries[-1]


def resets_summary() -> str:
    """What the agent resets, in words: "NVIDIA devices (nvidia-smi --gpu-reset ...)
    and AMD devices (amdsmi_reset_gpu)"."""
    return _listed(
        [f"{s.name} devices ({s.reset.how})" for s in SUPPORT.values() if s.reset is not None]
    )


def reset_unsupported(vendor: str) -> str:
    """Why a reset of ``vendor``'s devices is not carried out, for answers and events."""
    s = support(vendor)
    return f"this agent cannot reset {s.name} devices ({s.no_reset}); it resets {resets_summary()}"


def partition_unsupported(vendor: str) -> str:
    """Why no partition layout applies to ``vendor``'s devices."""
    s = support(vendor)
    kinds = _listed([f"{p.kind} ({t.name})" for t in SUPPORT.values() for p in t.partitions])
    return (
        f"the node agent applies no partition layout to {s.name} devices "
        f"({s.no_partitions}); it partitions {kinds}"
    )


__all__ = [
    "PARTITION_KINDS",
    "RESETTABLE_VENDORS",
    "RESET_MECHANISMS",
    "SUPPORT",
    "UNFIXED_REASON",
    "UNSUPPORTED_REASON",
    "PartitionKind",
    "Partitioning",
    "Reset",
    "ResetMechanism",
    "VendorSupport",
    "can_partition",
    "can_reset",
    "partition_unsupported",
    "partition_vendor",
    "reset_unsupported",
    "resets_summary",
    "support",
]
