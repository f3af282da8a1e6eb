"""What an action runs with (``ActionContext``) and what it reports (``Outcome``).

An action's ``execute(ctx, decision)`` touches the cluster only through
``ctx.kube`` (the ``Kube`` protocol), reads time only from ``ctx.clock`` and waits
only through ``ctx.sleep``. The controller gives it the client-backed (or dry-run)
``Kube`` and the wall clock; the fleet simulator gives it its in-memory cluster and
simulated time. The same code runs in both.

Long actions (a drain that waits for a PodDisruptionBudget) check
``ctx.leading()`` between steps: a replica that lost its Lease stops acting at the
next step, and the replica that takes over resumes from the node annotation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from autoscaler.kube.protocol import Kube
from autoscaler.pools.base import NodePoolProvider
from autoscaler.types import QueryResult

Status = Literal["done", "partial", "skipped", "failed", "unknown"]


def _always() -> bool:
    return True


@dataclass
class ActionContext:
    kube: Kube
    # The controller's name, recorded as the owner in accel-fleet.io/remediation; all
    # replicas of one controller share it, so a new leader resumes the old one's work.
    controller: str = "accel-autoscaler"
    # This replica (the Lease holder identity), recorded beside the owner for people.
    replica: str = ""
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    dry_run: bool = False
    # The node-pool provider (scale_node_pool); None when no provider is configured.
    pools: NodePoolProvider | None = None
    # PromQL against the controller's source, for actions that weigh load (rebalance).
    query: Callable[[str, float], Awaitable[QueryResult]] | None = None
    # How long to wait between eviction attempts that a PDB refused.
    retry_interval: float = 5.0
    # False once this replica lost its Lease: long actions stop at the next step.
    leading: Callable[[], bool] = _always
    # The namespace for Events about cluster-scoped objects (nodes).
    event_namespace: str = "default"


@dataclass
class Outcome:
    """What an action did. ``status``: ``done`` (all of it), ``partial`` (some of it,
    e.g. pods a PDB kept until drainTimeout), ``skipped`` (nothing to do, or not
    allowed: a node someone else cordoned), ``failed`` (it ran and the cluster says it
    did not work: the agent answered failed, a PodDisruptionBudget kept the pods, the
    node did not come back; the evidence is in ``message`` and the Event), or
    ``unknown`` (an API error, an exception, an unreadable value or a missing fact
    stopped it: nothing says the remedy failed).

    The difference matters to escalation ladders (``engine/ladder.py``): a ``failed``
    step goes on to the next at once, an ``unknown`` one waits for its timeout, so
    that garbage or an API outage can never take a ladder to a reboot."""

    status: Status
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "details": dict(self.details)}


__all__ = ["ActionContext", "Outcome", "Status"]
