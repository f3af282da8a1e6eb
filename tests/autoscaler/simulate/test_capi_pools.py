"""Pools as Cluster API has them, in the simulator (issue 30): a ``min: 0`` pool
scales up from its MachineDeployment's capacity annotations for a queued job and
the job runs; a new node is Ready ``deviceReadyDelay`` before its devices are
allocatable and the shipped rules take it for capacity on its way, not for a
broken node; the simulated pool series equal what ``clusterstate.collect`` reads
while nodes warm; the simulated MachineDeployment read through the real client
from the fake API server gives the controller the same scale-up, and without its
annotations the pool is handled as ``autoscaler/pools/clusterapi.py`` says; and a
scenario whose jobs can never run is refused with the reason, where it is written.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_common.names import (
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CAPACITY_LABELS,
    CAPI_CAPACITY_PREFIX,
    POOL_LABEL,
)
from autoscaler import clusterstate as cs
from autoscaler.kube.client import ClientKube
from autoscaler.pools.base import NodeShape
from autoscaler.pools.capacity import DEVICE_WAIT, read_shape
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.simulate import run as sim
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.machines import CAPI_NAMESPACE
from autoscaler.simulate.results import RunResult
from autoscaler.simulate.scenario import DEVICE_READY_DELAY, Scenario, ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from autoscaler.simulate.telemetry import Telemetry
from autoscaler.types import Vector
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.capi import machine_set
from tests.support.paths import REPO

RULES = [str(REPO / "rules")]

# A queued 8-GPU job (drawn at the start) for an H100 pool at 0 nodes; an L40S pool
# with a node, that the job may not use (it is bound to its pool).
ZERO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: {duration}
  evaluationInterval: 30s
  seed: 4
  pools:
    - {{name: l40s, vendor: nvidia, model: NVIDIA L40S, topology: pcie, devicesPerNode: 4,
       initial: 1, min: 1, max: 1}}
    - {{name: h100, vendor: nvidia, devicesPerNode: 8, initial: 0, min: 0, max: 2,
       provisionTime: 5m{h100}}}
  workload:
    arrivalsPerHour: {arrivals}
    initialJobs: 1
    pools: {{h100: 1}}
    sizes: {{8: 1}}
    duration: {{distribution: fixed, value: 1h}}
"""


def scenario(
    tmp_path: Path, *, duration: str = "2h", h100: str = "", arrivals: float = 0.001
) -> Scenario:
    """``ZERO``; ``arrivals`` per hour besides the one queued at the start."""
    path = tmp_path / "zero.yaml"
    path.write_text(ZERO.format(duration=duration, h100=h100, arrivals=arrivals))
    return load_scenario(path)


def rules_run(s: Scenario) -> RunResult:
    return sim.simulate(s, RULES, baseline=False)["rules"]


# What the shipped rules do to a node they think broken or a job they think stuck.
REMEDIES = frozenset(
    {
        "taint",
        "cordon",
        "drain",
        "migrate_jobs",
        "requeue_job",
        "reset_devices",
        "reboot_node",
        "replace_machine",
        "mark_for_return",
    }
)


def remedies(result: RunResult) -> set[str]:
    """The remedy actions decided in a run (``<type>`` or ``<type>:recover``)."""
    return {a for a in result.stats.actions if a.split(":")[0] in REMEDIES}


def test_a_min_zero_pool_scales_up_from_its_annotations_and_the_job_runs(
    tmp_path: Path,
) -> None:
    """The acceptance: the shipped pool-scale-up rule grows the pool from 0 for the
    queued job, which runs; pool-scale-down takes the idle pool back to 0, and the
    next job drawn for it grows it again. A pod that waited for a node from zero
    waited the rule's ``for: 2m`` (from an evaluation), the Machine's provisioning
    (5m) and the device plugin's default 90 s."""
    s = scenario(tmp_path, duration="10h", arrivals=0.5)
    result = rules_run(s)
    nodes = [n for n, _ in itertools.groupby(result.timeline.nodes["h100"])]
    assert nodes == [0, 1, 0, 1]
    assert result.stats.completed >= 2
    assert result.outcomes["scale_node_pool:done"] == 3  # up, down, up
    assert remedies(result) == set()
    from_zero = [w for w in result.stats.queue_wait if w > 0]
    assert len(from_zero) == 2
    for wait in from_zero:
        # The evaluation and the telemetry pipeline (pipeline.py) add up to a few intervals.
        assert 120 + 300 + DEVICE_READY_DELAY <= wait <= 120 + 300 + DEVICE_READY_DELAY + 120


