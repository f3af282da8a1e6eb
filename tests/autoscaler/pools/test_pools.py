"""Node pools: the Cluster API provider and the ``scale_node_pool`` action, against
the fake API server with the real ``kubernetes`` client (``ClientKube``).

One behaviour per test: scale-up respects the maximum and counts provisioning
Machines; scale-down drains, marks the Machine and only then lowers replicas (read
from the server's request log); never below the minimum; and a MachineDeployment
without the autoscaler annotations is refused with a message that names them. Time
is fake (an auto ``FakeClock``): a drain that a PodDisruptionBudget holds runs to its deadline
without the test waiting for it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actions import scale_node_pool
from autoscaler.actions.context import ActionContext
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.kube.protocol import Kube
from autoscaler.pools.clusterapi import (
    DELETE_MACHINE,
    DEPLOYMENT_LABEL,
    MAX_SIZE,
    MIN_SIZE,
    ClusterAPIProvider,
    PoolRefused,
    count_machines,
)
from tests.support.clock import FakeClock
from tests.support.fakes.apiserver import FakeApiServer, RecordedRequest

NS = "capi"
T0 = 1_800_000_000.0
CAPI = "cluster.x-k8s.io/v1beta1"


# -- objects ---------------------------------------------------------------------


def machine_deployment(
    name: str, replicas: int, bounds: tuple[int, int] | None = (1, 6), **annotations: str
) -> dict[str, Any]:
    ann = dict(annotations)
    if bounds is not None:
        ann[MIN_SIZE], ann[MAX_SIZE] = str(bounds[0]), str(bounds[1])
    return {
        "apiVersion": CAPI,
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NS, "annotations": ann},
        "spec": {"clusterName": "c1", "replicas": replicas},
    }


def machine(
    name: str,
    pool: str,
    node: str | None = None,
    *,
    phase: str | None = None,
    marked: bool = False,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {DEPLOYMENT_LABEL: pool}}
    if marked:
        meta["annotations"] = {DELETE_MACHINE: "yes"}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-15T08:00:00Z"
    status: dict[str, Any] = {"phase": phase or ("Running" if node else "Provisioning")}
    if node:
        status["nodeRef"] = {"kind": "Node", "name": node}
    return {
        "apiVersion": CAPI,
        "kind": "Machine",
        "metadata": meta,
        "spec": {"clusterName": "c1"},
        "status": status,
    }


def node(
    name: str, *, gpus: int = 8, ready: bool = True, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    node_name: str | None,
    *,
    gpus: int = 1,
    namespace: str = "ml",
    phase: str | None = None,
    owner: tuple[str, str] | None = ("ReplicaSet", "train-rs"),
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner is not None:
        api = "batch/v1" if owner[0] == "Job" else "apps/v1"
        meta["ownerReferences"] = [
            {
                "apiVersion": api,
                "kind": owner[0],
                "name": owner[1],
                "uid": f"uid-{owner[1]}",
                "controller": True,
            }
        ]
    body: dict[str, Any] = {
        "containers": [{"name": "main", "image": "train:1", "resources": resources}]
    }
    if node_name:
        body["nodeName"] = node_name
    body.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": body,
        "status": {"phase": phase or ("Running" if node_name else "Pending")},
    }


def budget(app: str) -> dict[str, Any]:
    """A PodDisruptionBudget that keeps one pod labelled ``app`` running."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }


def add_pool(
    api: FakeApiServer,
    name: str,
    *,
    replicas: int,
    nodes: int,
    bounds: tuple[int, int] | None = (1, 6),
    waiting: int = 0,
) -> list[str]:
    """A MachineDeployment with ``nodes`` registered Machines (and Nodes) and
    ``waiting`` Machines without a nodeRef; returns the node names."""
    api.add(machine_deployment(name, replicas, bounds))
    names = [f"{name}-n{i}" for i in range(nodes)]
    for i, n in enumerate(names):
        api.add(node(n, labels={"pool": name}))
        api.add(machine(f"{name}-m{i}", name, n))
    for i in range(waiting):
        api.add(machine(f"{name}-w{i}", name))
    return names


# -- harness ---------------------------------------------------------------------


def context(kube: Kube, *, dry_run: bool = False) -> ActionContext:
    clock = FakeClock(T0, auto=True)
    return ActionContext(
        kube=kube,
        replica="replica-a",
        clock=clock,
        sleep=clock.sleep,
        dry_run=dry_run,
        pools=ClusterAPIProvider(kube, NS, clock=clock),
        retry_interval=5.0,
    )


