"""Who holds the simulated devices: pods, ResourceClaims, shared devices, processes.

The sim backend (``exporter/backends/sim.py``) keeps the devices' behaviour; this
module decides, once and the same for a seed, which simulated pods hold which
devices and how, so that the per-pod series (``accel_device_pod_info`` and its
``claim``, ``accel_pod_utilization_ratio``, the chargeback built on them) can be seen
and tested without a cluster (issue 29). It is built so:

* **The rows are what the kubelet backend would hand over.** A device plugin's
  device is a row with the plugin's resource and the device's UUID. A device that a
  ResourceClaim gave (``--sim-claims``) is a row with ``claim`` set, the DRA driver
  as the resource and the driver's own device name, as the NVIDIA and AMD DRA
  drivers publish it: NVIDIA ``gpu-<minor>`` and ``gpu-<minor>-mig-<profile>-<GI
  profile id>-<placement start>``; AMD ``gpu-<card>-<render minor>``, which the
  kubelet backend turns into a PCI address (or ``<pci>/<k>`` for a partition)
  through the amdkfd topology. The sim does the same through ``exporter.dra`` with
  a topology of its own devices, so the renderer's DRA matching is what runs.
* **Sharing (``--sim-sharing``) shows each way a device is held.** The last free
  NVIDIA GPU is shared through MPS by three ``infer`` pods (under ``--sim-claims``
  one shared claim, as the NVIDIA DRA driver's MPS sharing gives), with the MPS
  server as a host process; the first train pod's first device is time-sliced
  with the last train pod (as without sharing); one pod, ``notebook-0``, holds a
  GPU and keeps it idle; the others hold theirs alone.
* **Processes carry the per-pod use.** With sharing, the NVIDIA and AMD devices list
  their processes as NVML and AMD SMI do: one process per container, with its share
  of the device's utilization and memory (none on a MIG instance, where NVML gives
  no per-process utilization), so the renderer's own attribution sums them. Their
  owners come from here rather than ``/proc`` (``owners``): the PIDs are made up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from accel_common import names
from exporter import dra
from exporter.model import DeviceInfo, PodAssignment, ProcessUsage
from exporter.procmap import NO_OWNER, Owner

NAMESPACE = "sim"
# What the idle pod's GPU does: a notebook kernel that holds the GPU and waits.
IDLE_UTILIZATION = 0.02
# Of a shared device's use, what its pods' processes account for; the rest is
# context switching and the host's, which no pod pays under the measured policy.
SHARED_ACCOUNTED = 0.9
# The MPS control daemon's server process, a host process holding some memory.
MPS_SERVER_PID = 4242
MPS_SERVER_MEMORY = 512 * 1024**2
INFER_PODS = 3
# Vendors whose real backends list a device's processes (NVML, AMD SMI).
LISTS_PROCESSES = ("nvidia", "amd")
# GPU instance profile ids and placement starts of the sim's MIG profiles on an H100.
MIG_PLACEMENT = {"3g.40gb": (9, 0), "1g.10gb": (19, 6)}


def noise(seed: int, device: str, t: int, what: str) -> float:
    """A deterministic pseudo-random number in [0, 1) for (seed, device, second)."""
    h = hashlib.blake2b(f"{seed}/{device}/{t}/{what}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2**64


def resource(info: DeviceInfo) -> str:
    """The extended resource a device plugin would advertise the device as."""
    if info.vendor == "nvidia" and info.parent:
        # A MIG instance, under the device plugin's ``mixed`` strategy.
        return names.nvidia_mig_resource(info.profile)
    # An AMD partition is ``amd.com/gpu`` under the plugin's default ``single`` naming.
    return names.VENDOR_RESOURCE[info.vendor]


@dataclass(frozen=True)
class SimDevice:
    """A simulated device and the index of its (parent) GPU among its vendor's."""

    info: DeviceInfo
    index: int


