"""The kube-scheduler extender: bodies shaped exactly as kube-scheduler sends them
(``k8s.io/kube-scheduler/extender/v1`` has no JSON tags, so the keys are the Go
field names), filter and prioritize answers, fail-open, bad bodies, and the
preferred-devices annotation; then the real ``accel-autoscaler extender`` process
against simulated exporters."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from autoscaler.placement.extender import MAX_PRIORITY, Extender, FleetCache, make_app
from autoscaler.placement.score import Device, FleetState, NodeDevices
from autoscaler.sources.scrape import ScrapeSource
from tests.autoscaler.placement.test_placement import nvlink_node, two_switch_pcie_node
from tests.support.paths import REPO
from tests.support.procs import exporter, free_port, wait_http
from tests.support.waits import wait


def k8s_pod(count: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pending pod as the API server returns it and kube-scheduler forwards it."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "train-7f9c",
            "generateName": "train-",
            "namespace": "ml",
            "uid": "0b6c2f35-64a5-4c7e-9a53-2f1b7a4d2a11",
            "resourceVersion": "48211",
            "creationTimestamp": "2026-11-29T20:00:00Z",
            "labels": {"job-name": "train"},
            "annotations": annotations or {},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": "5d1f1a3e-0c0e-4c52-8d0b-0f0e8c1f2a33",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1",
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(count), "memory": "64Gi"},
                        "requests": {"nvidia.com/gpu": str(count), "cpu": "8", "memory": "64Gi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def args_names(pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """ExtenderArgs with nodeCacheCapable: true, as Go's encoding/json writes it."""
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def args_nodes(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """ExtenderArgs with nodeCacheCapable: false: full Node objects, no names."""
    return {
        "Pod": pod,
        "Nodes": {"metadata": {"resourceVersion": "9"}, "items": nodes},
        "NodeNames": None,
    }


def cache_with(state: FleetState | None) -> FleetCache:
    # The source is never asked: the state under test is set directly.
    cache = FleetCache(ScrapeSource({"x": "http://127.0.0.1:9/metrics"}), max_age=3600)
    if state is not None:
        cache.fleet = state
        cache.refreshed_at = time.time()
    return cache


@pytest.fixture
async def client_for() -> AsyncIterator[Any]:
    made: list[TestClient[Any, Any]] = []

    async def make(extender: Extender) -> TestClient[Any, Any]:
        client = TestClient(TestServer(make_app(extender), host="127.0.0.1"))
        await client.start_server()
        made.append(client)
        return client

    yield make
    for c in made:
        await c.close()


def fleet(*nodes: NodeDevices) -> FleetState:
    return FleetState({n.name: n for n in nodes}, at=time.time())


async def test_filter_answers_with_go_field_names(client_for: Any) -> None:
    state = fleet(
        nvlink_node("gpu-a", held={0, 1, 2, 3, 4, 5}),  # 2 free
        nvlink_node("gpu-b"),
        two_switch_pcie_node("gpu-c", set()),
    )
    client = await client_for(Extender(cache_with(state)))
    resp = await client.post("/filter", json=args_names(k8s_pod(4), ["gpu-a", "gpu-b", "gpu-c"]))
    assert resp.status == 200
    body = await resp.json()
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert body["Nodes"] is None
    assert body["NodeNames"] == ["gpu-b", "gpu-c"]
    assert body["FailedNodes"] == {
        "gpu-a": "accel-fleet: 2 of 8 healthy nvidia devices are free, the pod needs 4"
    }
    assert body["FailedAndUnresolvableNodes"] == {}
    assert body["Error"] == ""


async def test_filter_with_full_node_objects_returns_a_node_list(client_for: Any) -> None:
    state = fleet(nvlink_node("gpu-a"), nvlink_node("gpu-b"))
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-a", "labels": {"kubernetes.io/hostname": "gpu-a"}},
            "spec": {
                "taints": [
                    {"key": "accel-fleet.io/faulty", "value": "true", "effect": "NoSchedule"}
                ]
            },
        },
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-b"}, "spec": {}},
    ]
    client = await client_for(Extender(cache_with(state)))
    body = await (await client.post("/filter", json=args_nodes(k8s_pod(2), nodes))).json()
    assert body["NodeNames"] is None
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["gpu-b"]
    assert "tainted accel-fleet.io/faulty=true" in body["FailedAndUnresolvableNodes"]["gpu-a"]


