"""The fake API server answers the official ``kubernetes`` client as a real one would.

The controller's tests are only as good as this fake: these tests drive it with the
generated client (typed methods, its serialisation and content types) and check
what a real server would do, including the objects it serves passing the strict
Kubernetes schemas.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import urllib3
from kubernetes import client, config, watch

from tests.support.fakes.apiserver import SCHEMA_VERSION, FakeApiServer, running_apiserver

JSON = dict[str, Any]


def node(name: str, **labels: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, node_name: str = "n1", namespace: str = "default", **labels: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def pdb(name: str, selector: dict[str, str], **spec: Any) -> JSON:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": selector}, **spec},
    }


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with running_apiserver(validate=True) as server:
        yield server


@pytest.fixture
def api_client(api: FakeApiServer, tmp_path: Path) -> Iterator[Any]:
    cfg = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(api.write_kubeconfig(tmp_path / "kubeconfig")), client_configuration=cfg
    )
    cfg.retries = False  # see every answer, as the controller's client does
    with client.ApiClient(cfg) as c:
        yield c


@pytest.fixture
def core(api_client: Any) -> Any:
    return client.CoreV1Api(api_client)


def raw(response: Any) -> JSON:
    """The decoded body of a ``_preload_content=False`` answer."""
    body: JSON = json.loads(response.data)
    return body


def error_of(call: Any) -> tuple[int, JSON]:
    with pytest.raises(client.ApiException) as info:
        call()
    return info.value.status, json.loads(info.value.body or "{}")


def strict(obj: JSON) -> None:
    kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)


def test_served_objects_validate_against_the_strict_schemas(
    api: FakeApiServer, api_client: Any
) -> None:
    core: Any = client.CoreV1Api(api_client)
    api.add(node("n1", pool="a"))
    core.create_namespaced_pod("default", pod("p1", app="x"))
    api.add(pdb("budget", {"app": "x"}, minAvailable=1))
    batch: Any = client.BatchV1Api(api_client)
    batch.create_namespaced_job(
        "default",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {
                "activeDeadlineSeconds": 60,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "trainer"}],
                    }
                },
            },
        },
    )
    leases: Any = client.CoordinationV1Api(api_client)
    leases.create_namespaced_lease(
        "default",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "leader"},
            "spec": {
                "holderIdentity": "a",
                "leaseDurationSeconds": 15,
                "renewTime": "2026-01-02T03:04:05.000000Z",
            },
        },
    )
    core.create_namespaced_event(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "n1."},
            "involvedObject": {"kind": "Node", "name": "n1", "apiVersion": "v1"},
            "reason": "Cordoned",
            "message": "accel-fleet cordoned n1",
            "type": "Normal",
            "source": {"component": "accel-autoscaler"},
        },
    )
    paths = {
        "Node": "/api/v1/nodes/n1",
        "Pod": "/api/v1/namespaces/default/pods/p1",
        "Job": "/apis/batch/v1/namespaces/default/jobs/train",
        "PodDisruptionBudget": "/apis/policy/v1/namespaces/default/poddisruptionbudgets/budget",
        "Lease": "/apis/coordination.k8s.io/v1/namespaces/default/leases/leader",
    }
    for kind, path in paths.items():
        served = raw(api_client.call_api("GET", api.url + path).response)
        assert served["kind"] == kind
        assert served["metadata"]["uid"] and served["metadata"]["resourceVersion"]
        strict(served)
    events = raw(core.list_namespaced_event("default", _preload_content=False))
    assert len(events["items"]) == 1
    event = {"apiVersion": "v1", "kind": "Event", **events["items"][0]}
    assert event["metadata"]["name"].startswith("n1.")
    strict(event)
    budget = api.get("poddisruptionbudgets", "default", "budget")
    assert budget is not None and "status" not in budget  # computed when served


def test_validate_refuses_invalid_objects_with_422(api: FakeApiServer, core: Any) -> None:
    api.add(node("n1"))
    status, body = error_of(
        lambda: core.patch_node(
            "n1",
            {"spec": {"unschedulable": "yes"}},
            _content_type="application/merge-patch+json",
        )
    )
    assert status == 422
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    assert "spec.unschedulable" in body["message"]
    with pytest.raises(ValueError, match="is invalid"):
        api.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}, "bogus": 1})
    served = api.get("nodes", None, "n1")
    assert served is not None and "unschedulable" not in served.get("spec", {})


def test_pdb_refuses_eviction_with_429_then_allows_it(api: FakeApiServer, core: Any) -> None:
    for name in ("p1", "p2"):
        api.add(pod(name, app="x"))
    api.add(pdb("keep-two", {"app": "x"}, minAvailable=2))
    eviction = client.V1Eviction(
        api_version="policy/v1",
        kind="Eviction",
        metadata=client.V1ObjectMeta(name="p1", namespace="default"),
    )
    status, body = error_of(lambda: core.create_namespaced_pod_eviction("p1", "default", eviction))
    assert status == 429
    assert body["reason"] == "TooManyRequests"
    assert "keep-two" in body["message"]
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert api.get("pods", "default", "p1") is not None
    served: Any = client.PolicyV1Api(core.api_client).read_namespaced_pod_disruption_budget(
        "keep-two", "default"
    )
    assert served.status.disruptions_allowed == 0 and served.status.current_healthy == 2

    api.add(pod("p3", app="x"))  # a third healthy pod: one disruption allowed
    core.create_namespaced_pod_eviction("p1", "default", eviction)
    assert api.get("pods", "default", "p1") is None
    assert api.evicted == [("default", "p1")]
    status, _ = error_of(
        lambda: core.create_namespaced_pod_eviction(
            "p2", "default", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {}}
        )
    )
    assert status == 400  # a body that names another pod is refused before the budget


def test_pdb_percentages_and_unhealthy_pods(api: FakeApiServer, core: Any) -> None:
    for i in range(4):
        api.add(pod(f"w{i}", app="w"))
    api.add(pdb("most", {"app": "w"}, minAvailable="60%"))
    pending = pod("w-new", app="w")
    pending["status"] = {"phase": "Pending"}
    api.add(pending)

    def evict(name: str) -> int:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
        try:
            core.create_namespaced_pod_eviction(name, "default", body)
        except client.ApiException as e:
            return int(e.status)
        return 201

    # 60% of 5 pods: 3 must stay healthy of 4; then 60% of 4 rounds up to 3 again.
    assert [evict("w0"), evict("w1")] == [201, 429]
    assert evict("w-new") == 201  # a pod that is not running is always evictable
    assert evict("gone") == 404


def test_watch_streams_changes_from_a_resource_version(api: FakeApiServer, core: Any) -> None:
    api.add(node("n1"))
    listing = raw(core.list_node(_preload_content=False))
    since = listing["metadata"]["resourceVersion"]

    def change() -> None:
        time.sleep(0.3)
        api.add(node("n2", pool="b"))
        core.patch_node("n1", {"metadata": {"labels": {"pool": "a"}}})
        api.remove("nodes", None, "n2")

    threading.Thread(target=change).start()
    watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]
    started = time.monotonic()
    events = [
        (e["type"], e["object"].metadata.name, e["object"].metadata.labels)
        for e in watcher.stream(core.list_node, resource_version=since, timeout_seconds=2)
    ]
    assert events == [
        ("ADDED", "n2", {"pool": "b"}),
        ("MODIFIED", "n1", {"pool": "a"}),
        ("DELETED", "n2", {"pool": "b"}),
    ]
    assert 1.5 < time.monotonic() - started < 5  # timeoutSeconds ends the stream
    # Without a version, a watch starts with the current state; selectors apply.
    first = next(iter(watcher.stream(core.list_node, label_selector="pool=a", timeout_seconds=1)))
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "n1")


def test_stale_resource_version_is_a_conflict(api: FakeApiServer, api_client: Any) -> None:
    core: Any = client.CoreV1Api(api_client)
    stale = api.add(node("n1"))["metadata"]["resourceVersion"]
    core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    for content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        status, body = error_of(
            lambda ct=content_type: core.patch_node(
                "n1",
                {"metadata": {"resourceVersion": stale, "labels": {"b": "2"}}},
                _content_type=ct,
            )
        )
        assert (status, body["reason"]) == (409, "Conflict")
        assert "the object has been modified" in body["message"]
    leases: Any = client.CoordinationV1Api(api_client)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a"},
    }
    created = raw(leases.create_namespaced_lease("default", lease, _preload_content=False))
    created["spec"]["holderIdentity"] = "b"
    leases.replace_namespaced_lease("l", "default", created)  # current version: accepted
    status, body = error_of(lambda: leases.replace_namespaced_lease("l", "default", created))
    assert (status, body["reason"]) == (409, "Conflict")
    served = api.get("leases", "default", "l")
    assert served is not None and served["spec"]["holderIdentity"] == "b"


def test_patch_types(api: FakeApiServer, core: Any) -> None:
    n = node("n1")
    n["status"]["conditions"].append({"type": "DiskPressure", "status": "False"})
    n["spec"]["taints"] = [{"key": "a", "effect": "NoSchedule"}]
    api.add(n)
    # A dict patch is strategic merge: conditions merge by type, taints replace.
    core.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    core.patch_node("n1", {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}})
    stored = api.get("nodes", None, "n1")
    assert stored is not None
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions == {"Ready": "False", "DiskPressure": "False"}
    assert stored["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]
    core.patch_node(
        "n1",
        [{"op": "add", "path": "/metadata/labels", "value": {"x": "1"}}],
        _content_type="application/json-patch+json",
    )
    core.patch_node("n1", {"spec": {"taints": None}}, _content_type="application/merge-patch+json")
    stored = api.get("nodes", None, "n1")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"x": "1"} and "taints" not in stored["spec"]


def test_pods_selectors_create_and_delete_preconditions(api: FakeApiServer, core: Any) -> None:
    api.add(pod("a", "n1", app="x"))
    api.add(pod("b", "n2", app="x"))
    api.add(pod("c", "n1", namespace="team", app="y"))
    on_n1 = raw(
        core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1", _preload_content=False)
    )
    assert sorted(p["metadata"]["name"] for p in on_n1["items"]) == ["a", "c"]
    in_default = raw(
        core.list_namespaced_pod(
            "default",
            label_selector="app in (x,z)",
            field_selector="spec.nodeName!=n1",
            _preload_content=False,
        )
    )
    assert [p["metadata"]["name"] for p in in_default["items"]] == ["b"]
    status, body = error_of(lambda: core.list_pod_for_all_namespaces(field_selector="spec.bogus=1"))
    assert status == 400 and "field label not supported" in body["message"]

    status, body = error_of(lambda: core.create_namespaced_pod("default", pod("a")))
    assert (status, body["reason"]) == (409, "AlreadyExists")
    status, body = error_of(
        lambda: core.delete_namespaced_pod(
            "a",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="old")),
        )
    )
    assert (status, body["reason"]) == (409, "Conflict") and "Precondition failed" in body[
        "message"
    ]
    uid = api.get("pods", "default", "a")["metadata"]["uid"]  # type: ignore[index]
    core.delete_namespaced_pod(
        "a",
        "default",
        grace_period_seconds=5,
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
    )
    assert api.get("pods", "default", "a") is None
    deletes = api.requests_for("DELETE", r"/pods/a$")
    assert [r.status for r in deletes] == [409, 200]
    assert deletes[-1].query["gracePeriodSeconds"] == "5"
    status, body = error_of(lambda: core.read_namespaced_pod("a", "default"))
    assert (status, body["kind"], body["reason"]) == (404, "Status", "NotFound")


def test_scale_subresource_and_machines(api: FakeApiServer, api_client: Any) -> None:
    custom: Any = client.CustomObjectsApi(api_client)
    api.add(
        {
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "MachineDeployment",
            "metadata": {"name": "gpu-pool", "namespace": "capi"},
            "spec": {"replicas": 2, "clusterName": "c"},
        }
    )
    api.add(
        {
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {
                "name": "m1",
                "namespace": "capi",
                "labels": {"cluster.x-k8s.io/deployment-name": "gpu-pool"},
            },
            "spec": {"clusterName": "c"},
        }
    )
    args = ("cluster.x-k8s.io", "v1beta1", "capi", "machinedeployments", "gpu-pool")
    scale = custom.get_namespaced_custom_object_scale(*args)
    assert (scale["kind"], scale["apiVersion"], scale["spec"]["replicas"]) == (
        "Scale",
        "autoscaling/v1",
        2,
    )
    custom.patch_namespaced_custom_object_scale(*args, {"spec": {"replicas": 3}})
    assert api.get("machinedeployments", "capi", "gpu-pool")["spec"]["replicas"] == 3  # type: ignore[index]
    machines = custom.list_namespaced_custom_object(
        "cluster.x-k8s.io",
        "v1beta1",
        "capi",
        "machines",
        label_selector="cluster.x-k8s.io/deployment-name=gpu-pool",
    )
    assert [m["metadata"]["name"] for m in machines["items"]] == ["m1"]
    custom.patch_namespaced_custom_object(
        "cluster.x-k8s.io",
        "v1beta1",
        "capi",
        "machines",
        "m1",
        {"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}},
    )
    m1 = api.get("machines", "capi", "m1")
    assert m1 is not None and "cluster.x-k8s.io/delete-machine" in m1["metadata"]["annotations"]
    # Custom resources have no strategic merge, as on a real server.
    status, body = error_of(
        lambda: custom.patch_namespaced_custom_object(
            "cluster.x-k8s.io",
            "v1beta1",
            "capi",
            "machines",
            "m1",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    )
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")


def test_fault_injection(api: FakeApiServer, core: Any) -> None:
    api.add(node("n1"))
    api.faults.fail(2, status=500, method="GET", path_regex=r"/nodes/n1$")
    api.faults.fail(1, status=429)
    for expected in (500, 500, 429):
        status, body = error_of(lambda: core.read_node("n1"))
        assert status == expected and body["kind"] == "Status"
    assert core.read_node("n1").metadata.name == "n1"

    api.faults.drop(1)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.read_node("n1")
    api.faults.delay(0.5, 1, method="GET")
    started = time.monotonic()
    core.read_node("n1")
    assert time.monotonic() - started >= 0.5
    assert api.faults.pending() == 0
    assert [r.status for r in api.requests_for("GET", "/nodes/n1")] == [500, 500, 429, 200, 0, 200]
    status, body = error_of(lambda: api_get(core, "/api/v1/widgets"))
    assert (status, body["kind"], body["reason"]) == (404, "Status", "NotFound")


def api_get(core: Any, path: str) -> Any:
    response = core.api_client.call_api("GET", core.api_client.configuration.host + path)
    if response.status >= 300:
        response.read()
        raise client.ApiException.from_response(http_resp=response, body=None, data=None)
    return response


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("pool=a", True),
        ("pool==a,gpu", True),
        ("pool!=a", False),
        ("missing!=x", True),
        ("!gpu", False),
        ("!missing", True),
        ("pool in (b, a),gpu notin (false)", True),
        ("pool notin (a)", False),
        ("pool in (b)", False),
    ],
)
def test_label_selectors(api: FakeApiServer, core: Any, selector: str, matches: bool) -> None:
    api.add(node("n1", pool="a", gpu="true"))
    found = raw(core.list_node(label_selector=selector, _preload_content=False))["items"]
    assert bool(found) == matches
    status, body = error_of(lambda: core.list_node(label_selector="pool in a"))
    assert status == 400 and "unable to parse requirement" in body["message"]
