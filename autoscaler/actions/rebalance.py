"""``rebalance``: move device-using pods off a hot node onto the coolest nodes
that can take them, a few per evaluation.

Moving a training job costs its progress since the last checkpoint, so the action
is deliberately slow: at most ``maxMovesPerCycle`` evictions per evaluation, and
only while the node's utilization exceeds the least-loaded candidate's by
``minUtilizationGap`` (a move that would merely swap which node is hot is not
made). There is nothing to undo, so a rule with this action has no ``recover``.

Targets: ``node``.

Parameters:

=====================  ==============================================  =======
``maxMovesPerCycle``   pods evicted per evaluation (>= 1)              ``1``
``minUtilizationGap``  least utilization difference (0-1) between the  ``0.2``
                       hot node and a destination
``nodeCooldown``       a node that gave or received a pod this long    ``30m``
                       ago is neither a source nor a destination
                       (duration)
``gainHorizon``        how long a move's load gain is counted when it  ``1h``
                       is weighed against the progress it throws away
                       (duration)
=====================  ==============================================  =======

Execution: the load of every node is the average of its devices' utilization
over the last 10 minutes, from the controller's source; the free devices of a
node are its allocatable device resources less what its pods request, read for
the hot node and the 16 coolest nodes that are cool enough (a node and its pods
each, not every pod of the cluster). Unknown load
means no move. A pod is movable when it uses devices, has an owner that recreates
it (not a bare pod, not a DaemonSet's), is not terminating, and does not carry
``accel-fleet.io/no-rebalance``. The youngest movable pods go first (they lose the
least work), each only if some other schedulable, untainted node has enough free
devices of the pod's kind and a load at least ``minUtilizationGap`` lower, and
only if the move cannot trigger the reverse move: estimating that the moved
devices carry the hot node's load, the destination afterwards must stay less than
``minUtilizationGap`` above the source. That, plus ``nodeCooldown`` (recorded in
the node annotation ``accel-fleet.io/rebalanced`` on both ends), is the
hysteresis: alternating load cannot make pods ping-pong (descheduler #707). A
PodDisruptionBudget refusal skips the pod this cycle. Events: ``Rebalanced`` on
the pod and the node.

Dynamic Resource Allocation: a pod whose devices come from ResourceClaims is
movable too. Its devices are its claims' allocation results; a node's free DRA
devices are those its ResourceSlices publish less what the claims of its pods
hold, counted under the driver's name (``gpu.nvidia.com``), so a claim's pod is
only moved where a DRA driver offers a device of its vendor, never onto a device
plugin's ``nvidia.com/gpu``. Claims and slices are read only when a pod weighed
uses claims; when they cannot be read, claim pods are not moved (their devices
are unknown).

Cost: a move restarts the pod from its last checkpoint. The progress at risk is
(now - ``accel-fleet.io/last-checkpoint``) x the pod's devices; without that
annotation, (pod age mod ``accel-fleet.io/checkpoint-interval``) x devices
(device-seconds). A pod that declares neither is moved as before (youngest first,
which already loses the least), since its age says nothing of what a restart
costs it. The expected gain is the load gap
between the hot node and the destination x the pod's devices x ``gainHorizon``.
A move whose progress at risk is larger than its gain is declined, and the outcome
says by how much. Gang members (``accel_common/gangs.py``) are never moved: a
member moved alone stalls its whole gang.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.clusterjson import ClusterValueError, annotations_of
from accel_common.dra import EMPTY_STATE, DraState, has_claims
from accel_common.gangs import gang_of
from accel_common.names import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    LAST_CHECKPOINT_ANNOTATION,
    REBALANCED_ANNOTATION,
)
from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    from_params,
    param,
    param_keys,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.fit import schedulable, used_devices
from autoscaler.actions.ops.nodes import node_of
from autoscaler.actions.ops.ownership import NO_REBALANCE, event, iso
from autoscaler.actions.ops.pods import (
    all_device_requests,
    controller_owner,
    dra_node_devices,
    evictable,
    is_device_resource,
    pod_key,
    uses_devices,
)
from autoscaler.actions.ops.unknown import answering_unknown, plausible_time, where
from autoscaler.clusterstate import checkpoint_declaration, start_time
from autoscaler.decision import Decision
from autoscaler.kube.dra import read_dra
from autoscaler.kube.errors import KubeError, NotFound, TooManyRequests
from autoscaler.kube.protocol import Obj
from autoscaler.types import Unknown, Vector

log = logging.getLogger("accel_autoscaler.actions")

NAME = "rebalance"
TARGETS = ("node",)


@dataclass(frozen=True)
class RebalanceParams:
    max_moves_per_cycle: int = param("maxMovesPerCycle", 1)
    min_utilization_gap: float = param("minUtilizationGap", 0.2)
    node_cooldown: float = param("nodeCooldown", 1800.0)
    gain_horizon: float = param("gainHorizon", 3600.0)


DEFAULTS = RebalanceParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(RebalanceParams))
    params = RebalanceParams(
        max_moves_per_cycle=r.integer("maxMovesPerCycle", DEFAULTS.max_moves_per_cycle, minimum=1),
        min_utilization_gap=r.ratio("minUtilizationGap", DEFAULTS.min_utilization_gap),
        node_cooldown=r.duration("nodeCooldown", DEFAULTS.node_cooldown),
        gain_horizon=r.duration("gainHorizon", DEFAULTS.gain_horizon),
    )
    return to_params(params), r.problems


# How many of the coolest nodes are weighed as destinations per execution.
MAX_DESTINATIONS = 16
LOAD_QUERY = 'avg by (node) (avg_over_time(accel_utilization_ratio{vendor!="cpu"}[10m]))'


@dataclass
class _Node:
    name: str
    load: float
    capacity: dict[str, int]
    used: dict[str, int]
    schedulable: bool
    cooling: bool
    obj: Obj

    def free(self, resource: str) -> int:
        return self.capacity.get(resource, 0) - self.used.get(resource, 0)

    @property
    def devices(self) -> int:
        return sum(self.capacity.values())


def _capacity(node: Obj) -> dict[str, int]:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    out: dict[str, int] = {}
    for k, v in alloc.items():
        if is_device_resource(k) and isinstance(v, (str, int)) and not isinstance(v, bool):
            # A device count is a small whole number ("8"); anything else (a
            # quantity with thousands of digits, "-3") offers nothing here.
            count = str(v).strip()
            if count.isdigit() and len(count) <= 6:
                out[k] = int(count)
    return out


def _cooling(node: Obj, now: float, cooldown: float) -> bool:
    stamp = annotations_of(node).get(REBALANCED_ANNOTATION)
    if stamp is None or stamp == "":
        return False
    try:
        at = plausible_time(stamp, where({"kind": "Node", **node}, REBALANCED_ANNOTATION))
    except ClusterValueError as e:
        # Unknown is not "never rebalanced": the node sits this cycle out.
        log.warning("%s; the node counts as cooling down", e)
        return True
    return now - at < cooldown


def movable(pod: Obj, dra: DraState | None = None) -> bool:
    owner = controller_owner(pod)
    flag = str(((pod.get("metadata") or {}).get("annotations") or {}).get(NO_REBALANCE, ""))
    return (
        uses_devices(pod, dra)
        and owner is not None
        and owner.get("kind") != "DaemonSet"
        and evictable(pod) is None
        and flag.lower() in ("", "false")
        and gang_of(pod) is None
    )


def progress_at_risk(pod: Obj, now: float, dra: DraState | None = None) -> float | None:
    """Device-seconds of work a restart of ``pod`` would redo: (now - last
    checkpoint) x devices; else (age mod checkpoint interval) x devices; None when
    the pod declares neither (it is then weighed as before: youngest first). The
    annotations are read as the stall rules' series read them."""
    devices = sum(all_device_requests(pod, dra).values())
    last = checkpoint_declaration(pod, LAST_CHECKPOINT_ANNOTATION)
    if last is not None:
        return max(0.0, now - last) * devices
    interval = checkpoint_declaration(pod, CHECKPOINT_INTERVAL_ANNOTATION) or 0.0
    if interval > 0:
        started = start_time(pod)
        age = max(0.0, now - started) if started is not None else 0.0
        return (age % interval) * devices
    return None


