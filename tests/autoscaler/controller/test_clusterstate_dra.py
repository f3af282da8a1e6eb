"""Cluster state with Dynamic Resource Allocation: a pod that holds its GPU through
a ResourceClaim is a device pod (job series), one whose claims hold only a network
card is not, a pending claim pod counts in its pool's pressure where the pool's
nodes publish DRA devices, and the DRA reads degrade as documented: no
``resource.k8s.io/v1`` means no DRA, no permission means claims are unknown."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from accel_common.dra import EMPTY_STATE, DraState
from autoscaler import clusterstate as cs
from autoscaler.kube import dra as kube_dra
from autoscaler.kube.client import ClientKube
from autoscaler.pools.base import Pool
from tests.support import draobjs
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import node, pod

pytestmark = pytest.mark.timeout(60)

T0 = 1_800_000_000.0
NIC = "dra.net"


def _dra_node(name: str, pool: str) -> dict[str, Any]:
    n = node(name, pool=pool)
    for part in ("allocatable", "capacity"):
        n["status"][part].pop("nvidia.com/gpu")
    n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    n["metadata"]["creationTimestamp"] = "2026-11-29T10:00:00Z"
    return n


def _nic_claim(name: str, pod_name: str) -> dict[str, Any]:
    c = draobjs.allocated_claim(name, "n1", ["eth1"], pod=pod_name, driver=NIC)
    c["spec"] = draobjs.claim_spec(1, "nic.example.com")
    return c


class _Pools:
    name = "test"

    def __init__(self, pools: list[Pool]) -> None:
        self._pools = pools

    async def pools(self) -> list[Pool]:
        return self._pools

    async def set_replicas(self, pool: str, replicas: int) -> None:
        raise AssertionError("not scaled here")

    async def mark_for_deletion(self, pool: str, node: str) -> None:
        raise AssertionError("not scaled here")


def _pick(rows: list[cs.Row], name: str) -> dict[tuple[str, ...], float]:
    return {tuple(lb.values()): v for m, lb, v in rows if m.name == name}


def test_is_device_pod() -> None:
    gpu = draobjs.allocated_claim("g", "n1", ["gpu-0"])
    nic = _nic_claim("e", "x")
    state = DraState.build([gpu, nic])
    assert cs.is_device_pod(draobjs.dra_pod("a", "n1", ["g"]), state)
    assert not cs.is_device_pod(draobjs.dra_pod("b", "n1", ["e"]), state)
    # A claim not seen: unknown, so a device pod; no view at all: every claim pod.
    assert cs.is_device_pod(draobjs.dra_pod("c", "n1", ["missing"]), state)
    assert cs.is_device_pod(draobjs.dra_pod("b", "n1", ["e"]), None)
    assert cs.is_device_pod(pod("plug", "n1"), EMPTY_STATE)
    assert not cs.is_device_pod(pod("cpu", "n1", gpus=0), None)
    # Devices are counted under the driver, never with the plugin's resource.
    assert cs.all_device_requests(draobjs.dra_pod("a", "n1", ["g"]), state) == {"gpu.nvidia.com": 1}
    slices = DraState.build(slices=[draobjs.resource_slice("n1", 3)])
    assert cs.dra_node_devices("n1", slices) == {"gpu.nvidia.com": 3}


async def test_collect_counts_claim_pods(api: FakeApiServer, kube: ClientKube) -> None:
    api.add(_dra_node("n1", pool="p"))
    api.add(_dra_node("n2", pool="p"))
    api.add(draobjs.device_class())
    api.add(draobjs.resource_slice("n1", 1))
    api.add(draobjs.resource_slice("n2", 2))
    api.add(draobjs.allocated_claim("g", "n1", ["gpu-0"], pod="trainer"))
    api.add(draobjs.dra_pod("trainer", "n1", ["g"]))
    api.add(_nic_claim("e", "netonly"))
    api.add(draobjs.dra_pod("netonly", "n1", ["e"]))
    # Pending: its claim generated from a template, not allocated yet (asks for 2).
    api.add(draobjs.claim("waiter-gpus", count=2))
    api.add(
        draobjs.dra_pod(
            "waiter", None, templates={"gpus": "two"}, generated={"gpus": "waiter-gpus"}
        )
    )
    pools = _Pools([Pool("p", 0, 10, 2, ("n1", "n2"), 0)])
    rows = await cs.collect(kube, pools, T0)
    ages = _pick(rows, "accel_job_age_seconds")
    assert {k[1] for k in ages} == {"trainer"}
    pending = _pick(rows, "accel_pool_pending_device_requests")
    assert sum(pending.values()) == 2, pending
    # The template was not needed: every claim pod's claim exists.
    assert api.requests_for("GET", r"resourceclaimtemplates") == []


async def test_templates_are_read_when_a_claim_is_not_generated(
    api: FakeApiServer, kube: ClientKube
) -> None:
    api.add(draobjs.claim_template("two", count=2))
    waiting = draobjs.dra_pod("w", None, templates={"gpus": "two"})
    state = await kube_dra.read_dra(kube, [waiting])
    assert state is not None
    assert state.requests(waiting) == {"nvidia": 2}
    assert len(api.requests_for("GET", r"/resourceclaimtemplates$")) == 1


async def test_dra_not_served_is_no_dra(api: FakeApiServer, kube: ClientKube) -> None:
    api.faults.fail(1, status=404, path_regex=r"/resourceclaims$")
    api.faults.fail(1, status=404, path_regex=r"/deviceclasses$")
    api.faults.fail(1, status=404, path_regex=r"/resourceslices$")
    assert await kube_dra.read_dra(kube) is EMPTY_STATE


async def test_dra_forbidden_is_unknown_and_said_once(
    api: FakeApiServer, kube: ClientKube, caplog: pytest.LogCaptureFixture
) -> None:
    kube_dra._DRA_REPORTED.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            api.faults.fail(1, status=403, path_regex=r"/resourceclaims$")
            assert await kube_dra.read_dra(kube) is None
    said = [r for r in caplog.records if "cannot list resourceclaims" in r.getMessage()]
    assert len(said) == 1
    assert "rbac.yaml" in said[0].getMessage()
