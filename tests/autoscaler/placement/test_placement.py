"""The placement scorer: hard filters, each soft term, device-set choice, priority
within a cycle, the device catalogue, and ``accel-autoscaler place`` against real
simulated exporters."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.placement.catalogue import (
    CatalogueError,
    default_catalogue,
    load_catalogue,
)
from autoscaler.placement.fleet import read_fleet
from autoscaler.placement.score import (
    Device,
    FleetState,
    NodeDevices,
    PodRequest,
    PodRequestError,
    Weights,
    choose_devices,
    islands,
    pod_request,
    schedule_cycle,
    score,
)
from autoscaler.sources.scrape import ScrapeSource
from exporter.model import DeviceInfo, Link
from exporter.topology import distances
from tests.support.paths import REPO
from tests.support.procs import exporter, http_get
from tests.support.waits import until

# Slow (places jobs on fleets read through a real Prometheus): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
MAX1550 = "Intel(R) Data Center GPU Max 1550"


def pod(
    count: int,
    resource: str = "nvidia.com/gpu",
    annotations: dict[str, str] | None = None,
    priority: int | None = None,
    name: str = "job",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "train:1", "resources": {"limits": {resource: str(count)}}}
        ]
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
        "spec": spec,
    }


def matrix(infos: list[DeviceInfo], links: list[Link]) -> dict[tuple[str, str], float]:
    """The distance matrix exactly as the exporter computes it."""
    return {(a, b): d for a, b, d in distances(infos, links)}


def nvlink_node(
    name: str,
    n: int = 8,
    *,
    model: str = H100,
    busy: float = 0.0,
    held: set[int] = frozenset(),  # type: ignore[assignment]
    island: int = 8,
) -> NodeDevices:
    infos = [
        DeviceInfo(device=f"nvidia{i}", vendor="nvidia", uuid=f"u{name}{i}", model=model)
        for i in range(n)
    ]
    links = [
        Link(a.device, b.device, "nvlink", 18)
        for a in infos
        for b in infos
        if a is not b and int(a.device[6:]) // island == int(b.device[6:]) // island
    ]
    devs = {
        d.device: Device(
            d.device,
            "nvidia",
            model,
            holders=("other/pod",) if i in held else (),
            utilization=busy,
            memory_used_ratio=0.2,
        )
        for i, d in enumerate(infos)
    }
    return NodeDevices(name, devs, matrix(infos, links))


def two_switch_pcie_node(name: str, held: set[int]) -> NodeDevices:
    """8 GPUs, no NVLink: 0-3 behind one PCIe switch, 4-7 behind another, the two
    switches on different sockets."""
    infos = [
        DeviceInfo(
            device=f"nvidia{i}",
            vendor="nvidia",
            uuid=f"u{i}",
            model="NVIDIA L40S",
            numa_node=str(i // 4),
        )
        for i in range(8)
    ]
    links = []
    for a in infos:
        for b in infos:
            if a is b:
                continue
            same = int(a.device[6:]) // 4 == int(b.device[6:]) // 4
            links.append(Link(a.device, b.device, "pcie_switch" if same else "system", 1))
    devs = {
        d.device: Device(
            d.device,
            "nvidia",
            d.model,
            holders=("other/pod",) if i in held else (),
            utilization=0.1,
            memory_used_ratio=0.1,
        )
        for i, d in enumerate(infos)
    }
    return NodeDevices(name, devs, matrix(infos, links))


def fleet(*nodes: NodeDevices) -> FleetState:
    return FleetState({n.name: n for n in nodes}, at=0.0)


# ------------------------------------------------------------------ pod requests


def test_pod_request_reads_resources_and_annotations() -> None:
    p = pod(
        4,
        annotations={
            "accel-fleet.io/flops": "3.2e18",
            "accel-fleet.io/precision": "FP8",
            "accel-fleet.io/models": "H100,H200",
            "accel-fleet.io/data-location": "topology.kubernetes.io/zone=us-east-1a",
        },
        priority=1000,
    )
    req = pod_request(p)
    assert req.count == 4
    assert req.vendors == frozenset({"nvidia"})
    assert req.models == ("H100", "H200")
    assert req.flops == 3.2e18
    assert req.precision == "fp8"
    assert req.data_location == (("topology.kubernetes.io/zone", "us-east-1a"),)
    assert req.priority == 1000
    assert req.key == "ml/job"
    assert pod_request(pod(2, "gpu.intel.com/i915")).vendors == frozenset({"oneapi"})


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"accel-fleet.io/flops": "lots"}, "accel-fleet.io/flops: 'lots' is not a number"),
        ({"accel-fleet.io/flops": "-1"}, "must be a positive number"),
        ({"accel-fleet.io/precision": "fp4"}, "unknown precision 'fp4'"),
        ({"accel-fleet.io/vendors": "cerebras"}, "unknown vendor 'cerebras'"),
        ({"accel-fleet.io/vendors": "amd"}, "excludes every vendor the pod's resources ask for"),
        ({"accel-fleet.io/data-location": "us-east-1a"}, "is not LABEL=VALUE"),
    ],
)
def test_bad_pod_annotations_say_what_is_wrong(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(PodRequestError, match=message.replace("(", r"\(")):
        pod_request(pod(1, annotations=annotations))


def test_a_fractional_device_count_is_refused() -> None:
    with pytest.raises(PodRequestError, match=r"container main: resources nvidia.com/gpu"):
        pod_request(
            pod(1)
            | {
                "spec": {
                    "containers": [
                        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}
                    ]
                }
            }
        )


# ----------------------------------------------------------------- hard filters


def test_faulty_taint_remediation_and_unhealthy_devices_are_filtered() -> None:
    sick = nvlink_node("sick")
    sick_devs = dict(sick.devices)
    for i in range(5):  # 5 of 8 devices down: only 3 healthy
        sick_devs[f"nvidia{i}"] = Device(f"nvidia{i}", "nvidia", H100, healthy=False)
    state = fleet(
        nvlink_node("tainted"),
        nvlink_node("remediating"),
        NodeDevices("sick", sick_devs, sick.distance),
        nvlink_node("full", held={0, 1, 2, 3, 4, 5}),
        nvlink_node("ok"),
    )
    nodes: list[dict[str, Any] | str] = [
        {
            "metadata": {"name": "tainted"},
            "spec": {
                "taints": [
                    {"key": "accel-fleet.io/faulty", "value": "true", "effect": "NoSchedule"}
                ]
            },
        },
        {"metadata": {"name": "remediating", "annotations": {"accel-fleet.io/remediation": "x"}}},
        "sick",
        "full",
        "ok",
        "unknown",
    ]
    ranking = score(pod_request(pod(4)), nodes, state)
    assert [c.node for c in ranking.candidates] == ["ok"]
    why = {r.node: r for r in ranking.rejected}
    assert "tainted accel-fleet.io/faulty=true:NoSchedule" in why["tainted"].reason
    assert "under remediation" in why["remediating"].reason
    assert why["sick"].reason == "has 3 healthy nvidia devices, the pod needs 4"
    assert not why["sick"].resolvable
    assert why["full"].reason == "2 of 8 healthy nvidia devices are free, the pod needs 4"
    assert why["full"].resolvable
    assert "no device metrics for this node" in why["unknown"].reason


def test_vendor_and_model_must_be_acceptable() -> None:
    state = fleet(nvlink_node("h100"), nvlink_node("a100", model=A100))
    ranking = score(
        pod_request(pod(2, annotations={"accel-fleet.io/models": "A100"})), ["h100", "a100"], state
    )
    assert [c.node for c in ranking.candidates] == ["a100"]
    assert "of model A100" in ranking.rejected[0].reason
    amd = score(pod_request(pod(2, "amd.com/gpu")), ["h100", "a100"], state)
    assert amd.candidates == ()


# ------------------------------------------------------------------- topology


def test_four_gpus_on_a_two_switch_pcie_node_share_one_switch() -> None:
    """One GPU behind the first switch is taken, so first-fit would hand out 0,2,3,4
    and put the job across both sockets; the scorer takes the four behind the second
    switch."""
    node = two_switch_pcie_node("pcie", held={1})
    assert node.dist("nvidia0", "nvidia3") == 20  # pcie_switch
    assert node.dist("nvidia3", "nvidia4") == 50  # across sockets
    ranking = score(pod_request(pod(4)), ["pcie"], fleet(node))
    best = ranking.candidates[0]
    assert best.devices == ("nvidia4", "nvidia5", "nvidia6", "nvidia7")
    assert best.distance == 6 * 20
    assert best.terms.topology == pytest.approx(0.75)
    # With every GPU free, either switch will do, never a mix.
    free = score(pod_request(pod(4)), ["pcie"], fleet(two_switch_pcie_node("pcie", set())))
    assert free.candidates[0].devices == ("nvidia0", "nvidia1", "nvidia2", "nvidia3")


def test_topology_prefers_the_node_where_the_job_stays_on_one_switch() -> None:
    split = two_switch_pcie_node("split", held={0, 1, 4, 5})  # 2+2 free: must cross
    whole = two_switch_pcie_node("whole", held={0, 1, 2, 3})  # 4 free behind one switch
    ranking = score(pod_request(pod(4)), ["split", "whole"], fleet(split, whole))
    assert ranking.candidates[0].node == "whole"
    by = {c.node: c for c in ranking.candidates}
    assert by["split"].terms.topology < by["whole"].terms.topology


def test_large_pools_are_searched_greedily_and_still_keep_an_island() -> None:
    """16 GPUs in two NVLink islands of 8: 16 choose 8 is 12870 subsets, past the
    exact limit; the greedy search still returns one whole island."""
    node = nvlink_node("big", n=16, island=8)
    assert sorted(len(g) for g in islands(node)) == [8, 8]
    chosen = choose_devices(node, list(node.devices), 8)
    assert len({int(d[6:]) // 8 for d in chosen}) == 1


async def test_topology_through_a_real_exporter_and_the_scrape_source() -> None:
    """The topology-aware choice end to end: the sim's PCIe-only node (Intel, no Xe
    Link) with a pod holding oneapi0-1; the matrix is read from accel_topology_distance."""
    with exporter(
        ["--backends", "sim", "--sim-devices", "oneapi:8", "--sim-pods", "1", "--sim-seed", "3"]
    ) as url:
        # The exporter's first poll has ended (a scrape waits for it only up to the
        # poll timeout, which a loaded CI machine can pass): what this test holds
        # is the topology read, not the exporter's start.
        await until(
            lambda: b"accel_device_info{" in http_get(url + "/metrics"),
            what="the exporter's first poll",
        )
        source = ScrapeSource({"pcie-node": url + "/metrics"}, timeout=5.0)
        try:
            state = await read_fleet(source, time.time())
        finally:
            await source.close()
    nd = state.nodes["pcie-node"]
    assert {d for d, dev in nd.devices.items() if not dev.free} == {"oneapi0", "oneapi1"}
    assert nd.dist("oneapi4", "oneapi5") == 20 and nd.dist("oneapi4", "oneapi6") == 30
    assert nd.dist("oneapi2", "oneapi4") == 50
    ranking = score(pod_request(pod(4, "gpu.intel.com/i915")), ["pcie-node"], state)
    assert ranking.candidates[0].devices == ("oneapi4", "oneapi5", "oneapi6", "oneapi7")


# ---------------------------------------------------------------- estimated run time


def test_runtime_prefers_the_node_that_finishes_soonest_not_the_fastest() -> None:
    """H100 (989 TFLOP/s bf16) against A100 (312): a lightly loaded
    H100 finishes first; a 90%-busy H100 gives the job 99 TFLOP/s per GPU and
    loses to an idle A100."""
    flops = {"accel-fleet.io/flops": "1e18"}
    req = pod_request(pod(2, annotations=flops))
    light = fleet(nvlink_node("h100", busy=0.3), nvlink_node("a100", model=A100, busy=0.0))
    ranking = score(req, ["h100", "a100"], light)
    assert ranking.candidates[0].node == "h100"
    by = {c.node: c for c in ranking.candidates}
    assert by["h100"].est_seconds == pytest.approx(1e18 / (2 * 989.4e12 * 0.7))
    assert by["a100"].est_seconds == pytest.approx(1e18 / (2 * 312e12))
    assert by["a100"].terms.load > by["h100"].terms.load  # load alone would pick a100

    busy = fleet(nvlink_node("h100", busy=0.9), nvlink_node("a100", model=A100, busy=0.0))
    ranking = score(req, ["h100", "a100"], busy)
    assert ranking.candidates[0].node == "a100"
    assert ranking.candidates[0].terms.runtime == 1.0


def test_runtime_uses_the_precision_and_says_when_a_model_is_unknown() -> None:
    req = pod_request(
        pod(1, annotations={"accel-fleet.io/flops": "1e15", "accel-fleet.io/precision": "fp64"})
    )
    state = fleet(nvlink_node("h100"), nvlink_node("odd", model="NVIDIA Tesla K80"))
    by = {c.node: c for c in score(req, ["h100", "odd"], state).candidates}
    assert by["h100"].est_seconds == pytest.approx(1e15 / 33.5e12)
    assert by["odd"].est_seconds is None and by["odd"].terms.runtime == 0.0
    assert "no fp64 peak for model 'NVIDIA Tesla K80'" in by["odd"].notes[0]


# ---------------------------------------------------------- locality, load, fragmentation


def test_locality_matches_node_labels() -> None:
    req = pod_request(
        pod(1, annotations={"accel-fleet.io/data-location": "topology.kubernetes.io/zone=b"})
    )
    nodes = [
        {"metadata": {"name": "in-a", "labels": {"topology.kubernetes.io/zone": "a"}}},
        {"metadata": {"name": "in-b", "labels": {"topology.kubernetes.io/zone": "b"}}},
    ]
    ranking = score(req, nodes, fleet(nvlink_node("in-a"), nvlink_node("in-b")))
    assert [c.node for c in ranking.candidates] == ["in-b", "in-a"]
    assert [c.terms.locality for c in ranking.candidates] == [1.0, 0.0]


def test_load_prefers_idle_devices() -> None:
    state = fleet(nvlink_node("busy", busy=0.9), nvlink_node("idle", busy=0.1))
    ranking = score(pod_request(pod(1)), ["busy", "idle"], state)
    assert ranking.candidates[0].node == "idle"


def test_small_jobs_leave_whole_islands_free() -> None:
    fresh = nvlink_node("fresh")  # one free island of 8
    used = nvlink_node("used", held={0, 1, 2, 3, 4, 5})  # its island already broken
    ranking = score(pod_request(pod(2)), ["fresh", "used"], fleet(fresh, used))
    assert ranking.candidates[0].node == "used"
    by = {c.node: c for c in ranking.candidates}
    assert by["fresh"].terms.fragmentation == pytest.approx(1 - 6 / 8)
    assert by["used"].terms.fragmentation == 1.0
    # An 8-GPU job takes the whole island: nothing stranded.
    whole = score(pod_request(pod(8)), ["fresh"], fleet(fresh)).candidates[0]
    assert whole.terms.fragmentation == 1.0


def test_weights_steer_the_total() -> None:
    req = pod_request(
        pod(1, annotations={"accel-fleet.io/data-location": "topology.kubernetes.io/zone=b"})
    )
    nodes = [
        {"metadata": {"name": "near-busy", "labels": {"topology.kubernetes.io/zone": "b"}}},
        {"metadata": {"name": "far-idle", "labels": {"topology.kubernetes.io/zone": "a"}}},
    ]
    state = fleet(nvlink_node("near-busy", busy=0.95), nvlink_node("far-idle", busy=0.0))
    only_load = Weights(topology=0, load=1, locality=0, runtime=0, fragmentation=0)
    only_place = Weights(topology=0, load=0, locality=1, runtime=0, fragmentation=0)
    assert score(req, nodes, state, only_load).candidates[0].node == "far-idle"
    assert score(req, nodes, state, only_place).candidates[0].node == "near-busy"


# -------------------------------------------------------------------- priority


def test_higher_priority_sees_its_candidates_first_within_a_cycle() -> None:
    state = fleet(nvlink_node("one", held={0, 1, 2, 3}))  # 4 free GPUs
    low = PodRequest("ml", "low", 4, frozenset({"nvidia"}), priority=0)
    high = PodRequest("ml", "high", 4, frozenset({"nvidia"}), priority=100)
    placements, after = schedule_cycle([low, high], ["one"], state)
    assert [(p.request.name, p.candidate is not None) for p in placements] == [
        ("high", True),
        ("low", False),
    ]
    assert placements[1].ranking.rejected[0].resolvable
    taken = {d for d, dev in after.nodes["one"].devices.items() if "ml/high" in dev.holders}
    assert taken == {"nvidia4", "nvidia5", "nvidia6", "nvidia7"}


def test_a_cycle_never_hands_out_a_device_twice() -> None:
    state = fleet(nvlink_node("a"), two_switch_pcie_node("b", set()))
    sizes = [3, 5, 2, 4, 1, 2]  # 17 GPUs asked, 16 exist
    reqs = [PodRequest("ml", f"p{i}", n, frozenset({"nvidia"})) for i, n in enumerate(sizes)]
    placements, after = schedule_cycle(reqs, ["a", "b"], state)
    seen: set[tuple[str, str]] = set()
    for p in placements:
        if p.candidate is None:
            continue
        for d in p.candidate.devices:
            assert (p.candidate.node, d) not in seen
            seen.add((p.candidate.node, d))
    placed = [p for p in placements if p.candidate is not None]
    assert len(seen) == sum(p.request.count for p in placed)
    assert len(placed) == 5  # all but one fit
    taken = {
        (n.name, d) for n in after.nodes.values() for d, dev in n.devices.items() if not dev.free
    }
    assert taken == seen


# -------------------------------------------------------------------- catalogue


def test_every_catalogue_entry_cites_a_source_and_matches_exporter_models() -> None:
    cat = default_catalogue()
    assert len(cat.models) >= 10
    assert all("https://" in m.source for m in cat.models)
    expect = {
        "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5 80GB",
        "NVIDIA H100 PCIe": "NVIDIA H100 PCIe 80GB",
        "NVIDIA H200": "NVIDIA H200 SXM 141GB",
        "NVIDIA A100-SXM4-40GB": "NVIDIA A100 SXM4 (40/80GB)",
        "NVIDIA A100 80GB PCIe": "NVIDIA A100 PCIe (40/80GB)",
        "NVIDIA L40S": "NVIDIA L40S",
        "AMD Instinct MI300X": "AMD Instinct MI300X",
        "AMD Instinct MI250X": "AMD Instinct MI250X (per GCD)",
        "AMD Instinct MI210": "AMD Instinct MI210",
        MAX1550: "Intel Data Center GPU Max 1550",
    }
    for model, entry in expect.items():
        found = cat.lookup(model)
        assert found is not None and found.name == entry, model
    assert cat.lookup("NVIDIA Tesla K80") is None
    # An MI250X package is two GCDs, each its own device.
    assert cat.peak("AMD Instinct MI250X", "bf16") == pytest.approx(383.0e12 / 2)
    assert cat.peak("AMD Instinct MI300X", "bf16") == pytest.approx(1307.4e12)


def test_a_bad_catalogue_names_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "devices.yaml"
    bad.write_text(
        "models:\n  - name: X\n    match: [X]\n    peak_tflops: {fp4: 1}\n"
        "    source: https://example.invalid/x\n"
    )
    with pytest.raises(CatalogueError, match=r"models\[0\] \(X\): unknown precision 'fp4'"):
        load_catalogue(bad)
    bad.write_text("models:\n  - name: Y\n    match: [Y]\n    peak_tflops: {bf16: 1}\n")
    with pytest.raises(CatalogueError, match="cites its source with a URL"):
        load_catalogue(bad)


# ------------------------------------------------------------- accel-autoscaler place


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[dict[str, str]]:
    """A PCIe-only Intel node (pods hold oneapi0-1) and an NVSwitch NVIDIA node."""
    with (
        exporter(
            ["--backends", "sim", "--sim-devices", "oneapi:8", "--sim-pods", "1", "--sim-seed", "3"]
        ) as pcie,
        exporter(["--backends", "sim", "--sim-devices", "nvidia:8"]) as nvl,
    ):
        yield {"pcie": pcie + "/metrics", "nvl": nvl + "/metrics"}


def _place(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "place", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_place_prints_the_ranking_with_every_term(
    two_nodes: dict[str, str], tmp_path: Path
) -> None:
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(
        yaml.safe_dump(
            pod(
                4,
                "gpu.intel.com/i915",
                {"accel-fleet.io/vendors": "intel,nvidia", "accel-fleet.io/flops": "1e18"},
            )
        )
    )
    targets = ",".join(f"{k}={v}" for k, v in two_nodes.items())
    got = _place(str(pod_file), "--source", "scrape", "--targets", targets)
    assert got.returncode == 0, got.stderr
    out = got.stdout
    assert "pod ml/job: 4 devices (vendors oneapi, 1e+18 FLOPs at bf16, priority 0)" in out
    for term in ("topology", "load", "locality", "runtime", "frag", "est"):
        assert term in out.splitlines()[2]
    assert "1. pcie: devices oneapi4,oneapi5,oneapi6,oneapi7 (pairwise distance 160)" in out
    assert "nvl: has 0 healthy oneapi devices, the pod needs 4" in out

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "NodeList",
                "items": [
                    {
                        "metadata": {"name": "pcie"},
                        "spec": {
                            "taints": [
                                {
                                    "key": "accel-fleet.io/faulty",
                                    "value": "true",
                                    "effect": "NoSchedule",
                                }
                            ]
                        },
                    },
                    {"metadata": {"name": "nvl"}},
                ],
            }
        )
    )
    got = _place(
        str(pod_file),
        "--nodes",
        str(nodes),
        "--source",
        "scrape",
        "--targets",
        targets,
        "--output",
        "json",
    )
    assert got.returncode == 1  # nothing fits
    doc = json.loads(got.stdout)
    assert doc["candidates"] == []
    assert {r["node"]: r["resolvable"] for r in doc["rejected"]} == {"pcie": False, "nvl": False}


def test_place_reports_bad_input_with_its_place(tmp_path: Path) -> None:
    bad = tmp_path / "pod.yaml"
    bad.write_text("kind: Pod\nmetadata: {name: x\n")
    got = _place(str(bad), "--source", "scrape", "--targets", "n=http://127.0.0.1:9/metrics")
    assert got.returncode == 2
    assert f"{bad}:" in got.stderr and "not valid YAML or JSON" in got.stderr
    bad.write_text(yaml.safe_dump(pod(1, annotations={"accel-fleet.io/flops": "many"})))
    got = _place(str(bad), "--source", "scrape", "--targets", "n=http://127.0.0.1:9/metrics")
    assert got.returncode == 2
    assert f"{bad}: annotation accel-fleet.io/flops: 'many' is not a number" in got.stderr
    bad.write_text(yaml.safe_dump(pod(1)))
    got = _place(str(bad), "--source", "scrape", "--targets", "n=http://127.0.0.1:9/metrics")
    assert got.returncode == 2
    assert "source scrape is down" in got.stderr


# ------------------------------------------------------------- the simulator's hook


def test_the_simulator_adapter_places_by_topology_and_keeps_nvlink_nodes_whole() -> None:
    from autoscaler.simulate.placement import PlacementScheduler
    from autoscaler.simulate.scheduler import FirstFit, NodeView, Request, slowdown

    pcie = NodeView("pcie-0", "mixed", "pcie", 8, free=(0, 2, 3, 4, 5, 6, 7))
    nvl = NodeView("nvl-0", "mixed", "nvlink", 8, free=tuple(range(8)))
    sched = PlacementScheduler()
    four = sched.place(Request("j4", "mixed", 4), [pcie])
    assert four is not None and four.devices == (4, 5, 6, 7)
    first = FirstFit().place(Request("j4", "mixed", 4), [pcie])
    assert first is not None and first.devices == (0, 2, 3, 4)
    assert slowdown("pcie", four.devices) < slowdown("pcie", first.devices)
    # A one-device job takes a PCIe device, not a whole free NVSwitch board.
    one = sched.place(Request("j1", "mixed", 1), [nvl, pcie])
    assert one is not None and one.node == "pcie-0"
    # Avoided nodes only when nothing else fits.
    avoid = NodeView("nvl-1", "mixed", "nvlink", 8, free=tuple(range(8)), avoid=True)
    eight = sched.place(Request("j8", "mixed", 8), [pcie, avoid])
    assert eight is not None and eight.node == "nvl-1"
    assert sched.place(Request("j9", "mixed", 9), [pcie, avoid]) is None


# An L40S PCIe server and an H100 NVSwitch board, named so that first-fit's name
# order reaches the PCIe server first; jobs of 4 GPUs sized for the H100 that may
# run on either (they ask for nvidia.com/gpu only).
TWO_MODELS = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 12h
  seed: 2
  pools:
    - {name: pcie, vendor: nvidia, model: NVIDIA L40S, topology: pcie, devicesPerNode: 8,
       initial: 1, min: 1, max: 1}
    - {name: sxm, vendor: nvidia, model: NVIDIA H100 80GB HBM3, devicesPerNode: 8,
       initial: 1, min: 1, max: 1}
  workload:
    arrivalsPerHour: 1
    pools: {sxm: 1}
    eligiblePools: vendor
    sizes: {4: 1}
    duration: {distribution: fixed, value: 2h}
"""


