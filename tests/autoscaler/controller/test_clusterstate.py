"""Cluster state as metrics: ``collect`` against the fake API server with the real
client, ``render`` checked by promtool, and ``ingest`` read back through the
built-in evaluator with the shipped pool rules' own expressions."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import yaml

from accel_common.names import is_device_resource
from autoscaler import clusterstate as cs
from autoscaler.kube.client import ClientKube
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Vector
from tests.autoscaler.pools.test_pools import NS, add_pool, machine, machine_deployment, node, pod
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.paths import REPO

T0 = 1_800_000_000.0
RULES = REPO / "rules" / "remediation.yaml"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def running(name: str, node_name: str, *, started: float, **kw: Any) -> dict[str, Any]:
    p = pod(name, node_name, **kw)
    p["status"]["startTime"] = iso(started)
    return p


def job(name: str, deadline: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "train:1"}],
            }
        }
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": spec,
    }


def as_dict(rows: list[cs.Row]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for metric, labels, value in rows:
        assert tuple(labels) == metric.labels, (metric.name, labels)
        key = (metric.name, tuple(labels.items()))
        assert key not in out, f"duplicate series {key}"
        out[key] = value
    return out


def pick(rows: list[cs.Row], name: str) -> dict[tuple[str, ...], float]:
    return {tuple(lb.values()): v for m, lb, v in rows if m.name == name}


# -- what counts as a device -----------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "device"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/gpu.shared", True),
        ("amd.com/gpu", True),
        ("amd.com/cpx_nps4", True),
        ("gpu.intel.com/i915", True),
        ("gpu.intel.com/xe", True),
        ("gpu.intel.com/millicores", False),
        ("gpu.intel.com/memory.max", False),
        ("cpu", False),
        ("memory", False),
        ("example.com/gpu", False),
    ],
)
def test_device_resources(resource: str, device: bool) -> None:
    assert is_device_resource(resource) is device


def test_device_requests_count_as_the_scheduler_does() -> None:
    p = pod("p", "n1", gpus=2)
    p["spec"]["containers"].append(
        {
            "name": "side",
            "image": "x",
            "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "2"}},
        }
    )
    # An init container that needs more than the containers together sets the request.
    p["spec"]["initContainers"] = [
        {"name": "warm", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
        {"name": "mig", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}},
    ]
    assert cs.device_requests(p) == {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 1}
    assert cs.device_requests(pod("q", "n1", gpus=0)) == {}


# -- collect ---------------------------------------------------------------------


def cluster(api: FakeApiServer) -> None:
    """Two pools and the pods the expectations below are about."""
    # a100: 3 replicas, min 1, max 4: n0 ready, n1 not ready, one Machine booting.
    add_pool(api, "a100", replicas=3, nodes=2, bounds=(1, 4), waiting=1)
    not_ready = node("a100-n1", ready=False, labels={"pool": "a100"})
    api.add(not_ready)
    # h100: 1 replica of 4 GPUs, min 0, max 3; its nodes say which accelerator.
    api.add(machine_deployment("h100", 1, (0, 3)))
    api.add(node("h100-n0", gpus=4, labels={"pool": "h100", "accelerator": "h100"}))
    api.add(machine("h100-m0", "h100", "h100-n0"))
    # A MachineDeployment nobody may autoscale: no pool series at all.
    add_pool(api, "plain", replicas=1, nodes=1, bounds=None)

    api.add(job("train", 7200))
    api.add(job("eval", None))
    # Running device pods.
    api.add(running("train-0", "a100-n0", started=T0 - 3600, gpus=4, owner=("Job", "train")))
    eval_pod = running("eval-0", "a100-n0", started=T0 - 60, gpus=2, owner=("Job", "eval"))
    eval_pod["metadata"]["annotations"] = {"accel-fleet.io/timeout": "30m"}
    api.add(eval_pod)
    api.add(running("notebook", "h100-n0", started=T0 - 10, gpus=1, owner=None))
    weird = running("weird", "h100-n0", started=T0 - 5, gpus=1, owner=("Job", "train"))
    weird["metadata"]["annotations"] = {"accel-fleet.io/timeout": "soon"}
    api.add(weird)
    # Not counted: no device, finished, not running yet on its node.
    api.add(running("web", "a100-n0", started=T0 - 100, gpus=0))
    api.add(running("old", "a100-n0", started=T0 - 100, gpus=8, phase="Succeeded"))
    # Pending pods.
    api.add(pod("any", None, gpus=2))  # both pools; h100 has more room (2 vs 1)
    api.add(pod("on-a100", None, gpus=8, nodeSelector={"pool": "a100"}))
    api.add(pod("too-big", None, gpus=16))  # no node offers 16
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "accelerator", "operator": "In", "values": ["h100"]}
                        ]
                    }
                ]
            }
        }
    }
    api.add(pod("wants-h100", None, gpus=1, affinity=affinity))
    api.add(pod("gated", None, gpus=1, schedulingGates=[{"name": "queue"}]))
    mig = pod("mig", None, gpus=0)
    mig["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    api.add(mig)


async def test_collect_reads_jobs_and_pools_from_the_api(
    api: FakeApiServer, kube: ClientKube, caplog: pytest.LogCaptureFixture
) -> None:
    cluster(api)
    provider = ClusterAPIProvider(kube, NS)

    with caplog.at_level(logging.WARNING, logger="autoscaler.clusterstate"):
        rows = await cs.collect(kube, provider, T0)

    got = as_dict(rows)  # also: labels in catalogue order, no duplicate series
    assert pick(rows, "accel_job_age_seconds") == {
        ("ml", "train-0", "a100-n0", "train"): 3600.0,
        ("ml", "eval-0", "a100-n0", "eval"): 60.0,
        ("ml", "notebook", "h100-n0", ""): 10.0,
        ("ml", "weird", "h100-n0", "train"): 5.0,
    }
    assert pick(rows, "accel_job_timeout_seconds") == {
        ("ml", "train-0", "a100-n0", "train"): 7200.0,  # the Job's activeDeadlineSeconds
        ("ml", "eval-0", "a100-n0", "eval"): 1800.0,  # the annotation
        ("ml", "weird", "h100-n0", "train"): 7200.0,  # a bad annotation: the Job's
    }
    assert "pod ml/weird: annotation accel-fleet.io/timeout: invalid duration 'soon'" in (
        caplog.text
    )
    # One read of Job "train" for two pods; none for "eval" (its pod is annotated).
    job_reads = api.requests_for("GET", r"/jobs/")
    assert [r.path.rsplit("/", 1)[-1] for r in job_reads] == ["train"]

    assert pick(rows, "accel_pool_nodes") == {
        ("a100", "ready"): 1.0,
        ("a100", "notready"): 1.0,
        ("a100", "provisioning"): 1.0,
        ("h100", "ready"): 1.0,
        ("h100", "notready"): 0.0,
        ("h100", "provisioning"): 0.0,
    }
    assert pick(rows, "accel_pool_nodes_min") == {("a100",): 1.0, ("h100",): 0.0}
    assert pick(rows, "accel_pool_nodes_max") == {("a100",): 4.0, ("h100",): 3.0}
    assert pick(rows, "accel_pool_pending_device_requests") == {
        ("a100", "nvidia.com/gpu"): 8.0,  # on-a100
        ("h100", "nvidia.com/gpu"): 3.0,  # any (more room) + wants-h100
    }
    # a100: train-0 (4) + eval-0 (2) of 16; h100: notebook + weird, 2 of 4.
    assert pick(rows, "accel_pool_devices_allocated_ratio") == {
        ("a100",): 6 / 16,
        ("h100",): 2 / 4,
    }
    assert pick(rows, "accel_node_pool_info") == {
        ("a100-n0", "a100"): 1.0,
        ("a100-n1", "a100"): 1.0,
        ("h100-n0", "h100"): 1.0,
    }
    # Every node's Ready condition, pooled or not: a100-n1 is NotReady.
    ready = pick(rows, "accel_node_ready")
    assert {k: v for k, v in ready.items() if not k[0].startswith("plain")} == {
        ("a100-n0",): 1.0,
        ("a100-n1",): 0.0,
        ("h100-n0",): 1.0,
    }
    assert len(ready) == 4  # and the unpooled MachineDeployment's one node
    assert not any("plain" in str(k) for k in got if k[0] != "accel_node_ready")


async def test_collect_without_a_provider_gives_the_job_series_only(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cluster(api)
    rows = await cs.collect(kube, None, T0)
    assert {m.name for m, _, _ in rows} == {
        "accel_job_age_seconds",
        "accel_job_timeout_seconds",
        "accel_node_ready",
    }
    assert not api.requests_for("GET", r"/machinedeployments")


async def test_an_unreadable_job_loses_only_its_timeout(
    api: FakeApiServer, kube: ClientKube, caplog: pytest.LogCaptureFixture
) -> None:
    api.add(node("n1"))
    api.add(job("train", 600))
    api.add(running("train-0", "n1", started=T0 - 30, owner=("Job", "train")))
    api.add(running("gone-0", "n1", started=T0 - 30, owner=("Job", "gone")))
    api.faults.fail(10, status=403, method="GET", path_regex=r"/jobs/train$")

    with caplog.at_level(logging.WARNING, logger="autoscaler.clusterstate"):
        rows = await cs.collect(kube, None, T0)

    assert pick(rows, "accel_job_age_seconds") == {
        ("ml", "train-0", "n1", "train"): 30.0,
        ("ml", "gone-0", "n1", "gone"): 30.0,
    }
    assert pick(rows, "accel_job_timeout_seconds") == {}
    assert "job ml/train: cannot read activeDeadlineSeconds" in caplog.text
    assert "ml/gone" not in caplog.text  # a Job that is gone simply has no deadline


# -- render and ingest -----------------------------------------------------------


async def test_render_is_valid_exposition(
    api: FakeApiServer, kube: ClientKube, promtool_check: Any
) -> None:
    cluster(api)
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), T0)
    text = cs.render(rows)
    promtool_check(text)
    assert text.count("# TYPE ") == len({m.name for m, _, _ in rows}) == 9
    assert 'accel_pool_nodes{pool="a100",state="provisioning"} 1\n' in text
    assert 'accel_pool_devices_allocated_ratio{pool="a100"} 0.375\n' in text
    assert 'accel_job_age_seconds{namespace="ml",pod="notebook",node="h100-n0",job=""} 10\n' in text


def test_render_escapes_label_values_and_help(promtool_check: Any) -> None:
    rows: list[cs.Row] = [
        (cs.NODE_POOL, {"node": 'we"ird\\node\nx', "pool": "p"}, 1.0),
        (cs.POOL_DEVICES_ALLOCATED, {"pool": "p"}, 0.1),
    ]
    text = cs.render(rows)
    promtool_check(text)
    assert 'accel_node_pool_info{node="we\\"ird\\\\node\\nx",pool="p"} 1\n' in text
    assert 'accel_pool_devices_allocated_ratio{pool="p"} 0.1\n' in text
    # Families come in catalogue order, whatever the rows' order.
    assert text.index("accel_pool_devices_allocated_ratio") < text.index("accel_node_pool_info")
    assert cs.render([]) == ""


def rule_expr(name: str) -> str:
    doc = yaml.safe_load(RULES.read_text())
    (rule,) = [r for r in doc["spec"]["rules"] if r["name"] == name]
    return str(rule["expr"])


def pools_in(result: object) -> set[str]:
    assert isinstance(result, Vector)
    return {s.get("pool") for s in result.samples}


async def test_ingested_rows_feed_the_shipped_pool_rules(
    api: FakeApiServer, kube: ClientKube
) -> None:
    cluster(api)
    provider = ClusterAPIProvider(kube, NS)
    store = SeriesStore(retention=3600)
    evaluator = Evaluator(store)

    stored = cs.ingest(store, await cs.collect(kube, provider, T0), T0)
    assert stored == len(await cs.collect(kube, provider, T0))

    # Both pools have pods waiting; a100 (1 ready + 1 notready + 1 provisioning of 4)
    # and h100 (1 of 3) are below their maximum.
    assert pools_in(evaluator.instant(rule_expr("pool-scale-up"), T0)) == {"a100", "h100"}
    # The booting a100 Machine registers and a fourth is asked for: a100 is full.
    api.add(machine("a100-w0", "a100", "a100-n2"))
    api.add(node("a100-n2", labels={"pool": "a100"}))
    api.add(machine("a100-m3", "a100"))
    md = api.get("machinedeployments", NS, "a100")
    assert md is not None
    md["spec"]["replicas"] = 4
    api.add(md)
    cs.ingest(store, await cs.collect(kube, provider, T0 + 15), T0 + 15)
    assert pools_in(evaluator.instant(rule_expr("pool-scale-up"), T0 + 15)) == {"h100"}

    # A pod that finished leaves no series behind: it is marked stale at once, not
    # kept for the five minutes of lookback.
    assert api.remove("pods", "ml", "notebook") is not None
    cs.ingest(store, await cs.collect(kube, provider, T0 + 30), T0 + 30)
    ages = evaluator.instant('accel_job_age_seconds{pod="notebook"}', T0 + 30)
    assert isinstance(ages, Vector) and ages.samples == ()
    ages = evaluator.instant('accel_job_age_seconds{pod="train-0"}', T0 + 30)
    assert isinstance(ages, Vector) and [s.value for s in ages.samples] == [3630.0]


# -- scale -----------------------------------------------------------------------


def big_cluster(nodes: int, pools: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``nodes`` nodes of 8 GPUs in ``pools`` pools, 6 device pods per node (one in
    ten with a timeout annotation), 2 without a device, and 200 pending pods."""
    node_objs, pod_objs = [], []
    for i in range(nodes):
        pool = f"pool-{i % pools}"
        name = f"node-{i:04d}"
        node_objs.append(node(name, labels={"pool": pool, "zone": f"z{i % 3}"}))
        for j in range(8):
            p = running(f"p-{i}-{j}", name, started=T0 - 100 * j, gpus=1 if j < 6 else 0)
            if j == 0 and i % 10 == 0:
                p["metadata"]["annotations"] = {"accel-fleet.io/timeout": "2h"}
            pod_objs.append(p)
    for k in range(200):
        selector = {"pool": f"pool-{k % pools}"} if k % 2 else {}
        pod_objs.append(pod(f"wait-{k}", None, gpus=1 + k % 8, nodeSelector=selector))
    return node_objs, pod_objs