def decision(pool: str, direction: str, step: int = 1) -> Decision:
    return Decision(
        rule=f"pool-scale-{direction}",
        kind="act",
        action="scale_node_pool",
        params={"direction": direction, "step": step},
        target={"pool": pool},
        sample_labels=(("pool", pool),),
        sample_value=1.0,
        at=T0,
        reason="test",
    )


def replicas(api: FakeApiServer, pool: str) -> int:
    md = api.get("machinedeployments", NS, pool)
    assert md is not None
    return int(md["spec"]["replicas"])


def scale_patches(api: FakeApiServer) -> list[RecordedRequest]:
    return api.requests_for("PATCH", r"/machinedeployments/[^/]+/scale$")


def events(api: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.objects("events") if e.get("reason") == reason]


# -- the provider ----------------------------------------------------------------


async def test_pools_read_bounds_replicas_nodes_and_provisioning(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "a100", replicas=5, nodes=2, bounds=(1, 8), waiting=1)
    # A Machine that failed does not come up by waiting; one being deleted is gone.
    api.add(machine("a100-bad", "a100", phase="Failed"))
    api.add(machine("a100-old", "a100", "a100-old-node", deleting=True))
    # Another pool's Machine, and an unlabelled one, do not count.
    add_pool(api, "h100", replicas=1, nodes=1, bounds=(0, 2))
    api.add(machine("stray", "", "stray-node"))

    pools = await ClusterAPIProvider(kube, NS).pools()

    assert [p.name for p in pools] == ["a100", "h100"]
    a100 = pools[0]
    assert (a100.min_size, a100.max_size, a100.replicas) == (1, 8, 5)
    assert a100.nodes == ("a100-n0", "a100-n1")
    # One Machine without a nodeRef, plus one replica no Machine backs yet
    # (5 replicas, 4 live Machines: 2 registered, 1 waiting, 1 failed).
    assert a100.provisioning == 2
    assert (pools[1].nodes, pools[1].provisioning) == (("h100-n0",), 0)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, f"no {MIN_SIZE} and no {MAX_SIZE} annotation"),
        ({MIN_SIZE: "1"}, f"no {MAX_SIZE} annotation"),
        ({MIN_SIZE: "one", MAX_SIZE: "4"}, f"annotation {MIN_SIZE}='one' is not a whole number"),
        ({MIN_SIZE: "5", MAX_SIZE: "4"}, f"annotation {MIN_SIZE}=5 is above {MAX_SIZE}=4"),
        ({MIN_SIZE: "-1", MAX_SIZE: "4"}, "must not be negative"),
    ],
)
async def test_a_pool_without_valid_bounds_is_not_autoscalable(
    api: FakeApiServer, kube: ClientKube, annotations: dict[str, str], expected: str
) -> None:
    api.add(machine_deployment("plain", 2, None, **annotations))
    provider = ClusterAPIProvider(kube, NS)

    assert await provider.pools() == []
    why = provider.refusal("plain")
    assert why is not None and expected in why, why
    assert why.startswith(f"MachineDeployment {NS}/plain")
    with pytest.raises(PoolRefused, match=re.escape(expected)):
        await provider.set_replicas("plain", 3)
    with pytest.raises(PoolRefused, match=re.escape(expected)):
        await provider.mark_for_deletion("plain", "x")
    assert scale_patches(api) == []


async def test_set_replicas_uses_the_scale_subresource_within_bounds(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "a100", replicas=2, nodes=2, bounds=(1, 4))
    provider = ClusterAPIProvider(kube, NS)

    await provider.set_replicas("a100", 4)
    assert replicas(api, "a100") == 4
    (patch,) = scale_patches(api)
    assert patch.body == {"spec": {"replicas": 4}}
    with pytest.raises(PoolRefused, match=r"5 replicas is outside its bounds 1\.\.4"):
        await provider.set_replicas("a100", 5)
    with pytest.raises(PoolRefused, match=r"0 replicas is outside its bounds 1\.\.4"):
        await provider.set_replicas("a100", 0)
    assert replicas(api, "a100") == 4