def test_the_device_ready_delay_is_exactly_what_the_job_waits_longer(tmp_path: Path) -> None:
    waits = {}
    for delay in ("2m", "0s"):
        result = rules_run(scenario(tmp_path, h100=f", deviceReadyDelay: {delay}"))
        assert result.stats.completed == 1, delay
        assert result.outcomes["scale_node_pool:done"] == 2, delay  # up, and down at 1h55
        (waits[delay],) = result.stats.queue_wait
    assert waits["2m"] - waits["0s"] == 120.0


def test_the_default_device_ready_delay_applies_to_new_nodes_only(tmp_path: Path) -> None:
    s = scenario(tmp_path)
    by_name = {p.name: p for p in s.pools}
    assert by_name["h100"].device_ready_delay == DEVICE_READY_DELAY == 90.0
    assert by_name["h100"].capacity_annotations
    fleet = Fleet(s, FirstFit(), static_pools=False)
    fleet.machines.start()
    (node,) = fleet.kube.nodes.values()  # the initial L40S node: devices at once
    assert node["status"]["allocatable"] == {"nvidia.com/gpu": "4"}


def test_a_node_warming_past_device_wait_is_replaced_and_a_shorter_wait_is_not(
    tmp_path: Path,
) -> None:
    """The shipped rules do not take a node waiting for its devices for a broken one:
    with a 10-minute device delay the rule's repeat finds it warming and adds
    nothing (skipped), and nothing else acts on it. Past DEVICE_WAIT (15 minutes
    from its creation) the controller calls it not ready, as
    ``autoscaler/pools/capacity.py`` says, and the next repeat adds a second node."""
    assert DEVICE_WAIT == 900.0
    short = rules_run(scenario(tmp_path, h100=", deviceReadyDelay: 10m"))
    assert short.outcomes.get("scale_node_pool:done") == 1, short.outcomes
    assert short.outcomes.get("scale_node_pool:skipped", 0) >= 1, short.outcomes
    assert remedies(short) == set()
    assert short.stats.breaker_trips == 0 and short.stats.completed == 1

    long = rules_run(scenario(tmp_path, h100=", deviceReadyDelay: 20m"))
    assert long.outcomes.get("scale_node_pool:done") == 2, long.outcomes
    assert remedies(long) == set()
    assert long.stats.completed == 1


def _keyed(rows: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(m.name, tuple(sorted(labels.items()))): v for m, labels, v in rows}


