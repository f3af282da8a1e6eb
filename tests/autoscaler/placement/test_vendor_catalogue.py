"""Gaudi, Ascend and TPU in placement: their catalogue entries (FLOPs per precision,
memory, links, a cited source), their device plugin resources read as their vendor,
and the scorer ranking idle nodes of each by the catalogue's FLOPs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accel_common import names
from autoscaler.placement.catalogue import CatalogueError, default_catalogue, load_catalogue
from autoscaler.placement.score import (
    Device,
    FleetState,
    NodeDevices,
    PodRequest,
    Weights,
    pod_request,
    score,
)

# (node, vendor, the model label its exporter would report, catalogue entry, bf16 TFLOP/s
# per device as the driver enumerates it)
NODES = [
    ("gaudi3-0", "gaudi", "HL-325L", "Intel Gaudi 3", 1835.0),
    ("gaudi2-0", "gaudi", "HL-225", "Intel Gaudi 2", 432.0),
    ("ascend910b-0", "ascend", "Ascend910B3", "Huawei Ascend 910B", 320.0),
    ("ascend910c-0", "ascend", "Ascend910C", "Huawei Ascend 910C (per die)", 781.0 / 2),
    ("v5e-0", "tpu", "TPU v5e", "Google TPU v5e", 197.0),
    ("v5p-0", "tpu", "TPU v5p", "Google TPU v5p", 459.0),
    ("v6e-0", "tpu", "TPU v6e", "Google TPU v6e (Trillium)", 918.0),
]


def test_entries_cite_sources_and_give_flops_memory_and_links() -> None:
    cat = default_catalogue()
    for _, vendor, model, entry_name, bf16 in NODES:
        entry = cat.lookup(model)
        assert entry is not None and entry.name == entry_name, model
        assert entry.vendor == vendor
        assert "https://" in entry.source
        assert cat.peak(model, "bf16") == pytest.approx(bf16 * 1e12)
        assert entry.memory_bytes > 0
        assert entry.interconnect.split(":")[0] in ("roce", "hccs", "ici")
    assert cat.peak("Intel Gaudi 3", "fp8") == pytest.approx(1835e12)
    # A 910C package is two dies, each an NPU to the driver: memory halves too.
    assert cat.lookup("Ascend 910C") is not None
    assert cat.lookup("Ascend 910C").memory_bytes == pytest.approx(64e9)  # type: ignore[union-attr]
    # The longest match wins: "TPU v5 lite" is a v5e, not a v5p.
    assert cat.lookup("TPU v5 lite").name == "Google TPU v5e"  # type: ignore[union-attr]


def _fleet(per_node: int = 4) -> FleetState:
    nodes: dict[str, NodeDevices] = {}
    for node, vendor, model, _, _ in NODES:
        devices = {
            f"{vendor}{i}": Device(
                f"{vendor}{i}", vendor, model, utilization=0.0, memory_used_ratio=0.0
            )
            for i in range(per_node)
        }
        distance = {(a, b): 10.0 for a in devices for b in devices if a != b}
        nodes[node] = NodeDevices(node, devices, distance)
    return FleetState(nodes)


def test_placement_ranks_idle_nodes_of_the_new_vendors_by_catalogue_flops() -> None:
    request = PodRequest("ml", "train", count=2, flops=1e18)
    ranking = score(
        request,
        [n for n, *_ in NODES],
        _fleet(),
        weights=Weights(topology=0, load=0, locality=0, runtime=1, fragmentation=0),
    )
    order = [c.node for c in ranking.candidates]
    assert order == [n for n, *_, bf16 in sorted(NODES, key=lambda row: -row[4])]
    assert order[0] == "gaudi3-0" and order[-1] == "v5e-0"
    # The estimate is the work over the chosen devices' peak.
    first = ranking.candidates[0]
    assert first.est_seconds == pytest.approx(1e18 / (2 * 1835e12))
    assert not ranking.rejected


def _pod(resource: str, count: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "job", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {resource: str(count)}}}]},
    }


@pytest.mark.parametrize("vendor", ["gaudi", "ascend", "tpu"])
def test_a_pod_asking_for_a_vendor_resource_ranks_that_vendors_nodes(vendor: str) -> None:
    resource = names.VENDOR_RESOURCE[vendor]
    req = pod_request(_pod(resource, 2, {names.FLOPS_ANNOTATION: "1e18"}))
    assert (req.count, req.vendors) == (2, frozenset({vendor}))
    ranking = score(req, [n for n, *_ in NODES], _fleet())
    mine = sorted((row for row in NODES if row[1] == vendor), key=lambda row: -row[4])
    assert [c.node for c in ranking.candidates] == [row[0] for row in mine]
    # Every other vendor's node is rejected with the reason.
    assert {r.node for r in ranking.rejected} == {row[0] for row in NODES if row[1] != vendor}


@pytest.mark.parametrize(
    ("alias", "vendor"), [("habana", "gaudi"), ("huawei", "ascend"), ("google", "tpu")]
)
def test_vendor_aliases_in_the_annotation(alias: str, vendor: str) -> None:
    req = pod_request(
        _pod(names.VENDOR_RESOURCE[vendor], 1, {names.VENDORS_ANNOTATION: f"nvidia,{alias}"})
    )
    assert req.vendors == frozenset({vendor})


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("vendor: habanna", "unknown vendor 'habanna' (use the exporter's vendor label"),
        ("memory_gb: lots", "memory_gb must be a non-negative number of GB"),
        ("interconnect: [roce]", "interconnect must be text"),
    ],
)
def test_a_bad_vendor_memory_or_interconnect_names_the_entry(
    tmp_path: Path, field: str, message: str
) -> None:
    bad = tmp_path / "devices.yaml"
    bad.write_text(
        "models:\n  - name: Gaudi X\n    match: [Gaudi X]\n    peak_tflops: {bf16: 1}\n"
        f"    source: https://example.com\n    {field}\n"
    )
    with pytest.raises(CatalogueError, match=r"models\[0\] \(Gaudi X\): " + message.split("(")[0]):
        load_catalogue(bad)
