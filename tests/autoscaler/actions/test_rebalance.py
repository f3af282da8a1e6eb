"""``rebalance`` on its own, through the real ``kubernetes`` client against the fake
API server: which pods move and where, the limits per evaluation, and the hysteresis
that keeps pods from ping-ponging between two nodes.

Table-driven (descheduler's habit): each case is a description, the nodes and pods,
the load the controller's source reports, the parameters, and the moves expected.
The hot node is always ``hot``; loads are average device utilization (0-1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from accel_common.names import NO_REBALANCE_ANNOTATION as NO_REBALANCE
from accel_common.names import REBALANCED_ANNOTATION as REBALANCED
from autoscaler.actions import rebalance
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import iso, parse_iso
from autoscaler.decision import Decision
from autoscaler.kube.client import ClientKube
from autoscaler.types import QueryResult, Sample, Unknown, Vector, labels_of
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import Obj, events, evictions, pdb
from tests.support.kubeobjs import node as base_node
from tests.support.kubeobjs import pod as base_pod

pytestmark = pytest.mark.timeout(60)

NOW = parse_iso("2026-11-29T12:00:00Z")
OLD, MID, YOUNG = "2026-11-29T08:00:00Z", "2026-11-29T09:00:00Z", "2026-11-29T10:00:00Z"


def node(
    name: str,
    gpus: int = 8,
    *,
    resource: str = "nvidia.com/gpu",
    cordoned: bool = False,
    taint: str | None = None,
    stamp: str | None = None,
) -> Obj:
    n = base_node(name, gpus, resource)
    if cordoned:
        n["spec"]["unschedulable"] = True
    if taint is not None:
        n["spec"]["taints"] = [{"key": "example.com/t", "value": "x", "effect": taint}]
    if stamp is not None:
        n["metadata"]["annotations"] = {REBALANCED: stamp}
    return n


def pod(
    name: str,
    node_name: str = "hot",
    gpus: int = 1,
    *,
    owner: str | None = "ReplicaSet",
    start: str = MID,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = None,
    terminating: bool = False,
) -> Obj:
    p = base_pod(
        name,
        node_name,
        owner=owner,
        gpus=gpus,
        start=start,
        labels=labels,
        annotations=annotations,
    )
    if phase is not None:
        p["status"]["phase"] = phase
    if terminating:
        p["metadata"]["deletionTimestamp"] = "2026-11-29T11:59:00Z"
        p["metadata"]["deletionGracePeriodSeconds"] = 30
    return p


def loads(values: dict[str, float]) -> Any:
    async def query(expr: str, at: float) -> QueryResult:
        assert expr == rebalance.LOAD_QUERY
        return Vector(tuple(Sample(labels_of({"node": n}), v, at) for n, v in values.items()))

    return query


def decide(hot: str = "hot", kind: str = "act", **raw: Any) -> Decision:
    params, problems = rebalance.validate(raw)
    assert not problems, problems
    return Decision(
        rule="hot-node",
        kind=kind,  # type: ignore[arg-type]
        action=rebalance.NAME,
        params=params,
        target={"node": hot},
        sample_labels=(),
        sample_value=0.95,
        at=0.0,
    )


def ctx(kube: Any, query: Any, now: float = NOW) -> ActionContext:
    return ActionContext(kube=kube, replica="test-replica", clock=lambda: now, query=query)


async def run(c: ActionContext, d: Decision) -> Outcome:
    return await rebalance.execute(c, d)


def stamp_of(api: FakeApiServer, name: str) -> str | None:
    n = api.get("nodes", None, name)
    assert n is not None
    return (n["metadata"].get("annotations") or {}).get(REBALANCED)


# -- which pods move, and where ---------------------------------------------------------


@dataclass(frozen=True)
class Case:
    description: str
    nodes: tuple[Obj, ...]
    pods: tuple[Obj, ...]
    load: dict[str, float]
    moved: tuple[str, ...]
    # Where each moved pod went, in order (read from the Rebalanced Event on the pod).
    to: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=lambda: {"minUtilizationGap": 0.3})
    words: str = ""
    extra: tuple[Obj, ...] = ()


CASES = [
    Case(
        "the youngest movable pod goes first, one per evaluation by default",
        (node("hot"), node("cool")),
        (pod("old", start=OLD), pod("young", start=YOUNG), pod("mid", start=MID)),
        {"hot": 0.9, "cool": 0.1},
        moved=("ml/young",),
        to=("cool",),
    ),
    Case(
        "maxMovesPerCycle bounds the moves of one evaluation",
        (node("hot"), node("cool-a"), node("cool-b"), node("cool-c")),
        (pod("p1", start=OLD), pod("p2", start=MID), pod("p3", start=YOUNG)),
        {"hot": 0.9, "cool-a": 0.0, "cool-b": 0.05, "cool-c": 0.1},
        params={"minUtilizationGap": 0.3, "maxMovesPerCycle": 2},
        moved=("ml/p3", "ml/p2"),
        to=("cool-a", "cool-b"),
    ),
    Case(
        "each move lowers the hot node's estimated load: the next needs the gap against it",
        (node("hot"), node("cool-a"), node("cool-b")),
        (pod("p1", start=OLD), pod("p2", start=YOUNG)),
        # After one 1-of-8-device move, hot is estimated at 0.7875: cool-b is no longer
        # 0.3 cooler, though it was before.
        {"hot": 0.9, "cool-a": 0.0, "cool-b": 0.55},
        params={"minUtilizationGap": 0.3, "maxMovesPerCycle": 2},
        moved=("ml/p2",),
        to=("cool-a",),
        words="moved 1 pod(s) off hot",
    ),
    Case(
        "a destination receives one pod per evaluation: it is in its nodeCooldown after",
        (node("hot"), node("cool")),
        (pod("p1", start=OLD), pod("p2", start=YOUNG)),
        {"hot": 0.9, "cool": 0.0},
        params={"minUtilizationGap": 0.3, "maxMovesPerCycle": 5},
        moved=("ml/p2",),
        to=("cool",),
    ),
    Case(
        "the coolest node that fits is the destination, by name on a tie",
        (node("hot"), node("warm"), node("cool-b"), node("cool-a")),
        (pod("p"),),
        {"hot": 0.9, "warm": 0.3, "cool-b": 0.1, "cool-a": 0.1},
        moved=("ml/p",),
        to=("cool-a",),
    ),
    Case(
        "a destination must be at least minUtilizationGap cooler",
        (node("hot"), node("cool")),
        (pod("p"),),
        {"hot": 0.5, "cool": 0.25},
        moved=(),
        words="no node fits it with a load 0.3 lower",
    ),
    Case(
        "a move that would only swap which node is hot is not made",
        (node("hot", 2), node("cool", 2)),
        (pod("big", gpus=2),),
        {"hot": 0.9, "cool": 0.1},
        moved=(),
        words="no node fits",
    ),
    Case(
        "the same pod moves to a node large enough to absorb its load",
        (node("hot", 2), node("cool", 2), node("large", 16)),
        (pod("big", gpus=2),),
        {"hot": 0.9, "cool": 0.1, "large": 0.1},
        moved=("ml/big",),
        to=("large",),
    ),
    Case(
        "a destination needs enough free devices for the pod",
        (node("hot"), node("cool", 2)),
        (pod("p", gpus=2),),
        {"hot": 0.9, "cool": 0.0},
        moved=(),
        words="no node fits",
        extra=(pod("there", "cool", gpus=1),),
    ),
    Case(
        "finished and terminating pods hold no devices on a destination",
        (node("hot"), node("cool", 2)),
        (pod("p", gpus=2),),
        {"hot": 0.9, "cool": 0.0},
        moved=("ml/p",),
        to=("cool",),
        extra=(
            pod("done", "cool", gpus=2, phase="Succeeded"),
            pod("going", "cool", gpus=2, terminating=True),
        ),
    ),
    Case(
        "a destination needs devices of the pod's kind",
        (node("hot"), node("amd", resource="amd.com/gpu")),
        (pod("p"),),
        {"hot": 0.9, "amd": 0.0},
        moved=(),
        words="no node fits",
    ),
    Case(
        "cordoned and NoSchedule/NoExecute-tainted nodes are no destination",
        (
            node("hot"),
            node("cordoned", cordoned=True),
            node("noschedule", taint="NoSchedule"),
            node("noexecute", taint="NoExecute"),
            node("prefer", taint="PreferNoSchedule"),
        ),
        (pod("p"),),
        {"hot": 0.9, "cordoned": 0.0, "noschedule": 0.0, "noexecute": 0.0, "prefer": 0.1},
        moved=("ml/p",),
        to=("prefer",),
    ),
    Case(
        "a node that gave or received a pod within nodeCooldown is no destination",
        (
            node("hot"),
            node("recent", stamp=iso(NOW - 600)),
            node("long-ago", stamp=iso(NOW - 3600)),
        ),
        (pod("p"),),
        {"hot": 0.9, "recent": 0.0, "long-ago": 0.1},
        params={"minUtilizationGap": 0.3, "nodeCooldown": "30m"},
        moved=("ml/p",),
        to=("long-ago",),
    ),
    Case(
        # Unknown is not "never rebalanced" (issue 27): unreadable holds it back.
        "an unreadable rebalance stamp holds a node back",
        (node("hot"), node("cool", stamp="yesterday")),
        (pod("p"),),
        {"hot": 0.9, "cool": 0.0},
        moved=(),
    ),
    Case(
        "a hot node within its nodeCooldown moves nothing",
        (node("hot", stamp=iso(NOW - 60)), node("cool")),
        (pod("p"),),
        {"hot": 0.9, "cool": 0.0},
        moved=(),
        words="within nodeCooldown",
    ),
    Case(
        "pods that nothing would recreate, or that must stay, are never moved",
        (node("hot"), node("cool")),
        (
            pod("daemon", owner="DaemonSet", start=YOUNG),
            pod("bare", owner=None, start=YOUNG),
            pod("cpu-only", gpus=0, start=YOUNG),
            pod("pinned", annotations={NO_REBALANCE: "true"}, start=YOUNG),
            pod("pinned-yes", annotations={NO_REBALANCE: "yes"}, start=YOUNG),
            pod("finished", phase="Succeeded", start=YOUNG),
            pod("leaving", terminating=True, start=YOUNG),
        ),
        {"hot": 0.9, "cool": 0.0},
        moved=(),
        words="has no movable pod",
    ),
    Case(
        'no-rebalance: "false" leaves a pod movable; a Job\'s pod is movable',
        (node("hot"), node("cool-a"), node("cool-b")),
        (
            pod("unpinned", annotations={NO_REBALANCE: "false"}, start=YOUNG),
            pod("job-0", owner="Job", start=OLD),
        ),
        {"hot": 0.9, "cool-a": 0.0, "cool-b": 0.0},
        params={"minUtilizationGap": 0.3, "maxMovesPerCycle": 2},
        moved=("ml/unpinned", "ml/job-0"),
        to=("cool-a", "cool-b"),
    ),
    Case(
        "a pod its PodDisruptionBudget protects is skipped this evaluation; the next moves",
        (node("hot"), node("cool")),
        (pod("guarded", labels={"app": "g"}, start=YOUNG), pod("free", start=OLD)),
        {"hot": 0.9, "cool": 0.0},
        moved=("ml/free",),
        to=("cool",),
        extra=(pdb("g", {"app": "g"}, min_available=1),),
    ),
    Case(
        "a refusal of every pod is reported",
        (node("hot"), node("cool")),
        (pod("guarded", labels={"app": "g"}),),
        {"hot": 0.9, "cool": 0.0},
        moved=(),
        words="ml/guarded",
        extra=(pdb("g", {"app": "g"}, min_available=1),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.description for c in CASES])
async def test_moves(api: FakeApiServer, kube: ClientKube, case: Case) -> None:
    for obj in (*case.nodes, *case.pods, *case.extra):
        api.add(obj)
    outcome = await run(ctx(kube, loads(case.load)), decide(**case.params))
    moved = tuple(outcome.details.get("moved", ()))
    assert moved == case.moved, outcome.message
    assert outcome.status == ("done" if case.moved else "skipped"), outcome.message
    assert case.words in outcome.message

    # Moved means evicted through the Eviction API, once; nothing else was touched.
    evicted = {f"{ns}/{name}" for ns, name in api.evicted}
    assert evicted == set(case.moved)
    for key in case.moved:
        assert evictions(api, key.split("/")[1]) == 1
    for p in case.pods:
        name = p["metadata"]["name"]
        assert (api.get("pods", "ml", name) is None) == (f"ml/{name}" in case.moved)

    # Each move leaves an Event on the pod naming its destination, and one on the node.
    on_pods = [e for e in events(api, "Rebalanced") if e["involvedObject"]["kind"] == "Pod"]
    on_node = [e for e in events(api, "Rebalanced") if e["involvedObject"]["kind"] == "Node"]
    to = {
        f"ml/{e['involvedObject']['name']}": e["message"].split("room on ")[1].split(" ")[0]
        for e in on_pods
    }
    assert to == dict(zip(case.moved, case.to, strict=True))
    assert len(on_pods) == len(on_node) == len(case.moved)
    assert all(e["involvedObject"]["name"] == "hot" for e in on_node)
    assert all(e["action"] == "Evict" for e in on_pods)

    # Both ends of a move are stamped now; no other node's stamp changed.
    ends = {"hot", *case.to} if case.moved else set()
    for n in case.nodes:
        name = n["metadata"]["name"]
        before = (n["metadata"].get("annotations") or {}).get(REBALANCED)
        assert stamp_of(api, name) == (iso(NOW) if name in ends else before), name


# -- unknown load means no move ---------------------------------------------------------


async def _unknown(expr: str, at: float) -> QueryResult:
    return Unknown("prometheus: connection refused")


async def _empty(expr: str, at: float) -> QueryResult:
    return Vector(())


@pytest.mark.parametrize(
    ("query", "hot", "words"),
    [
        (None, "hot", "no metrics source"),
        (_unknown, "hot", "node load unknown (prometheus: connection refused)"),
        (_empty, "hot", "no node has load data"),
        (loads({"cool": 0.0}), "hot", "node hot has no load data"),
        (loads({"hot": 0.9, "gone": 0.0, "cool": 0.0}), "gone", "node gone is gone"),
    ],
    ids=[
        "no source",
        "an unknown result",
        "an empty result",
        "no load for the hot node",
        "a hot node that left the cluster",
    ],
)
async def test_unknown_load_moves_nothing(
    api: FakeApiServer, kube: ClientKube, query: Any, hot: str, words: str
) -> None:
    api.add(node("hot"))
    api.add(node("cool"))
    api.add(pod("p"))
    outcome = await run(ctx(kube, query), decide(hot, minUtilizationGap=0.3))
    assert outcome.status == "skipped"
    assert words in outcome.message
    assert not api.requests_for("POST", r"/eviction$")
    assert not api.requests_for("PATCH", r"/nodes/")


async def test_recover_has_nothing_to_undo(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(node("hot"))
    api.add(node("cool"))
    api.add(pod("p"))
    outcome = await run(ctx(kube, loads({"hot": 0.9, "cool": 0.0})), decide(kind="recover"))
    assert outcome.status == "skipped"
    assert "nothing to undo" in outcome.message
    assert not api.requests


# -- bounded reads ----------------------------------------------------------------------


@pytest.mark.unvalidated_api
async def test_only_the_sixteen_coolest_nodes_are_weighed(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(node("hot"))
    load = {"hot": 0.9}
    for i in range(30):
        api.add(node(f"n{i:02d}"))
        load[f"n{i:02d}"] = 0.01 * i
    api.add(pod("p"))
    outcome = await run(ctx(kube, loads(load)), decide(minUtilizationGap=0.3))
    assert outcome.status == "done", outcome.message
    read = [r.path.rsplit("/", 1)[1] for r in api.requests_for("GET", r"/api/v1/nodes/[^/]+$")]
    assert read == ["hot", *(f"n{i:02d}" for i in range(16))]
    listed = api.requests_for("GET", r"/api/v1/pods$")
    assert len(listed) == 1 + 16
    assert all("spec.nodeName=" in r.query.get("fieldSelector", "") for r in listed)


# -- no ping-pong -----------------------------------------------------------------------


async def test_alternating_load_moves_a_pod_once(api: FakeApiServer, kube: ClientKube) -> None:
    """Two nodes take turns at being hot, every minute: nodeCooldown, stamped on both
    ends of the first move, keeps either from giving or taking a pod again."""
    api.add(node("a", 4))
    api.add(node("b", 4))
    api.add(pod("m1", "a", gpus=1, start=YOUNG))
    api.add(pod("m2", "b", gpus=1, start=YOUNG))
    now = NOW
    got: list[str] = []
    for cycle in range(10):
        hot, cool = ("a", "b") if cycle % 2 == 0 else ("b", "a")
        c = ctx(kube, loads({hot: 0.9, cool: 0.2}), now=now)
        outcome = await run(c, decide(hot, minUtilizationGap=0.3, nodeCooldown="30m"))
        for key in outcome.details.get("moved", []):
            got.append(f"{key}: {hot}->{cool}")
            # The owner recreates the pod, and the scheduler puts it on the cool node.
            api.add(pod(key.split("/")[1] + "x", cool, gpus=1))
        now += 60
    assert got == ["ml/m1: a->b"]
    assert stamp_of(api, "a") == stamp_of(api, "b") == iso(NOW)


async def test_a_move_that_would_invite_the_reverse_move_is_not_made(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """Without nodeCooldown, the estimate alone: moving the 2-device pod would leave the
    destination the hotter node by more than the gap, so the 1-device pod goes instead,
    and with the loads the move leads to, neither node then moves anything back."""
    api.add(node("a", 4))
    api.add(node("b", 4))
    api.add(pod("two", "a", gpus=2, start=YOUNG))
    api.add(pod("one", "a", gpus=1, start=OLD))
    c = ctx(kube, loads({"a": 0.9, "b": 0.5}))
    outcome = await run(c, decide("a", minUtilizationGap=0.3, nodeCooldown="0s"))
    assert outcome.details.get("moved") == ["ml/one"], outcome.message
    api.add(pod("one-x", "b", gpus=1))
    # The source loses a quarter of its load (0.9 -> 0.675), the destination gains it.
    later = ctx(kube, loads({"a": 0.675, "b": 0.725}), now=NOW + 60)
    for hot in ("a", "b"):
        again = await run(later, decide(hot, minUtilizationGap=0.3, nodeCooldown="0s"))
        assert again.status == "skipped", again.message
    assert api.evicted == [("ml", "one")]
