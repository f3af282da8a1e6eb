"""ProvisioningRequests answered (``autoscaler/provisioning.py``): with the real
client against the fake API server, Kueue emulated (``kueueops.py``, its
provisioning admission check included) and Cluster API emulated (``capi.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel_common.names import (
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CAPACITY_LABELS,
)
from autoscaler import clusterstate as cs
from autoscaler import provisioning as prov
from autoscaler.actions.context import ActionContext
from autoscaler.controller import Controller
from autoscaler.kube.client import ClientKube
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import render_metrics
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.wiring import wire
from tests.autoscaler.controller.test_state_survives import STORM_RULES
from tests.autoscaler.pools.test_pools import NS, machine_deployment
from tests.autoscaler.test_kueue_queues import (
    cluster_queue,
    flavor,
    local_queue,
    queued_job,
    rows_of,
)
from tests.support.dying import Cut, Killed
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.fakes.capi import ClusterAPI, machine_set
from tests.support.fakes.kueueops import API, KueueOperators
from tests.support.sources import HealthySource

pytestmark = pytest.mark.timeout(60)
GPU = "nvidia.com/gpu"
T0 = 1_800_000_000.0
Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def h100_pool(api: FakeApiServer, max_size: int = 10) -> None:
    """A pool at 0 nodes that declares 8 H100s a node (scale from zero)."""
    shape = {
        CAPI_CAPACITY_GPU_COUNT: "8",
        CAPI_CAPACITY_GPU_TYPE: GPU,
        CAPI_CAPACITY_LABELS: "pool=h100",
    }
    api.add(machine_deployment("h100", 0, (0, max_size), **shape))
    api.add(machine_set("h100-ms", NS, "h100", 0, **shape))


def kueue_with_provisioning(api: FakeApiServer, quota: int = 128) -> None:
    api.add(flavor("h100", {"pool": "h100"}))
    cq = cluster_queue("team-a", {"h100": quota})
    cq["spec"]["admissionChecks"] = ["gang"]
    api.add(cq)
    api.add(local_queue("a", "team-a"))
    api.add(
        {
            "apiVersion": API,
            "kind": "AdmissionCheck",
            "metadata": {"name": "gang"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "ProvisioningRequestConfig",
                    "name": "atomic",
                },
            },
        }
    )
    api.add(
        {
            "apiVersion": API,
            "kind": "ProvisioningRequestConfig",
            "metadata": {"name": "atomic"},
            "spec": {"provisioningClassName": prov.CLASS},
        }
    )


def replicas(api: FakeApiServer) -> int:
    md = api.get("machinedeployments", NS, "h100") or {}
    return int(md["spec"]["replicas"])


def scale_patches(api: FakeApiServer) -> list[Any]:
    return [r.body for r in api.requests_for("PATCH", r"machinedeployments/h100/scale")]


def condition(pr: Obj, kind: str) -> Obj:
    return next(c for c in pr["status"]["conditions"] if c["type"] == kind)


def setup(
    api: FakeApiServer, clock: Clock, max_size: int = 10
) -> tuple[KueueOperators, ClusterAPI]:
    h100_pool(api, max_size)
    kueue_with_provisioning(api)
    kueue = KueueOperators(api, clock=clock)
    api.add(queued_job("train", "a", 8))  # 8 pods x 8 GPUs: a 64-GPU gang
    kueue.reconcile()
    return kueue, ClusterAPI(api)


async def test_a_64_gpu_gang_gets_8_nodes_at_once_runs_and_the_pool_shrinks(
    api: FakeApiServer, kube: ClientKube
) -> None:
    clock = Clock()
    kueue, capi = setup(api, clock)
    (pr,) = api.objects("provisioningrequests")
    assert pr["spec"]["provisioningClassName"] == prov.CLASS
    assert api.objects("pods") == []  # Kueue holds the job: no pods yet
    provider = ClusterAPIProvider(kube, NS, clock=clock)

    # The queue series leave the Workload to its ProvisioningRequest: pool-scale-up
    # sees no demand for it, so only one of the two grows the pool.
    rows = await cs.collect(kube, provider, clock())
    assert rows_of(rows, "accel_pool_queued_device_requests") == {("h100", GPU): 0}

    provisioner = prov.Provisioner(kube, provider, clock=clock)
    await provisioner.reconcile()
    assert scale_patches(api) == [{"spec": {"replicas": 8}}]  # 8 at once, never 1..7
    pr = api.get("provisioningrequests", "ml", pr["metadata"]["name"]) or {}
    assert condition(pr, "Accepted")["status"] == "True"
    assert "Provisioned" not in {c["type"] for c in pr["status"]["conditions"]}

    capi.reconcile()  # the 8 Machines and their Ready nodes
    clock.now += 60
    await provisioner.reconcile()
    pr = api.get("provisioningrequests", "ml", pr["metadata"]["name"]) or {}
    assert condition(pr, "Provisioned")["reason"] == "CapacityIsProvisioned"
    kueue.reconcile()  # the check is Ready: admitted, the job runs its 8 pods
    wl = kueue.workload_of(api.get("jobs", "ml", "train") or {}) or {}
    assert {c["type"] for c in wl["status"]["conditions"] if c["status"] == "True"} >= {
        "QuotaReserved",
        "Admitted",
    }
    pods = api.objects("pods")
    assert len(pods) == 8
    assert len({p["spec"].get("nodeName") for p in pods}) == 8

    # The booking expires while the pods use every node: nothing is released.
    clock.now += prov.BOOKING + 1
    await provisioner.reconcile()
    pr = api.get("provisioningrequests", "ml", pr["metadata"]["name"]) or {}
    assert condition(pr, "BookingExpired")["status"] == "True"
    assert replicas(api) == 8
    assert len(scale_patches(api)) == 1

    # The job ends: Kueue finishes the Workload and deletes the request, and the
    # nodes the gang used go.
    job = api.get("jobs", "ml", "train") or {}
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    api.add(job)
    for p in api.objects("pods"):
        p["status"]["phase"] = "Succeeded"
        api.add(p)
    kueue.reconcile()
    assert api.objects("provisioningrequests") == []
    await provisioner.reconcile()
    assert replicas(api) == 0
    capi.reconcile()
    assert api.objects("machines") == []
    md = api.get("machinedeployments", NS, "h100") or {}
    assert prov.RECORD not in (md["metadata"].get("annotations") or {})
    assert provisioner.scale_ups == 1


@pytest.mark.parametrize("after", range(1, 15))
async def test_killed_anywhere_in_the_scale_up_resumes_without_a_second(
    api: FakeApiServer, kube: ClientKube, after: int
) -> None:
    """A controller killed right after its ``after``-th API call of its first pass
    (reads 1-8; the record on the MachineDeployment 9-10, the scale 11-12,
    the Accepted condition 13, the Event 14); a new one resumes: one scale-up of 8 nodes
    in all, and the request is answered."""
    clock = Clock()
    _, capi = setup(api, clock)
    cut = Cut(kube, after=after)
    dying = prov.Provisioner(cut, ClusterAPIProvider(cut, NS, clock=clock), clock=clock)
    with pytest.raises(Killed):
        await dying.reconcile()
    assert len(cut.calls) >= after  # the provider gathers two lists at once
    if after == 14:
        assert cut.calls[8:] == [
            "get_custom",  # the record: read
            "patch_custom",  # and written, before
            "get_custom",  # the bounds checked once more
            "patch_scale",  # the scale-up
            "patch_custom_status",  # Accepted
            "create_event",  # ScaledUp
        ]
    fresh = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await fresh.reconcile()
    capi.reconcile()
    await fresh.reconcile()
    assert [p["spec"]["replicas"] for p in scale_patches(api)] == [8]
    assert replicas(api) == 8
    assert len(api.objects("machines")) == 8
    (pr,) = api.objects("provisioningrequests")
    assert condition(pr, "Provisioned")["status"] == "True"


async def test_a_gang_past_the_pools_maximum_fails_and_adds_no_node(
    api: FakeApiServer, kube: ClientKube
) -> None:
    clock = Clock()
    setup(api, clock, max_size=7)
    provisioner = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await provisioner.reconcile()
    assert scale_patches(api) == []
    (pr,) = api.objects("provisioningrequests")
    failed = condition(pr, "Failed")
    assert failed["status"] == "True"
    assert failed["reason"] == "MaxLimitReached"
    assert "8 nodes at once" in failed["message"]


async def test_the_breaker_holds_new_scale_ups(api: FakeApiServer, kube: ClientKube) -> None:
    clock = Clock()
    setup(api, clock)
    why: list[str | None] = ["circuit breaker open"]
    provisioner = prov.Provisioner(
        kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock, blocked=lambda: why[0]
    )
    await provisioner.reconcile()
    assert scale_patches(api) == []
    why[0] = None
    await provisioner.reconcile()
    assert scale_patches(api) == [{"spec": {"replicas": 8}}]


async def test_unused_nodes_are_released_after_the_booking(
    api: FakeApiServer, kube: ClientKube
) -> None:
    clock = Clock()
    _, capi = setup(api, clock)
    provisioner = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await provisioner.reconcile()
    capi.reconcile()
    await provisioner.reconcile()  # Provisioned; no pod comes (the test leaves Kueue be)
    clock.now += prov.BOOKING + 1
    await provisioner.reconcile()
    assert replicas(api) == 0
    capi.reconcile()
    assert api.objects("machines") == []
    (pr,) = api.objects("provisioningrequests")
    assert condition(pr, "BookingExpired")["reason"] == "CapacityReservationTimeExpired"


async def test_malformed_requests_and_records_are_skipped_and_counted(
    api: FakeApiServer, kube: ClientKube
) -> None:
    clock = Clock()
    h100_pool(api)
    md = api.get("machinedeployments", NS, "h100") or {}
    md["metadata"]["annotations"][prov.RECORD] = "not json"
    api.add(md)
    bad: Obj = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": "odd", "namespace": "ml"},
        "spec": {"provisioningClassName": prov.CLASS, "podSets": [{"count": "many"}]},
    }
    api.add(bad)
    other = json.loads(json.dumps(bad))
    other["metadata"]["name"] = "theirs"
    other["spec"] = {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io"}
    api.add(other)
    provisioner = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await provisioner.reconcile()
    assert provisioner.skipped == {"ProvisioningRequest": 1, "MachineDeployment": 1}
    assert scale_patches(api) == []
    assert "status" not in (api.get("provisioningrequests", "ml", "theirs") or {})


def test_nodes_needed_rounds_each_pod_set_up() -> None:
    assert prov.nodes_needed([{GPU: 8}], [8], {GPU: 8}) == 8
    assert prov.nodes_needed([{GPU: 2}, {GPU: 8}], [5, 1], {GPU: 8}) == 3
    with pytest.raises(Exception, match="cannot hold"):
        prov.nodes_needed([{GPU: 16}], [1], {GPU: 8})


async def test_nodes_that_never_come_fail_the_request_and_are_given_back(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """The scale-up is asked for, no Machine comes (Cluster API is not reconciled):
    after the provisioning timeout the request is Failed (CapacityIsNotFound), and
    the replicas it added are released."""
    clock = Clock()
    setup(api, clock)
    provisioner = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await provisioner.reconcile()
    assert replicas(api) == 8
    clock.now += prov.TIMEOUT
    await provisioner.reconcile()
    (pr,) = api.objects("provisioningrequests")
    assert condition(pr, "Failed")["reason"] == "CapacityIsNotFound"
    await provisioner.reconcile()
    # No node registered: the 8 replicas that never came are given back.
    assert replicas(api) == 0
    md = api.get("machinedeployments", NS, "h100") or {}
    assert prov.RECORD not in (md["metadata"].get("annotations") or {})
    assert provisioner.scale_ups == 1


def in_process(tmp: Path, kube: ClientKube, provisioner: prov.Provisioner, **kw: Any) -> Controller:
    rules = tmp / "rules.yaml"
    rules.write_text(STORM_RULES)
    ctx = ActionContext(kube=kube, controller="accel-autoscaler", replica="test")
    watcher = RuleWatcher([str(rules)], source="prometheus")
    source = HealthySource()
    return Controller(
        watcher,
        source,
        AlertReceiver(),
        wiring=wire(source, lambda: watcher.current, ctx),
        provisioner=provisioner,
        **kw,
    )


async def test_the_controller_answers_after_each_cycle_unless_the_breaker_is_open(
    api: FakeApiServer, kube: ClientKube, tmp_path: Path
) -> None:
    clock = Clock()
    setup(api, clock)
    provisioner = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    dry = in_process(tmp_path, kube, provisioner, dry_run=True)
    await dry.cycle()
    assert scale_patches(api) == []  # --dry-run answers nothing
    controller = in_process(tmp_path, kube, provisioner)
    controller.state.breaker_open = True
    await controller.cycle()
    assert scale_patches(api) == []
    controller.state.breaker_open = False
    await controller.cycle()
    assert scale_patches(api) == [{"spec": {"replicas": 8}}]
    text = render_metrics(controller)
    assert 'accel_autoscaler_provisioning_total{outcome="scale_up"} 1.0' in text
    assert 'accel_autoscaler_provisioning_total{outcome="error"} 0.0' in text


def device_pod(name: str, node: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "m", "image": "m:1", "resources": {"limits": {GPU: "8"}}}],
        },
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize("after", range(1, 35))  # the pass makes 34 calls
async def test_killed_anywhere_in_the_release_resumes_without_a_second(
    api: FakeApiServer, kube: ClientKube, after: int
) -> None:
    """Three of the eight nodes run pods when the booking expires: the other five
    go, once, whether or not the controller is killed after its ``after``-th API
    call of that pass; the busy three stay, and so does their booking."""
    clock = Clock()
    _, capi = setup(api, clock)
    first = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await first.reconcile()
    capi.reconcile()
    await first.reconcile()  # Provisioned
    busy = sorted(n["metadata"]["name"] for n in api.objects("nodes"))[:3]
    for i, node in enumerate(busy):
        api.add(device_pod(f"p{i}", node))
    clock.now += prov.BOOKING + 1
    cut = Cut(kube, after=after)
    dying = prov.Provisioner(cut, ClusterAPIProvider(cut, NS, clock=clock), clock=clock)
    with pytest.raises(Killed):
        await dying.reconcile()
    fresh = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await fresh.reconcile()
    capi.reconcile()
    await fresh.reconcile()
    assert replicas(api) == 3
    assert [p["spec"]["replicas"] for p in scale_patches(api)] == [8, 3]
    assert sorted(n["metadata"]["name"] for n in api.objects("nodes")) == busy
    md = api.get("machinedeployments", NS, "h100") or {}
    (booking,) = prov.read_records(md).values()
    assert (booking.nodes, booking.held) == (3, True)


def test_a_pod_template_name_kueue_shortened_is_matched_by_position() -> None:
    r = prov.read_request(
        {
            "metadata": {"name": "x", "namespace": "ml", "uid": "u"},
            "spec": {
                "provisioningClassName": prov.CLASS,
                "podSets": [{"podTemplateRef": {"name": "ppt-very-long-name-3f9a2"}, "count": 2}],
            },
        }
    )
    assert r is not None
    template = {"spec": {"containers": [{"name": "m", "resources": {"limits": {GPU: "4"}}}]}}
    wl = {
        "spec": {"podSets": [{"name": "workers", "count": 2, "template": template}]},
        "status": {"admission": {"podSetAssignments": [{"flavors": {GPU: "h100"}}]}},
    }
    assert prov.gang_of(wl, r) == ([{GPU: 4}], "h100")


async def test_two_gangs_in_one_pass_each_get_their_nodes(
    api: FakeApiServer, kube: ClientKube
) -> None:
    """Two requests answered in one pass: the second starts from the replicas the
    first set (8 -> 16), not from the pass's first read of the pool (0 -> 8)."""
    clock = Clock()
    kueue, capi = setup(api, clock, max_size=16)
    api.add(queued_job("eval", "a", 8))
    kueue.reconcile()
    assert len(api.objects("provisioningrequests")) == 2
    provisioner = prov.Provisioner(kube, ClusterAPIProvider(kube, NS, clock=clock), clock=clock)
    await provisioner.reconcile()
    assert [p["spec"]["replicas"] for p in scale_patches(api)] == [8, 16]
    capi.reconcile()
    await provisioner.reconcile()
    for pr in api.objects("provisioningrequests"):
        assert condition(pr, "Provisioned")["status"] == "True"
