"""``migrate_jobs`` with ``deviceOnly: true`` when nobody knows which pods hold the
device: it evicts nothing and taints nothing (missing data never acts more widely
than known data would), and its outcome says the holders are unknown. Against the
fake API server through the real client."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest

from accel_common.names import BARE_PODS_ANNOTATION
from autoscaler.actions.ops.barepods import Record, replacement_name, sanitised
from autoscaler.kube.client import ClientKube
from autoscaler.types import QueryResult, Scalar, Unknown, Vector
from tests.autoscaler.actions.test_actions_kube import ctx, decide, run, taints
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node, pod

pytestmark = pytest.mark.timeout(60)

Query = Callable[[str, float], Awaitable[QueryResult]]


def answer(result: QueryResult) -> Query:
    async def query(expr: str, at: float) -> QueryResult:
        assert expr.startswith("accel_device_pod_info{")
        return result

    return query


CASES: list[tuple[str, Query | None, str]] = [
    ("query unknown", answer(Unknown("source prometheus is down")), "source prometheus is down"),
    ("no series for the device", answer(Vector(())), "no accel_device_pod_info series"),
    ("not a vector", answer(Scalar(1.0, 0.0)), "not a vector"),
    ("no source at all", None, "no metrics source"),
]


@pytest.mark.parametrize(("query", "why"), [(q, w) for _, q, w in CASES], ids=[c[0] for c in CASES])
async def test_unknown_holders_evict_nothing_and_say_so(
    api: FakeApiServer, kube: ClientKube, query: Query | None, why: str
) -> None:
    api.add(node("n1"))
    api.add(pod("a", "n1"))
    api.add(pod("b", "n1", owner="ReplicaSet"))
    api.add(pod("solo", "n1", owner=None))
    d = decide("migrate_jobs", {"node": "n1", "device": "nvidia3"}, rule="ecc", deviceOnly=True)
    outcome = await run(ctx(kube, query=query), d)

    assert outcome.status == "skipped", outcome.message
    assert "unknown holders" in outcome.message and why in outcome.message
    assert outcome.details["unknown"] == "holders"
    assert outcome.details["device"] == "nvidia3"
    # Nothing moved, nothing created, nothing tainted, nothing written.
    assert api.requests_for("POST", r"/eviction$") == []
    assert api.requests_for("POST", r"/pods$") == []
    assert api.requests_for("PATCH", r".") == []
    assert {p["metadata"]["name"] for p in api.objects("pods")} == {"a", "b", "solo"}
    assert taints(api, "n1") == []


async def test_unknown_holders_still_finish_a_bare_pod_an_earlier_run_evicted(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """A resumed deviceOnly migration whose holders are unknown now: the pods still
    there stay, but a bare pod the earlier run already evicted gets its replacement
    from the spec kept on the node (it is never lost), and nothing else happens."""
    api.add(node("n1"))
    api.add(pod("a", "n1"))
    gone = api.add(pod("solo", "n1", owner=None))
    record = Record(gone["metadata"]["uid"], "ecc", replacement_name(gone), sanitised(gone))
    api.remove("pods", "ml", "solo")  # the earlier run's eviction
    n = api.get("nodes", None, "n1")
    assert n is not None
    n["metadata"]["annotations"] = {BARE_PODS_ANNOTATION: json.dumps({"ml/solo": record.as_json()})}
    api.add(n)

    d = decide("migrate_jobs", {"node": "n1", "device": "nvidia3"}, rule="ecc", deviceOnly=True)
    outcome = await run(ctx(kube, query=answer(Unknown("source down"))), d)

    assert outcome.status == "skipped", outcome.message
    assert "unknown holders" in outcome.message
    assert outcome.details["recreated"] == [f"ml/{record.replacement}"]
    assert api.requests_for("POST", r"/eviction$") == []
    assert {p["metadata"]["name"] for p in api.objects("pods")} == {"a", record.replacement}
    stored = api.get("nodes", None, "n1")
    assert stored is not None
    assert BARE_PODS_ANNOTATION not in (stored["metadata"].get("annotations") or {})
    assert taints(api, "n1") == []
