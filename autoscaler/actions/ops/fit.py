"""Which node a scale-down may remove: one whose device pods can all run on the
pool's other nodes, as cluster-autoscaler asks before it removes a node.

Why: a pool under half allocated may still have no empty node (jobs spread over
its nodes), and its least-loaded node may run a job of 8 devices that no other
node has 8 free devices for. Draining that node stops the job (it restarts from
its last checkpoint) and leaves it pending until a scale-up brings a node back:
the scale-down costs the work it was meant to save. So a node is removable only
when every device pod on it

- is recreated elsewhere by an owner (a Job, JobSet, ReplicaSet, StatefulSet...;
  a bare pod would be gone for good: ``migrate_jobs`` is the action that keeps
  bare pods; a DaemonSet's or a static pod belongs to the node and is not
  counted),
- is no gang member (moving one member restarts its whole gang),
- does not say ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`` (the
  annotation users already put on pods that cluster-autoscaler must not move),
- has devices that are known (a ResourceClaim that cannot be read is unknown, and
  unknown keeps the node), and

all of them together fit, largest first, into the free devices (allocatable less
what running pods request, by resource) of the pool's other schedulable nodes.
A node with no device pod always fits. Reading a node or its pods failing is
*unknown*: no node is picked (``Unknown``), never a guess.

A node whose drain this rule already began (its remediation annotation holds the
rule's entry) is resumed first, fit or not: its pods were being moved already,
and leaving it cordoned half-drained would be worse than finishing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from accel_common.clusterjson import annotations_of
from accel_common.dra import EMPTY_STATE, DraState, has_claims
from accel_common.gangs import gang_of
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.ownership import entries
from autoscaler.actions.ops.pods import (
    RECREATING_OWNERS,
    controller_owner,
    is_daemonset_pod,
    is_live,
    is_mirror_pod,
    pod_key,
    uses_devices,
)
from autoscaler.clusterstate import all_device_requests, dra_node_devices
from autoscaler.kube.dra import read_dra
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj
from autoscaler.pools.capacity import node_devices

# cluster-autoscaler's annotation: "false" on a pod keeps its node.
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


@dataclass
class Node:
    """A pool node as a scale-down weighs it."""

    name: str
    obj: Obj
    pods: list[Obj]
    free: dict[str, int] = field(default_factory=dict)
    schedulable: bool = True
    # Running or pending pods that hold devices.
    device_pods: list[Obj] = field(default_factory=list)


@dataclass(frozen=True)
class Pick:
    """The node to remove, or why none (``node`` None)."""

    node: str | None
    why: str = ""


@dataclass(frozen=True)
class Unknown:
    """The nodes or their pods could not be read."""

    reason: str


def keeps_node(pod: Obj, dra: DraState | None) -> str | None:
    """Why this device pod keeps its node from a scale-down, or None if it may move."""
    owner = controller_owner(pod)
    if owner is None or owner.get("kind") not in RECREATING_OWNERS:
        kind = "no owner" if owner is None else f"owned by a {owner.get('kind')}"
        return f"pod {pod_key(pod)} has {kind} that would recreate it elsewhere"
    if gang_of(pod) is not None:
        return f"pod {pod_key(pod)} is a gang member (moving it restarts its gang)"
    if str(annotations_of(pod).get(SAFE_TO_EVICT, "")).strip().lower() == "false":
        return f'pod {pod_key(pod)} says {SAFE_TO_EVICT}: "false"'
    if has_claims(pod) and (dra is None or dra.unknown_claims(pod)):
        return f"pod {pod_key(pod)} holds devices through claims that cannot be read"
    return None


def schedulable(node: Obj) -> bool:
    """Whether new pods may land on the node: not cordoned, no taint that keeps
    pods off (``NoSchedule``, ``NoExecute``)."""
    spec = node.get("spec") or {}
    return not spec.get("unschedulable") and not any(
        isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")
        for t in spec.get("taints") or ()
    )


def used_devices(pods: Sequence[Obj], dra: DraState | None) -> dict[str, int]:
    """The devices the live pods of a node hold, by resource (device plugins' and,
    under their drivers' names, the claims')."""
    used: dict[str, int] = {}
    for p in pods:
        if is_live(p):
            for resource, n in all_device_requests(p, dra).items():
                used[resource] = used.get(resource, 0) + n
    return used


def weigh(name: str, obj: Obj, pods: list[Obj], dra: DraState | None) -> Node:
    """The node's free devices (by resource) and its device pods."""
    # A DaemonSet's pod or a static pod belongs to the node: it goes with it and
    # needs no room elsewhere (cluster-autoscaler counts neither).
    devices = [
        p
        for p in pods
        if is_live(p) and uses_devices(p, dra) and not is_daemonset_pod(p) and not is_mirror_pod(p)
    ]
    capacity = {**node_devices(obj), **dra_node_devices(name, dra)}
    used = used_devices(pods, dra)
    free = {r: capacity.get(r, 0) - used.get(r, 0) for r in capacity}
    return Node(name, obj, pods, free, schedulable(obj), devices)


