"""``accel_node_ready`` in the simulator: the simulator writes the cluster-state
series into its store itself, refreshed on the fleet's node events, so the store
must hold what ``clusterstate.collect`` reads from the same Nodes before a node
goes down, while it is down and after it comes back, and stop a node's series
when the node leaves (issue 31's lost-node rule reads it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from autoscaler import clusterstate
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.simulate import run as sim
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.scenario import load_scenario
from autoscaler.simulate.scheduler import FirstFit
from autoscaler.simulate.telemetry import Telemetry
from autoscaler.types import Vector

# Three nodes; h100-0001 goes down at 1h and comes back 30 minutes later.
SCENARIO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 3h
  evaluationInterval: 1m
  seed: 3
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 3, min: 3, max: 3,
       provisionTime: 5m}
  workload:
    arrivalsPerHour: 2
    sizes: {8: 1}
    duration: {distribution: fixed, value: 2h}
  faults:
    nodeDownRecovery: 30m
    events:
      - {at: 1h, kind: node_down, node: h100-0001}
"""


def test_node_ready_in_the_store_is_what_collect_reads(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    fleet = Fleet(load_scenario(path), FirstFit(), static_pools=True)
    store = SeriesStore()
    telemetry = Telemetry(fleet, store, [clusterstate.NODE_READY.name], seed=1)
    stored: dict[float, dict[str, float]] = {}
    read: dict[float, dict[str, float]] = {}

    def ready_rows(rows: list[clusterstate.Row]) -> dict[str, float]:
        return {lb["node"]: v for m, lb, v in rows if m.name == clusterstate.NODE_READY.name}

    def look() -> None:
        # What the store holds after the controller's read at this moment, and
        # what that read (clusterstate.node_rows over the listed Nodes) gives.
        now = fleet.now
        telemetry.scrape_cluster(now)
        got = Evaluator(store).instant(clusterstate.NODE_READY.name, now)
        assert isinstance(got, Vector)
        stored[now - EPOCH] = {s.get("node"): s.value for s in got.samples}
        read[now - EPOCH] = ready_rows(clusterstate.node_rows(list(fleet.kube.nodes.values())))

    async def go() -> dict[str, float]:
        # The controller reads the cluster every minute, as the pipeline does.
        fleet.every(60.0, lambda: telemetry.scrape_cluster(fleet.now), start=EPOCH + 15)
        for minute in (30, 61, 89, 95):
            fleet.at(EPOCH + minute * 60, look)
        await fleet.run()
        look()
        # The controller's own read through the Kube protocol, at the end.
        rows = await clusterstate.collect(fleet.kube, sim.pool_provider(fleet), fleet.now)
        return ready_rows(rows)

    collected = asyncio.run(go())
    assert stored == read
    assert stored[fleet.now - EPOCH] == collected
    ready = {"h100-0000": 1.0, "h100-0001": 1.0, "h100-0002": 1.0}
    assert stored[30 * 60] == ready
    assert stored[61 * 60] == ready | {"h100-0001": 0.0}
    assert stored[89 * 60] == ready | {"h100-0001": 0.0}
    assert stored[95 * 60] == ready
