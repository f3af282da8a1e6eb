"""Gaudi, Ascend and TPU pools in the fleet simulator: scenarios/vendors.yaml runs,
the shipped rules remediate a fatal fault on each vendor along the path the node
agent's vendor table (``accel_common.agentsupport``) allows (Gaudi, Ascend, TPU: the
reset step ends unsupported at once and the reboot fixes the fault; NVIDIA: the
reset fixes it), the simulated nodes offer (and the pods ask for) each vendor's
device plugin resource with a model from the placement catalogue, and a pool's
topology must be its vendor's."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from accel_common import names
from accel_common.agentsupport import UNFIXED_REASON, UNSUPPORTED_REASON, support
from autoscaler import clusterstate
from autoscaler.placement.catalogue import default_catalogue
from autoscaler.simulate import results
from autoscaler.simulate import run as sim
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.results import RunResult
from autoscaler.simulate.scenario import DEFAULT_MODEL, ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from tests.support.paths import REPO

# Slow (simulates a four-hour fleet with the shipped rules): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

VENDORS_SCENARIO = REPO / "scenarios" / "vendors.yaml"
RULES = [str(REPO / "rules")]
NEW = ("gaudi", "ascend", "tpu")
# The faulty node of each vendor's pool (scenarios/vendors.yaml's events).
FAULTY = {"gaudi": "gaudi3-0000", "ascend": "ascend-0000", "tpu": "v5e-0000", "nvidia": "h100-0000"}


class RecordingFleet(Fleet):
    """The simulator's own Fleet, kept once the run ends so that the test can read
    the simulated cluster's Events and Nodes; it changes nothing."""

    made: ClassVar[list[Fleet]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        RecordingFleet.made.append(self)


@pytest.fixture(scope="module")
def vendors_run() -> tuple[RunResult, Fleet]:
    """scenarios/vendors.yaml under the shipped rules, once for the module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim, "Fleet", RecordingFleet)
        RecordingFleet.made.clear()
        scenario = load_scenario(VENDORS_SCENARIO)
        result = sim.simulate(scenario, RULES, baseline=False, parallel=False)["rules"]
        (fleet,) = RecordingFleet.made
    return result, fleet


def _node_events(fleet: Fleet, node: str) -> list[str]:
    return [
        e["reason"]
        for e in fleet.kube.events
        if e.get("involvedObject", {}).get("kind") == "Node"
        and e.get("involvedObject", {}).get("name") == node
    ]


def test_the_vendor_scenario_runs_and_the_rules_remediate_every_vendor(
    vendors_run: tuple[RunResult, Fleet],
) -> None:
    result, _ = vendors_run
    assert {p.vendor for p in load_scenario(VENDORS_SCENARIO).pools} == {*NEW, "nvidia"}
    # One fatal fault per vendor, each a migration and, later, its recovery.
    assert result.stats.actions.get("migrate_jobs") == 4
    # Gaudi, Ascend and TPU cannot be reset by the node agent: each reset step ends
    # at once (never done, as the simulated agent once pretended); NVIDIA's is done.
    assert result.outcomes.get("reset_devices:skipped") == 3
    assert result.outcomes.get("reset_devices:done") == 1
    assert result.outcomes.get("reboot_node:done") == 3
    section = results.summary_section(result)
    assert section["jobs_lost"] == 0
    assert section["jobs_completed"] > 0
    # What closed each vendor's fault, as summary.json says it.
    assert section["faults_closed_by_vendor"] == {
        "ascend": {"reboot": 1},
        "gaudi": {"reboot": 1},
        "nvidia": {"reset": 1},
        "tpu": {"reboot": 1},
    }


@pytest.mark.parametrize("vendor", NEW)
def test_an_unresettable_vendors_fault_goes_from_an_unsupported_reset_to_a_reboot(
    vendors_run: tuple[RunResult, Fleet], vendor: str
) -> None:
    _, fleet = vendors_run
    reasons = _node_events(fleet, FAULTY[vendor])
    # The reset step ends unsupported before anything is asked, then the reboot.
    assert "ResetRequested" not in reasons and "DevicesReset" not in reasons
    assert reasons.index("ResetUnsupported") < reasons.index("RebootRequested")
    assert reasons.index("RebootRequested") < reasons.index("Rebooted")
    said = next(
        e["message"]
        for e in fleet.kube.events
        if e["reason"] == "ResetUnsupported" and e["involvedObject"]["name"] == FAULTY[vendor]
    )
    assert " ".join(support(vendor).no_reset.split()) in said
    # Asked anyway, the simulated agent answers as the real one: failed, unsupported.
    answer = _ask_the_simulated_agent(fleet, FAULTY[vendor], f"probe-{vendor}")
    assert answer["state"] == "failed" and answer["reason"] == UNSUPPORTED_REASON
    assert "nothing was reset" in answer["message"]


def test_nvidias_fault_closes_at_the_reset(vendors_run: tuple[RunResult, Fleet]) -> None:
    _, fleet = vendors_run
    reasons = _node_events(fleet, FAULTY["nvidia"])
    assert reasons.index("ResetRequested") < reasons.index("DevicesReset")
    assert "ResetUnsupported" not in reasons and "RebootRequested" not in reasons


def _ask_the_simulated_agent(fleet: Fleet, node: str, rid: str) -> dict[str, Any]:
    """Writes a reset request for the node's first device, as reset_devices would,
    and returns the simulated agent's answer."""

    async def ask() -> dict[str, Any]:
        request = {"id": rid, "devices": [], "requestedAt": "2026-01-01T04:00:00Z", "by": "t"}
        patch = {"metadata": {"annotations": {names.RESET_REQUEST_ANNOTATION: json.dumps(request)}}}
        after = await fleet.kube.patch_node(node, patch)
        status = json.loads(after["metadata"]["annotations"][names.RESET_STATUS_ANNOTATION])
        assert status["id"] == rid
        return dict(status)

    return asyncio.run(ask())


def _cluster() -> tuple[list[Any], list[Any]]:
    fleet = Fleet(load_scenario(VENDORS_SCENARIO), FirstFit(), static_pools=True)

    async def go() -> tuple[list[Any], list[Any]]:
        await fleet.run()
        return await fleet.kube.list_nodes(), await fleet.kube.list_pods()

    return asyncio.run(go())


def test_nodes_offer_and_pods_ask_for_each_vendors_resource() -> None:
    nodes, pods = _cluster()
    catalogue = default_catalogue()
    pool_vendor: dict[str, str] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        vendor = labels[names.VENDOR_LABEL]
        devices = [r for r in node["status"]["allocatable"] if names.is_device_resource(r)]
        assert devices == [names.VENDOR_RESOURCE[vendor]]
        pool_vendor[labels[names.POOL_LABEL]] = vendor
    assert sorted(set(pool_vendor.values())) == sorted(FAULTY)
    asked: set[str] = set()
    for pod in pods:
        vendor = pool_vendor[pod["spec"]["nodeSelector"][names.POOL_LABEL]]
        (resource,) = clusterstate.device_requests(pod)
        assert resource == names.VENDOR_RESOURCE[vendor]
        asked.add(vendor)
    assert asked == set(FAULTY)
    for vendor in FAULTY:
        entry = catalogue.lookup(DEFAULT_MODEL[vendor])
        assert entry is not None and entry.vendor == vendor


@pytest.mark.parametrize(
    ("vendor", "topology", "message"),
    [
        ("gaudi", "hccs", "gaudi devices have no hccs links (use roce or pcie)"),
        ("tpu", "nvlink", "tpu devices have no nvlink links (use ici or pcie)"),
    ],
)
def test_a_pool_topology_must_be_its_vendors(
    tmp_path: Path, vendor: str, topology: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: accel-fleet/v1\nkind: Scenario\nspec:\n  duration: 1h\n"
        "  evaluationInterval: 30s\n  pools:\n"
        f"    - {{name: p, vendor: {vendor}, topology: {topology}, devicesPerNode: 4,"
        " initial: 1, max: 1}\n"
        "  workload:\n    arrivalsPerHour: 1\n    sizes: {1: 1}\n"
        "    duration: {distribution: fixed, value: 10m}\n"
    )
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_scenario(path)


UNFIXED_SCENARIO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 2h
  evaluationInterval: 30s
  seed: 5
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 2, min: 2, max: 2}
  workload:
    arrivalsPerHour: 2
    sizes: {1: 1}
    duration: {distribution: fixed, value: 20m}
  faults:
    events:
      - {at: 30m, kind: fatal, node: h100-0000, device: nvidia0, action: reset}
  repairs:
    selfHeals: 0
    reset: {fixes: 0, duration: 3m}
    reboot: {fixes: 1, duration: 10m}
