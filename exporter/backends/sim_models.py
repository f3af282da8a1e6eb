"""What each simulated vendor's device looks like, and how a simulated node wires them.

The sim backend (``exporter/backends/sim.py``) keeps the behaviour (load, scripted
faults, pods); this module keeps the per-vendor facts it imitates, so that adding a
vendor is one entry here and no change to the behaviour. Each entry imitates one
model that the placement catalogue (``autoscaler/placement/devices.yaml``) knows, so
a simulated device gets a run-time estimate like the hardware it imitates, and
reports what that vendor's real backend reports: a field the real backend cannot
read (a TPU runtime gives no temperature, power or clocks) is left out here too
(``SimModel.missing``), never exported as 0.

Topology shapes (``SimModel.link_type``), within each simulated node of ``group``
devices:

- ``nvlink``, ``xgmi``, ``roce``, ``hccs``: every pair is linked (an NVSwitch board,
  an MI300X OAM platform, Gaudi's all-to-all RoCE ports on an HLS board, an Ascend
  910B server's HCCS full mesh), with ``pair_links`` parallel links;
- ``ici``: a TPU slice's torus, here a 2x2 (``group`` 4, as on a 4-chip TPU v5e
  VM): chips whose indices differ in one bit are ICI neighbours, the diagonal has no
  direct link;
- ``pcie``: no device links, only the PCIe tree (Intel without an Xe Link bridge).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024**3
# The first word of every simulated device's ``model``: a dashboard, a rule or a
# person can tell a simulated device from the hardware it imitates at a glance.
SIMULATED = "Simulated"


@dataclass(frozen=True)
class SimModel:
    """What one simulated vendor's device looks like."""

    model: str
    memory_bytes: float
    driver: str
    tdp_watts: float
    idle_watts: float
    max_clock_hz: float
    memory_clock_hz: float
    link_type: str  # a Link type, or "pcie": no device links, only the PCIe tree
    links: int  # the device's link ports, each with its own throughput series
    link_bytes_per_second: float
    link_error_types: tuple[str, ...]
    bandwidth_source: str
    uuid_prefix: str
    group: int  # devices per simulated node, for topology
    # Parallel links between two linked devices (0: ``links``, as through a switch).
    pair_links: int = 0
    # Reading fields the vendor's real backend cannot fill: left out, never 0.
    missing: frozenset[str] = field(default_factory=frozenset)
    # The temperature sensors the vendor reports: the die, then its memory.
    sensors: tuple[str, str] = ("gpu", "memory")


MODELS: dict[str, SimModel] = {
    "nvidia": SimModel(
        "NVIDIA H100 80GB HBM3",
        80 * GIB,
        "550.90.07",
        700.0,
        70.0,
        1.98e9,
        2.619e9,
        "nvlink",
        18,
        25e9,
        ("crc_flit", "replay"),
        "NVML GPM DRAM_BW_UTIL",
        "GPU-",
        8,
    ),
    "amd": SimModel(
        "AMD Instinct MI300X",
        192 * GIB,
        "6.8.5",
        750.0,
        90.0,
        2.1e9,
        1.3e9,
        "xgmi",
        7,
        64e9,
        ("xgmi_err",),
        "gpu_metrics average_umc_activity",
        "",
        8,
    ),
    "oneapi": SimModel(
        "Intel(R) Data Center GPU Max 1550",
        128 * GIB,
        "1.3.29735",
        600.0,
        60.0,
        1.6e9,
        3.2e9,
        # PCIe-only (no Xe Link bridge): the sim's node whose topology is the PCIe tree.
        "pcie",
        0,
        0.0,
        (),
        "Level Zero memory bandwidth counters",
        "",
        8,
    ),
    # Gaudi 3 OAM (HL-325L): 128 GB HBM2e, 900 W, 24 x 200 GbE RoCE ports of which 21
    # join the 8 Gaudis of an HLS board all-to-all (3 per pair); the rest scale out.
    "gaudi": SimModel(
        "Intel Gaudi 3 HL-325L",
        128 * GIB,
        "1.18.0-524",
        900.0,
        90.0,
        1.6e9,
        3.7e9,
        "roce",
        24,
        25e9,
        (),
        "HLML",
        "",
        8,
        pair_links=3,
        sensors=("on_chip", "board"),
        # The Gaudi backend reads no per-port throughput (exporter/schema.py's
        # sources): the links are in the topology only.
        missing=frozenset({"link_bytes_per_second"}),
    ),
    # Ascend 910B3 (Atlas 800T A2; DCMI names it "Ascend" + "910B3"): 64 GB HBM, 8 NPUs
    # in an HCCS full mesh, seven HCCS ports each, one to each peer.
    "ascend": SimModel(
        "Ascend910B3",
        64 * GIB,
        "24.1.rc2",
        400.0,
        80.0,
        1.8e9,
        1.6e9,
        "hccs",
        7,
        56e9,
        (),
        "DCMI HBM bandwidth utilization",
        "",
        8,
        pair_links=1,
        sensors=("chip", "hbm"),
        missing=frozenset({"pcie_bytes_per_second", "link_bytes_per_second"}),
    ),
    # TPU v5e: 16 GiB HBM2e, 4 ICI ports, 2x2 chips on a 4-chip VM. libtpu's runtime
    # metrics give duty cycle and HBM use only.
    "tpu": SimModel(
        "TPU v5e",
        16 * GIB,
        "libtpu 0.0.11",
        0.0,
        0.0,
        0.0,
        0.0,
        "ici",
        4,
        50e9,
        (),
        "",
        "",
        4,
        pair_links=2,
        missing=frozenset(
            {
                "memory_bandwidth_utilization",
                "ecc_errors",
                "temperatures",
                "power_watts",
                "power_limit_watts",
                "energy_joules",
                "clocks_hz",
                "throttle",
                "pcie_bytes_per_second",
                "link_bytes_per_second",
                "link_errors",
            }
        ),
    ),
}


def linked(spec: SimModel, a: int, b: int) -> bool:
    """Whether devices ``a`` and ``b`` (indices among the vendor's devices) have a
    direct device link (see the module docstring); never for ``pcie``."""
    if spec.link_type == "pcie" or a // spec.group != b // spec.group:
        return False
    if spec.link_type == "ici":
        return (a ^ b).bit_count() == 1
    return True


def pcie_kind(a: int, b: int) -> str:
    """The PCIe-tree link type between two devices of a PCIe-only node: two
    neighbours share a switch, four a host bridge, the rest are across the system."""
    if a // 2 == b // 2:
        return "pcie_switch"
    if a // 4 == b // 4:
        return "pcie_hostbridge"
    return "system"
