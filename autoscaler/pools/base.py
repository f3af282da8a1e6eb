"""Node pools behind one protocol, so that ``scale_node_pool`` and the pool metrics
do not care whether a pool is a Cluster API MachineDeployment or something else.

The first provider is Cluster API (``autoscaler/pools/clusterapi.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class NodePoolProvider(Protocol):
    name: str

    async def pools(self) -> list[Pool]: ...

    async def set_replicas(self, pool: str, replicas: int) -> None: ...

    async def mark_for_deletion(self, pool: str, node: str) -> None:
        """Mark the node's machine so that the next replica decrease removes it."""
        ...


__all__ = ["NodePoolProvider", "Pool"]
