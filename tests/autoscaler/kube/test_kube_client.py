"""``ClientKube`` and ``DryRunKube`` against the fake API server, over real HTTP.

What matters to the actions above them: errors arrive typed, transient failures
and throttling are retried without doing an operation twice (the fake's request
log is the witness), a PDB refusal is not retried, dry-run changes nothing, and a
large cluster lists quickly.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from autoscaler.kube.client import ClientKube, KubeConfigError
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.kube.errors import Conflict, Invalid, NotFound, TooManyRequests, Transient
from autoscaler.kube.protocol import CAPI_GROUP, CAPI_VERSION, MACHINE_DEPLOYMENTS, Kube
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import client

JSON = dict[str, Any]


def node(name: str, **labels: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pod(name: str, node_name: str = "n1", namespace: str = "default", **labels: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


make_kube = client


def statuses(api: FakeApiServer, method: str, path_regex: str) -> list[int]:
    return [r.status for r in api.requests_for(method, path_regex)]


async def test_it_implements_the_protocol(kube: ClientKube) -> None:
    # The annotations make mypy check every signature against the protocol.
    as_kube: Kube = kube
    dry: Kube = DryRunKube(kube)
    assert isinstance(as_kube, Kube) and isinstance(dry, Kube)


async def test_reads_return_api_json_dicts(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("n1", pool="a"))
    api.add(node("n2", pool="b"))
    api.add(pod("p1", "n1"))
    api.add(pod("p2", "n1", namespace="team"))
    api.add(pod("p3", "n2"))
    got = await kube.get_node("n1")
    assert got["kind"] == "Node" and got["metadata"]["labels"] == {"pool": "a"}
    nodes = await kube.list_nodes("pool=b")
    assert [(n["kind"], n["apiVersion"], n["metadata"]["name"]) for n in nodes] == [
        ("Node", "v1", "n2")
    ]
    on_n1 = await kube.list_pods(node="n1")
    assert sorted(p["metadata"]["name"] for p in on_n1) == ["p1", "p2"]
    assert all(p["kind"] == "Pod" for p in on_n1)
    assert [p["metadata"]["name"] for p in await kube.list_pods(namespace="team")] == ["p2"]
    assert api.requests_for("GET", "/api/v1/pods")[0].query == {"fieldSelector": "spec.nodeName=n1"}


async def test_errors_are_typed(api: FakeApiServer, kube: ClientKube) -> None:
    stored = api.add(node("n1"))
    with pytest.raises(NotFound) as missing:
        await kube.get_node("nope")
    assert missing.value.status == 404 and 'nodes "nope" not found' in str(missing.value)

    await kube.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    stale = {"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]}}
    with pytest.raises(Conflict) as conflict:
        await kube.patch_node("n1", stale)
    assert not conflict.value.already_exists

    api.add(pod("p1"))
    with pytest.raises(Conflict) as exists:
        await kube.create_pod("default", pod("p1"))
    assert exists.value.already_exists

    with pytest.raises(Invalid) as invalid:
        await kube.patch_node("n1", {"spec": {"unschedulable": "yes"}})
    assert invalid.value.status == 422

    with pytest.raises(Conflict):
        await kube.delete_pod("default", "p1", uid="another-incarnation")
    assert api.get("pods", "default", "p1") is not None

    # A write that answers 409 or 422 is never retried: one request each.
    assert len(api.requests_for("PATCH", "/nodes/n1$")) == 3
    assert len(api.requests_for("DELETE", "/pods/p1$")) == 1


async def test_bursts_of_500_and_429_are_retried_and_the_write_happens_once(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.faults.fail(2, status=500, method="PATCH")
    api.faults.fail(2, status=429, method="PATCH")
    patched = await kube.patch_node("n1", {"spec": {"unschedulable": True}})
    assert patched["spec"]["unschedulable"] is True
    assert statuses(api, "PATCH", "/nodes/n1$") == [500, 500, 429, 429, 200]
    assert kube.request_counts[("patch", "nodes", 500)] == 2
    assert kube.request_counts[("patch", "nodes", 429)] == 2
    assert kube.request_counts[("patch", "nodes", 200)] == 1

    api.add(pod("p1"))
    api.faults.fail(3, status=503, method="POST", path_regex="/eviction$")
    await kube.evict_pod("default", "p1")
    assert statuses(api, "POST", "/eviction$") == [503, 503, 503, 201]
    assert api.evicted == [("default", "p1")]  # evicted exactly once


async def test_retries_are_bounded(api: FakeApiServer, tmp_path: Path) -> None:
    kube = make_kube(api, tmp_path, attempts=3)
    api.add(node("n1"))
    api.faults.fail(10, status=500)
    with pytest.raises(Transient) as failed:
        await kube.get_node("n1")
    assert failed.value.status == 500
    assert len(api.requests_for("GET", "/nodes/n1$")) == 3


async def test_dropped_connections_and_timeouts_are_retried(
    api: FakeApiServer, tmp_path: Path
) -> None:
    kube = make_kube(api, tmp_path, request_timeout=0.3)
    api.add(node("n1"))
    api.faults.drop(2, method="GET")
    assert (await kube.get_node("n1"))["metadata"]["name"] == "n1"
    assert statuses(api, "GET", "/nodes/n1$") == [0, 0, 200]
    assert kube.request_counts[("get", "nodes", 0)] == 2

    api.faults.delay(1.0, 1, method="GET")  # longer than the request timeout
    assert (await kube.get_node("n1"))["metadata"]["name"] == "n1"
    assert kube.request_counts[("get", "nodes", 0)] == 3


async def test_a_lost_answer_to_a_committed_create_surfaces_as_already_exists(
    api: FakeApiServer, kube: ClientKube
) -> None:
    # The write happened but its answer was lost: the retry meets the object it
    # created. The caller (migrate_jobs) reads AlreadyExists as done.
    api.faults.drop(1, method="POST", path_regex="/pods$", after=True)
    with pytest.raises(Conflict) as info:
        await kube.create_pod("default", pod("p1"))
    assert info.value.already_exists
    assert statuses(api, "POST", "/pods$") == [0, 409]
    assert len(api.objects("pods")) == 1


async def test_a_pdb_refusal_is_not_retried(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(pod("p1", app="x"))
    api.add(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-one"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "minAvailable": 1},
        }
    )
    with pytest.raises(TooManyRequests) as refused:
        await kube.evict_pod("default", "p1", grace_period_seconds=30)
    assert "keep-one" in str(refused.value)
    evictions = api.requests_for("POST", "/pods/p1/eviction$")
    assert [r.status for r in evictions] == [429]
    assert evictions[0].body["deleteOptions"] == {"gracePeriodSeconds": 30}
    with pytest.raises(NotFound):
        await kube.evict_pod("default", "gone")


async def test_delete_pod_sends_preconditions(api: FakeApiServer, kube: ClientKube) -> None:
    uid = api.add(pod("p1"))["metadata"]["uid"]
    await kube.delete_pod("default", "p1", grace_period_seconds=10, uid=uid)
    assert api.get("pods", "default", "p1") is None
    body = api.requests_for("DELETE", "/pods/p1$")[0].body
    assert body["preconditions"] == {"uid": uid} and body["gracePeriodSeconds"] == 10


async def test_jobs_events_leases_and_scale(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "i"}]}
                }
            },
        }
    )
    job = await kube.patch_job("default", "train", {"spec": {"suspend": True}})
    assert job["spec"]["suspend"] is True and (await kube.get_job("default", "train"))["kind"]
    event = await kube.create_event(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "train."},
            "involvedObject": {"kind": "Job", "name": "train", "namespace": "default"},
            "reason": "Requeued",
            "message": "requeued",
            "type": "Normal",
        },
    )
    assert event["metadata"]["name"].startswith("train.")
    lease = await kube.create_lease(
        "default",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l"},
            "spec": {"holderIdentity": "a"},
        },
    )
    lease["spec"]["holderIdentity"] = "b"
    await kube.replace_lease("default", "l", lease)
    with pytest.raises(Conflict):
        await kube.replace_lease("default", "l", lease)  # the old resourceVersion
    assert (await kube.get_lease("default", "l"))["spec"]["holderIdentity"] == "b"

    api.add(
        {
            "apiVersion": f"{CAPI_GROUP}/{CAPI_VERSION}",
            "kind": "MachineDeployment",
            "metadata": {"name": "pool", "namespace": "capi", "labels": {"gpu": "yes"}},
            "spec": {"replicas": 1},
        }
    )
    args = (CAPI_GROUP, CAPI_VERSION, "capi", MACHINE_DEPLOYMENTS)
    assert [m["metadata"]["name"] for m in await kube.list_custom(*args, "gpu=yes")] == ["pool"]
    assert (await kube.get_scale(*args, "pool"))["spec"]["replicas"] == 1
    scale = await kube.patch_scale(*args, "pool", 4)
    assert scale["spec"]["replicas"] == 4
    assert (await kube.get_custom(*args, "pool"))["spec"]["replicas"] == 4
    await kube.patch_custom(*args, "pool", {"metadata": {"annotations": {"x": "y"}}})
    patches = api.requests_for("PATCH", "/machinedeployments/pool")
    assert {r.body["spec"]["replicas"] for r in patches if "spec" in r.body} == {4}


async def test_server_side_dry_run_changes_nothing(api: FakeApiServer, tmp_path: Path) -> None:
    kube = make_kube(api, tmp_path, dry_run=True)
    api.add(node("n1"))
    api.add(pod("p1"))
    before = (api.get("nodes", None, "n1"), api.get("pods", "default", "p1"))
    patched = await kube.patch_node("n1", {"spec": {"unschedulable": True}})
    assert patched["spec"]["unschedulable"] is True  # what it would be
    await kube.evict_pod("default", "p1")
    await kube.delete_pod("default", "p1")
    await kube.create_pod("default", pod("p2"))
    assert (api.get("nodes", None, "n1"), api.get("pods", "default", "p1")) == before
    assert api.get("pods", "default", "p2") is None and api.evicted == []
    writes = [r for r in api.requests if r.method != "GET"]
    assert len(writes) == 4
    # Lease writes are real even in dry-run: leader election is not an action.
    await kube.create_lease(
        "default",
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}},
    )
    assert api.get("leases", "default", "l") is not None
    for r in writes:
        if r.path.endswith("/eviction"):
            assert r.body["deleteOptions"]["dryRun"] == ["All"]
        else:
            assert r.query.get("dryRun") == "All", r


async def test_dry_run_kube_records_and_answers_without_writing(
    api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.add(node("n1", pool="a"))
    api.add(pod("pod-1"))
    dry = DryRunKube(make_kube(api, tmp_path))  # no server behind it: nothing is sent
    with caplog.at_level(logging.INFO, logger="autoscaler.kube.dryrun"):
        node_after = await dry.patch_node("n1", {"metadata": {"labels": {"pool": None, "x": "1"}}})
        await dry.evict_pod("default", "pod-1")
    assert node_after["metadata"]["labels"] == {"x": "1"}
    assert [m for m, _ in dry.writes] == ["patch_node", "evict_pod"]
    assert "dry-run: would evict default/pod-1" in caplog.text
    assert [r.method for r in api.requests] == ["GET"]  # the read for the patch result
    assert api.get("pods", "default", "pod-1") is not None

    server_side = DryRunKube(make_kube(api, tmp_path, dry_run=True))
    await server_side.evict_pod("default", "pod-1")
    evictions = api.requests_for("POST", "/eviction$")
    assert len(evictions) == 1 and evictions[0].body["deleteOptions"]["dryRun"] == ["All"]
    assert api.get("pods", "default", "pod-1") is not None
    assert server_side.request_counts is not None
    assert server_side.request_counts[("create", "pods/eviction", 201)] == 1


async def test_a_thousand_nodes_list_quickly(api: FakeApiServer, kube: ClientKube) -> None:
    api.validate = False  # validating 1,000 adds is the fake's cost, not the client's
    for i in range(1000):
        api.add(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gpu-{i:04d}",
                    "labels": {"pool": f"pool-{i % 10}", "kubernetes.io/hostname": f"gpu-{i:04d}"},
                    "annotations": {"accel-fleet.io/remediation": "{}"},
                },
                "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
                "status": {
                    "capacity": {"nvidia.com/gpu": "8", "cpu": "96"},
                    "allocatable": {"nvidia.com/gpu": "8", "cpu": "95"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    await kube.list_nodes()  # warm the connection
    before = len(api.requests_for("GET", "^/api/v1/nodes"))
    started, cpu = time.perf_counter(), time.process_time()
    nodes = await kube.list_nodes()
    worked = time.process_time() - cpu
    elapsed = time.perf_counter() - started
    print(f"\nlist_nodes: 1,000 nodes in {elapsed * 1000:.1f} ms, {worked * 1000:.1f} ms of CPU")
    assert len(nodes) == 1000 and nodes[999]["metadata"]["name"] == "gpu-0999"
    # Quick by construction: one LIST for the thousand (not a GET per node), and the
    # plain JSON dicts the server sent (no conversion to the kubernetes client's models).
    assert len(api.requests_for("GET", "^/api/v1/nodes")) - before == 1
    assert all(type(n) is dict for n in nodes)
    # The CPU this process spent (client and in-process fake server together, about a
    # tenth of a second here) bounds any per-node cost that grows worse than linearly;
    # CPU time, not the wall clock, which other busy processes stretch.
    assert worked < 2.0, worked


async def test_from_config_names_what_it_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError) as info:
        ClientKube.from_config(None)
    message = str(info.value)
    assert "KUBERNETES_SERVICE_HOST is not set" in message
    assert f"$KUBECONFIG={tmp_path / 'missing'} (no such file)" in message
    assert "~/.kube/config (no such file)" in message and "--kubeconfig" in message

    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(KubeConfigError, match=f"--kubeconfig {broken}: cannot load"):
        ClientKube.from_config(str(broken))


async def test_from_config_uses_kubeconfig_env(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path / "kc")))
    api.add(node("n1"))
    kube = ClientKube.from_config(None)
    assert (await kube.get_node("n1"))["metadata"]["name"] == "n1"
