"""Kubernetes objects for the action tests, in the API's JSON shape, and a Kube
client against the fake API server with short retry backoffs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoscaler.kube.client import ClientKube
from tests.support.fakes.apiserver import FakeApiServer

Obj = dict[str, Any]
RUNNING: Obj = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
    "startTime": "2026-11-29T10:00:00Z",
}


def node(name: str, gpus: int = 8, resource: str = "nvidia.com/gpu", **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {},
        "status": {
            "allocatable": {resource: str(gpus), "cpu": "64", "memory": "512Gi"},
            "capacity": {resource: str(gpus), "cpu": "64", "memory": "512Gi"},
        },
    }


def pod(
    name: str,
    node_name: str,
    *,
    owner: str | None = "Job",
    owner_name: str | None = None,
    gpus: int = 1,
    namespace: str = "ml",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    start: str = "2026-11-29T10:00:00Z",
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        api = {
            "Job": "batch/v1",
            "DaemonSet": "apps/v1",
            "ReplicaSet": "apps/v1",
            "StatefulSet": "apps/v1",
        }[owner]
        meta["ownerReferences"] = [
            {
                "apiVersion": api,
                "kind": owner,
                "name": owner_name or f"{name}-owner",
                "uid": f"uid-{owner_name or name}-owner",
                "controller": True,
            }
        ]
    resources: Obj = {}
    if gpus:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "main", "image": "train:1", "resources": resources}],
        },
        "status": {**RUNNING, "startTime": start},
    }


def pdb(name: str, match: dict[str, str], min_available: int, namespace: str = "ml") -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": match}},
    }


def job(name: str, namespace: str = "ml") -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "train:1"}],
                }
            }
        },
    }


def client(api: FakeApiServer, tmp: Path, **kw: Any) -> ClientKube:
    """A client of ``api`` whose retries wait milliseconds, not seconds."""
    kw.setdefault("backoff_min", 0.01)
    kw.setdefault("backoff_max", 0.05)
    return ClientKube.from_config(str(api.write_kubeconfig(tmp / "kubeconfig")), **kw)


def evictions(api: FakeApiServer, name: str) -> int:
    """Successful evictions of pod ``name`` the server answered."""
    return sum(
        1 for r in api.requests_for("POST", rf"/pods/{name}/eviction$") if 200 <= r.status < 300
    )


def events(api: FakeApiServer, reason: str | None = None) -> list[Obj]:
    return [e for e in api.objects("events") if reason is None or e.get("reason") == reason]