def test_pool_and_job_rows_for_a_thousand_nodes_take_well_under_a_cycle() -> None:
    """The part of ``collect`` that is ours (no API calls): 1,000 nodes, 8,000 pods,
    10 pools, 200 pending pods. Figures for docs/performance.md."""
    from autoscaler.pools.base import Pool

    nodes, pods = big_cluster(1000, 10)
    pools = [
        Pool(
            f"pool-{k}",
            1,
            200,
            100,
            tuple(f"node-{i:04d}" for i in range(k, 1000, 10)),
            0,
        )
        for k in range(10)
    ]
    # CPU time, the cost itself: wall time on a machine shared with parallel test
    # workers measures the neighbours too.
    timings = []
    for _ in range(3):
        start = time.process_time()
        rows = cs.pool_rows(pools, nodes, pods)
        timings.append(time.process_time() - start)
    best = min(timings)
    print(f"pool_rows: 1000 nodes, 8000 pods, 200 pending: {best * 1000:.1f} ms")
    assert len(pick(rows, "accel_node_pool_info")) == 1000
    assert sum(pick(rows, "accel_pool_pending_device_requests").values()) == sum(
        1 + k % 8 for k in range(200)
    )
    assert best < 1.0, f"pool_rows took {best:.2f}s of CPU for 1,000 nodes"


