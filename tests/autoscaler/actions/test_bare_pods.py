"""A bare pod (no owner to recreate it) that ``migrate_jobs`` moves never runs
twice and is never lost, against the fake API server through the real client:

- a PodDisruptionBudget that refuses its eviction leaves the original as the one
  copy, and no replacement is ever created;
- an eviction that succeeds leaves the replacement as the one copy, created only
  after the eviction, from the spec kept on the node before it;
- a controller killed after ANY of the action's API calls, then resumed the way a
  restarted controller resumes (``Executor.resume`` with a fresh client), ends
  with exactly one copy and the original spec;
- a spec too large to keep on the node leaves the pod where it is;
- an original that is still terminating is waited for, not doubled;
- a dry run shows the eviction and then the create, and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import BARE_PODS_ANNOTATION, MIGRATED_FROM_ANNOTATION
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.barepods import Record, replacement_name, sanitised
from autoscaler.executor import Executor
from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from tests.autoscaler.actions.test_actions_kube import decide, entry, run
from tests.support.dying import Cut, Killed
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import client, evictions, node, pdb, pod

pytestmark = pytest.mark.timeout(120)

START = 1_800_000_000.0
ORIGINAL = "ml/solo"


def fake_time() -> tuple[Callable[[], float], Callable[[float], Awaitable[None]]]:
    now = [START]

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        await asyncio.sleep(0)

    return (lambda: now[0]), sleep


def context(kube: Any, clock: Any, sleep: Any) -> ActionContext:
    return ActionContext(
        kube=kube, replica="test-replica", clock=clock, sleep=sleep, retry_interval=0.25
    )


def setup(api: FakeApiServer, *, refusing: bool) -> None:
    api.add(node("n1"))
    api.add(node("n2"))
    api.add(pod("train-0", "n1", owner="Job"))
    solo = pod("solo", "n1", owner=None, labels={"app": "solo"})
    solo["spec"]["containers"][0]["env"] = [{"name": "RUN", "value": "42"}]
    api.add(solo)
    if refusing:
        api.add(pdb("solo", {"app": "solo"}, min_available=1))


DECISION = decide(
    "migrate_jobs", {"node": "n1", "device": "nvidia0"}, rule="fatal", drainTimeout="1s"
)


def copies(api: FakeApiServer) -> list[dict[str, Any]]:
    """The original, or pods made from it."""
    return [
        p
        for p in api.objects("pods")
        if f"{p['metadata']['namespace']}/{p['metadata']['name']}" == ORIGINAL
        or (p["metadata"].get("annotations") or {}).get(MIGRATED_FROM_ANNOTATION, "").split("@")[0]
        == ORIGINAL
    ]


def records(api: FakeApiServer) -> dict[str, Any]:
    n = api.get("nodes", None, "n1")
    assert n is not None
    raw = (n["metadata"].get("annotations") or {}).get(BARE_PODS_ANNOTATION)
    return dict(json.loads(raw)) if raw else {}


def order(api: FakeApiServer) -> list[str]:
    """The successful writes that matter, in the order the server took them."""
    out = []
    for r in api.requests:
        if not 200 <= r.status < 300:
            continue
        if r.method == "POST" and r.path.endswith("/pods/solo/eviction"):
            out.append("evict")
        elif r.method == "POST" and r.path.endswith("/namespaces/ml/pods"):
            out.append("create")
        elif r.method == "PATCH" and r.path.endswith("/nodes/n1"):
            body = ((r.body or {}).get("metadata") or {}).get("annotations") or {}
            if BARE_PODS_ANNOTATION in body:
                out.append("save" if body[BARE_PODS_ANNOTATION] else "drop")
    return out


def assert_one_copy_with_the_spec(api: FakeApiServer) -> dict[str, Any]:
    found = copies(api)
    assert len(found) == 1, [p["metadata"]["name"] for p in found]
    assert found[0]["spec"]["containers"][0]["env"] == [{"name": "RUN", "value": "42"}]
    # Never two at once: a replacement is only created after the original's eviction.
    seen = order(api)
    if "create" in seen:
        assert "evict" in seen and seen.index("evict") < seen.index("create"), seen
    if "evict" in seen:
        assert "save" in seen and seen.index("save") < seen.index("evict"), seen
    return found[0]


# -- the two ends ---------------------------------------------------------------------


async def test_a_refusing_budget_leaves_the_original_as_the_one_copy(
    api: FakeApiServer, kube: ClientKube
) -> None:
    setup(api, refusing=True)
    clock, sleep = fake_time()
    outcome = await run(context(kube, clock, sleep), DECISION)
    assert outcome.status == "partial", outcome.message
    assert "still refused" in outcome.message
    only = assert_one_copy_with_the_spec(api)
    assert only["metadata"]["name"] == "solo"
    assert evictions(api, "solo") == 0
    assert api.requests_for("POST", r"/namespaces/ml/pods$") == []
    # The record served its purpose (the spec was kept while an eviction could
    # succeed) and is gone: the original runs.
    assert records(api) == {}
    assert order(api) == ["save", "drop"]
    assert entry(api, "n1")["fatal"]["phase"] == "migrate-incomplete"


async def test_an_evicted_bare_pod_is_replaced_once_after_its_eviction(
    api: FakeApiServer, kube: ClientKube
) -> None:
    setup(api, refusing=False)
    clock, sleep = fake_time()
    outcome = await run(context(kube, clock, sleep), DECISION)
    assert outcome.status == "done", outcome.message
    assert "recreated 1 bare pod" in outcome.message
    only = assert_one_copy_with_the_spec(api)
    assert only["metadata"]["name"].startswith("solo-m")
    assert "nodeName" not in only["spec"]
    terms = only["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
    ]
    assert only["metadata"]["annotations"][MIGRATED_FROM_ANNOTATION] == "ml/solo@n1"
    assert order(api) == ["save", "evict", "create", "drop"]
    assert records(api) == {}
    assert entry(api, "n1")["fatal"]["phase"] == "migrated"


async def test_the_kept_spec_is_sanitised(api: FakeApiServer, kube: ClientKube) -> None:
    setup(api, refusing=True)
    clock, sleep = fake_time()
    seen: list[dict[str, Any]] = []
    await run(context(kube, clock, sleep), DECISION)
    for r in api.requests_for("PATCH", r"/nodes/n1$"):
        value = (((r.body or {}).get("metadata") or {}).get("annotations") or {}).get(
            BARE_PODS_ANNOTATION
        )
        if value:
            seen.append(json.loads(value)[ORIGINAL])
    assert len(seen) == 1
    saved = seen[0]
    assert saved["uid"] and saved["rule"] == "fatal" and saved["replacement"].startswith("solo-m")
    assert set(saved["pod"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(saved["pod"]["metadata"]) <= {"name", "namespace", "labels", "annotations"}
    assert "nodeName" not in saved["pod"]["spec"]


async def test_a_spec_too_large_to_keep_leaves_the_pod_in_place(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    big = pod("solo", "n1", owner=None)
    big["spec"]["containers"][0]["env"] = [{"name": "BLOB", "value": "x" * 300_000}]
    api.add(big)
    clock, sleep = fake_time()
    outcome = await run(context(kube, clock, sleep), DECISION)
    assert outcome.status == "partial", outcome.message
    assert "256 KiB" in outcome.message and "ml/solo" in outcome.message
    assert api.get("pods", "ml", "solo") is not None
    assert evictions(api, "solo") == 0
    assert records(api) == {}
    assert api.requests_for("POST", r"/namespaces/ml/pods$") == []


# -- killed between any two API calls --------------------------------------------------


async def _clean_run_calls(tmp_path: Path, refusing: bool) -> int:
    async with FakeApiServer() as api:
        setup(api, refusing=refusing)
        kube = client(api, _dir(tmp_path, "clean"))
        try:
            counted = Cut(kube)
            clock, sleep = fake_time()
            await run(context(counted, clock, sleep), DECISION)
            # One call, one request: the count is the server's too.
            assert len(counted.calls) == len(api.requests)
            return len(counted.calls)
        finally:
            kube.close()


def _dir(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    return d


@pytest.mark.parametrize(
    ("refusing", "rule_deleted"),
    [(False, False), (True, False), (False, True)],
    ids=["evictable", "refusing-pdb", "rule-deleted-before-the-restart"],
)
async def test_killed_after_any_call_then_resumed_leaves_exactly_one_copy(
    tmp_path: Path, refusing: bool, rule_deleted: bool
) -> None:
    """With ``rule_deleted`` the restarted controller no longer has the rule: the
    migration is abandoned, yet a bare pod it had evicted still gets its
    replacement (ending the step begun is not a new step)."""
    total = await _clean_run_calls(tmp_path, refusing)
    assert total > 10
    for n in range(1, total + 1):
        async with FakeApiServer() as api:
            setup(api, refusing=refusing)
            clock, sleep = fake_time()
            dying = client(api, _dir(tmp_path, f"dying-{n}"))
            try:
                with pytest.raises(Killed):
                    await run(context(Cut(dying, after=n), clock, sleep), DECISION)
            finally:
                dying.close()
            # A restarted controller: a new client, a new executor, the same cluster.
            fresh = client(api, _dir(tmp_path, f"fresh-{n}"))
            try:
                executor = Executor(context(fresh, clock, sleep))
                await executor.resume(rules=() if rule_deleted else None)
                await executor.wait(timeout=30)
                outcomes = [r.outcome for r in executor.history]
            finally:
                fresh.close()
            where = f"killed after call {n} of {total}; resumed: {[o.message for o in outcomes]}"
            found = copies(api)
            assert len(found) == 1, where
            assert_one_copy_with_the_spec(api)
            assert records(api) == {}, where
            assert all(o.status != "failed" for o in outcomes), where
            kind = "original" if refusing else "replacement"
            name = found[0]["metadata"]["name"]
            if refusing or entry(api, "n1") == {}:
                # Refused (or killed before the entry was written): the original runs.
                assert name == "solo", (where, kind)
            elif not rule_deleted:
                assert name.startswith("solo-m"), (where, kind)
            elif name == "solo":
                # Abandoned before its eviction: it stays, and nothing new starts.
                assert evictions(api, "solo") == 0, where


async def test_a_dry_run_shows_the_eviction_then_the_create_and_changes_nothing(
    api: FakeApiServer, kube: ClientKube
) -> None:
    setup(api, refusing=False)
    dry = DryRunKube(kube)
    clock, sleep = fake_time()
    c = context(dry, clock, sleep)
    c.dry_run = True
    outcome = await run(c, DECISION)
    assert outcome.status == "done", outcome.message
    writes = [
        (method, args.get("name") or args.get("body", {}).get("metadata", {}).get("name", ""))
        for method, args in dry.writes
        if method in ("evict_pod", "create_pod")
    ]
    assert next(w for w in writes if "solo" in w[1]) == ("evict_pod", "solo")
    assert [w[0] for w in writes if w[1].startswith("solo-m")] == ["create_pod"]
    assert [p["metadata"]["name"] for p in copies(api)] == ["solo"]
    assert records(api) == {}
    assert api.requests_for("PATCH", r"/nodes/n1$") == []


async def test_the_replacement_waits_until_the_original_has_terminated(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """An evicted original whose containers are still stopping (deletionTimestamp
    set, its kubelet slow or gone) is not yet gone: no replacement while it is
    there. The entry stays in flight, and the run that finds it gone creates it."""
    setup(api, refusing=False)
    stopping = api.get("pods", "ml", "solo")
    assert stopping is not None
    record = Record(
        stopping["metadata"]["uid"], "fatal", replacement_name(stopping), sanitised(stopping)
    )
    stopping["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    stopping["spec"]["terminationGracePeriodSeconds"] = 5
    api.add(stopping)
    n1 = api.get("nodes", None, "n1")
    assert n1 is not None
    n1["metadata"]["annotations"] = {BARE_PODS_ANNOTATION: json.dumps({ORIGINAL: record.as_json()})}
    api.add(n1)
    clock, sleep = fake_time()
    c = context(kube, clock, sleep)
    outcome = await run(c, DECISION)
    assert outcome.status == "partial", outcome.message
    assert "still terminating" in outcome.message
    assert [p["metadata"]["name"] for p in copies(api)] == ["solo"]
    assert api.requests_for("POST", r"/namespaces/ml/pods$") == []
    assert list(records(api)) == [ORIGINAL]
    assert entry(api, "n1")["fatal"]["phase"] == "migrating"

    # The kubelet finishes; a restarted controller resumes the entry.
    api.remove("pods", "ml", "solo")
    executor = Executor(c)
    assert await executor.resume() == 1
    await executor.wait(timeout=30)
    assert [p["metadata"]["name"] for p in copies(api)] == [record.replacement]
    assert records(api) == {}
    assert entry(api, "n1")["fatal"]["phase"] == "migrated"
