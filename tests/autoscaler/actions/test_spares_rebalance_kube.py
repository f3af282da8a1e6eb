"""Issue 16's two cost rules against the fake API server with the real client:
``scale_node_pool`` sizes its spare buffer by the documented formula, records it on
the MachineDeployment and keeps it; ``rebalance`` never moves a gang member and
declines a move whose progress at risk outweighs its gain."""

from __future__ import annotations

import math
from typing import Any

import pytest

from accel_common.names import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    GANG_LABEL,
    LAST_CHECKPOINT_ANNOTATION,
    SPARE_NODES_ANNOTATION,
)
from autoscaler.actions import ACTIONS, scale_node_pool
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import iso
from autoscaler.actions.ops.spares import poisson_quantile, size
from autoscaler.actions.rebalance import progress_at_risk
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.types import QueryResult, Sample, Vector, labels_of
from tests.autoscaler.pools.test_pools import NS, add_pool, context, replicas
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node, pod

pytestmark = pytest.mark.timeout(60)

NOW = 1_800_000_000.0


def decide(action: str, target: dict[str, str], **raw: Any) -> Decision:
    params, problems = ACTIONS[action].validate(raw)
    assert not problems, problems
    return Decision("r", "act", action, params, target, (), 1.0, NOW)


# -- the formula -------------------------------------------------------------------


def poisson_cdf(s: int, mu: float) -> float:
    return sum(math.exp(-mu) * mu**k / math.factorial(k) for k in range(s + 1))


@pytest.mark.parametrize("mu", [0.01, 0.108, 0.5, 2.0, 7.5, 30.0])
@pytest.mark.parametrize("q", [0.9, 0.99, 0.999])
def test_poisson_quantile_is_the_smallest_sufficient_buffer(mu: float, q: float) -> None:
    s = poisson_quantile(mu, q)
    assert poisson_cdf(s, mu) >= q
    assert s == 0 or poisson_cdf(s - 1, mu) < q


def test_the_documented_worked_example() -> None:
    # docs/actions.md: Llama 3's 1.97e-5 per GPU-hour on 8-GPU nodes, 2,048 nodes,
    # 10 min provisioning + 10 min restart overhead, quantile 0.999 -> 2 spares.
    sized = size(
        1.97e-5 * 8,
        2048,
        provisioning_time=600,
        restart_overhead=600,
        quantile=0.999,
        max_spares=8,
    )
    assert sized.mean == pytest.approx(0.1076, abs=1e-4)
    assert sized.spares == 2
    assert (
        size(
            0.0, 2048, provisioning_time=600, restart_overhead=600, quantile=0.999, max_spares=8
        ).spares
        == 0
    )
    capped = size(
        1.0, 100, provisioning_time=3600, restart_overhead=0, quantile=0.999, max_spares=8
    )
    assert capped.spares == 8


# -- spares through the action ------------------------------------------------------


async def run_pool(kube: ClientKube, pool: str, direction: str, **raw: Any) -> Outcome:
    params, problems = ACTIONS["scale_node_pool"].validate({"direction": direction, **raw})
    assert not problems, problems
    d = Decision(
        f"pool-{direction}", "act", "scale_node_pool", params, {"pool": pool}, (), 1.0, NOW
    )
    return await scale_node_pool.execute(context(kube), d)


# A fault rate that makes μ = rate · 4 nodes · 1 h = 2 → 6 spares at 0.999, capped at 2.
SPARES = {
    "spareFaultRate": 0.5,
    "provisioningTime": "50m",
    "restartOverhead": "10m",
    "maxSpares": 2,
}


async def test_scale_up_adds_the_missing_spares_and_records_the_buffer(
    api: FakeApiServer, kube: ClientKube
) -> None:
    names = add_pool(api, "h100", replicas=4, nodes=4, bounds=(1, 10))
    for n in names:  # every node busy: no spare yet
        api.add(pod(f"job-{n}", n, owner="ReplicaSet", gpus=8))
    out = await run_pool(kube, "h100", "up", step=1, **SPARES)
    assert out.status == "done", out.message
    assert replicas(api, "h100") == 4 + 1 + 2
    assert out.details["spares"] == 2 and out.details["idle"] == 0
    md = api.get("machinedeployments", NS, "h100")
    assert md is not None and md["metadata"]["annotations"][SPARE_NODES_ANNOTATION] == "2"