async def test_filter_never_passes_a_node_without_enough_free_devices(client_for: Any) -> None:
    """Over 200 random fleets: every node filter lets through has
    at least as many free, healthy NVIDIA devices as the pod asks for."""
    rng = random.Random(7)
    extender = Extender(cache_with(None))
    client = await client_for(extender)
    passed = 0
    for _ in range(200):
        nodes: list[NodeDevices] = []
        for i in range(rng.randint(1, 6)):
            base = nvlink_node(f"n{i}", n=rng.choice([4, 8]), island=rng.choice([2, 4, 8]))
            devs = {
                name: Device(
                    name,
                    rng.choice(["nvidia", "nvidia", "amd"]),
                    d.model,
                    healthy=rng.random() > 0.15,
                    holders=("x/y",) if rng.random() < 0.4 else (),
                    utilization=rng.random(),
                )
                for name, d in base.devices.items()
            }
            nodes.append(NodeDevices(base.name, devs, base.distance))
        state = fleet(*nodes)
        extender.cache.fleet = state
        extender.cache.refreshed_at = time.time()
        count = rng.randint(1, 8)
        names = [n.name for n in nodes]
        body = await (await client.post("/filter", json=args_names(k8s_pod(count), names))).json()
        for name in body["NodeNames"]:
            free = [
                d
                for d in state.nodes[name].devices.values()
                if d.vendor == "nvidia" and d.healthy and d.free
            ]
            assert len(free) >= count
        refused = set(body["FailedNodes"]) | set(body["FailedAndUnresolvableNodes"])
        assert refused | set(body["NodeNames"]) == set(names)
        passed += len(body["NodeNames"])
    assert passed > 100  # the fleets are not all hopeless


async def test_prioritize_scores_are_integers_in_the_extender_range(client_for: Any) -> None:
    state = fleet(
        nvlink_node("nvl"),  # 4 GPUs on NVLink
        two_switch_pcie_node("pcie-split", {0, 1, 4, 5}),  # 4 free across two sockets
        nvlink_node("busy", busy=0.95),
        nvlink_node("full", held=set(range(8))),
    )
    client = await client_for(Extender(cache_with(state)))
    names = ["nvl", "pcie-split", "busy", "full", "unknown"]
    resp = await client.post("/prioritize", json=args_names(k8s_pod(4), names))
    assert resp.status == 200
    body = await resp.json()
    assert [h["Host"] for h in body] == names
    assert all(set(h) == {"Host", "Score"} for h in body)
    assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= MAX_PRIORITY for h in body)
    scores = {h["Host"]: h["Score"] for h in body}
    assert scores["nvl"] == MAX_PRIORITY
    assert scores["nvl"] > scores["busy"] > scores["full"] == 0
    assert scores["nvl"] > scores["pcie-split"]
    assert scores["unknown"] == 0