async def test_mark_for_deletion_annotates_the_nodes_machine(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "a100", replicas=3, nodes=3)
    provider = ClusterAPIProvider(kube, NS, clock=lambda: T0)

    await provider.mark_for_deletion("a100", "a100-n1")

    marked = {
        m["metadata"]["name"]: (m["metadata"].get("annotations") or {}).get(DELETE_MACHINE)
        for m in api.objects("machines")
    }
    assert marked == {"a100-m0": None, "a100-m1": "2027-01-15T08:00:00Z", "a100-m2": None}
    with pytest.raises(PoolRefused, match=r"no Machine whose nodeRef is node 'elsewhere'"):
        await provider.mark_for_deletion("a100", "elsewhere")


def test_a_marked_surplus_machine_is_counted_as_gone() -> None:
    ms = [
        machine("m0", "p", "n0"),
        machine("m1", "p", "n1", marked=True),
        machine("m2", "p", "n2"),
    ]
    # Replicas already lowered to 2: the MachineSet removes the marked Machine.
    assert count_machines(2, ms) == (("n0", "n2"), 0)
    # Marked but replicas not lowered yet: the node is still the pool's.
    assert count_machines(3, ms) == (("n0", "n1", "n2"), 0)
    # Nothing marked and a surplus: the MachineSet picks; nothing is assumed gone.
    plain = [machine("m0", "p", "n0"), machine("m1", "p", "n1")]
    assert count_machines(1, plain) == (("n0", "n1"), 0)


# -- scale_node_pool: up ---------------------------------------------------------


async def test_scale_up_respects_the_maximum(api: FakeApiServer, kube: ClientKube) -> None:
    add_pool(api, "a100", replicas=5, nodes=5, bounds=(1, 6))
    ctx = context(kube)

    out = await scale_node_pool.execute(ctx, decision("a100", "up", step=3))

    assert out.status == "done", out.message
    assert replicas(api, "a100") == 6
    assert "capped at its maximum 6" in out.message
    (ev,) = events(api, "ScaledUp")
    assert ev["involvedObject"]["kind"] == "MachineDeployment"
    assert ev["involvedObject"]["apiVersion"] == CAPI
    assert ev["involvedObject"]["name"] == "a100"
    assert ev["metadata"]["namespace"] == NS
    assert ev["source"] == {"component": "accel-autoscaler"}
    assert "from 5 to 6 replicas" in ev["message"] and "rule pool-scale-up" in ev["message"]

    again = await scale_node_pool.execute(ctx, decision("a100", "up"))
    assert again.status == "skipped"
    assert again.message == "pool a100 is at its maximum (6 of 6)"
    assert len(scale_patches(api)) == 1
    assert len(events(api, "ScaleRefused")) == 1


async def test_scale_up_counts_nodes_still_provisioning(
    api: FakeApiServer, kube: ClientKube
) -> None:
    # 3 replicas: 2 nodes registered, 1 Machine still booting.
    add_pool(api, "a100", replicas=3, nodes=2, bounds=(1, 8), waiting=1)
    ctx = context(kube)

    held = await scale_node_pool.execute(ctx, decision("a100", "up", step=1))
    assert held.status == "skipped"
    assert "1 node(s) already provisioning cover step 1" in held.message
    assert scale_patches(api) == [] and replicas(api, "a100") == 3

    # A step of 3 with one on its way adds two, not three.
    grown = await scale_node_pool.execute(ctx, decision("a100", "up", step=3))
    assert grown.status == "done", grown.message
    assert replicas(api, "a100") == 5
    assert grown.details["provisioning"] == 1 and grown.details["to"] == 5

    # Now 3 are provisioning (1 Machine + 2 replicas with no Machine yet): a step of
    # 3 is covered; once the Machines register, the next decision adds again.
    assert (await scale_node_pool.execute(ctx, decision("a100", "up", step=3))).status == "skipped"
    api.add(machine("a100-w0", "a100", "a100-n2"))
    for i in (3, 4):
        api.add(machine(f"a100-m{i}", "a100", f"a100-n{i}"))
    done = await scale_node_pool.execute(ctx, decision("a100", "up", step=1))
    assert done.status == "done" and replicas(api, "a100") == 6


# -- scale_node_pool: down -------------------------------------------------------