@dataclass(frozen=True)
class Holder:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class PodLayout:
    """Every row the sim's ``pods()`` returns, and who holds each device."""

    rows: tuple[PodAssignment, ...] = ()
    # device name -> its holders, in the rows' order, each once
    holders: Mapping[str, tuple[Holder, ...]] = field(default_factory=dict)
    # The device shared through MPS, and the one held idle ("" for none).
    mps: str = ""
    idle: str = ""
    pids: Mapping[Holder, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Options:
    seed: int
    pods: int
    claims: bool
    sharing: bool
    # The DRA pool (the node) the sim's ResourceSlices would name.
    pool: str


def layout(devices: Sequence[SimDevice], opts: Options) -> PodLayout:
    """Who holds what (see the module docstring); no pods for ``opts.pods`` 0."""
    if opts.pods <= 0:
        return PodLayout()
    parents = {d.info.parent for d in devices if d.info.parent}
    free = [d for d in devices if d.info.device not in parents]
    mps = idle = None
    if opts.sharing:
        whole = [d for d in free if not d.info.parent]
        mps = next((d for d in reversed(whole) if d.info.vendor == "nvidia"), None)
        idle = next(
            (d for d in reversed(whole) if d.info.vendor in LISTS_PROCESSES and d is not mps), None
        )
        free = [d for d in free if d is not mps and d is not idle]
    naming = _Naming(devices, opts.pool)
    rows: list[PodAssignment] = []
    first: PodAssignment | None = None
    for k in range(opts.pods):
        if not free:
            break
        want = 1 + int(noise(opts.seed, "pods", k, "size") * 4)
        # A pod asks for one resource (nvidia.com/gpu, one MIG profile...), as real
        # pods do: it takes only devices of the first free one's kind.
        kind = resource(free[0].info)
        held = [d for d in free if resource(d.info) == kind][:want]
        free = [d for d in free if d not in held]
        pod = f"train-{k}"
        claimed = opts.claims and k % 2 == 1 and held[0].info.vendor in LISTS_PROCESSES
        claim = _claim_name(opts.seed, pod) if claimed else ""
        for d in held:
            row = naming.row(Holder(NAMESPACE, pod, "main"), d, claim)
            first = first or row
            rows.append(row)
    if first is not None and len(rows) > 1 and rows[-1].pod != first.pod:
        # Time-slicing: the last pod shares the first pod's first device.
        last = rows[-1].pod
        rows.append(PodAssignment(NAMESPACE, last, "main", first.resource, first.device_id))
    if mps is not None:
        claim = "infer-mps" if opts.claims else ""
        for k in range(INFER_PODS):
            rows.append(naming.row(Holder(NAMESPACE, f"infer-{k}", "server"), mps, claim))
    if idle is not None:
        rows.append(naming.row(Holder(NAMESPACE, "notebook-0", "main"), idle, ""))
    return _with_holders(
        rows, naming.device_of, mps.info.device if mps else "", idle.info.device if idle else ""
    )


def _with_holders(
    rows: list[PodAssignment], device_of: Mapping[tuple[str, str], str], mps: str, idle: str
) -> PodLayout:
    """The layout of ``rows``: each device's holders, each container once, and a
    made-up PID per container."""
    holders: dict[str, list[Holder]] = {}
    pids: dict[Holder, int] = {}
    for row in rows:
        device = device_of[(row.resource, row.device_id)]
        holder = Holder(row.namespace, row.pod, row.container)
        pids.setdefault(holder, 20_000 + 7 * len(pids))
        if holder not in holders.setdefault(device, []):
            holders[device].append(holder)
    return PodLayout(tuple(rows), {k: tuple(v) for k, v in holders.items()}, mps, idle, pids)


def _claim_name(seed: int, pod: str) -> str:
    """A claim made from the pod's ResourceClaimTemplate: ``<pod>-<claim>-<suffix>``,
    as the scheduler names them."""
    suffix = hashlib.sha256(f"{seed}/{pod}".encode()).hexdigest()[:5]
    return f"{pod}-gpus-{suffix}"


class _Naming:
    """The DRA drivers' names for the sim's NVIDIA and AMD devices, and the amdkfd
    topology that turns AMD's into a PCI reference (module docstring)."""

    def __init__(self, devices: Sequence[SimDevice], pool: str) -> None:
        self.pool = pool or "sim"
        parents = {d.info.parent for d in devices if d.info.parent}
        self.names: dict[str, str] = {}
        # render minor -> reference, as exporter.dra.kfd_references reads sysfs
        per_gpu: dict[str, list[int]] = {}
        card = 0
        for d in devices:
            info = d.info
            if info.vendor == "nvidia":
                self.names[info.device] = _nvidia_name(d)
            elif info.vendor == "amd" and info.device not in parents:
                render = 128 + card
                self.names[info.device] = f"gpu-{card}-{render}"
                per_gpu.setdefault(dra.pci_address(info.pci_bus_id), []).append(render)
                card += 1
        self.kfd: dict[int, str] = {}
        # (resource, device ID) of each row made -> the sim's device name
        self.device_of: dict[tuple[str, str], str] = {}
        for pci, minors in per_gpu.items():
            for k, minor in enumerate(minors):
                self.kfd[minor] = pci if len(minors) == 1 else f"{pci}/{k}"

    def row(self, who: Holder, d: SimDevice, claim: str) -> PodAssignment:
        info = d.info
        if not claim:
            self.device_of[(resource(info), info.uuid)] = info.device
            return PodAssignment(who.namespace, who.pod, who.container, resource(info), info.uuid)
        driver = names.DRA_NVIDIA_GPU if info.vendor == "nvidia" else names.DRA_AMD_GPU
        ref = dra.DraDevice(driver, self.pool, self.names[info.device])
        # What the kubelet backend's first step makes of the name (exporter.dra).
        device_id = dra.reference(ref, {}, self.kfd)
        self.device_of[(driver, device_id)] = info.device
        return PodAssignment(who.namespace, who.pod, who.container, driver, device_id, claim)


def _nvidia_name(d: SimDevice) -> str:
    """The NVIDIA DRA driver's name for a GPU or a MIG device."""
    if not d.info.parent:
        return f"gpu-{d.index}"
    profile_id, start = MIG_PLACEMENT.get(d.info.profile, (0, 0))
    key = dra.mig_profile_key(d.info.profile)
    return f"gpu-{d.index}-mig-{key}-{profile_id}-{start}"


def processes(
    plan: PodLayout,
    info: DeviceInfo,
    utilization: float,
    memory_used: float,
    seed: int,
    second: int,
) -> list[ProcessUsage]:
    """The processes on one device as its vendor library would list them: one per
    container that holds it, sharing ``utilization`` and ``memory_used`` (a shared
    device's by weights that move with time), plus the MPS server on the MPS GPU."""
    holders = plan.holders.get(info.device, ())
    if not holders:
        return []
    # NVML gives no per-process utilization on a MIG instance.
    measured = not (info.vendor == "nvidia" and info.parent)
    if len(holders) == 1:
        weights = [1.0]
    else:
        raw = [0.2 + noise(seed, f"{info.device}/{h.pod}", second, "w") for h in holders]
        weights = [SHARED_ACCOUNTED * w / sum(raw) for w in raw]
    out = [
        ProcessUsage(
            plan.pids[h],
            round(utilization * w, 4) if measured else None,
            float(int(memory_used * w)),
        )
        for h, w in zip(holders, weights, strict=True)
    ]
    if info.device == plan.mps:
        out.append(ProcessUsage(MPS_SERVER_PID, 0.0 if measured else None, MPS_SERVER_MEMORY))
    return out


def owners(plan: PodLayout, pids: Sequence[int], seed: int) -> dict[int, Owner]:
    """Who each of the sim's PIDs is (``NO_OWNER`` for the MPS server and any PID
    the sim did not make): what ``exporter.procmap`` reads from ``/proc`` and the
    kubelet's logs for real processes."""
    by_pid = {pid: h for h, pid in plan.pids.items()}
    out: dict[int, Owner] = {}
    for pid in pids:
        h = by_pid.get(pid)
        if h is None:
            out[pid] = NO_OWNER
            continue
        uid = hashlib.sha256(f"{seed}/{h.namespace}/{h.pod}".encode()).hexdigest()
        pod_uid = f"{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:32]}"
        out[pid] = Owner(h.namespace, h.pod, h.container, pod_uid, "")
    return out
