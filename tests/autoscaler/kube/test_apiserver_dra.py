"""The fake API server's resource.k8s.io/v1 kinds, driven by the official client's
``ResourceV1Api``: ResourceClaims with a real status subresource, templates,
cluster-scoped ResourceSlices (with their field selectors) and DeviceClasses, each
served object valid against the strict 1.34 schemas, and invalid ones refused with
422 as the real server's validation would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client, config

from tests.support import draobjs
from tests.support.fakes.apiserver import DRA_SCHEMA_VERSION, FakeApiServer, running_apiserver

JSON = dict[str, Any]


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with running_apiserver(validate=True) as server:
        yield server


@pytest.fixture
def res(api: FakeApiServer, tmp_path: Path) -> Iterator[Any]:
    cfg = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(api.write_kubeconfig(tmp_path / "kubeconfig")), client_configuration=cfg
    )
    cfg.retries = False
    with client.ApiClient(cfg) as c:
        yield client.ResourceV1Api(c)


def _raw(call: Any, *args: Any, **kw: Any) -> JSON:
    body: JSON = json.loads(call(*args, _preload_content=False, **kw).data)
    return body


def _error(call: Any, *args: Any) -> tuple[int, str]:
    with pytest.raises(client.ApiException) as info:
        call(*args)
    return info.value.status, json.loads(info.value.body or "{}").get("message", "")


def test_kinds_round_trip_and_validate(api: FakeApiServer, res: Any) -> None:
    res.create_device_class(draobjs.device_class())
    res.create_resource_slice(draobjs.resource_slice("n1", 4))
    res.create_resource_slice(draobjs.resource_slice("n2", 2))
    res.create_namespaced_resource_claim_template("ml", draobjs.claim_template("one-gpu"))
    res.create_namespaced_resource_claim("ml", draobjs.claim("c1", count=2))
    served = [
        _raw(res.read_device_class, "gpu.nvidia.com"),
        _raw(res.read_resource_slice, "n1-gpu-nvidia-com"),
        _raw(res.read_namespaced_resource_claim_template, "one-gpu", "ml"),
        _raw(res.read_namespaced_resource_claim, "c1", "ml"),
    ]
    for obj in served:
        kubernetes_validate.validate(obj, DRA_SCHEMA_VERSION, strict=True)
    # The typed client decodes them (its models are the v1 schema).
    c1 = res.read_namespaced_resource_claim("c1", "ml")
    assert c1.spec.devices.requests[0].exactly.count == 2
    assert c1.status is None or c1.status.allocation is None
    # Slices are cluster-scoped, listed by node through the real field selector.
    on_n2 = res.list_resource_slice(field_selector="spec.nodeName=n2")
    assert [s.spec.node_name for s in on_n2.items] == ["n2"]
    assert len(on_n2.items[0].spec.devices) == 2
    status, msg = _error(lambda: res.list_resource_slice(field_selector="spec.devices=x"))
    assert status == 400 and "spec.devices" in msg
    assert len(res.list_resource_claim_for_all_namespaces().items) == 1


def test_claim_status_is_a_subresource(api: FakeApiServer, res: Any) -> None:
    body = draobjs.allocated_claim("c1", "n1", ["gpu-0"], pod="p1")
    res.create_namespaced_resource_claim("ml", body)
    # A create keeps no status: only the scheduler's status write allocates.
    created = api.get("resourceclaims", "ml", "c1")
    assert created is not None and not created.get("status")
    res.patch_namespaced_resource_claim_status("c1", "ml", {"status": body["status"]})
    stored = api.get("resourceclaims", "ml", "c1")
    assert stored is not None
    assert stored["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    # A patch of the claim itself leaves the status alone.
    res.patch_namespaced_resource_claim(
        "c1", "ml", {"metadata": {"labels": {"a": "b"}}, "status": {"allocation": None}}
    )
    again = api.get("resourceclaims", "ml", "c1")
    assert again is not None and again["status"] == stored["status"]
    assert again["metadata"]["labels"] == {"a": "b"}
    # The allocation may be cleared, never changed; the spec never changes.
    other = draobjs.allocation("n1", ["gpu-1"])
    status, msg = _error(
        lambda: res.patch_namespaced_resource_claim_status(
            "c1", "ml", {"status": {"allocation": other}}
        )
    )
    assert status == 422 and "status.allocation" in msg
    status, msg = _error(
        lambda: res.patch_namespaced_resource_claim(
            "c1", "ml", {"spec": draobjs.claim_spec(count=3)}
        )
    )
    assert status == 422 and "spec" in msg
    res.patch_namespaced_resource_claim_status(
        "c1", "ml", [{"op": "remove", "path": "/status/allocation"}]
    )
    cleared = api.get("resourceclaims", "ml", "c1")
    assert cleared is not None and "allocation" not in cleared["status"]


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        # A request asks `exactly` or `firstAvailable`: neither is invalid.
        (
            {**draobjs.claim("bad"), "spec": {"devices": {"requests": [{"name": "gpu"}]}}},
            "exactly",
        ),
        # count is above zero.
        (draobjs.claim("bad", count=0), "count"),
    ],
)
def test_invalid_claims_are_422(api: FakeApiServer, res: Any, obj: JSON, where: str) -> None:
    status, msg = _error(res.create_namespaced_resource_claim, "ml", obj)
    assert status == 422 and where in msg


def test_v1beta1_shaped_request_fails_the_v1_schema(api: FakeApiServer) -> None:
    """v1beta1 put deviceClassName and count on the request itself; v1 moved them
    under ``exactly`` (the typed client refuses the old shape before sending, so
    the fake is given it directly)."""
    old = draobjs.claim("bad")
    old["spec"] = {
        "devices": {"requests": [{"name": "g", "deviceClassName": "gpu.nvidia.com", "count": 1}]}
    }
    with pytest.raises(ValueError, match="is invalid"):
        api.add(old)


def test_slice_names_its_nodes_one_way(api: FakeApiServer, res: Any) -> None:
    both = draobjs.resource_slice("n1")
    both["spec"]["allNodes"] = True
    status, msg = _error(res.create_resource_slice, both)
    assert status == 422 and "exactly one of" in msg
    with pytest.raises(ValueError, match="exactly one of"):
        api.add(both)
    # add() keeps a claim's status: it is how a test plays the scheduler.
    api.add(draobjs.allocated_claim("c2", "n1", ["gpu-3"]))
    stored = api.get("resourceclaims", "ml", "c2")
    assert stored is not None and stored["status"]["allocation"]["devices"]["results"]
