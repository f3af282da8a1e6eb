"""Pools done right, against the fake API server with the real client and the
emulated Cluster API (``tests/support/fakes/capi.py``): a node is capacity only when
its devices are allocatable, and a pool at 0 nodes scales up for a job that the node
its capacity annotations describe would take.

The pool-scale-up rule's own expression (rules/remediation.yaml) is evaluated by
the built-in evaluator over what ``clusterstate.collect`` read, so the tests follow
the path a real decision takes: series, rule, ``scale_node_pool``.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
import yaml

from accel_common.dra import node_offers, pod_requests
from accel_common.names import (
    CAPI_ACCELERATOR_LABEL,
    CAPI_CAPACITY_DRA_DRIVER,
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CAPACITY_LABELS,
    CAPI_CAPACITY_TAINTS,
    DRA_NVIDIA_GPU,
)
from autoscaler import clusterstate as cs
from autoscaler.actions import scale_node_pool
from autoscaler.actions.context import ActionContext
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.pools.base import NodeShape, Pool
from autoscaler.pools.capacity import DEVICE_WAIT, DraView, read_shape, readiness
from autoscaler.pools.clusterapi import MAX_SIZE, MIN_SIZE, ClusterAPIProvider
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Vector
from tests.support import draobjs
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.capi import CAPI, ClusterAPI, machine_set
from tests.support.paths import REPO

NS = "capi"


def scale_up_expr() -> str:
    doc = yaml.safe_load((REPO / "rules" / "remediation.yaml").read_text())
    (rule,) = [r for r in doc["spec"]["rules"] if r["name"] == "pool-scale-up"]
    return str(rule["expr"])


def deployment(name: str, replicas: int, bounds: tuple[int, int], **annotations: str) -> Any:
    return {
        "apiVersion": CAPI,
        "kind": "MachineDeployment",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {MIN_SIZE: str(bounds[0]), MAX_SIZE: str(bounds[1]), **annotations},
        },
        "spec": {"clusterName": "c1", "replicas": replicas},
    }


def pod(name: str, node: str | None, gpus: int, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "train:1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
        **spec,
    }
    if node:
        body["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": body,
        "status": {"phase": "Running" if node else "Pending"},
    }


def decision(pool: str) -> Decision:
    return Decision(
        rule="pool-scale-up",
        kind="act",
        action="scale_node_pool",
        params={"direction": "up", "step": 1},
        target={"pool": pool},
        sample_labels=(("pool", pool),),
        sample_value=1.0,
        at=0.0,
        reason="test",
    )


def context(kube: ClientKube, now: float) -> ActionContext:
    return ActionContext(
        kube=kube, replica="replica-a", clock=lambda: now, pools=ClusterAPIProvider(kube, NS)
    )


async def fires(kube: ClientKube, now: float) -> set[str]:
    """The pools the shipped pool-scale-up rule selects at ``now``."""
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), now)
    store = SeriesStore()
    cs.ingest(store, rows, now)
    result = Evaluator(store).instant(scale_up_expr(), now)
    assert isinstance(result, Vector)
    return {dict(s.labels)["pool"] for s in result.samples}


def pick(rows: list[cs.Row], name: str) -> dict[tuple[str, ...], float]:
    return {tuple(lb.values()): v for m, lb, v in rows if m.name == name}


def replicas(api: FakeApiServer, pool: str) -> int:
    md = api.get("machinedeployments", NS, pool)
    assert md is not None
    return int(md["spec"]["replicas"])


def born(api: FakeApiServer, node: str) -> float:
    obj = api.get("nodes", None, node)
    assert obj is not None
    stamp = obj["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


async def test_a_ready_node_without_allocatable_gpus_gives_no_second_scale_up(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(deployment("a100", 1, (1, 6)))
    api.add(machine_set("a100-ms", NS, "a100", 1))
    capi = ClusterAPI(api)
    capi.reconcile()
    ((_, n0),) = capi.created
    api.add(pod("busy", n0, 8))
    api.add(pod("train", None, 8))

    # The pod waits: the rule fires and the pool grows by one.
    now = time.time()
    assert await fires(kube, now) == {"a100"}
    first = await scale_node_pool.execute(context(kube, now), decision("a100"))
    assert first.status == "done" and replicas(api, "a100") == 2

    # The new node registers and is Ready, but its device plugin has not advertised
    # the GPUs: 0 allocatable. Five minutes later it is still so.
    capi.devices_ready = False
    capi.reconcile()
    _, n1 = capi.created[-1]
    fresh = api.get("nodes", None, n1)
    assert fresh is not None and fresh["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    later = born(api, n1) + 300
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), later)
    assert pick(rows, "accel_pool_nodes") == {
        ("a100", "ready"): 1.0,
        ("a100", "notready"): 0.0,
        ("a100", "provisioning"): 1.0,  # n1: coming, not capacity
    }
    assert pick(rows, "accel_pool_pending_device_requests") == {("a100", "nvidia.com/gpu"): 8.0}
    # The rule still fires (the pod still waits), and the action adds nothing.
    assert await fires(kube, later) == {"a100"}
    second = await scale_node_pool.execute(context(kube, later), decision("a100"))
    assert second.status == "skipped", second.message
    assert "1 node(s) already provisioning cover step 1" in second.message
    assert f"{n1} registered, waiting for their devices" in second.message
    assert second.details["warming"] == [n1]
    assert replicas(api, "a100") == 2
    assert len(api.requests_for("PATCH", r"/scale$")) == 1

    # Past DEVICE_WAIT it is broken, not coming: the next decision adds a node.
    broken = born(api, n1) + DEVICE_WAIT + 60
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), broken)
    assert pick(rows, "accel_pool_nodes")[("a100", "notready")] == 1.0
    assert pick(rows, "accel_pool_nodes")[("a100", "provisioning")] == 0.0
    third = await scale_node_pool.execute(context(kube, broken), decision("a100"))
    assert third.status == "done" and replicas(api, "a100") == 3

    # Once the GPUs are advertised the node is ready capacity.
    assert fresh is not None
    fresh["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    api.add(fresh)
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), later)
    assert pick(rows, "accel_pool_nodes")[("a100", "ready")] == 2.0


async def test_a_pool_at_zero_with_capacity_annotations_scales_up_for_a_queued_job(
    api: FakeApiServer, kube: ClientKube
) -> None:
    shape = {
        CAPI_CAPACITY_GPU_COUNT: "4",
        CAPI_CAPACITY_GPU_TYPE: "nvidia.com/gpu",
        CAPI_CAPACITY_LABELS: "accelerator=h100,zone=a",
        CAPI_CAPACITY_TAINTS: "nvidia.com/gpu=present:NoSchedule",
    }
    api.add(deployment("h100", 0, (0, 4), **shape))
    api.add(machine_set("h100-ms", NS, "h100", 0))
    # A second pool at 0 declares its shape on its MachineSet only.
    api.add(deployment("l40s", 0, (0, 4)))
    api.add(machine_set("l40s-ms", NS, "l40s", 0, **{CAPI_CAPACITY_GPU_COUNT: "2"}))
    capi = ClusterAPI(api, allocatable={"h100": {"cpu": "96", "nvidia.com/gpu": "4"}})
    capi.reconcile()
    assert capi.created == []
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    api.add(pod("queued", None, 4, nodeSelector={"accelerator": "h100"}, tolerations=[toleration]))
    # Would fit the h100 shape but does not tolerate its taint: counted nowhere.
    api.add(pod("intolerant", None, 4, nodeSelector={"accelerator": "h100"}))

    now = time.time()
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), now)
    assert pick(rows, "accel_pool_pending_device_requests") == {
        ("h100", "nvidia.com/gpu"): 4.0,
        ("l40s", "nvidia.com/gpu"): 0.0,
    }
    assert await fires(kube, now) == {"h100"}

    out = await scale_node_pool.execute(context(kube, now), decision("h100"))
    assert out.status == "done", out.message
    assert replicas(api, "h100") == 1
    capi.reconcile()
    ((_, node),) = capi.created
    obj = api.get("nodes", None, node)
    assert obj is not None and obj["status"]["allocatable"]["nvidia.com/gpu"] == "4"

    pools = {p.name: p for p in await ClusterAPIProvider(kube, NS).pools()}
    assert pools["h100"].shape == NodeShape(
        {"nvidia.com/gpu": 4},
        {"accelerator": "h100", "zone": "a"},
        (("nvidia.com/gpu", "present", "NoSchedule"),),
        source=f"MachineDeployment {NS}/h100",
    )
    assert pools["l40s"].shape is not None
    assert pools["l40s"].shape.source == f"MachineSet {NS}/l40s-ms"


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        ({CAPI_CAPACITY_GPU_COUNT: "two"}, "is not a whole number"),
        ({CAPI_CAPACITY_GPU_COUNT: "-1"}, "is negative"),
        ({CAPI_CAPACITY_GPU_COUNT: "1", CAPI_CAPACITY_GPU_TYPE: "cpu"}, "not an accelerator"),
        ({CAPI_CAPACITY_GPU_COUNT: "1", CAPI_CAPACITY_DRA_DRIVER: "nic.example.com"}, "DRA"),
        ({CAPI_CAPACITY_GPU_COUNT: "1", CAPI_CAPACITY_LABELS: "novalue"}, "is not key=value"),
        ({CAPI_CAPACITY_GPU_COUNT: "1", CAPI_CAPACITY_TAINTS: "k=v:Sometimes"}, "Effect"),
    ],
)
def test_unreadable_capacity_annotations_say_where_and_what(
    annotations: dict[str, str], problem: str
) -> None:
    obj = deployment("bad", 0, (0, 1), **annotations)
    with pytest.raises(ValueError, match=problem) as e:
        read_shape(obj)
    assert f"MachineDeployment {NS}/bad" in str(e.value)


def test_shapes_default_to_nvidia_and_count_dra_devices_under_the_driver() -> None:
    plain = read_shape(deployment("p", 0, (0, 1), **{CAPI_CAPACITY_GPU_COUNT: "8"}))
    assert plain is not None and plain.devices == {"nvidia.com/gpu": 8}
    dra = read_shape(
        deployment(
            "d",
            0,
            (0, 1),
            **{CAPI_CAPACITY_GPU_COUNT: "4", CAPI_CAPACITY_DRA_DRIVER: "gpu.amd.com"},
        )
    )
    assert dra is not None and dra.devices == {"gpu.amd.com": 4} and dra.dra_driver
    assert read_shape(deployment("z", 0, (0, 1), **{CAPI_CAPACITY_GPU_COUNT: "0"})) is None
    assert read_shape(deployment("n", 0, (0, 1))) is None


def node(
    name: str,
    *,
    gpus: int,
    age: float,
    now: float,
    ready: bool = True,
    labels: dict[str, str] | None = None,
) -> Any:
    stamp = datetime.fromtimestamp(now - age).astimezone().isoformat()
    return {
        "metadata": {"name": name, "creationTimestamp": stamp, "labels": labels or {}},
        "status": {
            "allocatable": {"cpu": "8", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_readiness_sorts_nodes_by_what_they_are_worth_now() -> None:
    now = 1_800_000_000.0
    nodes = {
        "ok": node("ok", gpus=8, age=3600, now=now),
        "young": node("young", gpus=0, age=60, now=now),
        "old": node("old", gpus=0, age=DEVICE_WAIT + 1, now=now),
        "down": node("down", gpus=8, age=3600, now=now, ready=False),
    }
    pool = Pool("p", 0, 8, 5, ("down", "gone", "ok", "old", "young"), 0)
    r = readiness(pool, nodes, now)
    assert (r.ready, r.warming, r.notready) == (("ok",), ("young",), ("down", "gone", "old"))

    # A CPU pool has no devices to wait for: Ready is ready.
    cpu = {"c": node("c", gpus=0, age=60, now=now)}
    assert readiness(Pool("cpu", 0, 8, 1, ("c",), 0), cpu, now).ready == ("c",)
    # Unless the node says it carries accelerators (the Cluster API provider's label).
    gpu = {"c": node("c", gpus=0, age=60, now=now, labels={CAPI_ACCELERATOR_LABEL: "h100"})}
    assert readiness(Pool("cpu", 0, 8, 1, ("c",), 0), gpu, now).warming == ("c",)


def test_dra_nodes_and_pods_count_through_resource_slices_and_claims() -> None:
    """A DRA node offers no extended resource: without ResourceSlices it would look
    like a GPU node still coming up; with them it is capacity, and a pod's claims
    are pool pressure."""
    now = 1_800_000_000.0
    nodes = [
        node("d0", gpus=0, age=3600, now=now),
        node("d1", gpus=0, age=60, now=now),
    ]
    shape = NodeShape({DRA_NVIDIA_GPU: 8}, dra_driver=DRA_NVIDIA_GPU)
    pool = Pool("dra", 0, 4, 2, ("d0", "d1"), 0, shape)
    waiting = draobjs.claim("want-2", count=2)
    queued = pod("queued", None, 0)
    queued["spec"]["containers"][0]["resources"] = {}
    queued["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "want-2"}]
    view = DraView(
        offers=node_offers([draobjs.resource_slice("d0", 8)]),
        requests=lambda p: pod_requests(p, {"want-2": waiting}),
    )

    rows = cs.pool_rows([pool], nodes, [queued], now, view)
    assert pick(rows, "accel_pool_nodes") == {
        ("dra", "ready"): 1.0,
        ("dra", "notready"): 0.0,
        ("dra", "provisioning"): 1.0,  # d1: no slice yet
    }
    assert pick(rows, "accel_pool_pending_device_requests") == {("dra", DRA_NVIDIA_GPU): 2.0}

    # Without a view of DRA, a DRA pool is not judged: Ready nodes are ready.
    blind = cs.pool_rows([pool], nodes, [queued], now)
    assert pick(blind, "accel_pool_nodes")[("dra", "ready")] == 2.0
