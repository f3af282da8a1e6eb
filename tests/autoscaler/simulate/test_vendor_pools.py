"""Gaudi, Ascend and TPU pools in the fleet simulator: scenarios/vendors.yaml runs,
the shipped rules remediate a fatal fault on each vendor, the simulated nodes offer
(and the pods ask for) each vendor's device plugin resource with a model from the
placement catalogue, and a pool's topology must be its vendor's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from accel_common import names
from autoscaler import clusterstate
from autoscaler.placement.catalogue import default_catalogue
from autoscaler.simulate import results
from autoscaler.simulate import run as sim
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.scenario import DEFAULT_MODEL, ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from tests.support.paths import REPO

# Slow (simulates a four-hour fleet with the shipped rules): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

VENDORS_SCENARIO = REPO / "scenarios" / "vendors.yaml"
RULES = [str(REPO / "rules")]
NEW = ("gaudi", "ascend", "tpu")


def test_the_vendor_scenario_runs_and_the_rules_remediate_every_vendor() -> None:
    scenario = load_scenario(VENDORS_SCENARIO)
    assert {p.vendor for p in scenario.pools} == set(NEW)
    result = sim.simulate(scenario, RULES, baseline=False, parallel=False)["rules"]
    # One fatal fault per vendor, each a migration and, later, its recovery.
    assert result.stats.actions.get("migrate_jobs") == 3
    assert result.outcomes.get("migrate_jobs:done") == 6
    # None of these vendors can be reset by the node agent: each reset step is
    # skipped at once (never done, as the simulated agent once pretended).
    assert result.outcomes.get("reset_devices:skipped") == 3
    assert "reset_devices:done" not in result.outcomes
    section = results.summary_section(result)
    assert section["jobs_lost"] == 0
    assert section["jobs_completed"] > 0


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
    assert sorted(set(pool_vendor.values())) == sorted(NEW)
    asked: set[str] = set()
    for pod in pods:
        vendor = pool_vendor[pod["spec"]["nodeSelector"][names.POOL_LABEL]]
        (resource,) = clusterstate.device_requests(pod)
        assert resource == names.VENDOR_RESOURCE[vendor]
        asked.add(vendor)
    assert asked == set(NEW)
    for vendor in NEW:
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
