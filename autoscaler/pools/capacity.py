"""When a node of a pool is capacity, and what a node of a pool at 0 would offer.

Two problems that the cluster-autoscaler met first, solved the same way for
``scale_node_pool`` and the ``accel_pool_*`` series:

**Ready is not capacity.** A GPU node is Ready as soon as its kubelet is, minutes
before its device plugin (or DRA driver) advertises the GPUs. Counted as capacity,
it answers no pending pod, the pods stay pending, and the pool is grown a second
time for the same pods. So a node counts as capacity only when its devices are
allocatable: an accelerator resource in ``status.allocatable`` above 0, or devices
in the ResourceSlices published for the node (``accel_common.dra.node_offers``).
A node that should have devices and has none yet is *warming*: it counts as capacity
on its way, like a Machine still provisioning, for at most ``DEVICE_WAIT`` (15
minutes) from its creation. After that it is broken, not coming (``notready``), and
a scale-up no longer waits for it. The cluster-autoscaler does the same: nodes with
the GPU label but no allocatable GPU are treated as unready (``utils/gpu``'s
``FilterOutNodesWithUnreadyGpus``), within its ``--max-node-provision-time`` (15
minutes by default); GKE auto-repairs a node whose GPUs stayed unallocatable for 15
minutes. A node *should* have devices when its pool's capacity annotations say so,
when another node of the pool offers devices, or when it carries the Cluster API
provider's ``cluster-api/accelerator`` label. Without a view of ResourceSlices
(``dra`` None), a pool whose devices come through DRA is not judged at all: its
Ready nodes are ready, as before.

**A pool at 0 has no node to look at.** Scale from zero reads what a node would
offer from the capacity annotations that the cluster-autoscaler's Cluster API
provider reads, on the MachineDeployment or, when it has none, its MachineSet
(``capacity.cluster-autoscaler.kubernetes.io/``): ``gpu-count`` (a whole number),
``gpu-type`` (the extended resource, ``nvidia.com/gpu`` when unset), or
``dra-driver`` (the DRA driver whose ``gpu-count`` devices a node publishes in its
ResourceSlices; counted under the driver's name, as the controller counts every DRA
device, so that only claims fit them), ``labels`` (``k1=v1,k2=v2``) and
``taints`` (``k1=v1:NoSchedule,k2:NoExecute``). ``cpu`` and ``memory`` are not
weighed: the pool series count devices, as they do for registered nodes.

A node the pool would add also has the labels every node has, which the
cluster-autoscaler gives its template node (``buildGenericLabels`` of its Cluster
API provider): ``kubernetes.io/os=linux`` and ``kubernetes.io/arch=amd64``, unless
the ``labels`` annotation says otherwise (an Arm pool: ``kubernetes.io/arch=arm64``).
Without them a pending pod that selects ``kubernetes.io/os: linux``, as many charts
write, would fit no pool at 0 nodes, and the pool would never grow
(``template_labels``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from accel_common.clusterjson import annotations_of
from accel_common.dra import VENDOR_DRIVER, driver_vendor
from accel_common.names import (
    AMD_GPU,
    CAPI_ACCELERATOR_LABEL,
    CAPI_CAPACITY_DRA_DRIVER,
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CAPACITY_LABELS,
    CAPI_CAPACITY_TAINTS,
    NVIDIA_GPU,
    is_device_resource,
)
from autoscaler.kube.protocol import Obj
from autoscaler.pools.base import NodeShape, Pool

log = logging.getLogger(__name__)

# The labels every new node has, the cluster-autoscaler's defaults for a template
# node (its Cluster API provider's buildGenericLabels; the hostname aside, which no
# pod can select before the node exists).
GENERIC_LABELS: Mapping[str, str] = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}

# How long a node that should have devices may go without allocatable ones and
# still count as capacity on its way (seconds from its creation).
DEVICE_WAIT = 15 * 60.0
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class DraView:
    """What the controller read of Dynamic Resource Allocation this cycle:
    ``offers`` node -> vendor -> devices (``accel_common.dra.node_offers``) and
    ``requests`` pod -> vendor -> devices it asks for through its claims
    (``accel_common.dra.pod_requests`` over the pod's namespace's claims)."""

    offers: Mapping[str, Mapping[str, int]]
    requests: Callable[[Obj], Mapping[str, int]]


def _vendor_resources(by_vendor: Mapping[str, int]) -> dict[str, int]:
    """vendor -> n keyed by the vendor's DRA driver (``nvidia`` -> ``gpu.nvidia.com``),
    as the controller counts DRA devices everywhere (``accel_common.dra.VENDOR_DRIVER``):
    a claim fits only where a DRA driver offers devices, never a device plugin's."""
    out: dict[str, int] = {}
    for vendor, n in by_vendor.items():
        resource = VENDOR_DRIVER.get(vendor)
        if resource is not None and n > 0:
            out[resource] = out.get(resource, 0) + n
    return out


