"""What a simulated pool's MachineDeployment declares about its nodes, and how its
registered nodes count as capacity.

Why a module of its own: both halves are the simulator's copy of something the
controller reads through the API, and each must stay the same as its original,
which lives in ``autoscaler/pools/capacity.py``:

- **The capacity annotations** (``capacity_annotations``): scale from zero. A
  pool at 0 nodes has no node to say what a new one would offer; the
  cluster-autoscaler's Cluster API provider, and the controller with it
  (``read_shape``), read it from the MachineDeployment's
  ``capacity.cluster-autoscaler.kubernetes.io/`` annotations. The simulator
  writes ``gpu-count`` (the pool's ``devicesPerNode``), ``gpu-type`` (its
  vendor's resource, ``accel_common.names.VENDOR_RESOURCE``) and ``labels`` (the
  labels every node of the pool carries, ``node_labels``, which its jobs select
  it by), in the formats ``read_shape`` reads. No ``taints``: the simulated nodes
  start with none. No ``cpu`` or ``memory``: the cluster-autoscaler wants them,
  but a pool has no such figure and the controller weighs devices only, so any
  value would be made up. A pool with ``capacityAnnotations: false`` carries
  none, as a MachineDeployment nobody annotated.
- **Ready is not capacity** (``sort_nodes``): a node that joined after the start
  is Ready ``deviceReadyDelay`` before its device plugin registers its devices.
  ``capacity.readiness`` sorts a pool's nodes into ready, warming (capacity on
  its way, for at most ``DEVICE_WAIT`` from the node's creation) and not ready;
  ``sort_nodes`` does the same from the simulator's slots, so that the pool
  series the simulator writes (``telemetry.Telemetry.pool_rows``) are what
  ``clusterstate.collect`` reads from the same cluster
  (``tests/autoscaler/simulate/test_capi_pools.py`` holds them equal while
  nodes warm).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from accel_common.names import (
    CAPI_CAPACITY_GPU_COUNT,
    CAPI_CAPACITY_GPU_TYPE,
    CAPI_CAPACITY_LABELS,
    CAPI_DEPLOYMENT_LABEL,
    POOL_LABEL,
    VENDOR_LABEL,
    VENDOR_RESOURCE,
)
from autoscaler.pools.capacity import DEVICE_WAIT


class PoolSpec(Protocol):
    """What is read here of a pool (``scenario.PoolSpec``)."""

    @property
    def name(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def devices_per_node(self) -> int: ...
    @property
    def capacity_annotations(self) -> bool: ...


class NodeSlot(Protocol):
    """What is read here of a registered node (``machines.Slot``)."""

    @property
    def ready(self) -> bool: ...
    @property
    def warming(self) -> bool: ...
    @property
    def created(self) -> float: ...


@dataclass(frozen=True)
class PoolNodes:
    """A pool's registered nodes as ``capacity.readiness`` sorts them, and what the
    pool offers a pending pod."""

    registered: int
    # Ready, and their devices allocatable (or the pool has none to wait for).
    ready: int
    # Should have devices, none allocatable yet, younger than DEVICE_WAIT:
    # counted with the provisioning Machines.
    warming: int
    # Not Ready, or past DEVICE_WAIT without their devices.
    notready: int
    # Registered nodes whose devices are allocatable (Ready or not): capacity.
    with_devices: int
    # A pending pod of the pool can be matched with a node of it: a registered one
    # whose devices are allocatable, or the shape its annotations declare.
    offers: bool


def node_labels(pool: PoolSpec) -> dict[str, str]:
    """The labels every node of ``pool`` carries, its hostname aside."""
    return {POOL_LABEL: pool.name, CAPI_DEPLOYMENT_LABEL: pool.name, VENDOR_LABEL: pool.vendor}


def capacity_annotations(pool: PoolSpec) -> dict[str, str]:
    """The scale-from-zero annotations of ``pool``'s MachineDeployment (module
    docstring); empty with ``capacityAnnotations: false``."""
    if not pool.capacity_annotations:
        return {}
    labels = ",".join(f"{k}={v}" for k, v in sorted(node_labels(pool).items()))
    return {
        CAPI_CAPACITY_GPU_COUNT: str(pool.devices_per_node),
        CAPI_CAPACITY_GPU_TYPE: VENDOR_RESOURCE[pool.vendor],
        CAPI_CAPACITY_LABELS: labels,
    }


def sort_nodes(pool: PoolSpec, nodes: Sequence[NodeSlot], now: float) -> PoolNodes:
    """``pool``'s registered ``nodes`` sorted as ``capacity.readiness`` sorts them
    at ``now``. A node whose devices are allocatable is ready when Ready. One
    without them is warming while younger than ``DEVICE_WAIT`` (dated by its
    ``creationTimestamp``, whole seconds) and not ready after, when the pool should
    have devices: its capacity annotations declare them, or another node offers
    some. Otherwise (no annotations, no node with devices yet) Ready alone
    decides, as it does for the controller, which then has nothing to say that a
    device is coming."""
    with_devices = sum(1 for n in nodes if not n.warming)
    expects = pool.capacity_annotations or with_devices > 0
    ready = warming = notready = 0
    for n in nodes:
        if not expects or not n.warming:
            ready += n.ready
            notready += not n.ready
        elif now - math.floor(n.created) < DEVICE_WAIT:
            warming += 1
        else:
            notready += 1
    return PoolNodes(len(nodes), ready, warming, notready, with_devices, expects)


__all__ = ["PoolNodes", "capacity_annotations", "node_labels", "sort_nodes"]