async def _stamp(ctx: ActionContext, node: str) -> None:
    stamp = {"metadata": {"annotations": {REBALANCED_ANNOTATION: iso(ctx.clock())}}}
    await ctx.kube.patch_node(node, stamp)


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return Outcome("skipped", "rebalance has nothing to undo")
    params = from_params(RebalanceParams, decision.params)
    hot_name = node_of(decision)
    if ctx.query is None:
        return Outcome("skipped", "no metrics source to weigh node load; not moving anything")
    loads = await ctx.query(LOAD_QUERY, ctx.clock())
    if not isinstance(loads, Vector) or not loads.samples:
        why = loads.reason if isinstance(loads, Unknown) else "no node has load data"
        return Outcome("skipped", f"node load unknown ({why}); not moving anything")
    load = {s.get("node"): s.value for s in loads.samples}
    if hot_name not in load:
        return Outcome("skipped", f"node {hot_name} has no load data; not moving anything")
    now = ctx.clock()
    read = await _read(ctx, hot_name, load, params, now)
    if isinstance(read, Outcome):
        return read
    dra = await _claims(ctx, [p for _, pods in read.values() for p in pods])
    nodes = {name: _weigh(name, read[name], load[name], dra, now, params) for name in read}
    candidates = sorted(
        (p for p in read[hot_name][1] if movable(p, dra)),
        key=lambda p: str((p.get("status") or {}).get("startTime") or ""),
        reverse=True,
    )
    if not candidates:
        return Outcome("skipped", f"node {hot_name} has no movable pod")
    return await _move(ctx, decision, params, nodes, nodes[hot_name], candidates, dra, now)


