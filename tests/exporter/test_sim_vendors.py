"""The sim backend's Gaudi, Ascend and TPU devices: one exposition of all six vendors
that promtool accepts, identities the placement catalogue knows, each vendor's link
shape, fatal fault codes from each vendor's catalogue, and fields a vendor's real
backend cannot read left out."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from accel_common import names as k8s
from autoscaler.placement.catalogue import default_catalogue
from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, parse_sim_devices
from exporter.faults import CATALOGUES
from exporter.poller import Poller
from exporter.topology import distances
from tests.support.clock import FakeClock
from tests.support.exposition import parse, total, value
from tests.support.paths import REPO

FIXED = 1_700_000_000.0
ALL_SIX = "nvidia:2,amd:2,oneapi:2,gaudi:2,ascend:2,tpu:2"
NEW = ("gaudi", "ascend", "tpu")


def sim(devices: str, script: Path | None = None, clock: FakeClock | None = None) -> SimBackend:
    opts = BackendOptions(sim_devices=parse_sim_devices(devices), sim_script=script)
    return SimBackend(opts, clock=clock or FakeClock(0.0))


async def exposition(backend: SimBackend, clock: FakeClock) -> str:
    poller = Poller([backend], 1, 5, clock=lambda: FIXED)
    await poller.poll_once()
    clock.advance(10.0)  # a second poll: energy and counters have moved
    return (await poller.poll_once()).text.decode()


async def test_all_six_vendors_in_one_exposition_pass_promtool(
    promtool_check: Callable[[str], None],
) -> None:
    clock = FakeClock(0.0)
    text = await exposition(sim(ALL_SIX, clock=clock), clock)
    promtool_check(text)
    up = {labels["device"]: v for name, labels, v in parse(text) if name == "accel_up"}
    for vendor in ("nvidia", "amd", "oneapi", *NEW):
        assert up[f"{vendor}0"] == 1 and up[f"{vendor}1"] == 1
        # Counters a rule reads with increase() exist at 0 from the first scrape.
        fatal = total(text, "accel_fault_events_total", device=f"{vendor}0", severity="fatal")
        assert fatal == 0


def test_identities_are_simulated_and_in_the_placement_catalogue() -> None:
    devices = {d.device: d for d in sim(ALL_SIX).discover()}
    catalogue = default_catalogue()
    for vendor in NEW:
        info = devices[f"{vendor}0"]
        assert info.vendor == vendor
        assert info.model.startswith("Simulated ")
        entry = catalogue.lookup(info.model)
        assert entry is not None, info.model
        assert entry.vendor == vendor
        # The sim's device plugin hands it out under the vendor's resource name.
        assert k8s.WHOLE_DEVICE_RESOURCES[k8s.VENDOR_RESOURCE[vendor]] == vendor
    assert len({d.uuid for d in devices.values()}) == len(devices)


def test_gaudi_and_ascend_nodes_are_full_meshes_and_tpu_a_2x2_torus() -> None:
    b = sim("gaudi:16,ascend:8,tpu:8")
    links = {(x.device, x.peer_device): x for x in b.topology()}
    for i in range(8):
        for j in range(8):
            if i != j:
                assert links[(f"gaudi{i}", f"gaudi{j}")].link_type == "roce"
                assert links[(f"gaudi{i}", f"gaudi{j}")].links == 3
                assert links[(f"ascend{i}", f"ascend{j}")].link_type == "hccs"
    # Two simulated Gaudi nodes of eight: no RoCE link between them.
    assert ("gaudi0", "gaudi8") not in links
    tpu = {pair: x for pair, x in links.items() if pair[0].startswith("tpu")}
    assert {x.link_type for x in tpu.values()} == {"ici"}
    assert ("tpu0", "tpu1") in tpu and ("tpu0", "tpu2") in tpu
    # The 2x2's diagonal has no direct ICI link; and two VMs' chips none at all.
    assert ("tpu0", "tpu3") not in tpu and ("tpu1", "tpu4") not in tpu
    m = {(a, c): d for a, c, d in distances(b.discover(), b.topology())}
    assert m[("gaudi0", "gaudi7")] == m[("ascend2", "ascend5")] == m[("tpu0", "tpu1")] == 10
    assert m[("tpu0", "tpu3")] > 10


def _fatal_code(vendor: str) -> str:
    return next(c.code for c in CATALOGUES[vendor].values() if c.severity == "fatal")


async def test_a_fatal_code_from_each_catalogue_counts_as_fatal(tmp_path: Path) -> None:
    script = tmp_path / "faults.yaml"
    script.write_text(
        "events:\n"
        + "".join(f"  - {{at: 5s, device: {v}1, fault: {_fatal_code(v)!r}}}\n" for v in NEW)
    )
    clock = FakeClock(0.0)
    text = await exposition(sim("gaudi:2,ascend:2,tpu:2", script=script, clock=clock), clock)
    for vendor in NEW:
        code = _fatal_code(vendor)
        assert total(text, "accel_fault_events_total", device=f"{vendor}1", severity="fatal") == 1
        assert total(text, "accel_fault_events_total", device=f"{vendor}0", severity="fatal") == 0
        assert (
            total(
                text,
                "accel_fault_code_events_total",
                device=f"{vendor}1",
                code=code,
                severity="fatal",
            )
            == 1
        )


async def test_tpu_leaves_out_what_the_runtime_does_not_report() -> None:
    clock = FakeClock(0.0)
    text = await exposition(sim("tpu:1,gaudi:1", clock=clock), clock)
    for metric in (
        "accel_temperature_celsius",
        "accel_power_watts",
        "accel_clock_hertz",
        "accel_memory_bandwidth_utilization_ratio",
        "accel_ecc_errors_total",
    ):
        devices = {labels.get("device") for name, labels, _ in parse(text) if name == metric}
        assert "tpu0" not in devices and "gaudi0" in devices, metric
    assert value(text, "accel_utilization_ratio", device="tpu0") is not None
    assert value(text, "accel_memory_total_bytes", device="tpu0") == 16 * 1024**3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gaudi:1025", "at most 1024 simulated devices per vendor"),
        ("ascend:1024,tpu:1024,gaudi:1", "2049 in all, at most 2048"),
        ("gaudy:2", "unknown sim vendor 'gaudy'"),
    ],
)
def test_new_vendors_have_the_same_limits(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_sim_devices(spec)
    assert parse_sim_devices("gaudi:1024,ascend:1024") == (("gaudi", 1024), ("ascend", 1024))


def test_the_rule_tests_codes_are_the_catalogues() -> None:
    """rules/tests/vendors_test.yaml feeds the shipped rules the series a backend
    publishes for a code: each code and severity there is the catalogue's."""
    doc = yaml.safe_load((REPO / "rules" / "tests" / "vendors_test.yaml").read_text())
    seen: set[str] = set()
    for test in doc["tests"]:
        for item in test["inputSeries"]:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', item["series"]))
            if "code" in labels:
                found = CATALOGUES[labels["vendor"]][labels["code"]]
                assert found.severity == labels["severity"] == "fatal", item["series"]
                seen.add(labels["vendor"])
    assert seen == set(NEW)
