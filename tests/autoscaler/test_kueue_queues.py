"""The queue series (``autoscaler/queues.py``): read with the real client from the
fake API server, with Kueue emulated (``tests/support/fakes/kueueops.py``), and
from objects written by hand where a state must hold still (a Workload that Kueue
would admit at once, one waiting for admission checks)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml

from autoscaler import clusterstate as cs
from autoscaler import queues
from autoscaler.kube.client import ClientKube
from autoscaler.kube.kueue import KueueObjects
from autoscaler.pools.base import NodeShape, Pool
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Vector
from tests.autoscaler.pools.test_pools import NS, add_pool
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.kueueops import API, KueueOperators
from tests.support.paths import REPO

pytestmark = pytest.mark.timeout(60)
GPU = "nvidia.com/gpu"
QUEUE = "kueue.x-k8s.io/queue-name"
H100 = {"accel.example/gpu": "h100"}
A100 = {"accel.example/gpu": "a100"}

Obj = dict[str, Any]


def flavor(name: str, labels: dict[str, str]) -> Obj:
    return {
        "apiVersion": API,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels},
    }


def cluster_queue(name: str, quotas: dict[str, Any], cohort: str = "", **limits: Any) -> Obj:
    resources = ["cpu", GPU]
    spec: Obj = {
        "resourceGroups": [
            {
                "coveredResources": resources,
                "flavors": [
                    {
                        "name": f,
                        "resources": [
                            {"name": "cpu", "nominalQuota": "1000"},
                            {"name": GPU, "nominalQuota": str(n), **limits},
                        ],
                    }
                    for f, n in quotas.items()
                ],
            }
        ]
    }
    if cohort:
        spec["cohort"] = cohort
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cq: str, namespace: str = "ml") -> Obj:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def queued_job(name: str, queue: str, pods: int, gpus: int = 8) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {QUEUE: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "train:1",
                            "resources": {"limits": {GPU: str(gpus)}},
                        }
                    ],
                }
            },
        },
    }


def rows_of(rows: list[Any], metric: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(labels.get(k, "") for k in m.labels): value
        for m, labels, value in rows
        if m.name == metric
    }


def label_pool(api: FakeApiServer, pool: str, labels: dict[str, str]) -> None:
    for n in api.objects("nodes"):
        if n["metadata"]["name"].startswith(f"{pool}-"):
            n["metadata"]["labels"].update(labels)
            api.add(n)


def teams(api: FakeApiServer) -> None:
    """Two teams in one cohort: team-a 16 H100s (borrowing at most 8), team-b 16."""
    api.add(flavor("h100", H100))
    api.add(cluster_queue("team-a", {"h100": 16}, cohort="research", borrowingLimit="8"))
    api.add(cluster_queue("team-b", {"h100": 16}, cohort="research"))
    api.add(local_queue("a", "team-a"))
    api.add(local_queue("b", "team-b"))


async def test_queue_series_read_through_the_real_client(
    api: FakeApiServer, kube: ClientKube
) -> None:
    add_pool(api, "h100-pool", replicas=2, nodes=2, bounds=(1, 8))
    label_pool(api, "h100-pool", H100)
    teams(api)
    kueue = KueueOperators(api, clock=lambda: 1_800_000_000.0)
    for name, queue, pods in (("a1", "a", 2), ("a2", "a", 1), ("a3", "a", 1), ("b1", "b", 1)):
        api.add(queued_job(name, queue, pods))
        kueue.reconcile()
    # a1 fits team-a's 16; a2 borrows 8 from team-b; a3 is past the borrowing limit.
    assert kueue.admissions == [
        kueue.workload_of(api.get("jobs", "ml", n) or {})["metadata"]["name"]  # type: ignore[index]
        for n in ("a1", "a2", "b1")
    ]
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), 1_800_000_000.0)

    workloads = rows_of(rows, "accel_queue_workloads")
    assert workloads[("team-a", "h100", "admitted")] == 2
    assert workloads[("team-a", "h100", "pending")] == 1
    assert workloads[("team-a", "h100", "reserved")] == 0
    assert workloads[("team-b", "h100", "admitted")] == 1
    devices = rows_of(rows, "accel_queue_device_requests")
    assert devices[("team-a", "h100", GPU, "admitted")] == 24
    assert devices[("team-a", "h100", GPU, "pending")] == 8
    assert rows_of(rows, "accel_queue_nominal_quota") == {
        ("team-a", "h100", GPU): 16,
        ("team-b", "h100", GPU): 16,
    }  # CPU quotas are left out
    assert rows_of(rows, "accel_queue_borrowing_limit") == {("team-a", "h100", GPU): 8}
    assert rows_of(rows, "accel_queue_info") == {
        ("team-a", "research"): 1,
        ("team-b", "research"): 1,
    }
    assert rows_of(rows, "accel_flavor_pool_info") == {("h100", "h100-pool"): 1}
    # a3 waits for quota, which no node gives: nothing for the pool rules.
    assert rows_of(rows, "accel_pool_queued_device_requests") == {("h100-pool", GPU): 0}
    assert set(rows_of(rows, "accel_kueue_objects_skipped").values()) == {0}
    # The admitted jobs' pods wait for nodes and count as pending pods, once.
    assert rows_of(rows, "accel_pool_pending_device_requests") == {("h100-pool", GPU): 16}


async def test_no_kueue_no_series_no_log(
    api: FakeApiServer, kube: ClientKube, caplog: pytest.LogCaptureFixture
) -> None:
    add_pool(api, "h100-pool", replicas=1, nodes=1)
    api.unserved.add("kueue.x-k8s.io")
    caplog.set_level(logging.DEBUG, logger="autoscaler")
    for _ in range(2):
        rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), 1_800_000_000.0)
        assert not [r for r in rows if r[0] in queues_metrics()]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    # A cycle asks whether Kueue is there, at each version it may serve; nothing more.
    asked = [r.path for r in api.requests_for("GET", r"/apis/kueue\.x-k8s\.io/")]
    assert asked == [f"/apis/kueue.x-k8s.io/{v}/clusterqueues" for v in ("v1beta1", "v1beta2")] * 2


async def test_kueue_forbidden_is_logged_once(
    api: FakeApiServer, kube: ClientKube, caplog: pytest.LogCaptureFixture
) -> None:
    teams(api)
    api.faults.fail(2, status=403, path_regex=r"/clusterqueues$")
    for _ in range(2):
        assert await queues.collect(kube, cs.device_requests, [], []) == []
    warned = [r for r in caplog.records if "clusterqueues" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]


def queues_metrics() -> set[Any]:
    names = {"accel_queue_", "accel_flavor_", "accel_kueue_", "accel_pool_queued_"}
    return {m for m in cs.CATALOGUE if any(m.name.startswith(n) for n in names)}


def workload(
    name: str,
    gpus: int,
    *,
    queue: str = "a",
    reserved: str = "",
    admitted: bool = False,
    selector: dict[str, str] | None = None,
    created: str = "2026-12-01T10:00:00Z",
) -> Obj:
    template: Obj = {
        "spec": {
            "containers": [{"name": "m", "resources": {"limits": {GPU: "8"}}}],
            **({"nodeSelector": selector} if selector else {}),
        }
    }
    wl: Obj = {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
        "spec": {"queueName": queue, "podSets": [{"name": "main", "count": gpus // 8}]},
    }
    wl["spec"]["podSets"][0]["template"] = template
    if reserved:
        conds = [{"type": "QuotaReserved", "status": "True"}]
        if admitted:
            conds.append({"type": "Admitted", "status": "True"})
        wl["status"] = {
            "conditions": conds,
            "admission": {
                "clusterQueue": "team-a",
                "podSetAssignments": [{"name": "main", "flavors": {GPU: reserved}}],
            },
        }
    return wl


def pool(name: str, labels: dict[str, str], nodes: int = 0) -> Pool:
    shape = NodeShape(devices={GPU: 8}, labels=labels)
    return Pool(name, 0, 10, nodes, tuple(f"{name}-{i}" for i in range(nodes)), 0, shape)


def read(workloads: list[Obj], cqs: list[Obj] | None = None) -> list[Any]:
    objs = KueueObjects(
        cluster_queues=tuple(cqs or [cluster_queue("team-a", {"h100": 16, "a100": 32})]),
        local_queues=(local_queue("a", "team-a"),),
        flavors=(flavor("h100", H100), flavor("a100", A100)),
        workloads=tuple(workloads),
        skipped={},
    )
    pools = [pool("pool-h100", H100), pool("pool-a100", A100)]
    return queues.queue_rows(objs, cs.device_requests, pools, [])


def test_demand_that_quota_admits_goes_to_its_flavors_pool() -> None:
    rows = read(
        [
            workload("held", 8, reserved="h100", admitted=True),
            workload("checks", 8, reserved="h100"),  # waits for admission checks
            # h100 has 0 left: the next flavor with room is a100.
            workload("fits", 16, created="2026-12-01T10:01:00Z"),
            # a100 has 16 left after "fits": 24 fits nowhere.
            workload("too-big", 24, created="2026-12-01T10:02:00Z"),
            # A selector that only a100 nodes carry skips h100.
            workload("picky", 8, selector=A100, created="2026-12-01T10:03:00Z"),
        ]
    )
    assert rows_of(rows, "accel_pool_queued_device_requests") == {
        ("pool-h100", GPU): 8,  # "checks"
        ("pool-a100", GPU): 24,  # "fits" and "picky"
    }
    workloads = rows_of(rows, "accel_queue_workloads")
    assert workloads[("team-a", "h100", "admitted")] == 1
    assert workloads[("team-a", "h100", "reserved")] == 1
    assert workloads[("team-a", "a100", "pending")] == 2
    # Beyond every quota: counted against the first flavor, queued for no pool.
    assert workloads[("team-a", "h100", "pending")] == 1
    assert rows_of(rows, "accel_queue_device_requests")[("team-a", "h100", GPU, "pending")] == 24


def test_priority_goes_first_for_the_room() -> None:
    late = workload("late-urgent", 32, created="2026-12-01T11:00:00Z")
    late["spec"]["priority"] = 100
    rows = read([workload("early", 32), late])
    # Only one of them fits a100's 32: the urgent one, though it came later.
    devices = rows_of(rows, "accel_queue_device_requests")
    assert devices[("team-a", "a100", GPU, "pending")] == 32
    assert rows_of(rows, "accel_pool_queued_device_requests")[("pool-a100", GPU)] == 32


def test_cohort_borrowing_within_the_limit() -> None:
    cqs = [
        cluster_queue("team-a", {"h100": 8}, cohort="c", borrowingLimit="8"),
        cluster_queue("team-b", {"h100": 32}, cohort="c"),
    ]
    rows = read([workload("borrows", 16), workload("past-limit", 8)], cqs)
    assert rows_of(rows, "accel_pool_queued_device_requests")[("pool-h100", GPU)] == 16


def _node(name: str, ready: bool = True) -> Obj:
    return {
        "metadata": {"name": name, "labels": H100},
        "status": {
            "allocatable": {GPU: "8"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _running(name: str, node: str, gpus: int) -> Obj:
    limits = {"limits": {GPU: str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"nodeName": node, "containers": [{"name": "m", "resources": limits}]},
        "status": {"phase": "Running"},
    }


def test_pods_that_the_pools_free_devices_take_need_no_node() -> None:
    # h100-0 is full, h100-1 has 8 free, h100-2 has 4 free (8 are not enough for
    # a pod there), h100-3 is not Ready. In the order Kueue admits, "first" (one
    # pod) takes h100-1, and of "second" (two pods) neither fits anywhere.
    objs = KueueObjects(
        cluster_queues=(cluster_queue("team-a", {"h100": 64}),),
        local_queues=(local_queue("a", "team-a"),),
        flavors=(flavor("h100", H100),),
        workloads=(
            workload("first", 8, created="2026-12-01T10:00:00Z"),
            workload("second", 16, created="2026-12-01T10:01:00Z"),
        ),
        skipped={},
    )
    nodes = [_node("h100-0"), _node("h100-1"), _node("h100-2"), _node("h100-3", ready=False)]
    pods = [_running("full", "h100-0", 8), _running("half", "h100-2", 4)]
    pools = [pool("h100", H100, nodes=4)]
    rows = queues.queue_rows(objs, cs.device_requests, pools, nodes, pods)
    assert rows_of(rows, "accel_pool_queued_device_requests") == {("h100", GPU): 16}
    # Without the pods every Ready node is free: 24 devices take all three pods.
    rows = queues.queue_rows(objs, cs.device_requests, pools, nodes, [])
    assert rows_of(rows, "accel_pool_queued_device_requests") == {("h100", GPU): 0}


def _cohort_rows(cqs: list[Obj], workloads: list[Obj]) -> list[Any]:
    objs = KueueObjects(
        cluster_queues=tuple(cqs),
        local_queues=tuple(local_queue(q, q) for q in ("team-a", "team-b", "team-c")),
        flavors=(flavor("h100", H100),),
        workloads=tuple(workloads),
        skipped={},
    )
    return queues.queue_rows(objs, cs.device_requests, [pool("pool-h100", H100)], [])


def test_what_one_queue_borrows_no_other_can() -> None:
    # A cohort of 8 + 16 + 16 = 40 H100s. team-b's 24 borrow 8 of team-a's
    # unused; team-c's 24 would need those same 8: they do not fit, and no pool
    # grows for them (before, each peer's unused quota counted for every
    # borrower and 48 devices were queued for a cohort of 40).
    cqs = [
        cluster_queue("team-a", {"h100": 8}, cohort="c"),
        cluster_queue("team-b", {"h100": 16}, cohort="c"),
        cluster_queue("team-c", {"h100": 16}, cohort="c"),
    ]
    rows = _cohort_rows(
        cqs,
        [
            workload("b", 24, queue="team-b", created="2026-12-01T10:00:00Z"),
            workload("c", 24, queue="team-c", created="2026-12-01T10:01:00Z"),
            workload("c-small", 16, queue="team-c", created="2026-12-01T10:02:00Z"),
        ],
    )
    assert rows_of(rows, "accel_pool_queued_device_requests")[("pool-h100", GPU)] == 24 + 16
    pending = rows_of(rows, "accel_queue_device_requests")
    assert pending[("team-c", "h100", GPU, "pending")] == 40  # "c" waits for quota


def test_a_lending_limit_bounds_what_a_queue_lends() -> None:
    # team-b lends 8 of its 16: team-a (8) can reach 16 and no more. Borrowed
    # first, those 8 are not there for team-b's own 16 (Kueue without
    # preemption admits them once team-a's jobs end).
    cqs = [
        cluster_queue("team-a", {"h100": 8}, cohort="c"),
        cluster_queue("team-b", {"h100": 16}, cohort="c", lendingLimit="8"),
    ]
    rows = _cohort_rows(
        cqs,
        [
            workload("a-fits", 8, queue="team-a", created="2026-12-01T10:00:00Z"),
            workload("a-borrows", 8, queue="team-a", created="2026-12-01T10:01:00Z"),
            workload("a-past", 8, queue="team-a", created="2026-12-01T10:02:00Z"),
            workload("b-own", 16, queue="team-b", created="2026-12-01T10:03:00Z"),
            workload("b-kept", 8, queue="team-b", created="2026-12-01T10:04:00Z"),
        ],
    )
    # team-a's 16 and the 8 team-b keeps for itself.
    assert rows_of(rows, "accel_pool_queued_device_requests")[("pool-h100", GPU)] == 24
    pending = rows_of(rows, "accel_queue_device_requests")
    assert pending[("team-a", "h100", GPU, "pending")] == 24
    assert pending[("team-b", "h100", GPU, "pending")] == 24


def test_malformed_objects_are_left_out_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    bad_cq = cluster_queue("bad", {"h100": 1})
    bad_cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "lots"
    bad_count = workload("bad-count", 8)
    bad_count["spec"]["podSets"][0]["count"] = -1
    odd_pod = {"name": "main", "count": 1, "template": {"spec": {"containers": {"m": {}}}}}
    wrong = [
        bad_count,
        {"metadata": {"name": "no-spec"}, "spec": "nope"},
        {"metadata": {"name": "sets"}, "spec": {"podSets": [{}] * 19}},
        {"metadata": {"name": "odd"}, "spec": {"podSets": [odd_pod]}},
        {"metadata": "what"},
    ]
    for _ in range(2):
        rows = read([workload("good", 8), *wrong], [cluster_queue("team-a", {"h100": 16}), bad_cq])
    assert rows_of(rows, "accel_kueue_objects_skipped") == {
        ("ClusterQueue",): 1,
        ("LocalQueue",): 0,
        ("ResourceFlavor",): 0,
        ("Workload",): 5,
        ("AdmissionCheck",): 0,
    }
    assert rows_of(rows, "accel_queue_workloads")[("team-a", "h100", "pending")] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 6, warnings  # once each, not once per read
    assert any("lots" in w for w in warnings)


async def test_the_shipped_pool_rules_grow_a_pool_for_a_suspended_workload_once(
    api: FakeApiServer, kube: ClientKube, promtool_check: Any
) -> None:
    """The whole way: Kueue's objects read with the real client, the rows rendered
    (promtool checks them) and ingested into the built-in evaluator, and the shipped
    pool-scale-up expression over them. A Workload whose quota is reserved but that
    waits for an admission check has no pods: the devices of those its pods the
    pool's free node cannot take are queued (one of its two 8-device pods fits
    there), and the pool grows for them. Once admitted it has pods: one runs on
    the pool's node, the other is a pending pod, and the queued devices are gone,
    so the pool's demand is that pod's 8 devices, never the Workload's on top."""
    add_pool(api, "h100-pool", replicas=1, nodes=1, bounds=(1, 8))
    label_pool(api, "h100-pool", H100)
    api.add(flavor("h100", H100))
    checked = cluster_queue("team-a", {"h100": 64})
    checked["spec"]["admissionChecks"] = ["provisioning"]
    api.add(checked)
    api.add(local_queue("a", "team-a"))
    kueue = KueueOperators(api, clock=lambda: T0)
    api.add(queued_job("train", "a", 2))
    kueue.reconcile()
    assert api.objects("pods") == []
    provider = ClusterAPIProvider(kube, NS)
    store = SeriesStore(retention=3600)
    evaluator = Evaluator(store)
    rule = rule_expr("pool-scale-up")
    demand = "sum by (pool) (accel_pool_pending_device_requests) + on (pool) " + (
        "sum by (pool) (accel_pool_queued_device_requests)"
    )

    rows = await cs.collect(kube, provider, T0)
    promtool_check(cs.render(rows))
    cs.ingest(store, rows, T0)
    assert values(evaluator.instant(demand, T0)) == {"h100-pool": 8}
    assert values(evaluator.instant(rule, T0)).keys() == {"h100-pool"}

    wl = kueue.workload_of(api.get("jobs", "ml", "train") or {})
    assert wl is not None
    wl["status"]["admissionChecks"][0]["state"] = "Ready"
    api.add(wl)
    kueue.reconcile()
    # One pod runs on the pool's one node; the other waits for a node.
    rows = await cs.collect(kube, provider, T0 + 15)
    cs.ingest(store, rows, T0 + 15)
    assert values(evaluator.instant("accel_pool_queued_device_requests", T0 + 15)) == {
        "h100-pool": 0
    }
    assert values(evaluator.instant(demand, T0 + 15)) == {"h100-pool": 8}
    assert values(evaluator.instant(rule, T0 + 15)).keys() == {"h100-pool"}


