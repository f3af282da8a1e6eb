"""The fake API server serves Kueue's kinds and the ProvisioningRequest as their CRDs
declare them (scope, status subresource), and the client's two calls for them:
``list_custom`` with no namespace (cluster-scoped, or every namespace) and
``patch_custom_status``, also through the dry-run wrapper."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import pytest

from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.kube.errors import NotFound
from autoscaler.kube.protocol import KUEUE_GROUP, KUEUE_VERSION
from tests.support.fakes.apiserver import FakeApiServer

pytestmark = pytest.mark.timeout(30)
API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"


def workload(name: str, namespace: str) -> dict[str, object]:
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queueName": "a", "podSets": [{"name": "main", "count": 1}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    }


async def test_scopes_and_lists_across_namespaces(api: FakeApiServer, kube: ClientKube) -> None:
    api.add({"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {}})
    api.add({"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "h100"}})
    api.add(workload("w1", "ml"))
    api.add(workload("w2", "research"))
    queues = await kube.list_custom(KUEUE_GROUP, KUEUE_VERSION, "", "clusterqueues")
    assert [q["metadata"]["name"] for q in queues] == ["cq"]
    every = await kube.list_custom(KUEUE_GROUP, KUEUE_VERSION, "", "workloads")
    assert sorted(w["metadata"]["name"] for w in every) == ["w1", "w2"]
    mine = await kube.list_custom(KUEUE_GROUP, KUEUE_VERSION, "ml", "workloads")
    assert [w["metadata"]["name"] for w in mine] == ["w1"]
    # A ClusterQueue is cluster-scoped: under a namespace there is none.
    with pytest.raises(NotFound):
        await kube.list_custom(KUEUE_GROUP, KUEUE_VERSION, "ml", "clusterqueues")
    provreq = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": "pr", "namespace": "ml"},
        "spec": {"provisioningClassName": "x", "podSets": []},
    }
    api.add(provreq)
    assert await kube.get_custom("autoscaling.x-k8s.io", "v1", "ml", "provisioningrequests", "pr")


async def test_the_status_subresource_and_its_absence(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(workload("w1", "ml"))
    api.add({"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "h100"}})
    evicted = {"status": {"conditions": [{"type": "Evicted", "status": "True"}]}}
    # A dry run sends the write with dryRun=All: nothing changes.
    dry = DryRunKube(kube)
    await dry.patch_custom_status(KUEUE_GROUP, KUEUE_VERSION, "ml", "workloads", "w1", evicted)
    stored = api.get("workloads", "ml", "w1") or {}
    assert stored["status"]["conditions"][0]["type"] == "QuotaReserved"
    # The status subresource writes the status and nothing else.
    both = {**evicted, "spec": {"active": False}}
    out = await kube.patch_custom_status(KUEUE_GROUP, KUEUE_VERSION, "ml", "workloads", "w1", both)
    assert out["status"]["conditions"] == evicted["status"]["conditions"]
    assert "active" not in out["spec"]
    # A write to the object itself leaves the status alone.
    spec = {"spec": {"active": False}, "status": {"conditions": []}}
    out = await kube.patch_custom(KUEUE_GROUP, KUEUE_VERSION, "ml", "workloads", "w1", spec)
    assert out["spec"]["active"] is False
    assert out["status"]["conditions"] == evicted["status"]["conditions"]
    # A ResourceFlavor declares no status subresource.
    request = urllib.request.Request(
        f"{api.url}/apis/{API}/resourceflavors/h100/status",
        data=b"{}",
        method="PATCH",
        headers={"Content-Type": "application/merge-patch+json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        await asyncio.to_thread(urllib.request.urlopen, request)
    assert refused.value.code == 404
