"""The placement scorer as the fleet simulator's ``placement`` scheduler.

The simulator (``autoscaler/simulate/scheduler.py``) asks one question per pending
job: which node, which device indices. This adapter turns its node views into the
scorer's fleet state, with the distance of each pair from the same link shapes the
simulator slows jobs down by (``link_type``) on the exporter's distance scale, and
asks ``score`` — the same function the extender and ``place`` use, so the
simulation measures the production code, not a copy of it.

Each view carries its pool's device model, and the request the job's work in
FLOPs (the pod's ``accel-fleet.io/flops``) and precision, so the run-time term
weighs an H100 against an L40S from the same catalogue (``devices.yaml``) that the
simulator runs the job at. Free devices read as idle (utilization and memory 0,
what the exporter shows for a device no pod holds); the simulator's nodes have no
labels, so locality is equal everywhere. Nodes the simulator marks ``avoid``
(``PreferNoSchedule``) are used only when nothing else fits, as first-fit does.
"""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.placement.score import (
    Device,
    FleetState,
    NodeDevices,
    PodRequest,
    Weights,
    score,
)
from autoscaler.simulate.scheduler import NodeView, Placement, Request, link_type

# The exporter's distance per link type (exporter/topology.py).
DISTANCE: dict[str, float] = {
    "nvlink": 10.0,
    "xgmi": 10.0,
    "roce": 10.0,
    "hccs": 10.0,
    "ici": 10.0,
    "xelink": 10.0,
    "pcie_switch": 20.0,
    "pcie_hostbridge": 30.0,
    "pcie_numa": 40.0,
    "system": 50.0,
}


def _device(view: NodeView, i: int, free: set[int]) -> Device:
    vendor, model = view.vendor or "sim", view.model or "sim"
    if i in free:
        return Device(f"d{i}", vendor, model, utilization=0.0, memory_used_ratio=0.0)
    return Device(f"d{i}", vendor, model, holders=("sim/job",))


def _node(view: NodeView) -> NodeDevices:
    free = set(view.free)
    n = view.devices_per_node
    devices = {f"d{i}": _device(view, i, free) for i in range(n)}
    distance = {
        (f"d{a}", f"d{b}"): DISTANCE[link_type(view.topology, a, b)]
        for a in range(n)
        for b in range(n)
        if a != b
    }
    return NodeDevices(view.name, devices, distance)


class PlacementScheduler:
    """``--scheduler placement``: the scorer's best candidate for each job."""

    name = "placement"

    def __init__(self, weights: Weights | None = None) -> None:
        self.weights = weights or Weights()

    def place(self, request: Request, nodes: Sequence[NodeView]) -> Placement | None:
        for group in ([v for v in nodes if not v.avoid], [v for v in nodes if v.avoid]):
            if not group:
                continue
            state = FleetState({v.name: _node(v) for v in group})
            req = PodRequest(
                "sim",
                request.job,
                request.devices,
                flops=request.flops,
                precision=request.precision,
            )
            ranking = score(req, [v.name for v in group], state, self.weights)
            if ranking.candidates:
                best = ranking.candidates[0]
                return Placement(best.node, tuple(sorted(int(d[1:]) for d in best.devices)))
        return None
