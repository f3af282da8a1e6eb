"""The circuit breaker's arithmetic: how many nodes may be under remediation at once.

A fault storm that takes half the fleet at once is more often a bad driver rollout, a
broken exporter or a network partition than half the hardware failing; draining
everything on it turns one incident into an outage. So the engine stops new
remediation when the nodes under remediation would exceed ``maxUnhealthyNodes``
(a count, or a share of the cluster's nodes) and waits for a person, or for a window
to pass with the share back under the limit.

Counting rule (one rule for numerator and denominator): a node that a scale-up added
less than ``scaleUpGrace`` seconds ago is *not established*. It is left out of the
count of nodes under remediation, and out of the cluster size that a share is taken
of: a node that is still initialising is not evidence of a storm, and a scale-up does
not make room for more of the established nodes to be remediated. Such nodes are
still acted on; they simply do not count. Every other node under remediation counts,
whether or not the cluster listing names it: a stale listing must not let a storm
through. Only remediation that treats a node as unwell counts (``UNHEALTHY_ACTIONS``:
cordon, taint, drain, migrate_jobs, and the ladder's reset_devices, reboot_node and
replace_machine); a rebalance of a busy node does not. A target on an escalation
ladder counts through every step, also while its node is away being replaced. The
breaker counts nodes under remediation, not acts: a rule's act whose outcome says
it did nothing (``skipped``: the node was gone, which pods hold the device was
unknown) releases its target (``EngineState.void``), and its node stops counting;
a ladder's target stays counted while the ladder goes on to its next step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from autoscaler.engine.state import ClusterInfo
from autoscaler.ruleset.model import Limits

# The actions that treat their node as unwell, and so count towards the breaker.
# rebalance moves load off a busy node, requeue_job restarts one pod and
# scale_node_pool resizes a pool: none of them says anything about a storm.
UNHEALTHY_ACTIONS = frozenset(
    {
        "cordon",
        "taint",
        "drain",
        "migrate_jobs",
        "reset_devices",
        "reboot_node",
        "replace_machine",
    }
)

# Float error in ratio * nodes (0.1 * 30 is 3.0000000000000004, 0.07 * 100 is
# 7.000000000000001) must not change the count by one.
_EPSILON = 1e-9


def in_grace(node: str, limits: Limits, cluster: ClusterInfo | None, now: float) -> bool:
    """Whether a scale-up added ``node`` less than ``scale_up_grace`` seconds ago."""
    if cluster is None:
        return False
    added = cluster.recently_added.get(node)
    return added is not None and now - added < limits.scale_up_grace


def counted(
    nodes: Iterable[str | None], limits: Limits, cluster: ClusterInfo | None, now: float
) -> set[str]:
    """The established nodes among ``nodes`` (None, for pod and pool targets, is no node)."""
    return {n for n in nodes if n is not None and not in_grace(n, limits, cluster, now)}


class SizeUnknown(Exception):
    """``maxUnhealthyNodes`` is a share and the cluster's size is not known."""


def allowed_unhealthy(limits: Limits, cluster: ClusterInfo | None, now: float) -> int | None:
    """How many established nodes may be under remediation at once; None: no limit.

    A share is rounded up, as Kubernetes rounds a PodDisruptionBudget's
    ``maxUnavailable`` percentage: 10% of 20 nodes is 2, and 10% of 5 nodes is 1, so
    that a small cluster can still remediate one node (one node is not a storm).
    ``0%`` allows none.

    Raises SizeUnknown when the limit is a share and ``cluster`` is None: the engine
    then holds node remediation rather than guess.
    """
    bounds: list[int] = []
    if limits.max_unhealthy_nodes is not None:
        bounds.append(limits.max_unhealthy_nodes)
    if limits.max_unhealthy_ratio is not None:
        if cluster is None:
            raise SizeUnknown("maxUnhealthyNodes is a share and the cluster's size is unknown")
        established = len(counted(cluster.nodes, limits, cluster, now))
        bounds.append(math.ceil(limits.max_unhealthy_ratio * established - _EPSILON))
    return min(bounds) if bounds else None


def describe_limit(limits: Limits, cluster: ClusterInfo | None, now: float) -> str:
    """The limit in the words of the rule file, for notes and the API."""
    parts: list[str] = []
    if limits.max_unhealthy_nodes is not None:
        parts.append(f"{limits.max_unhealthy_nodes} nodes")
    if limits.max_unhealthy_ratio is not None:
        share = f"{limits.max_unhealthy_ratio * 100:g}%"
        if cluster is not None:
            established = len(counted(cluster.nodes, limits, cluster, now))
            share += f" of {established} established nodes"
        parts.append(share)
    return "maxUnhealthyNodes " + " and ".join(parts)