@pytest.mark.parametrize(
    ("scheduler", "node", "devices", "links"),
    [("first-fit", "pcie-0000", (0, 1, 2, 3), 1.25), ("placement", "sxm-0000", (0, 1, 2, 3), 1.0)],
)
def test_the_scorer_sends_a_multi_gpu_job_to_the_nvswitch_board(
    tmp_path: Path, scheduler: str, node: str, devices: tuple[int, ...], links: float
) -> None:
    """The first job lands on an empty fleet. First-fit takes the first node by
    name, the PCIe server, where it runs 2.73 (bf16 H100 / L40S) x 1.25 (four GPUs
    under one host bridge) times as long; the scorer reads the pod's FLOPs and the
    nodes' models and sends it to the NVSwitch board, at full speed."""
    from autoscaler.simulate.fleet import Fleet
    from autoscaler.simulate.scenario import load_scenario
    from autoscaler.simulate.schedulers import SCHEDULERS

    path = tmp_path / "two-models.yaml"
    path.write_text(TWO_MODELS)
    fleet = Fleet(load_scenario(path), SCHEDULERS[scheduler](), static_pools=True)
    first: list[tuple[str, tuple[int, ...], float, float]] = []
    finished: dict[str, float] = {}

    def listen(what: str, job: Any) -> None:
        if what == "pod_bound" and not first:
            slot = fleet.slots[job.slot]
            local = tuple(g - slot.base for g in job.devices)
            first.append((str(slot.node), local, job.links, job.factor))
        if what == "pod_unbound" and job.name == "train-000000":
            finished[job.name] = fleet.now - job.bound_at

    fleet.listeners.append(listen)
    asyncio.run(fleet.run())
    peaks = default_catalogue()
    ratio = (peaks.peak(H100, "bf16") or 0) / (peaks.peak("NVIDIA L40S", "bf16") or 1)
    speed = 1.0 if node.startswith("sxm") else ratio
    assert [f[:3] for f in first] == [(node, devices, links)]
    assert first[0][3] == pytest.approx(speed * links)
    assert finished["train-000000"] == pytest.approx(2 * 3600.0 * speed * links)


