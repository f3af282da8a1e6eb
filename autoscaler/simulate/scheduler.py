"""Where a pending job runs: the scheduler hook, the built-in ``first-fit``, and what
device topology costs a job.

The hook is one method so that other placement strategies (the ``placement``
package's scorer, through an adapter) plug in without knowing the simulation::

    class Scheduler(Protocol):
        name: str
        def place(self, request: Request, nodes: Sequence[NodeView]) -> Placement | None

``nodes`` are the nodes the job may use (those of its eligible pools,
``Request.eligible``: ready, not cordoned, no taint it does not tolerate), in name
order across the pools, each with its free devices and its device model; nodes
whose taints say "prefer not" (``PreferNoSchedule``) are marked ``avoid``. The
request carries the job's work in FLOPs (what its pod's ``accel-fleet.io/flops``
says) for a scheduler that weighs device speed. ``place``
returns the node and the device indices to bind, or None to leave the job
pending. A scheduler must not keep references to the views past the call.
Register one in ``SCHEDULERS`` (a scenario picks it with ``scheduler:``);
``placement`` is the placement package's scorer.

Topology: a job on several devices runs at the speed its slowest pair of devices
allows. ``LINK_FACTOR`` is the run-time multiplier per link type, the same link
types as the exporter's ``accel_topology_link_info`` (``exporter/backends/sim.py``
builds the same shapes: NVIDIA and AMD nodes connect every pair, a PCIe-only node
pairs devices on a switch, four on a host bridge, and crosses the CPU
interconnect between halves). The factors are the simulation's assumption, in
the range that all-reduce bandwidth ratios suggest (NVLink/xGMI ~ 10x a PCIe
switch path, which in a compute-bound training step costs some 10-50 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from autoscaler.placement.catalogue import DEFAULT_PRECISION

LINK_FACTOR: dict[str, float] = {
    "nvlink": 1.0,
    "xgmi": 1.0,
    "roce": 1.0,
    "hccs": 1.0,
    "ici": 1.0,
    "pcie_switch": 1.1,
    "pcie_hostbridge": 1.25,
    "system": 1.5,
}


def link_type(topology: str, a: int, b: int) -> str:
    """The link between devices ``a`` and ``b`` of one node with this topology."""
    if topology != "pcie":
        return topology
    if a // 2 == b // 2:
        return "pcie_switch"
    if a // 4 == b // 4:
        return "pcie_hostbridge"
    return "system"


def slowdown(topology: str, devices: Sequence[int]) -> float:
    """How much longer a job takes on these devices than on ideally linked ones."""
    worst = 1.0
    for i, a in enumerate(devices):
        for b in devices[i + 1 :]:
            worst = max(worst, LINK_FACTOR[link_type(topology, a, b)])
    return worst


@dataclass(frozen=True)
class Request:
    """A pending job: how many devices, of which pools. ``pool`` is the pool it was
    drawn for (whose model its nominal run time is measured on); ``pools`` the pools
    it may run on, when more than that one."""

    job: str
    pool: str
    devices: int
    pools: tuple[str, ...] = ()
    flops: float | None = None
    precision: str = DEFAULT_PRECISION

    @property
    def eligible(self) -> tuple[str, ...]:
        return self.pools or (self.pool,)


@dataclass(frozen=True)
class NodeView:
    name: str
    pool: str
    topology: str
    devices_per_node: int
    free: tuple[int, ...]
    avoid: bool = False
    model: str = ""
    vendor: str = ""


@dataclass(frozen=True)
class Placement:
    node: str
    devices: tuple[int, ...]


class Scheduler(Protocol):
    name: str

    def place(self, request: Request, nodes: Sequence[NodeView]) -> Placement | None: ...


class FirstFit:
    """The first node (in name order across the eligible pools, preferred nodes
    before ``avoid`` ones) with enough free devices, and its lowest-numbered free
    devices. It knows nothing of topology or of device models, which is the point of
    having it: it is what kube-scheduler does with a device plugin that is not
    topology-aware. Its scoring weighs CPU and memory, not which GPU a node has, so
    among nodes that fit, the model a job gets is an accident of the order it looks
    in; name order is that accident made repeatable."""

    name = "first-fit"

    def place(self, request: Request, nodes: Sequence[NodeView]) -> Placement | None:
        fallback: NodeView | None = None
        for view in nodes:
            if len(view.free) < request.devices:
                continue
            if view.avoid:
                fallback = fallback or view
                continue
            return Placement(view.name, view.free[: request.devices])
        if fallback is not None:
            return Placement(fallback.name, fallback.free[: request.devices])
        return None


__all__ = [
    "LINK_FACTOR",
    "FirstFit",
    "NodeView",
    "Placement",
    "Request",
    "Scheduler",
    "link_type",
    "slowdown",
]
