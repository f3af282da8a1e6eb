"""Pods that hold devices through ResourceClaims (Dynamic Resource Allocation), in
the actions, against the fake API server through the real client: migrate_jobs
moves them off a failed node (and leaves a pod whose claims hold only a network
card), deviceOnly moves every pod sharing the failed device's claim, rebalance
moves a claim's pod only to where a DRA driver offers room, and requeue_job says
which claimed devices it frees."""

from __future__ import annotations

from typing import Any

import pytest

from accel_common.names import DRA_NVIDIA_GPU
from autoscaler.actions import rebalance
from autoscaler.kube.client import ClientKube
from autoscaler.types import QueryResult, Sample, Vector, labels_of
from tests.autoscaler.actions.test_actions_kube import ctx, decide, run
from tests.support import draobjs
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import evictions, job, node, pod

pytestmark = pytest.mark.timeout(60)

NIC = "dra.net"


def _node_without_plugin(name: str) -> dict[str, Any]:
    """A node whose GPUs are published through DRA only: no extended resource."""
    n = node(name)
    for part in ("allocatable", "capacity"):
        n["status"][part].pop("nvidia.com/gpu")
    return n


def _world(api: FakeApiServer) -> None:
    api.add(_node_without_plugin("n1"))
    api.add(draobjs.device_class())
    api.add(draobjs.resource_slice("n1", 4))
    # A claim-allocated GPU, a plugin GPU, a NIC-only claim, a claim never read
    # (not found), and a pod with no device at all.
    api.add(draobjs.allocated_claim("gpu-a", "n1", ["gpu-0"], pod="dra"))
    api.add(draobjs.dra_pod("dra", "n1", ["gpu-a"]))
    api.add(pod("plug", "n1"))
    api.add(
        draobjs.allocated_claim("nic-a", "n1", ["eth1"], pod="nic", driver=NIC)
        | {"spec": draobjs.claim_spec(1, "nic.example.com")}
    )
    api.add(draobjs.dra_pod("nic", "n1", ["nic-a"]))
    api.add(draobjs.dra_pod("ghost", "n1", ["never-made"]))
    api.add(pod("cpu", "n1", gpus=0))


async def test_migrate_moves_claim_pods_not_nic_pods(api: FakeApiServer, kube: ClientKube) -> None:
    _world(api)
    d = decide("migrate_jobs", {"node": "n1"}, rule="fatal")
    outcome = await run(ctx(kube), d)
    assert outcome.status == "done", outcome.message
    moved = {name for name in ("dra", "plug", "nic", "ghost", "cpu") if evictions(api, name)}
    # A claim we could not read counts as a device (its devices are unknown).
    assert moved == {"dra", "plug", "ghost"}
    # One list of claims for the namespace; no per-pod reads.
    assert len(api.requests_for("GET", r"/namespaces/ml/resourceclaims$")) == 1


def _pod_info(*rows: tuple[str, str, str]) -> Any:
    async def query(expr: str, at: float) -> QueryResult:
        assert expr.startswith("accel_device_pod_info{")
        return Vector(
            tuple(
                Sample(
                    labels_of(
                        {
                            "node": "n1",
                            "device": "nvidia0",
                            "namespace": "ml",
                            "pod": p,
                            "container": "main",
                            "claim": c,
                        }
                    ),
                    1.0,
                    at,
                )
                for p, c, _ in rows
            )
        )

    return query


async def test_device_only_moves_every_pod_sharing_the_claim(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(_node_without_plugin("n1"))
    shared = draobjs.allocated_claim("shared", "n1", ["gpu-0"], pod="a")
    shared["status"]["reservedFor"].append({"resource": "pods", "name": "b", "uid": "uid-b"})
    api.add(shared)
    api.add(draobjs.allocated_claim("other", "n1", ["gpu-1"], pod="c"))
    for name, claim in (("a", "shared"), ("b", "shared"), ("c", "other")):
        api.add(draobjs.dra_pod(name, "n1", [claim], owner=("Job", f"j-{name}")))
    # The exporter saw only pod a on nvidia0 (say b's container had not started).
    query = _pod_info(("a", "shared", ""))
    d = decide("migrate_jobs", {"node": "n1", "device": "nvidia0"}, deviceOnly=True)
    outcome = await run(ctx(kube, query=query), d)
    assert outcome.status == "done", outcome.message
    assert evictions(api, "a") == 1 and evictions(api, "b") == 1
    assert evictions(api, "c") == 0


async def test_rebalance_moves_a_claim_pod_only_where_dra_offers_room(
    api: FakeApiServer, kube: ClientKube
) -> None:
    # hot: a DRA node running one claim pod; plug: cool, but only plugin GPUs;
    # dra: cool, with free DRA devices.
    api.add(_node_without_plugin("hot"))
    api.add(node("plug"))
    api.add(_node_without_plugin("dra"))
    api.add(draobjs.resource_slice("hot", 4))
    api.add(draobjs.resource_slice("dra", 8))
    api.add(draobjs.allocated_claim("c1", "hot", ["gpu-0"], pod="mover"))
    api.add(draobjs.dra_pod("mover", "hot", ["c1"], owner=("Job", "train")))
    query = _loads({"hot": 0.95, "plug": 0.05, "dra": 0.30})
    d = decide("rebalance", {"node": "hot"}, rule="hot-node")
    outcome = await run(ctx(kube, query=query), d)
    assert outcome.status == "done", outcome.message
    assert evictions(api, "mover") == 1
    hot = api.get("nodes", None, "hot")
    dest = api.get("nodes", None, "dra")
    plug = api.get("nodes", None, "plug")
    assert hot is not None and dest is not None and plug is not None
    stamped = [n["metadata"]["name"] for n in (hot, dest, plug) if n["metadata"].get("annotations")]
    assert stamped == ["hot", "dra"]


async def test_rebalance_without_room_for_dra_moves_nothing(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(_node_without_plugin("hot"))
    api.add(node("plug"))  # eight free plugin GPUs: no use to a claim's pod
    api.add(draobjs.resource_slice("hot", 1))
    api.add(draobjs.allocated_claim("c1", "hot", ["gpu-0"], pod="mover"))
    api.add(draobjs.dra_pod("mover", "hot", ["c1"], owner=("Job", "train")))
    d = decide("rebalance", {"node": "hot"}, rule="hot-node")
    outcome = await run(ctx(kube, query=_loads({"hot": 0.95, "plug": 0.05})), d)
    assert outcome.status == "skipped" and "no node fits" in outcome.message
    assert evictions(api, "mover") == 0


def _loads(values: dict[str, float]) -> Any:
    async def query(expr: str, at: float) -> QueryResult:
        assert expr == rebalance.LOAD_QUERY
        return Vector(tuple(Sample(labels_of({"node": n}), v, at) for n, v in values.items()))

    return query


async def test_requeue_names_the_claimed_devices_it_frees(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(job("train"))
    api.add(draobjs.allocated_claim("c1", "n1", ["gpu-0", "gpu-1"], pod="p"))
    api.add(draobjs.dra_pod("p", "n1", ["c1"], owner=("Job", "train")))
    d = decide("requeue_job", {"namespace": "ml", "pod": "p"}, rule="stalled")
    outcome = await run(ctx(kube), d)
    assert outcome.status == "done", outcome.message
    freed = [f"{DRA_NVIDIA_GPU}/n1/gpu-0", f"{DRA_NVIDIA_GPU}/n1/gpu-1"]
    assert outcome.details["devices"] == freed
    assert freed[0] in outcome.message
    assert api.get("pods", "ml", "p") is None