def fits(node: Node, others: Sequence[Node], dra: DraState | None) -> str | None:
    """None when every device pod of ``node`` may move and all fit, largest first,
    on the schedulable ``others``; else why not."""
    for pod in node.device_pods:
        why = keeps_node(pod, dra)
        if why is not None:
            return why
    room = [dict(o.free) for o in others if o.schedulable and o.name != node.name]
    wants = sorted(
        ((all_device_requests(p, dra), pod_key(p)) for p in node.device_pods),
        key=lambda w: (-sum(w[0].values()), w[1]),
    )
    for want, key in wants:
        spot = next((r for r in room if all(r.get(k, 0) >= n for k, n in want.items())), None)
        if spot is None:
            asked = ", ".join(f"{n} {k}" for k, n in sorted(want.items()))
            return f"pod {key} ({asked}) fits on no other schedulable node of the pool"
        for k, n in want.items():
            spot[k] -= n
    return None


async def read_nodes(
    ctx: ActionContext, names: Sequence[str]
) -> tuple[list[Node], DraState | None] | Unknown:
    """Each named node with its pods (a node gone is left out), and the claims of
    those pods that use claims (None: they could not be read)."""
    got: dict[str, tuple[Obj, list[Obj]]] = {}

    async def fetch(name: str) -> None:
        with contextlib.suppress(NotFound):
            got[name] = (await ctx.kube.get_node(name), await ctx.kube.list_pods(node=name))

    # Every read finishes (none is left running behind an early error).
    for result in await asyncio.gather(*(fetch(n) for n in names), return_exceptions=True):
        if isinstance(result, KubeError):
            return Unknown(f"cannot read the pool's nodes and pods: {result}")
        if isinstance(result, BaseException):
            raise result
    pods = [p for _, ps in got.values() for p in ps]
    dra: DraState | None = EMPTY_STATE
    if any(has_claims(p) for p in pods):
        namespaces = {str((p.get("metadata") or {}).get("namespace") or "default") for p in pods}
        try:
            dra = await read_dra(ctx.kube, pods, namespaces=namespaces, classes=False)
        except KubeError:
            dra = None  # claim pods then keep their nodes (keeps_node)
    return [weigh(n, *got[n], dra) for n in names if n in got], dra


async def pick(ctx: ActionContext, names: Sequence[str], rule: str) -> Pick | Unknown:
    """The node of ``names`` (a pool's nodes still there) that a scale-down by
    ``rule`` removes next: one whose drain ``rule`` began, else the one with the
    fewest device pods (ties by name) whose pods fit on the others."""
    read = await read_nodes(ctx, names)
    if isinstance(read, Unknown):
        return read
    nodes, dra = read
    if not nodes:
        return Pick(None, "none of its nodes could be found")
    for node in nodes:
        if rule in entries(node.obj):
            return Pick(node.name)
    reasons: list[str] = []
    for node in sorted(nodes, key=lambda n: (len(n.device_pods), n.name)):
        why = fits(node, nodes, dra)
        if why is None:
            return Pick(node.name)
        reasons.append(f"{node.name}: {why}")
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return Pick(None, f"no node can go without stopping a job that has nowhere to run ({shown})")


__all__ = [
    "SAFE_TO_EVICT",
    "Node",
    "Pick",
    "Unknown",
    "fits",
    "keeps_node",
    "pick",
    "read_nodes",
    "schedulable",
    "used_devices",
    "weigh",
]
