"""resource.k8s.io/v1 objects (DeviceClass, ResourceSlice, ResourceClaim,
ResourceClaimTemplate) and pods that use them, in the API's JSON shape, for the DRA
tests of the fake API server, the controller and the end-to-end test: one place
that spells the real schema, so each test says only what differs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accel_common.names import DRA_NVIDIA_GPU
from tests.support.kubeobjs import RUNNING

Obj = dict[str, Any]
API = "resource.k8s.io/v1"


def device_class(name: str = DRA_NVIDIA_GPU, driver: str | None = None) -> Obj:
    """A DeviceClass selecting ``driver``'s devices (the NVIDIA chart's shape)."""
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver or name}'"}}]},
    }


def resource_slice(
    node: str, devices: int = 8, driver: str = DRA_NVIDIA_GPU, generation: int = 1
) -> Obj:
    """The slice a node's DRA driver publishes: one pool named after the node,
    devices ``gpu-0``... (the NVIDIA driver's names), each with a uuid attribute."""
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver.replace('.', '-')}"},
        "spec": {
            "driver": driver,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": f"GPU-{node}-{i}"},
                        "index": {"int": i},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def claim_spec(count: int = 1, device_class_name: str = DRA_NVIDIA_GPU) -> Obj:
    return {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class_name, "count": count}}
            ]
        }
    }


def claim(
    name: str,
    namespace: str = "ml",
    count: int = 1,
    device_class_name: str = DRA_NVIDIA_GPU,
) -> Obj:
    """An unallocated ResourceClaim asking for ``count`` devices of the class."""
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(count, device_class_name),
    }


def allocation(node: str, devices: list[str], driver: str = DRA_NVIDIA_GPU) -> Obj:
    """A claim's ``status.allocation`` as the scheduler writes it: the devices of the
    node's pool, pinned to that node."""
    return {
        "devices": {
            "results": [
                {"request": "gpu", "driver": driver, "pool": node, "device": d} for d in devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def allocated_claim(
    name: str,
    node: str,
    devices: list[str],
    namespace: str = "ml",
    pod: str = "",
    driver: str = DRA_NVIDIA_GPU,
) -> Obj:
    """A ResourceClaim allocated ``devices`` on ``node`` and reserved for ``pod``."""
    obj = claim(name, namespace, len(devices) or 1)
    obj["status"] = {"allocation": allocation(node, devices, driver)}
    if pod:
        obj["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]
    return obj


def claim_template(
    name: str, namespace: str = "ml", count: int = 1, device_class_name: str = DRA_NVIDIA_GPU
) -> Obj:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(count, device_class_name)},
    }


def dra_pod(
    name: str,
    node: str | None,
    claims: Sequence[str] = (),
    templates: dict[str, str] | None = None,
    namespace: str = "ml",
    owner: tuple[str, str] | None = ("Job", "train"),
    generated: dict[str, str] | None = None,
) -> Obj:
    """A pod whose container uses claims: ``claims`` by name, ``templates`` as
    {entry: template}, with ``generated`` {entry: claim name} in its status (what
    the resource claim controller writes). Running when it has a node."""
    entries: list[Obj] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    entries += [{"name": e, "resourceClaimTemplateName": t} for e, t in (templates or {}).items()]
    meta: Obj = {"name": name, "namespace": namespace, "labels": {"app": name}}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": f"uid-{owner[1]}",
                "controller": True,
            }
        ]
    spec: Obj = {
        "containers": [
            {
                "name": "main",
                "image": "trainer:1",
                "resources": {"claims": [{"name": e["name"]} for e in entries]},
            }
        ],
        "resourceClaims": entries,
    }
    status: Obj = {"phase": "Pending"}
    if node is not None:
        spec["nodeName"] = node
        status = dict(RUNNING)
    if generated:
        status["resourceClaimStatuses"] = [
            {"name": e, "resourceClaimName": c} for e, c in generated.items()
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
