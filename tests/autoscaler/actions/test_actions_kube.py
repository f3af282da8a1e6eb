"""The actions against the fake API server, through the real ``kubernetes`` client:
a fatal fault moves each kind of pod its own way, a cordon someone else made is never
lifted, API errors in bursts are retried without doing anything twice, requeues stop
at their limit, and rebalance neither forces a move nor ping-pongs. (Resuming after a
``kill -9``, through the controller process, is in test_controller_kube.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import ANNOTATION, REQUEUES
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.types import QueryResult, Sample, Unknown, Vector, labels_of
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import events, evictions, job, node, pdb, pod
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)


def decide(
    action: str,
    target: dict[str, str],
    rule: str = "r",
    kind: str = "act",
    **raw: Any,
) -> Decision:
    params, problems = ACTIONS[action].validate(raw)
    assert not problems, problems
    return Decision(
        rule=rule,
        kind=kind,  # type: ignore[arg-type]
        action=action,
        params=params,
        target=target,
        sample_labels=(),
        sample_value=1.0,
        at=0.0,
    )


def ctx(kube: Any, **kw: Any) -> ActionContext:
    kw.setdefault("retry_interval", 0.05)
    kw.setdefault("replica", "test-replica")
    return ActionContext(kube=kube, **kw)


async def run(c: ActionContext, d: Decision) -> Outcome:
    execute = ACTIONS[d.action].execute
    assert execute is not None
    return await execute(c, d)


def entry(api: FakeApiServer, name: str) -> dict[str, Any]:
    n = api.get("nodes", None, name)
    assert n is not None
    raw = (n["metadata"].get("annotations") or {}).get(ANNOTATION)
    return dict(json.loads(raw)) if raw else {}


def taints(api: FakeApiServer, name: str) -> list[tuple[str, str]]:
    n = api.get("nodes", None, name)
    assert n is not None
    return [(t["key"], t["effect"]) for t in n["spec"].get("taints") or []]


# -- a fatal fault on a node with four kinds of pods ---------------------------------


async def test_fatal_fault_moves_each_kind_of_pod_the_right_way(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(node("n2"))
    api.add(pod("train-0", "n1", owner="Job"))
    api.add(pod("scratch", "n1", owner=None, labels={"app": "scratch"}))
    api.add(pod("dcgm", "n1", owner="DaemonSet"))
    api.add(pod("serve-0", "n1", owner="ReplicaSet", labels={"app": "serve"}))
    api.add(pdb("serve", {"app": "serve"}, min_available=1))
    d = decide(
        "migrate_jobs",
        {"node": "n1", "device": "nvidia0"},
        rule="fatal-device-fault",
        drainTimeout="1m",
    )
    task = asyncio.create_task(run(ctx(kube), d))

    # The taint goes on; the Job pod is evicted; the bare pod is recreated elsewhere.
    await until(lambda: api.get("pods", "ml", "train-0") is None)
    await until(lambda: api.get("pods", "ml", "scratch") is None)
    assert ("accel-fleet.io/faulty", "NoSchedule") in taints(api, "n1")
    replacements = [p for p in api.objects("pods") if p["metadata"]["name"].startswith("scratch-m")]
    assert len(replacements) == 1
    spec = replacements[0]["spec"]
    assert "nodeName" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
    ]
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert replacements[0]["metadata"]["labels"] == {"app": "scratch"}

    # The DaemonSet pod stays; the PDB pod waits while its budget refuses: the
    # action asks again and is refused again (the event, rather than a fixed sleep).
    def refused() -> list[object]:
        posts = api.requests_for("POST", r"/pods/serve-0/eviction$")
        return [r for r in posts if r.status == 429]

    await until(lambda: len(refused()) >= 2, what="two refused evictions of serve-0")
    assert api.get("pods", "ml", "dcgm") is not None
    assert api.get("pods", "ml", "serve-0") is not None
    assert not task.done()
    assert entry(api, "n1")["fatal-device-fault"]["phase"] == "migrating"

    # A second replica becomes ready elsewhere: the budget allows one disruption.
    api.add(pod("serve-1", "n2", owner="ReplicaSet", labels={"app": "serve"}))
    outcome = await asyncio.wait_for(task, 10)
    assert outcome.status == "done", outcome.message
    assert api.get("pods", "ml", "serve-0") is None
    assert api.get("pods", "ml", "dcgm") is not None

    # Ownership is on the node; Events were written.
    e = entry(api, "n1")["fatal-device-fault"]
    assert e["controller"] == "accel-autoscaler"
    assert e["replica"] == "test-replica"
    assert e["action"] == "migrate_jobs"
    assert e["phase"] == "migrated"
    assert e["taint"] == "accel-fleet.io/faulty=true:NoSchedule"
    assert e["cordoned"] is False
    reasons = {ev["reason"] for ev in events(api)}
    assert {"MigrationStarted", "Evicted", "Recreated", "Migrated"} <= reasons
    evicted = {ev["involvedObject"]["name"] for ev in events(api, "Evicted")}
    assert evicted == {"train-0", "scratch", "serve-0"}
    for name in ("train-0", "scratch", "serve-0"):
        assert evictions(api, name) == 1

    # Recover removes the taint it added, and the entry.
    undo = await run(
        ctx(kube), decide("migrate_jobs", {"node": "n1"}, "fatal-device-fault", "recover")
    )
    assert undo.status == "done"
    assert taints(api, "n1") == []
    assert entry(api, "n1") == {}


async def test_device_only_moves_the_pods_holding_the_device(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(pod("a", "n1"))
    api.add(pod("b", "n1"))

    async def query(expr: str, at: float) -> QueryResult:
        assert 'device="nvidia3"' in expr and 'node="n1"' in expr
        labels = {"namespace": "ml", "pod": "b", "node": "n1", "device": "nvidia3"}
        return Vector((Sample(labels_of(labels), 1.0, at),))

    d = decide("migrate_jobs", {"node": "n1", "device": "nvidia3"}, deviceOnly=True)
    outcome = await run(ctx(kube, query=query), d)
    assert outcome.status == "done", outcome.message
    assert api.get("pods", "ml", "a") is not None
    assert api.get("pods", "ml", "b") is None


async def test_drain_skips_daemonset_and_mirror_pods_and_honours_the_selector(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(pod("keep-ds", "n1", owner="DaemonSet", gpus=0))
    mirror = pod("kube-proxy", "n1", owner=None, gpus=0)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    api.add(mirror)
    api.add(pod("infra", "n1", owner="ReplicaSet", gpus=0, labels={"tier": "infra"}))
    api.add(pod("work", "n1", owner="ReplicaSet", gpus=0, labels={"tier": "batch"}))
    d = decide("drain", {"node": "n1"}, podSelector="tier!=infra")
    outcome = await run(ctx(kube), d)
    assert outcome.status == "done", outcome.message
    left = {p["metadata"]["name"] for p in api.objects("pods")}
    assert left == {"keep-ds", "kube-proxy", "infra"}
    n = api.get("nodes", None, "n1")
    assert n is not None and n["spec"]["unschedulable"] is True
    assert entry(api, "n1")["r"]["phase"] == "drained"
    assert entry(api, "n1")["r"]["cordoned"] is True


async def test_drain_gives_up_at_the_timeout_and_force_deletes_only_when_allowed(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(node("n2"))
    api.add(pod("guarded", "n1", owner="ReplicaSet", labels={"app": "g"}))
    api.add(pdb("g", {"app": "g"}, min_available=1))
    outcome = await run(ctx(kube), decide("drain", {"node": "n1"}, drainTimeout="1s"))
    assert outcome.status == "partial"
    assert "still refused" in outcome.message
    assert api.get("pods", "ml", "guarded") is not None
    assert entry(api, "n1")["r"]["phase"] == "drain-incomplete"
    assert events(api, "DrainIncomplete")

    # Run again (a restart resuming it): the deadline stays the first one, already past.
    outcome = await run(ctx(kube), decide("drain", {"node": "n1"}, drainTimeout="1s"))
    assert outcome.status == "partial"
    assert "timeout passed first" in outcome.message
    assert api.get("pods", "ml", "guarded") is not None

    forced = decide(
        "drain", {"node": "n1"}, rule="forced", drainTimeout="1s", forceDeleteAfterTimeout=True
    )
    outcome = await run(ctx(kube), forced)
    assert outcome.status == "done", outcome.message
    assert api.get("pods", "ml", "guarded") is None
    assert events(api, "ForceDeleted")


# -- never uncordon a node someone else cordoned --------------------------------------


async def test_recover_never_uncordons_a_node_someone_else_cordoned(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cordoned = node("n1")
    cordoned["spec"] = {"unschedulable": True}
    api.add(cordoned)
    c = ctx(kube)
    outcome = await run(c, decide("cordon", {"node": "n1"}, rule="storm"))
    assert outcome.status == "done"
    assert entry(api, "n1")["storm"]["cordoned"] is False

    outcome = await run(c, decide("cordon", {"node": "n1"}, rule="storm", kind="recover"))
    assert outcome.status == "done"
    n = api.get("nodes", None, "n1")
    assert n is not None and n["spec"]["unschedulable"] is True
    assert entry(api, "n1") == {}

    # The explicit uncordon action refuses too, and says so in an Event.
    outcome = await run(c, decide("uncordon", {"node": "n1"}, rule="undo"))
    assert outcome.status == "skipped"
    n = api.get("nodes", None, "n1")
    assert n is not None and n["spec"]["unschedulable"] is True
    refused = events(api, "UncordonRefused")
    assert refused and refused[0]["type"] == "Warning"
    # No request ever set unschedulable to false.
    for r in api.requests_for("PATCH", r"/nodes/n1$"):
        assert (r.body or {}).get("spec", {}).get("unschedulable") is not False


async def test_one_rules_recovery_keeps_the_cordon_another_rule_needs(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    c = ctx(kube)
    assert (await run(c, decide("cordon", {"node": "n1"}, rule="a"))).status == "done"
    assert (await run(c, decide("cordon", {"node": "n1"}, rule="b"))).status == "done"
    await run(c, decide("cordon", {"node": "n1"}, rule="a", kind="recover"))
    n = api.get("nodes", None, "n1")
    assert n is not None and n["spec"]["unschedulable"] is True
    assert entry(api, "n1")["b"]["cordoned"] is True  # handed over
    await run(c, decide("cordon", {"node": "n1"}, rule="b", kind="recover"))
    n = api.get("nodes", None, "n1")
    assert n is not None and not n["spec"].get("unschedulable")


async def test_another_controllers_entry_is_not_ours(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("n1"))
    await run(ctx(kube, controller="other"), decide("cordon", {"node": "n1"}, rule="a"))
    outcome = await run(ctx(kube), decide("uncordon", {"node": "n1"}, rule="u"))
    assert outcome.status == "skipped"
    n = api.get("nodes", None, "n1")
    assert n is not None and n["spec"]["unschedulable"] is True


# -- 500s and 429s in bursts ----------------------------------------------------------


async def test_api_errors_in_bursts_are_retried_and_nothing_is_done_twice(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(pod("train-0", "n1"))
    api.add(pod("solo", "n1", owner=None))
    api.faults.fail(3, status=500)
    api.faults.fail(2, status=429, method="PATCH")
    api.faults.fail(2, status=500, method="POST", path_regex=r"/pods$")
    api.faults.drop(1, method="GET")
    d = decide("migrate_jobs", {"node": "n1"}, rule="fatal")
    outcome = await run(ctx(kube), d)
    assert outcome.status == "done", outcome.message
    assert api.faults.pending() == 0
    assert taints(api, "n1") == [("accel-fleet.io/faulty", "NoSchedule")]
    assert evictions(api, "train-0") == 1
    assert evictions(api, "solo") == 1
    created = [r for r in api.requests_for("POST", r"/namespaces/ml/pods$") if r.status == 201]
    assert len(created) == 1
    assert len([p for p in api.objects("pods") if p["metadata"]["name"].startswith("solo-m")]) == 1


# -- requeue at most maxRequeues times -------------------------------------------------


async def test_timed_out_job_is_requeued_at_most_max_requeues_times(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(job("train"))
    c = ctx(kube)
    outcomes = []
    for attempt in range(4):
        name = f"train-{attempt}"
        api.add(pod(name, "n1", owner="Job", owner_name="train"))
        d = decide(
            "requeue_job",
            {"namespace": "ml", "pod": name},
            rule="job-timeout",
            maxRequeues=2,
            backoff="0s",
        )
        outcomes.append(await run(c, d))
    assert [o.status for o in outcomes] == ["done", "done", "skipped", "skipped"]
    assert api.get("pods", "ml", "train-0") is None
    assert api.get("pods", "ml", "train-1") is None
    assert api.get("pods", "ml", "train-2") is not None
    stored = api.get("jobs", "ml", "train")
    assert stored is not None
    assert json.loads(stored["metadata"]["annotations"][REQUEUES])["count"] == 2
    limit = events(api, "RequeueLimitReached")
    assert len(limit) == 2 and limit[0]["involvedObject"]["kind"] == "Job"
    assert len(events(api, "Requeued")) == 2

    # A retried requeue of the same pod (a restart in between) is not counted twice.
    api.add(job("again"))
    api.add(pod("again-0", "n1", owner="Job", owner_name="again"))
    api.faults.drop(1, method="DELETE")
    d = decide("requeue_job", {"namespace": "ml", "pod": "again-0"}, maxRequeues=1, backoff="0s")
    assert (await run(c, d)).status == "done"
    stored = api.get("jobs", "ml", "again")
    assert stored is not None
    assert json.loads(stored["metadata"]["annotations"][REQUEUES])["count"] == 1


async def test_requeue_leaves_pods_without_a_job_alone(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("n1"))
    api.add(pod("web-0", "n1", owner="ReplicaSet"))
    outcome = await run(ctx(kube), decide("requeue_job", {"namespace": "ml", "pod": "web-0"}))
    assert outcome.status == "skipped"
    assert api.get("pods", "ml", "web-0") is not None
    assert events(api, "RequeueSkipped")


async def test_requeue_by_suspending_the_job(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("n1"))
    api.add(job("sus"))
    api.add(pod("sus-0", "n1", owner="Job", owner_name="sus"))
    d = decide("requeue_job", {"namespace": "ml", "pod": "sus-0"}, via="suspend", backoff="0s")
    outcome = await run(ctx(kube), d)
    assert outcome.status == "done", outcome.message
    patches = [r.body for r in api.requests_for("PATCH", r"/jobs/sus$")]
    suspends = [b["spec"]["suspend"] for b in patches if "spec" in (b or {})]
    assert suspends == [True, False]


# -- rebalance ------------------------------------------------------------------------


def loads(values: dict[str, float]) -> Any:
    async def query(expr: str, at: float) -> QueryResult:
        return Vector(tuple(Sample(labels_of({"node": n}), v, at) for n, v in values.items()))

    return query


async def test_rebalance_does_nothing_when_no_node_fits(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("hot", gpus=2))
    api.add(node("cool", gpus=2))
    api.add(pod("a", "hot", owner="ReplicaSet", gpus=2))
    api.add(pod("b", "cool", owner="ReplicaSet", gpus=1))  # one free device: too few
    c = ctx(kube, query=loads({"hot": 0.95, "cool": 0.1}))
    outcome = await run(c, decide("rebalance", {"node": "hot"}, minUtilizationGap=0.3))
    assert outcome.status == "skipped"
    assert "no node fits" in outcome.message
    assert not api.requests_for("POST", r"/eviction$")

    # Unknown load is no move either.
    async def unknown(expr: str, at: float) -> QueryResult:
        return Unknown("source down")

    outcome = await run(ctx(kube, query=unknown), decide("rebalance", {"node": "hot"}))
    assert outcome.status == "skipped" and "unknown" in outcome.message


async def test_rebalance_never_ping_pongs_under_alternating_load(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("a", gpus=8))
    api.add(node("b", gpus=8))
    api.add(
        pod(
            "keep",
            "a",
            owner="ReplicaSet",
            gpus=4,
            annotations={"accel-fleet.io/no-rebalance": "true"},
        )
    )
    api.add(pod("m1", "a", owner="ReplicaSet", gpus=2))
    api.add(pod("m2", "b", owner="ReplicaSet", gpus=2))
    now = [1_800_000_000.0]
    moved: list[str] = []
    for cycle in range(10):
        hot, cool = ("a", "b") if cycle % 2 == 0 else ("b", "a")
        c = ctx(kube, query=loads({hot: 0.95, cool: 0.2}), clock=lambda: now[0])
        outcome = await run(c, decide("rebalance", {"node": hot}, minUtilizationGap=0.3))
        for key in outcome.details.get("moved", []):
            moved.append(key)
            # The owner recreates the pod, and the scheduler puts it on the cool node.
            name = key.split("/")[1]
            api.add(pod(f"{name}x", cool, owner="ReplicaSet", gpus=2))
        now[0] += 60
    # One move, on the first cycle; the cooldown and the hysteresis stop the way back.
    assert moved == ["ml/m1"], moved
    assert api.get("pods", "ml", "keep") is not None  # no-rebalance is never moved
    assert all("keep" not in m for m in moved)