def test_pool_series_equal_what_collect_reads_while_nodes_warm(tmp_path: Path) -> None:
    """No controller here: the pool is scaled by hand at 10m (to one node) and 40m (to
    two), and the simulated pool series are compared with ``clusterstate.collect``
    over the same cluster every 30 s, through the pool at 0, the Machines
    provisioning, the nodes Ready without devices (warming, then past DEVICE_WAIT:
    not ready), and the devices coming."""
    s = scenario(tmp_path, duration="2h", h100=", deviceReadyDelay: 20m")
    fleet = Fleet(s, FirstFit(), static_pools=False)
    telemetry = Telemetry(fleet, SeriesStore(), [], seed=1)
    seen: list[tuple[float, dict[Any, float]]] = []

    async def compare() -> None:
        ours = _keyed(telemetry.pool_rows() + telemetry.node_rows())
        theirs = _keyed(await cs.collect(fleet.kube, sim.pool_provider(fleet), fleet.now))
        theirs = {k: v for k, v in theirs.items() if not k[0].startswith("accel_job")}
        assert ours == theirs, fleet.now - EPOCH
        seen.append((fleet.now - EPOCH, ours))

    def scale(replicas: int) -> Any:
        return lambda: fleet.kube.patch_scale(
            "cluster.x-k8s.io", "v1beta1", CAPI_NAMESPACE, "machinedeployments", "h100", replicas
        )

    fleet.at(EPOCH + 600, scale(1))
    fleet.at(EPOCH + 2400, scale(2))
    fleet.every(30.0, compare, start=EPOCH + 15)
    asyncio.run(fleet.run())

    def at(t: float, state: str) -> float:
        series = dict(seen)[t]
        return series[("accel_pool_nodes", (("pool", "h100"), ("state", state)))]

    pending = (
        "accel_pool_pending_device_requests",
        (("pool", "h100"), ("resource", "nvidia.com/gpu")),
    )
    # At 0 nodes the job waits on the pool, through its declared shape.
    assert dict(seen)[585.0][pending] == 8.0
    # The Machine provisions (5m), its node is Ready at 15m, devices at 35m.
    assert at(885.0, "provisioning") == 1.0
    assert at(1065.0, "provisioning") == 1.0  # Ready, warming, not capacity
    assert dict(seen)[1065.0][pending] == 8.0
    node = next(n for n in fleet.kube.nodes if n.startswith("h100-"))
    assert at(1815.0, "notready") == 1.0  # past DEVICE_WAIT without devices
    assert at(2115.0, "ready") == 1.0  # its devices came at 35m
    assert dict(seen)[2115.0][pending] == 0.0  # and the job runs there
    assert fleet.stats.completed == 1
    assert fleet.kube.nodes[node]["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    # The second node: Ready at 45m, its devices at 65m.
    assert at(2715.0, "provisioning") == 1.0 and at(2715.0, "ready") == 1.0
    assert at(3915.0, "ready") == 2.0


def test_a_warming_node_offers_no_device_to_the_scheduler(tmp_path: Path) -> None:
    """Until its devices are allocatable, the node's Node has no GPU resource at all
    and the pod stays pending; the exporter already reports the devices."""
    s = scenario(tmp_path, duration="1h", h100=", deviceReadyDelay: 3m")
    fleet = Fleet(s, FirstFit(), static_pools=False)
    telemetry = Telemetry(fleet, SeriesStore(), [], seed=1)
    marks: dict[str, Any] = {}

    def look(name: str) -> Any:
        def go() -> None:
            node = next((n for k, n in fleet.kube.nodes.items() if k.startswith("h100-")), None)
            marks[name] = (
                copy.deepcopy(node["status"]) if node else None,
                len(fleet.running),
                int(telemetry.scraped.sum()),
            )

        return go

    fleet.at(EPOCH + 1, lambda: fleet.kube.patch_scale(
        "cluster.x-k8s.io", "v1beta1", CAPI_NAMESPACE, "machinedeployments", "h100", 1
    ))  # fmt: skip
    fleet.at(EPOCH + 1 + 300 + 179, look("warming"))
    fleet.at(EPOCH + 1 + 300 + 181, look("ready"))
    asyncio.run(fleet.run())
    status, running, scraped = marks["warming"]
    assert "nvidia.com/gpu" not in status["allocatable"]
    assert "nvidia.com/gpu" not in status["capacity"]
    assert status["conditions"][0]["status"] == "True"
    assert running == 0 and scraped == 4 + 8  # the L40S node's devices and these
    status, running, _ = marks["ready"]
    assert status["allocatable"]["nvidia.com/gpu"] == "8" and running == 1


def test_simulated_deployments_carry_what_read_shape_reads(tmp_path: Path) -> None:
    s = scenario(tmp_path)
    fleet = Fleet(s, FirstFit(), static_pools=False)
    fleet.machines.start()
    md = fleet.kube.custom[("machinedeployments", CAPI_NAMESPACE, "h100")]
    notes = md["metadata"]["annotations"]
    assert notes[CAPI_CAPACITY_GPU_COUNT] == "8"
    assert notes[CAPI_CAPACITY_GPU_TYPE] == "nvidia.com/gpu"
    shape = read_shape(md)
    assert shape is not None and shape.devices == {"nvidia.com/gpu": 8}
    assert shape.labels[POOL_LABEL] == "h100" and shape.taints == ()
    # Every label declared is one the pool's nodes carry.
    fleet.machines.replicas_changed({"metadata": {"name": "h100"}, "spec": {"replicas": 1}})
    asyncio.run(_advance(fleet, 3600))
    (node,) = [n for k, n in fleet.kube.nodes.items() if k.startswith("h100-")]
    assert shape.labels.items() <= node["metadata"]["labels"].items()

    off = dataclasses.replace(s, pools=tuple(
        dataclasses.replace(p, capacity_annotations=False) if p.name == "l40s" else p
        for p in s.pools
    ))  # fmt: skip
    fleet = Fleet(off, FirstFit(), static_pools=False)
    fleet.machines.start()
    md = fleet.kube.custom[("machinedeployments", CAPI_NAMESPACE, "l40s")]
    assert not any(k.startswith(CAPI_CAPACITY_PREFIX) for k in md["metadata"]["annotations"])


async def _advance(fleet: Fleet, seconds: float) -> None:
    fleet.time.end = fleet.now + seconds
    await fleet.time.run(lambda t: None, lambda: None)


# -- the production side: the simulator's objects on the fake API server ------------

NS = CAPI_NAMESPACE


def _scale_up_expr() -> str:
    doc = yaml.safe_load((REPO / "rules" / "remediation.yaml").read_text())
    (rule,) = [r for r in doc["spec"]["rules"] if r["name"] == "pool-scale-up"]
    return str(rule["expr"])


async def _fires(kube: ClientKube, now: float) -> set[str]:
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), now)
    store = SeriesStore()
    cs.ingest(store, rows, now)
    result = Evaluator(store).instant(_scale_up_expr(), now)
    assert isinstance(result, Vector)
    return {dict(x.labels)["pool"] for x in result.samples}