@pytest.mark.unvalidated_api
async def test_collect_against_the_api_for_a_thousand_nodes(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """The whole of ``collect`` through the real client and the fake server: one list
    of nodes, one of pods, the pools; no per-pod calls."""
    nodes, pods = big_cluster(1000, 10)
    for obj in nodes + pods:
        api.add(obj)
    for k in range(10):
        api.add(machine_deployment(f"pool-{k}", 100, (1, 200)))
    for i in range(1000):
        api.add(machine(f"m-{i:04d}", f"pool-{i % 10}", f"node-{i:04d}"))
    provider = ClusterAPIProvider(kube, NS)

    await cs.collect(kube, provider, T0)  # warm the client's connection pool
    before = len(api.requests)
    start = time.perf_counter()
    rows = await cs.collect(kube, provider, T0)
    took = time.perf_counter() - start
    calls = api.requests[before:]
    print(
        f"collect: 1000 nodes, 8000 pods via the fake API server: {took * 1000:.0f} ms, "
        f"{len(calls)} API calls, {len(rows)} series"
    )
    # nodes, pods, machinedeployments, machines, and one scale per pool; and the
    # DRA lists: ResourceClaims, DeviceClasses, ResourceSlices; and Kueue's
    # ClusterQueues (none here, so no other Kueue list).
    assert len(calls) == 4 + 10 + 3 + 1, [c.path for c in calls]
    assert len(pick(rows, "accel_job_age_seconds")) == 6000
    assert len(pick(rows, "accel_job_timeout_seconds")) == 100
    assert took < 20.0