async def _read(
    ctx: ActionContext,
    hot_name: str,
    load: Mapping[str, float],
    params: RebalanceParams,
    now: float,
) -> dict[str, tuple[Obj, list[Obj]]] | Outcome:
    """The hot node and the coolest nodes that are cool enough (a bounded number of
    them: a few small reads instead of every node and pod of a large cluster), each
    with its pods; or the Outcome that ends the action here."""
    read: dict[str, tuple[Obj, list[Obj]]] = {}

    async def fetch(name: str) -> None:
        read[name] = (await ctx.kube.get_node(name), await ctx.kube.list_pods(node=name))

    try:
        await fetch(hot_name)
    except NotFound:
        return Outcome("skipped", f"node {hot_name} is gone")
    except KubeError as e:
        return Outcome("unknown", str(e))
    if _cooling(read[hot_name][0], now, params.node_cooldown):
        return Outcome(
            "skipped", f"node {hot_name} gave or received a pod within nodeCooldown; waiting"
        )
    gap = params.min_utilization_gap
    # The coolest few, by load and then name: a heap of MAX_DESTINATIONS over
    # (load, name) pairs, not a sort of every node with a key function
    # (fleet-1000 weighs 1,000 nodes at each rebalance).
    limit = load[hot_name] - gap
    cool = [
        n
        for _, n in heapq.nsmallest(
            MAX_DESTINATIONS, ((v, n) for n, v in load.items() if n != hot_name and v <= limit)
        )
    ]
    for name in cool:
        try:
            await fetch(name)
        except NotFound:
            continue
        except KubeError as e:
            return Outcome("unknown", str(e))
    return read


def _weigh(
    name: str,
    read: tuple[Obj, list[Obj]],
    load: float,
    dra: DraState | None,
    now: float,
    params: RebalanceParams,
) -> _Node:
    obj, pods = read
    capacity = {**_capacity(obj), **dra_node_devices(name, dra)}
    cooling = _cooling(obj, now, params.node_cooldown)
    return _Node(name, load, capacity, used_devices(pods, dra), schedulable(obj), cooling, obj)