def _pending(rows: list[cs.Row]) -> dict[str, float]:
    return {lb["pool"]: v for m, lb, v in rows if m is cs.POOL_PENDING}


def _served(obj: dict[str, Any]) -> dict[str, Any]:
    """An object the simulator made, as a client would create it (no server fields)."""
    out = copy.deepcopy(obj)
    for key in ("resourceVersion", "uid", "creationTimestamp"):
        out["metadata"].pop(key, None)
    if out.get("kind") != "Pod":
        out.pop("status", None)
    return out


async def test_collect_attributes_a_pending_pod_to_the_zero_node_pool_through_the_real_client(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    """The simulator's MachineDeployment and its queued job's pod, stored in the fake
    API server and read by ``clusterstate.collect`` through the real client and the
    Cluster API provider: the pod waits on the pool at 0 nodes (its declared shape),
    and the shipped pool-scale-up rule selects it. The same MachineDeployment without
    the annotations: the pod counts nowhere and nothing fires, until its MachineSet
    declares the shape (clusterapi.py: the newest MachineSet that has them)."""
    fleet = Fleet(scenario(tmp_path), FirstFit(), static_pools=False)
    fleet.machines.start()
    fleet.job_controller.start()
    md = _served(fleet.kube.custom[("machinedeployments", NS, "h100")])
    api.add(md)
    (pod,) = [p for p in fleet.kube.pods.values() if p["status"]["phase"] == "Pending"]
    api.add(_served(pod))
    now = time.time()
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), now)
    assert _pending(rows) == {"h100": 8.0}
    nodes = {lb["state"]: v for m, lb, v in rows if m is cs.POOL_NODES}
    assert nodes == {"ready": 0.0, "notready": 0.0, "provisioning": 0.0}
    assert await _fires(kube, now) == {"h100"}
    (pool,) = await ClusterAPIProvider(kube, NS).pools()
    assert pool.shape == NodeShape(
        {"nvidia.com/gpu": 8},
        dict(
            item.split("=")
            for item in md["metadata"]["annotations"][CAPI_CAPACITY_LABELS].split(",")
        ),
        source=f"MachineDeployment {NS}/h100",
    )

    bare = copy.deepcopy(md)
    bare["metadata"]["annotations"] = {
        k: v
        for k, v in md["metadata"]["annotations"].items()
        if not k.startswith(CAPI_CAPACITY_PREFIX)
    }
    api.add(bare)
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), now)
    assert _pending(rows) == {}
    assert await _fires(kube, now) == set()

    shape = {
        k: v for k, v in md["metadata"]["annotations"].items() if k.startswith(CAPI_CAPACITY_PREFIX)
    }
    api.add(machine_set("h100-ms", NS, "h100", 0, **shape))
    assert await _fires(kube, now) == {"h100"}


