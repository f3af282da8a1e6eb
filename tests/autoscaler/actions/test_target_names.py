"""A target whose name no Kubernetes object can have is refused before any API call,
for every action, act and recover: ``n1/status`` once reached the node's ``status``
subresource. Through the executor (the dispatch every decision passes through) with
the real ``kubernetes`` client against the fake API server, counting the requests it
receives; and, below it, the client and the dry-run wrapper refuse such a name on
their own (tests/autoscaler/kube/test_names.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.decision import Decision
from autoscaler.executor import Executor
from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.types import QueryResult, Vector
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import job, node, pod

pytestmark = pytest.mark.timeout(60)

BAD_NAMES = {
    "a subresource": "n1/status",
    "a parent path": "../x",
    "upper case": "Node-1",
    "300 characters": "n" * 300,
}
# Parameters an action cannot go without.
REQUIRED: dict[str, dict[str, Any]] = {
    "scale_node_pool": {"direction": "down"},
    "repartition": {"layout": "h100-all-1g"},
}


def targets(target_kind: str, bad: str) -> list[dict[str, str]]:
    """The targets of one kind that carry ``bad`` where a name goes."""
    if target_kind == "node":
        return [{"node": bad}]
    if target_kind == "device":
        return [{"node": bad, "device": "nvidia0"}]
    if target_kind == "pod":
        return [{"namespace": "ml", "pod": bad}, {"namespace": bad, "pod": "train-0"}]
    if target_kind == "pool":
        return [{"pool": bad}]
    raise AssertionError(f"a target kind this test does not know: {target_kind}")


CASES = [
    (action, kind, target_kind)
    for action, spec in ACTIONS.items()
    for kind in (("act", "recover") if spec.reversible else ("act",))
    for target_kind in spec.targets
]


def decide(action: str, kind: str, target: dict[str, str]) -> Decision:
    params, problems = ACTIONS[action].validate(REQUIRED.get(action, {}))
    assert not problems, problems
    return Decision(
        rule="r",
        kind=kind,  # type: ignore[arg-type]
        action=action,
        params=params,
        target=target,
        sample_labels=(),
        sample_value=1.0,
        at=0.0,
    )


class Queries:
    """The source's PromQL, counted: a refused decision asks nothing either."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, expr: str, at: float) -> QueryResult:
        self.asked.append(expr)
        return Vector(())


async def execute(kube: Any, d: Decision, queries: Queries) -> tuple[Outcome, Executor]:
    executor = Executor(
        ActionContext(
            kube=kube,
            replica="test-replica",
            pools=ClusterAPIProvider(kube, "capi"),
            query=queries,
            retry_interval=0.01,
        )
    )
    await executor.submit(d)
    (record,) = executor.history
    return record.outcome, executor


def populate(api: FakeApiServer) -> None:
    """Objects a valid target would find, so that an action let through would call."""
    api.add(node("n1"))
    api.add(job("train"))
    api.add(pod("train-0", "n1", owner="Job", owner_name="train"))


@pytest.mark.parametrize(("action", "kind", "target_kind"), CASES, ids=["-".join(c) for c in CASES])
async def test_a_bad_target_name_makes_no_api_call(
    api: FakeApiServer, kube: ClientKube, action: str, kind: str, target_kind: str
) -> None:
    populate(api)
    for what, bad in BAD_NAMES.items():
        for target in targets(target_kind, bad):
            where = f"{what} in {target}"
            queries = Queries()
            outcome, executor = await execute(kube, decide(action, kind, target), queries)
            assert outcome.status == "unknown", where
            assert "refused before any API call" in outcome.message, where
            assert "is not a valid Kubernetes name" in outcome.message, where
            assert repr(bad if len(bad) <= 80 else bad[:60] + "...") in outcome.message, where
            assert api.requests == [], [f"{r.method} {r.path}" for r in api.requests]
            assert queries.asked == [], where
            assert executor.history[0].first_call is None, where
            assert executor.outcomes[("r", action, "unknown")] == 1, where


@pytest.mark.parametrize("bad", BAD_NAMES.values(), ids=BAD_NAMES.keys())
async def test_a_dry_run_refuses_it_the_same_way(
    api: FakeApiServer, kube: ClientKube, bad: str
) -> None:
    populate(api)
    dry = DryRunKube(kube)
    outcome, _ = await execute(dry, decide("drain", "act", {"node": bad}), Queries())
    assert outcome.status == "unknown" and "not a valid Kubernetes name" in outcome.message
    assert dry.writes == [] and api.requests == []


async def test_the_same_decisions_with_valid_names_do_call(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """The control: the counting above would see a call if one were made."""
    populate(api)
    outcome, executor = await execute(kube, decide("cordon", "act", {"node": "n1"}), Queries())
    assert outcome.status == "done", outcome.message
    assert api.requests_for("PATCH", r"/api/v1/nodes/n1$")
    assert executor.history[0].first_call is not None
    before = len(api.requests)
    requeue = decide("requeue_job", "act", {"namespace": "ml", "pod": "train-0"})
    outcome, _ = await execute(kube, requeue, Queries())
    assert outcome.status == "done", outcome.message
    assert len(api.requests) > before


async def test_an_absent_name_is_left_to_the_action(api: FakeApiServer, kube: ClientKube) -> None:
    """Which names a target needs is the action's business: it says what is missing."""
    outcome, _ = await execute(kube, decide("requeue_job", "act", {"pod": "train-0"}), Queries())
    assert outcome.status == "failed"
    assert "names no namespace and pod" in outcome.message
    assert api.requests == []