async def _move(
    ctx: ActionContext,
    decision: Decision,
    params: RebalanceParams,
    nodes: Mapping[str, _Node],
    hot: _Node,
    candidates: list[Obj],
    dra: DraState | None,
    now: float,
) -> Outcome:
    """Evict the candidates, youngest first, each to the coolest node it fits, while
    the move is worth the work it throws away; the hot node's load falls with each."""
    gap = params.min_utilization_gap
    moved: list[str] = []
    reasons: list[str] = []
    hot_load = hot.load
    for pod in candidates:
        if len(moved) >= params.max_moves_per_cycle:
            break
        wants = all_device_requests(pod, dra)
        k = sum(wants.values())
        if not k:
            reasons.append(f"{pod_key(pod)}: its devices are unknown (its claims were not read)")
            continue
        dest = _destination(nodes, hot, wants, k, hot_load, gap)
        if dest is None:
            reasons.append(f"{pod_key(pod)}: no node fits it with a load {gap:g} lower")
            continue
        risk = progress_at_risk(pod, now, dra)
        gain = (hot_load - dest.load) * k * params.gain_horizon
        if risk is not None and risk > gain:
            reasons.append(
                f"{pod_key(pod)}: moving it throws away {risk:.0f} device-seconds since its "
                f"last checkpoint, more than the {gain:.0f} it would gain over gainHorizon"
            )
            continue
        try:
            await ctx.kube.evict_pod(
                pod["metadata"].get("namespace", "default"),
                pod["metadata"]["name"],
                uid=pod["metadata"].get("uid"),
            )
        except NotFound:
            continue
        except TooManyRequests as e:
            reasons.append(f"{pod_key(pod)}: {e}")
            continue
        except KubeError as e:
            return Outcome("unknown", f"{pod_key(pod)}: {e}")
        moved.append(pod_key(pod))
        hot_load -= hot.load * k / max(1, hot.devices)
        await _moved(ctx, decision, pod, hot, dest, wants, k)
    if not moved:
        return Outcome("skipped", "; ".join(reasons[:5]) or "nothing to move")
    return Outcome("done", f"moved {len(moved)} pod(s) off {hot.name}", {"moved": moved})


async def _moved(
    ctx: ActionContext,
    decision: Decision,
    pod: Obj,
    hot: _Node,
    dest: _Node,
    wants: Mapping[str, int],
    k: int,
) -> None:
    """After one eviction: the destination's new load and use, both nodes' cooldown
    stamps, and the Events."""
    dest.load += hot.load * k / max(1, dest.devices)
    for r, q in wants.items():
        dest.used[r] = dest.used.get(r, 0) + q
    dest.cooling = True
    for name in (hot.name, dest.name):
        try:
            await _stamp(ctx, name)
        except KubeError as e:
            log.warning("node %s: could not record the rebalance time: %s", name, e)
    message = (
        f"moved off hot node {hot.name} (load {hot.load:.2f}) by rule {decision.rule}; "
        f"room on {dest.name} (load {dest.load:.2f} after)"
    )
    await event(ctx, pod, "Rebalanced", message, action="Evict")
    await event(ctx, hot.obj, "Rebalanced", f"{pod_key(pod)} {message}", action=NAME)


async def _claims(ctx: ActionContext, pods: list[Obj]) -> DraState | None:
    """Claims, classes and slices when a weighed pod uses claims; else none needed."""
    namespaces = {str((p.get("metadata") or {}).get("namespace") or "default") for p in pods}
    if not any(has_claims(p) for p in pods):
        return EMPTY_STATE
    try:
        return await read_dra(ctx.kube, pods, namespaces=namespaces, classes=False)
    except KubeError as e:
        log.warning("rebalance: cannot read ResourceClaims or ResourceSlices: %s", e)
        return None


def _destination(
    nodes: Mapping[str, _Node],
    hot: _Node,
    wants: Mapping[str, int],
    k: int,
    hot_load: float,
    gap: float,
) -> _Node | None:
    """The coolest node that fits the pod and that the move cannot make hot enough
    to trigger the reverse move."""
    best: _Node | None = None
    for n in nodes.values():
        if n.name == hot.name or not n.schedulable or n.cooling:
            continue
        if any(n.free(r) < q for r, q in wants.items()):
            continue
        if hot_load - n.load < gap:
            continue
        after_dest = n.load + hot.load * k / max(1, n.devices)
        after_hot = hot_load - hot.load * k / max(1, hot.devices)
        if after_dest - after_hot >= gap:
            continue
        if best is None or (n.load, n.name) < (best.load, best.name):
            best = n
    return best


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=False,
        params_type=RebalanceParams,
        validate=validate,
        execute=execute,
    )
)