def _pod(name: str, selector: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeSelector": selector,
            "containers": [
                {
                    "name": "main",
                    "image": "train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


async def test_a_pool_at_zero_offers_the_os_and_arch_labels_every_node_has(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """A node the pool would add is linux/amd64, as the cluster-autoscaler's template
    node is, unless the labels annotation says otherwise: a pod that selects
    ``kubernetes.io/os: linux`` (as many charts write) waits on the pool at 0 nodes
    and makes it grow; one for arm64 waits on the pool declared arm64."""
    base = {"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0"}
    base["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"] = "4"
    for name, labels in (
        ("h100", "accel-fleet.io/pool=h100"),
        ("gh200", "accel-fleet.io/pool=gh200,kubernetes.io/arch=arm64"),
    ):
        notes = {**base, CAPI_CAPACITY_GPU_COUNT: "8", CAPI_CAPACITY_LABELS: labels}
        api.add(
            {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "MachineDeployment",
                "metadata": {"name": name, "namespace": NS, "annotations": notes},
                "spec": {"clusterName": "c1", "replicas": 0},
            }
        )
    api.add(_pod("linux", {"kubernetes.io/os": "linux", POOL_LABEL: "h100"}))
    amd64 = {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [amd64]}]
            }
        }
    }
    api.add(_pod("amd64", {POOL_LABEL: "h100"}, affinity=affinity))
    api.add(_pod("arm", {"kubernetes.io/arch": "arm64"}))
    api.add(_pod("windows", {"kubernetes.io/os": "windows"}))
    now = time.time()
    rows = await cs.collect(kube, ClusterAPIProvider(kube, NS), now)
    assert _pending(rows) == {"h100": 16.0, "gh200": 8.0}
    assert await _fires(kube, now) == {"h100", "gh200"}


# -- scenarios refused ---------------------------------------------------------------

REFUSED = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 2h
  pools:
    - {name: l40s, vendor: nvidia, model: NVIDIA L40S, devicesPerNode: 4, initial: 1, max: 1}
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 0, min: 0, max: %s}
  workload:
    arrivalsPerHour: 1
    pools: {%s}
    sizes: {%s}
    duration: {distribution: fixed, value: 1h}
%s"""


@pytest.mark.parametrize(
    ("max_", "pools", "sizes", "extra", "where", "message"),
    [
        pytest.param(
            "0",
            "h100: 1",
            "8: 1",
            "",
            "7:80",
            "jobs of 8 devices drawn for pool 'h100' can never run: pool 'h100' has max: 0, "
            "so it never has a node; raise the max of pool 'h100' to 1 or more, or draw no "
            "jobs of 8 devices for it",
            id="max-0",
        ),
        pytest.param(
            "2, capacityAnnotations: false",
            "h100: 1",
            "8: 1",
            "",
            "7:104",
            "jobs of 8 devices drawn for pool 'h100' can never run: pool 'h100' starts with "
            "no node (initial: 0) and its MachineDeployment carries no capacity annotations "
            "(capacityAnnotations: false), so the controller cannot know what a node of it "
            "would offer and never scales it up; give pool 'h100' capacityAnnotations: "
            "true, or initial: 1 or more",
            id="zero-without-shape",
        ),
        pytest.param(
            "2",
            "h100: 1",
            "32: 1",
            "    gangKind: jobset\n",
            "11:13",
            "jobs of 32 devices drawn for pool 'h100' can never run: a gang of 4 whole nodes "
            "does not fit pool 'h100', which has at most 2 (max: 2, 8 devices per node); "
            "raise the max of pool 'h100' to 4 or more, or draw no jobs of 32 devices for it",
            id="gang-over-max",
        ),
        pytest.param(
            "2",
            "h100: 0, l40s: 0",
            "1: 1",
            "",
            "10:12",
            "no pool gets any job: the weights of workload.pools are all 0",
            id="no-weight",
        ),
    ],
)
def test_impossible_scenarios_are_refused_with_the_reason_where_it_is_written(
    tmp_path: Path, max_: str, pools: str, sizes: str, extra: str, where: str, message: str
) -> None:
    path = tmp_path / "impossible.yaml"
    path.write_text(REFUSED % (max_, pools, sizes, extra))
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert f"{path}:{where}: {message}" in str(e.value), str(e.value)


def test_a_pool_at_zero_without_annotations_is_fine_where_its_jobs_can_run_elsewhere(
    tmp_path: Path,
) -> None:
    """Not impossible: jobs that may run on either pool (eligiblePools: vendor) run on
    the pool with a node. And one that starts with nodes may go to zero without
    annotations: it runs, then waits, as that MachineDeployment would."""
    path = tmp_path / "fine.yaml"
    path.write_text(
        REFUSED
        % ("2, capacityAnnotations: false", "h100: 1", "4: 1", "    eligiblePools: vendor\n")
    )
    s = load_scenario(path)
    assert not {p.name: p for p in s.pools}["h100"].capacity_annotations
    path.write_text(
        REFUSED.replace("initial: 0, min: 0", "initial: 1, min: 0")
        % ("2, capacityAnnotations: false", "h100: 1", "8: 1", "")
    )
    load_scenario(path)