async def test_scale_down_drains_the_least_loaded_node_and_marks_before_replicas_drop(
    api: FakeApiServer, kube: ClientKube
) -> None:
    names = add_pool(api, "a100", replicas=3, nodes=3, bounds=(1, 6))
    api.add(pod("busy-0", names[0]))
    api.add(pod("busy-1", names[0]))
    api.add(pod("one-0", names[2]))
    # n1 holds no device, only a pod without one (and a finished device pod): least loaded.
    api.add(pod("web-0", names[1], gpus=0))
    api.add(pod("done-0", names[1], phase="Succeeded"))
    ctx = context(kube)

    out = await scale_node_pool.execute(ctx, decision("a100", "down"))

    assert out.status == "done", out.message
    assert out.details["removed"] == ["a100-n1"]
    assert replicas(api, "a100") == 2
    n1 = api.get("nodes", None, "a100-n1")
    assert n1 is not None and n1["spec"].get("unschedulable") is True
    assert "accel-fleet.io/remediation" in n1["metadata"]["annotations"]
    assert api.evicted == [("ml", "web-0")]
    m1 = api.get("machines", NS, "a100-m1")
    assert m1 is not None and DELETE_MACHINE in m1["metadata"]["annotations"]
    for other in ("a100-m0", "a100-m2"):
        obj = api.get("machines", NS, other)
        assert obj is not None and DELETE_MACHINE not in (obj["metadata"].get("annotations") or {})

    # The order, from the server's own log: cordon, evict, mark, then replicas.
    def step(r: RecordedRequest) -> str | None:
        if r.method == "PATCH" and r.path.endswith("/nodes/a100-n1"):
            return "node"
        if r.method == "POST" and r.path.endswith("/eviction"):
            return "evict"
        if r.method == "PATCH" and r.path.endswith("/machines/a100-m1"):
            return "mark"
        if r.method == "PATCH" and r.path.endswith("/scale"):
            return "scale"
        return None

    order = [s for r in api.requests if (s := step(r)) is not None]
    assert order.index("node") < order.index("evict") < order.index("mark") < order.index("scale")
    assert order.count("mark") == 1 and order.count("scale") == 1
    (ev,) = events(api, "ScaledDown")
    assert ev["involvedObject"]["kind"] == "MachineDeployment"
    assert "drained node a100-n1" in ev["message"] and "down to 2 replicas" in ev["message"]

    # Asked again, the provider no longer counts the marked node (replicas dropped and
    # the MachineSet will remove it): the next least-loaded node goes, never n1 twice.
    pools = await ClusterAPIProvider(kube, NS).pools()
    assert pools[0].nodes == ("a100-n0", "a100-n2")


async def test_scale_down_never_goes_below_the_minimum(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "a100", replicas=2, nodes=2, bounds=(2, 6))
    names = add_pool(api, "h100", replicas=3, nodes=3, bounds=(1, 6))
    ctx = context(kube)

    at_min = await scale_node_pool.execute(ctx, decision("a100", "down"))
    assert at_min.status == "skipped"
    assert at_min.message == "pool a100 is at its minimum (2, minimum 2)"
    assert api.requests_for("PATCH", r"/nodes/") == []
    assert api.requests_for("PATCH", r"/machines/") == []
    assert scale_patches(api) == []
    (refused,) = events(api, "ScaleRefused")
    assert refused["involvedObject"]["name"] == "a100"

    # A step of 5 from 3 replicas with a minimum of 1 removes two nodes, one at a time.
    out = await scale_node_pool.execute(ctx, decision("h100", "down", step=5))
    assert out.status == "done", out.message
    assert replicas(api, "h100") == 1
    assert out.details["removed"] == names[:2]
    assert [r.body for r in scale_patches(api)] == [
        {"spec": {"replicas": 2}},
        {"spec": {"replicas": 1}},
    ]


async def test_scale_down_waits_for_the_drain_and_reports_partial(
    api: FakeApiServer, kube: ClientKube
) -> None:
    names = add_pool(api, "a100", replicas=2, nodes=2, bounds=(1, 6))
    api.add(pod("held-0", names[0], labels={"app": "held"}))
    api.add(pod("other-0", names[1]))
    api.add(pod("other-1", names[1]))
    api.add(budget("held"))
    ctx = context(kube)

    out = await scale_node_pool.execute(ctx, decision("a100", "down"))

    assert out.status == "partial", out.message
    assert "drain of node a100-n0 not finished" in out.message
    assert "replicas stay at 2" in out.message
    assert replicas(api, "a100") == 2
    assert api.requests_for("PATCH", r"/machines/") == []
    assert scale_patches(api) == []
    # The drain kept trying, on fake time, until its deadline.
    assert len(api.requests_for("POST", r"/eviction$")) > 10
    assert ctx.clock() - T0 >= 600
    (refused,) = events(api, "ScaleRefused")
    assert refused["type"] == "Warning"

    # Asked again after the drain's deadline: the same node, still not empty, is
    # still not removed.
    again = await scale_node_pool.execute(ctx, decision("a100", "down"))
    assert again.status == "partial", again.message
    assert "drain of node a100-n0 not finished" in again.message
    assert api.requests_for("PATCH", r"/machines/") == [] and scale_patches(api) == []
    assert replicas(api, "a100") == 2