def dra_requests(pod: Obj, dra: DraView | None) -> dict[str, int]:
    """The devices a pod asks for through its claims, by DRA driver name."""
    return _vendor_resources(dra.requests(pod)) if dra is not None else {}


def _count(value: Any) -> int:
    """A device count in allocatable ("8"); anything that is not a small whole
    number (a quantity with thousands of digits, "-3", an object) offers none."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return 0
    digits = str(value).strip()
    return int(digits) if digits.isdigit() and len(digits) <= 6 else 0


def node_devices(node: Obj, dra: DraView | None = None) -> dict[str, int]:
    """The devices a node offers now: accelerator resources in its allocatable above
    0, plus the devices its ResourceSlices publish (by DRA driver name)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    out = {r: n for r, v in allocatable.items() if is_device_resource(r) and (n := _count(v)) > 0}
    if dra is not None:
        name = str((node.get("metadata") or {}).get("name", ""))
        for resource, n in _vendor_resources(dra.offers.get(name) or {}).items():
            out[resource] = out.get(resource, 0) + n
    return out


def finished(pod: Obj) -> bool:
    """Whether the pod is done (phase Succeeded or Failed): it holds no device."""
    status = pod.get("status") if isinstance(pod, dict) else None
    return isinstance(status, dict) and status.get("phase") in ("Succeeded", "Failed")


def node_ready(node: Obj | None) -> bool:
    """Whether the node's Ready condition is True (a missing node is not ready)."""
    if node is None:
        return False
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def created(node: Obj) -> float | None:
    raw = (node.get("metadata") or {}).get("creationTimestamp")
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Readiness:
    """A pool's registered nodes by what they are worth now."""

    # Ready, and their devices allocatable (or the pool has none to wait for).
    ready: tuple[str, ...]
    # Should have devices, none allocatable yet, younger than DEVICE_WAIT: capacity
    # on its way, counted with the provisioning Machines.
    warming: tuple[str, ...]
    # Not Ready, missing, or past DEVICE_WAIT without their devices.
    notready: tuple[str, ...]


def readiness(
    pool: Pool,
    nodes: Mapping[str, Obj],
    now: float,
    *,
    dra: DraView | None = None,
    wait: float = DEVICE_WAIT,
) -> Readiness:
    """Sort ``pool``'s registered nodes (module docstring)."""
    devices = {n: node_devices(nodes[n], dra) for n in pool.nodes if n in nodes}
    shape = pool.shape
    judged = shape is None or not shape.dra_driver or dra is not None
    pool_has_devices = bool(shape is not None and shape.devices and judged) or any(devices.values())
    ready: list[str] = []
    warming: list[str] = []
    notready: list[str] = []
    for name in pool.nodes:
        node = nodes.get(name)
        if node is None:
            notready.append(name)
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        expects = pool_has_devices or CAPI_ACCELERATOR_LABEL in labels
        if not expects or devices.get(name):
            (ready if node_ready(node) else notready).append(name)
            continue
        born = created(node)
        if born is not None and now - born < wait:
            warming.append(name)
        else:
            notready.append(name)
    return Readiness(tuple(ready), tuple(warming), tuple(notready))


# What one declared shape may hold: a node has a few devices (1024 is far above any
# machine's), and a few labels and taints; the values are kept as Kubernetes keeps them.
MAX_DEVICES = 1024
MAX_PARTS = 64
MAX_VALUE = 253


