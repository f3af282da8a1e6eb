"""The ``Kube`` wrapper's resource.k8s.io/v1 reads, through the real client against
the fake API server: claims of one namespace or all, one claim, templates, a node's
ResourceSlices by field selector, DeviceClasses; the dry-run wrapper passes them
through; a node name no object can have is refused before any request."""

from __future__ import annotations

import pytest

from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.kube.errors import NotFound
from autoscaler.kube.names import InvalidName
from tests.support import draobjs
from tests.support.fakes.apiserver import FakeApiServer

pytestmark = pytest.mark.timeout(60)


async def test_dra_reads(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(draobjs.device_class())
    api.add(draobjs.resource_slice("n1", 2))
    api.add(draobjs.resource_slice("n2", 3))
    api.add(draobjs.claim_template("one"))
    api.add(draobjs.allocated_claim("c1", "n1", ["gpu-0"]))
    api.add(draobjs.claim("c2", namespace="other"))
    for k in (kube, DryRunKube(kube)):
        claims = await k.list_resource_claims()
        assert sorted(c["metadata"]["name"] for c in claims) == ["c1", "c2"]
        # Items carry kind and apiVersion, as ``kubectl get -o json`` prints them.
        assert {c["kind"] for c in claims} == {"ResourceClaim"}
        assert [c["metadata"]["name"] for c in await k.list_resource_claims("ml")] == ["c1"]
        got = await k.get_resource_claim("ml", "c1")
        assert got["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
        with pytest.raises(NotFound):
            await k.get_resource_claim("ml", "nope")
        assert [t["metadata"]["name"] for t in await k.list_resource_claim_templates()] == ["one"]
        on_n2 = await k.list_resource_slices("n2")
        assert [s["spec"]["nodeName"] for s in on_n2] == ["n2"]
        assert len(await k.list_resource_slices()) == 2
        assert [c["metadata"]["name"] for c in await k.list_device_classes()] == ["gpu.nvidia.com"]
    assert api.requests_for("GET", r"/resourceslices$")[0].query == {
        "fieldSelector": "spec.nodeName=n2"
    }


async def test_bad_node_name_is_refused_before_any_request(
    api: FakeApiServer, kube: ClientKube
) -> None:
    before = len(api.requests)
    with pytest.raises(InvalidName):
        await kube.list_resource_slices("n1,spec.driver=x")
    with pytest.raises(InvalidName):
        await kube.get_resource_claim("ml", "../c1")
    assert len(api.requests) == before