async def test_the_fleet_through_a_real_prometheus(tmp_path: Path) -> None:
    """The production source: Prometheus scrapes a sim exporter with the node label
    relabeling would add; the fleet read through it matches the scrape source's."""
    from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource
    from tests.support.procs import prometheus

    with (
        exporter(["--backends", "sim", "--sim-devices", "oneapi:8", "--sim-pods", "1",
                  "--sim-seed", "3"]) as url,
        prometheus(tmp_path, [url.removeprefix("http://")], labels={"node": "pvc-1"}) as prom,
    ):  # fmt: skip
        source = PrometheusSource(PrometheusConfig(url=prom, timeout=5.0))
        try:
            deadline = time.monotonic() + 30
            state = None
            while time.monotonic() < deadline:
                if await source.refresh(time.time()):
                    state = await read_fleet(source, time.time(), refresh=False)
                    if state.nodes["pvc-1"].distance:
                        break
                await asyncio.sleep(0.5)
        finally:
            await source.close()
    assert state is not None
    nd = state.nodes["pvc-1"]
    assert sorted(nd.devices) == [f"oneapi{i}" for i in range(8)]
    assert {d for d, dev in nd.devices.items() if not dev.free} == {"oneapi0", "oneapi1"}
    assert nd.devices["oneapi5"].model == f"Simulated {MAX1550}"  # the sim says it is one
    assert nd.devices["oneapi5"].utilization is not None
    ranking = score(pod_request(pod(4, "gpu.intel.com/i915")), ["pvc-1"], state)
    assert ranking.candidates[0].devices == ("oneapi4", "oneapi5", "oneapi6", "oneapi7")


def test_simcompare_runs_both_schedulers_on_the_same_jobs() -> None:
    """The measurement behind docs/placement.md's figures, on a 12-hour cut of the
    scenario: the same jobs arrive in both runs, NVIDIA jobs run on both models
    (an H100 at their nominal speed, an L40S at least 2.7 times as long), and the
    scorer's multi-device jobs run with less topology slowdown than first-fit's."""
    import dataclasses

    from autoscaler.simulate.scenario import load_scenario
    from bench.placement import SCHEDULER_NAMES, compare, table

    scenario = load_scenario(REPO / "scenarios" / "placement.yaml", SCHEDULER_NAMES)
    short = dataclasses.replace(scenario, duration=12 * 3600.0)
    first, scored = compare(short, [1, 2])
    assert first.submitted == scored.submitted > 100
    assert first.slowdown and scored.slowdown
    assert statistics.fmean(scored.slowdown) < statistics.fmean(first.slowdown)
    for run in (first, scored):
        assert 1.0 in run.factor and max(run.factor) > 2.7 and min(run.factor) >= 1.0
    text = table(first, scored)
    assert text.splitlines()[0].split() == ["first-fit", "placement", "placement/first-fit"]
    assert "mean job completion time (h)" in text