async def test_bad_bodies_get_a_400_that_says_why(client_for: Any) -> None:
    client = await client_for(Extender(cache_with(fleet(nvlink_node("a")))))
    cases: list[tuple[bytes, str]] = [
        (b"{not json", "the body is not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"NodeNames": ["a"]}', "ExtenderArgs.Pod is missing"),
        (json.dumps({"Pod": k8s_pod(1)}).encode(), "neither Nodes nor NodeNames"),
        (json.dumps({"Pod": k8s_pod(1), "NodeNames": "a"}).encode(), "must be a list of strings"),
        (json.dumps({"Pod": k8s_pod(1), "Nodes": {"x": 1}}).encode(), "NodeList with an items"),
    ]
    for verb in ("filter", "prioritize"):
        for raw, message in cases:
            resp = await client.post(f"/{verb}", data=raw)
            assert resp.status == 400, raw
            assert message in (await resp.json())["Error"]
    # The server is still there and right.
    ok = await client.post("/filter", json=args_names(k8s_pod(1), ["a"]))
    assert (await ok.json())["NodeNames"] == ["a"]


async def test_fail_open_when_the_source_is_down(
    client_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The source is down (nothing answers on its port): every node passes with
    the same score, and the log says why, once."""
    source = ScrapeSource({"gpu-a": f"http://127.0.0.1:{free_port()}/metrics"}, timeout=2.0)
    cache = FleetCache(source, interval=1.0, max_age=60.0)
    await cache.refresh()
    extender = Extender(cache)
    client = await client_for(extender)
    names = ["gpu-a", "gpu-b", "gpu-c"]
    with caplog.at_level(logging.WARNING, logger="accel_autoscaler.placement.extender"):
        for _ in range(3):
            f = await (await client.post("/filter", json=args_names(k8s_pod(8), names))).json()
            assert f["NodeNames"] == names
            assert f["FailedNodes"] == {} and f["FailedAndUnresolvableNodes"] == {}
            assert f["Error"] == ""
            p = await (await client.post("/prioritize", json=args_names(k8s_pod(8), names))).json()
            assert len({h["Score"] for h in p}) == 1
    opened = [r.getMessage() for r in caplog.records if "fail-open" in r.getMessage()]
    assert opened == ["fail-open: passing every node with equal scores: source scrape is down"]
    assert extender.fail_open_count == 6
    health = await (await client.get("/healthz")).json()
    assert health == {
        "fleet": "unavailable",
        "reason": "source scrape is down",
        "nodes": 0,
        "failOpen": 6,
    }
    await source.close()


async def test_stale_state_and_bad_annotations_fail_open(client_for: Any) -> None:
    cache = cache_with(fleet(nvlink_node("a", held=set(range(8)))))
    cache.max_age = 30
    cache.refreshed_at = time.time() - 120
    client = await client_for(Extender(cache))
    body = await (await client.post("/filter", json=args_names(k8s_pod(1), ["a"]))).json()
    assert body["NodeNames"] == ["a"]  # all held, but the state is too old to trust
    cache.refreshed_at = time.time()
    body = await (await client.post("/filter", json=args_names(k8s_pod(1), ["a"]))).json()
    assert body["NodeNames"] == [] and "a" in body["FailedNodes"]
    bad = k8s_pod(1, {"accel-fleet.io/flops": "lots"})
    body = await (await client.post("/filter", json=args_names(bad, ["a"]))).json()
    assert body["NodeNames"] == ["a"]


async def test_a_pod_without_devices_passes_everywhere(client_for: Any) -> None:
    client = await client_for(Extender(cache_with(fleet(nvlink_node("a", held=set(range(8)))))))
    plain = k8s_pod(1)
    del plain["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    del plain["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
    body = await (await client.post("/filter", json=args_names(plain, ["a", "b"]))).json()
    assert body["NodeNames"] == ["a", "b"]


class PodPatches:
    """Records pod patches through the ``Kube`` wrapper's own method names (the
    level the project's tests mock at, never the HTTP client)."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((namespace, name, copy.deepcopy(patch)))
        return {}

    async def list_nodes(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {
                    "name": "gpu-b",
                    "annotations": {"accel-fleet.io/remediation": "draining"},
                }
            }
        ]


async def test_the_chosen_devices_go_into_a_pod_annotation(client_for: Any) -> None:
    kube = PodPatches()
    cache = cache_with(None)
    cache.kube = kube  # type: ignore[assignment]
    await cache.refresh()  # the source is unreachable; the node list still comes in
    assert cache.fleet is None and set(cache.nodes) == {"gpu-b"}
    await cache.source.close()
    cache.fleet = fleet(two_switch_pcie_node("gpu-a", {1}), nvlink_node("gpu-b"))
    cache.refreshed_at = time.time()
    extender = Extender(cache, annotate=True)
    client = await client_for(extender)
    body = await (
        await client.post("/prioritize", json=args_names(k8s_pod(4), ["gpu-a", "gpu-b"]))
    ).json()
    # gpu-b is under remediation (from the cached node objects): score 0.
    assert {h["Host"]: h["Score"] for h in body} == {"gpu-a": 10, "gpu-b": 0}
    await extender.drain()
    assert kube.patches == [
        (
            "ml",
            "train-7f9c",
            {
                "metadata": {
                    "annotations": {
                        "accel-fleet.io/preferred-devices": json.dumps(
                            {"gpu-a": ["nvidia4", "nvidia5", "nvidia6", "nvidia7"]}
                        )
                    }
                }
            },
        )
    ]


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_extender_process_against_real_exporters() -> None:
    """``accel-autoscaler extender`` with the scrape source: the PCIe node (pods
    hold two GPUs) and an NVSwitch node; then the exporters stop and it fails open."""
    port = free_port()
    with (
        exporter(["--backends", "sim", "--sim-devices", "nvidia:8"]) as nvl,
        exporter(
            ["--backends", "sim", "--sim-devices", "oneapi:8", "--sim-pods", "1", "--sim-seed", "3"]
        ) as pcie,
    ):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autoscaler.cli",
                "extender",
                "--listen",
                f"127.0.0.1:{port}",
                "--source",
                "scrape",
                "--targets",
                f"nvl={nvl}/metrics,pcie={pcie}/metrics",
                "--refresh-interval",
                "500ms",
                "--max-age",
                "2s",
            ],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_http(base + "/healthz")

            def fleet_ok() -> bool:
                with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
                    return bool(json.loads(r.read())["fleet"] == "ok")

            wait(fleet_ok, what="the fleet read", every=0.1)
            intel = k8s_pod(7)
            res = intel["spec"]["containers"][0]["resources"]
            for part in ("limits", "requests"):
                del res[part]["nvidia.com/gpu"]
                res[part]["gpu.intel.com/i915"] = "4"
            got = _post(base + "/filter", args_names(intel, ["nvl", "pcie"]))
            assert got["NodeNames"] == ["pcie"]
            assert "has 0 healthy oneapi devices" in got["FailedAndUnresolvableNodes"]["nvl"]
            got = _post(base + "/filter", args_names(k8s_pod(8), ["nvl", "pcie"]))
            assert got["NodeNames"] == ["nvl"]
            try:
                _post(base + "/filter", {"Pod": "x"})
            except urllib.error.HTTPError as e:
                assert e.code == 400
            else:
                raise AssertionError("a bad body must get a 400")
        except BaseException:
            proc.terminate()
            proc.wait(timeout=10)
            raise
    try:
        # Both exporters are gone: within --max-age the extender fails open.

        def fails_open() -> bool:
            got = _post(base + "/filter", args_names(k8s_pod(8), ["nvl", "pcie", "other"]))
            return bool(got["NodeNames"] == ["nvl", "pcie", "other"])

        wait(fails_open, what="every node passed (failing open)", every=0.2)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "fail-open: passing every node with equal scores" in err


async def test_refresh_reads_a_real_exporter() -> None:
    with exporter(["--backends", "sim", "--sim-devices", "amd:4"]) as url:
        cache = FleetCache(ScrapeSource({"amd-node": url + "/metrics"}, timeout=5.0))
        await cache.refresh()
        state, why = cache.current()
        assert why == "" and state is not None
        assert sorted(state.nodes["amd-node"].devices) == ["amd0", "amd1", "amd2", "amd3"]
        assert state.nodes["amd-node"].dist("amd0", "amd3") == 10  # xGMI
        await cache.source.close()
    await asyncio.sleep(0)