async def test_scale_down_keeps_the_spare_buffer(api: FakeApiServer, kube: ClientKube) -> None:
    names = add_pool(api, "h100", replicas=4, nodes=4, bounds=(1, 10))
    for n in names[:2]:
        api.add(pod(f"job-{n}", n, owner="ReplicaSet", gpus=8))
    # Two idle nodes, and the buffer wants two: the scale-down removes none.
    out = await run_pool(kube, "h100", "down", step=1, **SPARES)
    assert out.status == "skipped" and "spare(s) the buffer keeps" in out.message
    assert replicas(api, "h100") == 4
    # Without a fault rate, the same pool shrinks as before.
    plain = await run_pool(kube, "h100", "down", step=1)
    assert plain.status == "done", plain.message
    assert replicas(api, "h100") == 3


# -- rebalance -----------------------------------------------------------------------


def loads(values: dict[str, float]) -> Any:
    async def query(expr: str, at: float) -> QueryResult:
        return Vector(tuple(Sample(labels_of({"node": n}), v, at) for n, v in values.items()))

    return query


def ctx(kube: ClientKube) -> ActionContext:
    return ActionContext(
        kube=kube, query=loads({"hot": 0.95, "cool": 0.1}), clock=lambda: NOW, retry_interval=0.05
    )


async def test_rebalance_never_moves_a_gang_member(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("hot"))
    api.add(node("cool"))
    api.add(pod("g-0", "hot", owner="Job", owner_name="g", gpus=4, labels={GANG_LABEL: "g"}))
    out = await run(kube, decide("rebalance", {"node": "hot"}, minUtilizationGap=0.3))
    assert out.status == "skipped" and "no movable pod" in out.message
    assert api.requests_for("POST", "/eviction$") == []


async def test_rebalance_weighs_progress_at_risk_against_the_gain(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("hot"))
    api.add(node("cool"))
    # Two hours since its last checkpoint on 4 devices: 28,800 device-seconds at risk,
    # against a gain of (0.95 - 0.1) x 4 x 1 h = 12,240.
    api.add(
        pod(
            "late",
            "hot",
            owner="ReplicaSet",
            gpus=4,
            annotations={LAST_CHECKPOINT_ANNOTATION: iso(NOW - 7200)},
        )
    )
    out = await run(kube, decide("rebalance", {"node": "hot"}, minUtilizationGap=0.3))
    assert out.status == "skipped", out.message
    assert "throws away 28800 device-seconds" in out.message and "12240" in out.message
    assert api.requests_for("POST", "/eviction$") == []
    # Just checkpointed (five minutes ago): the move is worth it.
    api.add(
        pod(
            "late",
            "hot",
            owner="ReplicaSet",
            gpus=4,
            annotations={LAST_CHECKPOINT_ANNOTATION: iso(NOW - 300)},
        )
    )
    moved = await run(kube, decide("rebalance", {"node": "hot"}, minUtilizationGap=0.3))
    assert moved.status == "done" and moved.details["moved"] == ["ml/late"], moved.message


def test_progress_at_risk_falls_back_to_the_checkpoint_interval() -> None:
    # 4,000 s old with a checkpoint every 30 min: 400 s since the last, on 2 devices.
    started = iso(NOW - 4000)
    p = pod("p", "n", gpus=2, annotations={CHECKPOINT_INTERVAL_ANNOTATION: "30m"}, start=started)
    assert progress_at_risk(p, NOW) == pytest.approx(800.0)
    assert progress_at_risk(pod("q", "n", gpus=2, start=started), NOW) is None


async def run(kube: ClientKube, d: Decision) -> Outcome:
    execute = ACTIONS[d.action].execute
    assert execute is not None
    return await execute(ctx(kube), d)
