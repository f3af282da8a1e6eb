"""A scale-down removes only a node whose device pods can run elsewhere
(``autoscaler/actions/ops/fit.py``), against the fake API server through the real
client: the node it drains, the pods it leaves alone, and what it says when no
node can go."""

from __future__ import annotations

import pytest

from accel_common.names import GANG_LABEL
from autoscaler.actions import scale_node_pool
from autoscaler.actions.ops.fit import SAFE_TO_EVICT
from autoscaler.kube.client import ClientKube
from tests.autoscaler.pools.test_pools import (
    add_pool,
    budget,
    context,
    decision,
    events,
    node,
    pod,
    replicas,
    scale_patches,
)
from tests.support.fakes.apiserver import FakeApiServer


def untouched(api: FakeApiServer) -> bool:
    """No cordon, no eviction, no Machine mark, no replica change."""
    return (
        api.requests_for("PATCH", r"/nodes/") == []
        and api.evicted == []
        and api.requests_for("PATCH", r"/machines/") == []
        and scale_patches(api) == []
    )


async def test_a_node_whose_job_fits_nowhere_else_is_passed_over(
    api: FakeApiServer, kube: ClientKube
) -> None:
    n0, n1, n2 = add_pool(api, "a100", replicas=3, nodes=3, bounds=(1, 6))
    # One device pod each: n0 comes first by name, but its 8 devices fit on no
    # other node (4 and 6 free); n1's 4 fit on n2.
    api.add(pod("big-0", n0, gpus=8))
    api.add(pod("mid-0", n1, gpus=4))
    api.add(pod("small-0", n2, gpus=2))

    out = await scale_node_pool.execute(context(kube), decision("a100", "down"))

    assert out.status == "done", out.message
    assert out.details["removed"] == [n1]
    assert api.evicted == [("ml", "mid-0")]
    assert replicas(api, "a100") == 2
    node0 = api.get("nodes", None, n0)
    assert node0 is not None and not node0["spec"].get("unschedulable")


async def test_no_node_removed_when_every_node_runs_a_job_with_nowhere_to_go(
    api: FakeApiServer, kube: ClientKube
) -> None:
    n0, n1 = add_pool(api, "a100", replicas=2, nodes=2, bounds=(1, 6))
    api.add(pod("a-0", n0, gpus=6))
    api.add(pod("b-0", n1, gpus=6))

    out = await scale_node_pool.execute(context(kube), decision("a100", "down"))

    assert out.status == "skipped", out.message
    assert "no node can go without stopping a job that has nowhere to run" in out.message
    assert "pod ml/a-0 (6 nvidia.com/gpu) fits on no other schedulable node" in out.message
    assert untouched(api)
    (refused,) = events(api, "ScaleRefused")
    assert "ml/a-0" in refused["message"]


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"owner": None}, "has no owner that would recreate it"),
        ({"owner": ("Deployment", "web")}, "owned by a Deployment"),
        ({"labels": {GANG_LABEL: "llm"}}, "is a gang member"),
    ],
)
async def test_pods_that_would_not_come_back_keep_their_node(
    api: FakeApiServer, kube: ClientKube, extra: dict[str, object], why: str
) -> None:
    (n0,) = add_pool(api, "a100", replicas=2, nodes=1, bounds=(1, 6))
    # Room elsewhere is no question here: the second replica's node is a spare.
    api.add(pod("keep-0", n0, gpus=1, **extra))  # type: ignore[arg-type]
    api.add(node("a100-spare", labels={"pool": "a100"}))

    out = await scale_node_pool.execute(context(kube), decision("a100", "down"))

    assert out.status == "skipped", out.message
    assert why in out.message, out.message
    assert untouched(api)


async def test_safe_to_evict_false_keeps_the_node_as_cluster_autoscaler_does(
    api: FakeApiServer, kube: ClientKube
) -> None:
    n0, n1 = add_pool(api, "a100", replicas=2, nodes=2, bounds=(1, 6))
    held = pod("held-0", n0, gpus=1)
    held["metadata"]["annotations"] = {SAFE_TO_EVICT: "false"}
    api.add(held)
    api.add(pod("b-0", n1, gpus=2))

    out = await scale_node_pool.execute(context(kube), decision("a100", "down"))

    # n0 has the fewest device pods but keeps its pod; n1's two devices fit on n0.
    assert out.status == "done", out.message
    assert out.details["removed"] == [n1]
    assert api.evicted == [("ml", "b-0")]


async def test_unreadable_pods_are_unknown_and_nothing_is_drained(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "a100", replicas=2, nodes=2, bounds=(1, 6))
    api.faults.fail(1, status=403, method="GET", path_regex=r"/pods$")

    out = await scale_node_pool.execute(context(kube), decision("a100", "down"))

    assert out.status == "unknown", out.message
    assert "cannot read the pool's nodes and pods" in out.message
    assert untouched(api)
    assert replicas(api, "a100") == 2


async def test_a_drain_this_rule_began_is_resumed_even_once_its_pod_no_longer_fits(
    api: FakeApiServer, kube: ClientKube
) -> None:
    n0, n1 = add_pool(api, "a100", replicas=2, nodes=2, bounds=(1, 6))
    api.add(pod("held-0", n0, gpus=2, labels={"app": "held"}))
    api.add(pod("other-0", n1, gpus=4))
    api.add(budget("held"))
    ctx = context(kube)
    first = await scale_node_pool.execute(ctx, decision("a100", "down"))
    assert first.status == "partial", first.message
    assert "drain of node a100-n0 not finished" in first.message

    # n1 fills up meanwhile: held-0 would fit nowhere now, but n0 is half drained
    # by this rule and cordoned; it is resumed, and n1 is left alone.
    api.add(pod("other-1", n1, gpus=4))
    again = await scale_node_pool.execute(ctx, decision("a100", "down"))

    assert again.status == "partial", again.message
    assert "drain of node a100-n0 not finished" in again.message
    node1 = api.get("nodes", None, n1)
    assert node1 is not None and not node1["spec"].get("unschedulable")
    assert all(name == "held-0" for _, name in api.evicted)


async def test_a_daemonset_device_pod_goes_with_its_node(
    api: FakeApiServer, kube: ClientKube
) -> None:
    n0, n1 = add_pool(api, "a100", replicas=2, nodes=2, bounds=(1, 6))
    api.add(pod("agent-0", n0, gpus=1, owner=("DaemonSet", "agent")))
    api.add(pod("agent-1", n1, gpus=1, owner=("DaemonSet", "agent")))
    api.add(pod("train-0", n1, gpus=7))

    out = await scale_node_pool.execute(context(kube), decision("a100", "down"))

    # n0's only device pod is the DaemonSet's: nothing there needs room elsewhere.
    assert out.status == "done", out.message
    assert out.details["removed"] == [n0]