def _shown(value: Any) -> str:
    """A value for a message, cut short: an annotation may be 256 KiB."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _parts(raw: str, where: str, key: str) -> list[str]:
    if len(raw) > MAX_PARTS * (2 * MAX_VALUE + 20):
        raise ValueError(f"{where}: {key}: {len(raw)} characters is far too long for a shape")
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if len(parts) > MAX_PARTS:
        raise ValueError(f"{where}: {key}: {len(parts)} entries (at most {MAX_PARTS})")
    for p in parts:
        if len(p) > 2 * MAX_VALUE + 20:
            raise ValueError(f"{where}: {key}: {_shown(p)} is too long for a label or taint")
    return parts


def _labels(raw: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in _parts(raw, where, CAPI_CAPACITY_LABELS):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{where}: {CAPI_CAPACITY_LABELS}: {_shown(part)} is not key=value")
        out[key.strip()] = value.strip()
    return out


def _taints(raw: str, where: str) -> tuple[tuple[str, str, str], ...]:
    out: list[tuple[str, str, str]] = []
    for part in _parts(raw, where, CAPI_CAPACITY_TAINTS):
        spec, colon, effect = part.rpartition(":")
        key, _, value = spec.partition("=")
        if not colon or not key or effect not in EFFECTS:
            raise ValueError(
                f"{where}: {CAPI_CAPACITY_TAINTS}: {_shown(part)} is not key=value:Effect "
                f"(Effect one of {', '.join(EFFECTS)})"
            )
        out.append((key, value, effect))
    return tuple(out)


def read_shape(obj: Obj) -> NodeShape | None:
    """The node shape a MachineDeployment's or MachineSet's capacity annotations
    declare; None when they declare no devices (no ``gpu-count``, or 0). Raises
    ValueError, naming the object and the annotation, on a value it cannot read."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    where = f"{obj.get('kind', 'object')} {meta.get('namespace', '')}/{meta.get('name', '')}"
    annotations: Mapping[str, Any] = annotations_of(obj)
    for key in (CAPI_CAPACITY_GPU_COUNT, CAPI_CAPACITY_DRA_DRIVER, CAPI_CAPACITY_GPU_TYPE):
        value = annotations.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_VALUE):
            raise ValueError(f"{where}: {key}={_shown(value)} is not a short string")
    for key in (CAPI_CAPACITY_LABELS, CAPI_CAPACITY_TAINTS):
        if not isinstance(annotations.get(key) or "", str):
            raise ValueError(f"{where}: {key}={_shown(annotations.get(key))} is not a string")
    raw_count = annotations.get(CAPI_CAPACITY_GPU_COUNT)
    if raw_count is None or str(raw_count).strip() == "":
        return None
    digits = str(raw_count).strip()
    if digits.startswith("-") and digits[1:].isdigit():
        raise ValueError(f"{where}: {CAPI_CAPACITY_GPU_COUNT}={_shown(raw_count)} is negative")
    if not digits.isdigit() or len(digits) > 6:
        raise ValueError(
            f"{where}: {CAPI_CAPACITY_GPU_COUNT}={_shown(raw_count)} is not a whole number "
            f"of devices (0..{MAX_DEVICES})"
        )
    count = int(digits)
    if count > MAX_DEVICES:
        raise ValueError(
            f"{where}: {CAPI_CAPACITY_GPU_COUNT}={count} is more devices than one node has "
            f"(at most {MAX_DEVICES})"
        )
    if count == 0:
        return None
    driver = str(annotations.get(CAPI_CAPACITY_DRA_DRIVER) or "").strip()
    if driver:
        resource = driver
        if driver_vendor(driver) is None:
            raise ValueError(
                f"{where}: {CAPI_CAPACITY_DRA_DRIVER}={_shown(driver)} is not an accelerator "
                "DRA driver this controller knows"
            )
    else:
        resource = str(annotations.get(CAPI_CAPACITY_GPU_TYPE) or "").strip() or NVIDIA_GPU
        if not is_device_resource(resource):
            raise ValueError(
                f"{where}: {CAPI_CAPACITY_GPU_TYPE}={_shown(resource)} is not an accelerator "
                f"resource (e.g. {NVIDIA_GPU}, {AMD_GPU})"
            )
    return NodeShape(
        devices={resource: count},
        labels=_labels(str(annotations.get(CAPI_CAPACITY_LABELS) or ""), where),
        taints=_taints(str(annotations.get(CAPI_CAPACITY_TAINTS) or ""), where),
        dra_driver=driver,
        source=where,
    )


def template_labels(shape: NodeShape) -> dict[str, str]:
    """The labels a node of ``shape`` will have: ``GENERIC_LABELS``, overridden by
    what its capacity annotations declare."""
    return {**GENERIC_LABELS, **shape.labels}


def tolerated(pod_spec: Obj, taints: Sequence[tuple[str, str, str]]) -> bool:
    """Whether the pod tolerates every NoSchedule and NoExecute taint (the
    scheduler's rule; PreferNoSchedule does not keep a pod off)."""
    tolerations = pod_spec.get("tolerations") or []
    for key, value, effect in taints:
        if effect == "PreferNoSchedule":
            continue
        if not any(_tolerates(t, key, value, effect) for t in tolerations):
            return False
    return True


def _tolerates(t: Mapping[str, Any], key: str, value: str, effect: str) -> bool:
    if t.get("effect") and t.get("effect") != effect:
        return False
    if t.get("operator") == "Exists":
        return not t.get("key") or t.get("key") == key
    return bool(t.get("key") == key and str(t.get("value") or "") == value)


__all__ = [
    "DEVICE_WAIT",
    "GENERIC_LABELS",
    "DraView",
    "Readiness",
    "created",
    "dra_requests",
    "finished",
    "node_devices",
    "node_ready",
    "read_shape",
    "readiness",
    "template_labels",
    "tolerated",
]