async def test_an_unannotated_pool_is_refused_with_the_annotation_named(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "plain", replicas=2, nodes=2, bounds=None)
    ctx = context(kube)

    for direction in ("up", "down"):
        out = await scale_node_pool.execute(ctx, decision("plain", direction))
        assert out.status == "skipped"
        assert out.message.startswith(
            f"MachineDeployment {NS}/plain is not autoscalable: it has no {MIN_SIZE} "
            f"and no {MAX_SIZE} annotation"
        ), out.message
    assert scale_patches(api) == [] and api.requests_for("PATCH", r"/nodes/") == []
    refused = events(api, "ScaleRefused")
    assert len(refused) == 2
    assert all(MIN_SIZE in e["message"] and e["type"] == "Warning" for e in refused)

    missing = await scale_node_pool.execute(ctx, decision("nowhere", "up"))
    assert (missing.status, missing.message) == (
        "skipped",
        "no pool named 'nowhere' (provider clusterapi)",
    )


async def test_without_a_provider_the_action_fails_and_says_why(kube: ClientKube) -> None:
    ctx = ActionContext(kube=kube)
    out = await scale_node_pool.execute(ctx, decision("a100", "up"))
    assert out.status == "failed"
    assert "no node-pool provider is configured" in out.message


async def test_dry_run_records_the_whole_scale_down_and_changes_nothing(
    api: FakeApiServer, tmp_path: Path
) -> None:
    names = add_pool(api, "a100", replicas=3, nodes=3, bounds=(1, 6))
    api.add(pod("train-0", names[0]))
    inner = ClientKube.from_config(str(api.write_kubeconfig(tmp_path / "kc")), dry_run=True)
    dry = DryRunKube(inner)
    ctx = context(dry, dry_run=True)
    try:
        out = await scale_node_pool.execute(ctx, decision("a100", "down"))
    finally:
        inner.close()

    assert out.status == "done", out.message
    assert replicas(api, "a100") == 3
    machines = api.objects("machines")
    assert all(DELETE_MACHINE not in (m["metadata"].get("annotations") or {}) for m in machines)
    n1 = api.get("nodes", None, "a100-n1")
    assert n1 is not None and not n1["spec"].get("unschedulable")
    # The same sequence as for real, recorded: cordon, mark, then replicas.
    recorded = [m for m, _ in dry.writes if m != "create_event"]
    assert recorded.index("patch_node") < recorded.index("patch_custom")
    assert recorded.index("patch_custom") < recorded.index("patch_scale")
    # ...and sent to the server with dryRun=All, so its validation still answers.
    writes = [r for r in api.requests if r.method == "PATCH"]
    assert writes and all(r.query.get("dryRun") == "All" for r in writes), writes
    assert {r.path.rsplit("/", 1)[-1] for r in writes} >= {"a100-m1", "scale"}


async def test_api_failures_are_retried_or_reported_and_never_remove_twice(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "a100", replicas=3, nodes=3, bounds=(1, 6))
    ctx = context(kube)
    # Two 500s on the scale subresource: retried by the client, one change in effect.
    api.faults.fail(2, status=500, method="PATCH", path_regex=r"/scale$")
    out = await scale_node_pool.execute(ctx, decision("a100", "down"))
    assert out.status == "done", out.message
    assert replicas(api, "a100") == 2
    assert [r.status for r in scale_patches(api)] == [500, 500, 200]

    # RBAC that forbids patching Machines: the node is drained but nothing removed,
    # and the outcome says so.
    api.faults.fail(5, status=403, method="PATCH", path_regex=r"/machines/")
    failed = await scale_node_pool.execute(ctx, decision("a100", "down"))
    assert failed.status == "failed"
    assert "node a100-n1 is drained and cordoned, but removing it failed" in failed.message
    assert "replicas stay at 2" in failed.message
    assert replicas(api, "a100") == 2 and len(scale_patches(api)) == 3
