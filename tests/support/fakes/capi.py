"""Cluster API's MachineDeployment and MachineSet controllers for the fake API
server: just enough of them to see what ``replace_machine`` and ``scale_node_pool``
lead to, a Machine replaced and a node added.

Why: the fake API server stores MachineDeployments, MachineSets and Machines and
runs no controller, so without this a test could only check the requests the
controller sent, not that they bring exactly one new node (and not two). Like
``tests/support/fakes/gangops.py``, ``reconcile()`` runs the emulated controllers
until nothing changes; a test calls it where a real cluster would have caught up.
It works on the server's store directly (``add``/``remove``), as the controllers'
own writes would, so the request log holds only the controller under test.

What it emulates, from Cluster API's behaviour:

- **MachineDeployment** (one MachineSet per deployment here, no rollouts): the
  MachineSet labelled ``cluster.x-k8s.io/deployment-name=<md>`` follows the
  deployment's ``spec.replicas``.
- **MachineHealthCheck remediation**: a Machine annotated
  ``cluster.x-k8s.io/remediate-machine`` that a MachineHealthCheck of its namespace
  selects (``spec.selector`` against the Machine's labels) is unhealthy whatever
  else it says, and its MachineSet deletes it. Without such a check the annotation
  does nothing, as in Cluster API.
- **Machine deletion**: a deleted Machine's Node is deleted too (Cluster API drains
  and deletes it before it lets the Machine go).
- **MachineSet**: keeps ``spec.replicas`` live Machines. Short: it creates a Machine
  ``<set>-<n>`` (labels deployment-name, set-name, cluster-name; an ownerReference
  to the set) and, at once, its Node ``<machine>-node``: Ready, with the pool's
  allocatable (``allocatable`` per pool, else read from the set's capacity
  annotations, else 8 ``nvidia.com/gpu``), annotated with the Machine's name and
  namespace as Cluster API annotates nodes; the Machine gets ``status.nodeRef``.
  ``devices_ready=False`` starts new nodes with 0 allocatable devices, as a node
  whose device plugin has not advertised them yet. Over: it deletes Machines marked
  ``cluster.x-k8s.io/delete-machine`` first, then the newest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel_common.names import (
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CLUSTER_LABEL,
    CAPI_CLUSTER_NAMESPACE_ANNOTATION,
    CAPI_DELETE_MACHINE_ANNOTATION,
    CAPI_DEPLOYMENT_LABEL,
    CAPI_MACHINE_ANNOTATION,
    CAPI_MACHINESET_LABEL,
    CAPI_REMEDIATE_MACHINE_ANNOTATION,
    HOSTNAME_LABEL,
    NVIDIA_GPU,
    is_device_resource,
)
from tests.support.fakes.apiserver import FakeApiServer, pod_selector_matches

Obj = dict[str, Any]
CAPI = "cluster.x-k8s.io/v1beta1"
CLUSTER = "c1"
BASE_ALLOCATABLE = {"cpu": "64", "memory": "512Gi", "pods": "110"}


def machine_set(
    name: str, namespace: str, deployment: str, replicas: int, **annotations: str
) -> Obj:
    """A MachineSet of ``deployment`` (the label Cluster API sets on it)."""
    return {
        "apiVersion": CAPI,
        "kind": "MachineSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {CAPI_DEPLOYMENT_LABEL: deployment, CAPI_CLUSTER_LABEL: CLUSTER},
            "annotations": dict(annotations),
        },
        "spec": {"clusterName": CLUSTER, "replicas": replicas},
    }


def machine_health_check(name: str, namespace: str, **match_labels: str) -> Obj:
    """A MachineHealthCheck selecting the Machines with ``match_labels``."""
    return {
        "apiVersion": CAPI,
        "kind": "MachineHealthCheck",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterName": CLUSTER, "selector": {"matchLabels": dict(match_labels)}},
    }


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.setdefault("metadata", {})
    return meta


class ClusterAPI:
    """The emulated Cluster API controllers of one fake API server."""

    def __init__(
        self,
        api: FakeApiServer,
        *,
        allocatable: Mapping[str, Mapping[str, str]] | None = None,
        devices_ready: bool = True,
    ) -> None:
        self.api = api
        self.allocatable = {k: dict(v) for k, v in (allocatable or {}).items()}
        self.devices_ready = devices_ready
        # Machines and Nodes this emulation created, in order.
        self.created: list[tuple[str, str]] = []
        self._serial: dict[str, int] = {}

    def reconcile(self, rounds: int = 20) -> None:
        """Run every controller until nothing changes (at most ``rounds`` passes)."""
        for _ in range(rounds):
            changed = self._deployments() | self._remediate() | self._orphans()
            changed |= self._machine_sets()
            if not changed:
                return
        raise AssertionError(f"the Cluster API emulation did not settle in {rounds} rounds")

    # -- MachineDeployment -> MachineSet replicas

    def _deployments(self) -> bool:
        changed = False
        deployments = {
            (_meta(md).get("namespace"), _meta(md)["name"]): md
            for md in self.api.objects("machinedeployments")
        }
        for ms in self.api.objects("machinesets"):
            meta = _meta(ms)
            md = deployments.get(
                (meta.get("namespace"), (meta.get("labels") or {}).get(CAPI_DEPLOYMENT_LABEL))
            )
            if md is None:
                continue
            want = int((md.get("spec") or {}).get("replicas") or 0)
            if int((ms.get("spec") or {}).get("replicas") or 0) != want:
                ms.setdefault("spec", {})["replicas"] = want
                self.api.add(ms)
                changed = True
        return changed

    # -- MachineHealthCheck + MachineSet remediation

    def _remediate(self) -> bool:
        checks = self.api.objects("machinehealthchecks")
        changed = False
        for m in self.api.objects("machines"):
            meta = _meta(m)
            if CAPI_REMEDIATE_MACHINE_ANNOTATION not in (meta.get("annotations") or {}):
                continue
            labels = meta.get("labels") or {}
            if any(
                _meta(c).get("namespace") == meta.get("namespace")
                and pod_selector_matches((c.get("spec") or {}).get("selector") or {}, labels)
                for c in checks
            ):
                self._delete_machine(m)
                changed = True
        return changed

    # -- Machine deletion takes its Node

    def _orphans(self) -> bool:
        """Nodes whose Machine (by Cluster API's node annotations) is gone."""
        live = {(_meta(m).get("namespace"), _meta(m)["name"]) for m in self.api.objects("machines")}
        changed = False
        for node in self.api.objects("nodes"):
            annotations = _meta(node).get("annotations") or {}
            machine = annotations.get(CAPI_MACHINE_ANNOTATION)
            namespace = annotations.get(CAPI_CLUSTER_NAMESPACE_ANNOTATION)
            if machine and namespace and (namespace, machine) not in live:
                self.api.remove("nodes", None, _meta(node)["name"])
                changed = True
        return changed

    def _delete_machine(self, machine: Obj) -> None:
        meta = _meta(machine)
        self.api.remove("machines", meta.get("namespace"), meta["name"])
        node = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
        if node:
            self.api.remove("nodes", None, str(node))

    # -- MachineSet

    def _machine_sets(self) -> bool:
        changed = False
        for ms in self.api.objects("machinesets"):
            meta = _meta(ms)
            namespace, name = str(meta.get("namespace")), str(meta["name"])
            owned = [
                m
                for m in self.api.objects("machines")
                if _meta(m).get("namespace") == namespace
                and (_meta(m).get("labels") or {}).get(CAPI_MACHINESET_LABEL) == name
                and not _meta(m).get("deletionTimestamp")
            ]
            want = int((ms.get("spec") or {}).get("replicas") or 0)
            if len(owned) < want:
                for _ in range(want - len(owned)):
                    self._create(ms)
                changed = True
            elif len(owned) > want:
                # Marked Machines first, then the newest (Cluster API's default
                # delete policy is Random; newest keeps the tests deterministic).
                def marked(m: Obj) -> bool:
                    return CAPI_DELETE_MACHINE_ANNOTATION in (_meta(m).get("annotations") or {})

                newest = sorted(
                    (m for m in owned if not marked(m)),
                    key=lambda m: (str(_meta(m).get("creationTimestamp", "")), _meta(m)["name"]),
                    reverse=True,
                )
                victims = [m for m in owned if marked(m)] + newest
                for m in victims[: len(owned) - want]:
                    self._delete_machine(m)
                changed = True
        return changed

    def _pool_allocatable(self, ms: Obj, pool: str) -> dict[str, str]:
        if pool in self.allocatable:
            out = dict(self.allocatable[pool])
        else:
            annotations = _meta(ms).get("annotations") or {}
            out = dict(BASE_ALLOCATABLE)
            count = annotations.get(CAPI_CAPACITY_GPU_COUNT)
            resource = annotations.get(CAPI_CAPACITY_GPU_TYPE) or NVIDIA_GPU
            out[str(resource)] = str(count) if count else "8"
        if not self.devices_ready:
            out = {r: ("0" if is_device_resource(r) else v) for r, v in out.items()}
        return out

    def _create(self, ms: Obj) -> None:
        meta = _meta(ms)
        namespace, name = str(meta.get("namespace")), str(meta["name"])
        pool = str((meta.get("labels") or {}).get(CAPI_DEPLOYMENT_LABEL) or name)
        serial = self._serial.get(name, 0)
        while self.api.get("machines", namespace, f"{name}-{serial}") is not None:
            serial += 1
        self._serial[name] = serial + 1
        machine_name = f"{name}-{serial}"
        node_name = f"{machine_name}-node"
        allocatable = self._pool_allocatable(ms, pool)
        self.api.add(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node_name,
                    "labels": {HOSTNAME_LABEL: node_name, "pool": pool},
                    "annotations": {
                        CAPI_MACHINE_ANNOTATION: machine_name,
                        CAPI_CLUSTER_NAMESPACE_ANNOTATION: namespace,
                    },
                },
                "spec": {"providerID": f"fake:///{machine_name}"},
                "status": {
                    "capacity": allocatable,
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }
        )
        self.api.add(
            {
                "apiVersion": CAPI,
                "kind": "Machine",
                "metadata": {
                    "name": machine_name,
                    "namespace": namespace,
                    "labels": {
                        CAPI_DEPLOYMENT_LABEL: pool,
                        CAPI_MACHINESET_LABEL: name,
                        CAPI_CLUSTER_LABEL: CLUSTER,
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": CAPI,
                            "kind": "MachineSet",
                            "name": name,
                            "uid": meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {"clusterName": CLUSTER},
                "status": {"phase": "Running", "nodeRef": {"kind": "Node", "name": node_name}},
            }
        )
        self.created.append((machine_name, node_name))


__all__ = ["ClusterAPI", "machine_health_check", "machine_set"]