"""


def test_a_reset_that_does_not_fix_the_fault_answers_failed_and_the_reboot_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulated agent answers ``done`` only for a fixed device: a reset drawn
    not to fix the fault answers ``failed`` (reason ``unfixed``), and the ladder
    reboots at its next evaluation instead of waiting out the reset step's 20m."""
    path = tmp_path / "unfixed.yaml"
    path.write_text(UNFIXED_SCENARIO)
    monkeypatch.setattr(sim, "Fleet", RecordingFleet)
    RecordingFleet.made.clear()
    result = sim.simulate(load_scenario(path), RULES, baseline=False, parallel=False)["rules"]
    (fleet,) = RecordingFleet.made
    assert result.outcomes.get("reset_devices:failed") == 1
    assert "reset_devices:done" not in result.outcomes
    assert results.summary_section(result)["faults_closed_by_vendor"] == {"nvidia": {"reboot": 1}}
    node = fleet.kube.nodes["h100-0000"]
    status = json.loads(node["metadata"]["annotations"][names.RESET_STATUS_ANNOTATION])
    assert status["state"] == "failed" and status["reason"] == UNFIXED_REASON
    assert "answers again but is not fixed" in status["message"]
    at = {
        e["reason"]: event_time(e)
        for e in fleet.kube.events
        if e["reason"] in ("DeviceResetFailed", "RebootRequested")
    }
    assert 0 < at["RebootRequested"] - at["DeviceResetFailed"] <= 30.0


def event_time(event: dict[str, Any]) -> float:
    stamp = event["metadata"]["creationTimestamp"]
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