T0 = 1_800_000_000.0


def rule_expr(name: str) -> str:
    doc = yaml.safe_load((REPO / "rules" / "remediation.yaml").read_text())
    (rule,) = [r for r in doc["spec"]["rules"] if r["name"] == name]
    return str(rule["expr"])


def values(result: object) -> dict[str, float]:
    assert isinstance(result, Vector), result
    return {str(s.get("pool")): s.value for s in result.samples}


async def test_a_kueue_that_serves_only_v1beta2_is_read_there(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """v1beta2 names the cohort ``spec.cohortName`` and leaves a nominal quota of 0
    out."""
    add_pool(api, "h100-pool", replicas=1, nodes=1, bounds=(1, 8))
    label_pool(api, "h100-pool", H100)
    api.kueue_versions = {"v1beta2"}
    api.add(flavor("h100", H100))
    for name, nominal in (("team-a", 0), ("team-b", 16)):
        cq = cluster_queue(name, {"h100": nominal}, borrowingLimit="8")
        cq["spec"]["cohortName"] = "research"
        if not nominal:
            del cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"]
        api.add(cq)
    api.add(local_queue("a", "team-a"))
    wl = workload("w", 8)
    wl.update(apiVersion=API, kind="Workload")
    api.add(wl)
    for n in api.objects("nodes"):  # cordoned: its free devices take nothing
        n.setdefault("spec", {})["unschedulable"] = True
        api.add(n)
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), T0)
    assert rows_of(rows, "accel_queue_info") == {
        ("team-a", "research"): 1,
        ("team-b", "research"): 1,
    }
    assert rows_of(rows, "accel_queue_nominal_quota")[("team-a", "h100", GPU)] == 0
    # team-a borrows its 8 from team-b.
    assert rows_of(rows, "accel_pool_queued_device_requests") == {("h100-pool", GPU): 8}
    assert api.requests_for("GET", r"/v1beta2/workloads$")
