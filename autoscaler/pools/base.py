"""Node pools behind one protocol, so that ``scale_node_pool`` and the pool metrics
do not care whether a pool is a Cluster API MachineDeployment or something else.

The first provider is Cluster API (``autoscaler/pools/clusterapi.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class NodeShape:
    """What one node of a pool will offer, declared rather than seen: the pool's
    capacity annotations (``autoscaler/pools/capacity.py``). It is how a pool at 0
    nodes can say that a queued job would fit on a node it would add."""

    # Device resource -> devices per node (a DRA driver's devices under the driver's
    # name, e.g. gpu.nvidia.com, as the controller counts DRA devices).
    devices: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    # (key, value, effect) of the taints a new node starts with.
    taints: tuple[tuple[str, str, str], ...] = ()
    # The DRA driver whose devices ``devices`` counts; "" for a device plugin's.
    dra_driver: str = ""
    # Where it was read, for messages ("MachineDeployment capi/a100").
    source: str = ""


@dataclass(frozen=True)
class Pool:
    name: str
    min_size: int
    max_size: int
    # Desired replicas as the provider holds them.
    replicas: int
    # Nodes that have registered with the cluster (a Machine with a nodeRef).
    nodes: tuple[str, ...]
    # Machines asked for but not yet registered as nodes: capacity on its way.
    provisioning: int
    # What a node of the pool offers, from its capacity annotations (None: not
    # declared); lets a pool at 0 nodes be matched with the pods it would serve.
    shape: NodeShape | None = None


class NodePoolProvider(Protocol):
    name: str

    async def pools(self) -> list[Pool]: ...

    async def set_replicas(self, pool: str, replicas: int) -> None: ...

    async def mark_for_deletion(self, pool: str, node: str) -> None:
        """Mark the node's machine so that the next replica decrease removes it."""
        ...


__all__ = ["NodePoolProvider", "NodeShape", "Pool"]
