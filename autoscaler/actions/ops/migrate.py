"""Moving a node's device pods off it: the taint, the holders of one device, the
eviction loop, bare pods recreated elsewhere and gangs restarted as one. The
``migrate_jobs`` action is this work under a rule (``autoscaler/actions/migrate_jobs.py``
says what it does, step by step, with its parameters); ``reset_devices`` and
``reboot_node`` move the pods the same way before they ask for a reset or a reboot
(``autoscaler/actions/ops/agent.py``), recorded under their own entry.

``MigrateJobsParams`` live here because all three read them from their decision's
parameters (``taint``, ``drainTimeout``, ``deviceOnly``): whichever action the
decision is for, the move is the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from accel_common.dra import DraState
from accel_common.gangs import gang_of
from accel_common.names import BARE_PODS_ANNOTATION as BARE_PODS
from accel_common.names import DEFAULT_TAINT
from autoscaler.actions.base import from_params, param
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops import barepods, gangs
from autoscaler.actions.ops.drain import DEFAULT_DRAIN_TIMEOUT
from autoscaler.actions.ops.nodes import claim, node_of
from autoscaler.actions.ops.ownership import event, iso, parse_iso
from autoscaler.actions.ops.pods import (
    EvictionResult,
    claims_of,
    controller_owner,
    evict_until,
    finish,
    meta,
    pod_key,
    uses_devices,
)
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj
from autoscaler.promql.matchers import quote
from autoscaler.types import Unknown, Vector

log = logging.getLogger("accel_autoscaler.actions")

# The action the move's Events name, whichever action's entry it runs under.
ACTION = "migrate_jobs"


@dataclass(frozen=True)
class MigrateJobsParams:
    taint: str = param("taint", DEFAULT_TAINT)
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    device_only: bool = param("deviceOnly", False)


async def _device_pods(ctx: ActionContext, node: str, device: str) -> tuple[set[str] | None, str]:
    """``namespace/pod`` of the pods holding ``device``, or None and why that is
    unknown. No series is unknown too: the exporter publishes
    ``accel_device_pod_info`` only for what the kubelet assigned, and "no pod" and
    "the kubelet could not be asked" look the same from here."""
    if not device:
        return None, "the target names no device"
    if ctx.query is None:
        return None, "no metrics source to ask"
    expr = f"accel_device_pod_info{{node={quote(node)},device={quote(device)}}}"
    result = await ctx.query(expr, ctx.clock())
    if isinstance(result, Unknown):
        return None, f"accel_device_pod_info is unknown: {result.reason}"
    if not isinstance(result, Vector):
        return None, "accel_device_pod_info is not a vector"
    if not result.samples:
        return None, f"no accel_device_pod_info series for {device} on {node}"
    holders = {f"{s.get('namespace')}/{s.get('pod')}" for s in result.samples}
    return holders | await _sharing(ctx, result), ""


async def _sharing(ctx: ActionContext, result: Vector) -> set[str]:
    """The other pods of the claims the exporter named (``claim`` label): a claim
    reserved for several pods gives all of them the device. A claim that cannot be
    read adds no one (the pods the exporter named still go)."""
    out: set[str] = set()
    named = {(str(s.get("namespace") or ""), str(s.get("claim") or "")) for s in result.samples}
    for namespace, claim_name in sorted(c for c in named if all(c)):
        try:
            obj = await ctx.kube.get_resource_claim(namespace, claim_name)
        except KubeError as e:
            log.info("claim %s/%s: cannot read who shares it: %s", namespace, claim_name, e)
            continue
        for ref in (obj.get("status") or {}).get("reservedFor") or ():
            if isinstance(ref, dict) and ref.get("resource") == "pods" and ref.get("name"):
                out.add(f"{namespace}/{ref['name']}")
    return out


async def migrate(ctx: ActionContext, decision: Decision) -> Outcome:
    """Taint the decision's node and move its device pods (all, or with ``deviceOnly``
    those holding the target device): the ``migrate_jobs`` action's work."""
    params = from_params(MigrateJobsParams, decision.params)
    name = node_of(decision)
    device = decision.target.get("device", "")
    holders: set[str] | None = None
    scope = f"every device-using pod of node {name}"
    if params.device_only:
        holders, why = await _device_pods(ctx, name, device)
        if holders is None:
            return await _unknown_holders(ctx, decision, name, device, why)
        scope = f"the {len(holders)} pod(s) holding {device}"
    try:
        claimed = await claim(ctx, decision, phase="migrating", taint=params.taint)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    deadline = parse_iso(claimed.entry.started) + params.drain_timeout
    await event(
        ctx,
        claimed.node,
        "MigrationStarted",
        f"tainted {params.taint}; moving {scope} for rule {decision.rule} "
        f"(until {iso(deadline)})" + (f": {decision.reason}" if decision.reason else ""),
        action=ACTION,
    )
    bare = _BarePods(
        ctx,
        name,
        decision.rule,
        # Whether the node may hold bare-pod records: skip the final read when not.
        saved=bool((meta(claimed.node).get("annotations") or {}).get(BARE_PODS)),
    )
    recreated = bare.recreated

    dra: DraState | None = None

    def chosen(pod: Obj) -> bool:
        if holders is not None:
            return pod_key(pod) in holders
        return uses_devices(pod, dra)

    def select(pod: Obj) -> bool:
        # A gang member is never evicted alone: its gang restarts as one, below.
        return chosen(pod) and gang_of(pod) is None

    try:
        if holders is None:
            # Which of the node's pods hold accelerators through ResourceClaims.
            dra = await claims_of(ctx, await ctx.kube.list_pods(node=name))
        # First what an earlier run left: replacements of pods it evicted.
        earlier = await barepods.settle(ctx, name, final=False, read=claimed.node)
        recreated.extend(earlier.recreated)
        # The node is tainted by now, so the gangs restart elsewhere.
        ganged = await gangs.restart_on_node(
            ctx, name, chosen, rule=decision.rule, why=f"a member was on node {name}"
        )
        result = await evict_until(
            ctx,
            name,
            select,
            deadline=deadline,
            rule=decision.rule,
            why=f"migrated off failing node ({decision.rule})",
            before_evict=bare.before_evict,
            after_evict=bare.after_evict,
        )
        if bare.saved and not result.stopped:
            settled = await barepods.settle(ctx, name, final=True)
            recreated.extend(settled.recreated)
            result.waiting.update(settled.waiting)
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    ganged.held_back(result)
    return await _finished(ctx, claimed.node, decision.rule, result, ganged, recreated)


async def _finished(
    ctx: ActionContext,
    node: Obj,
    rule: str,
    result: EvictionResult,
    ganged: gangs.GangPass,
    recreated: list[str],
) -> Outcome:
    """The move's phase, Event and outcome."""
    return await finish(
        ctx,
        node,
        rule,
        ACTION,
        result,
        # A replacement still to create keeps the work in flight: the next leader
        # (or this one after a restart) resumes it from the node annotation.
        phases=("migrated", "migrating" if result.waiting else "migrate-incomplete"),
        reasons=("Migrated", "MigrationIncomplete"),
        extra=(f", recreated {len(recreated)} bare pod(s) elsewhere" if recreated else "")
        + (f", {ganged.summary()}" if ganged.summary() else ""),
        details={"recreated": recreated, "gangs": [r.gang for r in ganged.restarts]},
    )


class _BarePods:
    """A move's bare pods (no owner recreates them): each is kept on the node
    before its eviction and recreated elsewhere once it is gone, never twice
    (``autoscaler/actions/ops/barepods.py``). Not frozen: it notes what it did."""

    def __init__(self, ctx: ActionContext, node: str, rule: str, *, saved: bool) -> None:
        self.ctx, self.node, self.rule = ctx, node, rule
        self.saved = saved
        self.recreated: list[str] = []

    async def before_evict(self, pod: Obj) -> str | None:
        if controller_owner(pod) is not None:
            return None  # its owner makes a new one; the taint keeps it off this node
        self.saved = True
        return await barepods.save(self.ctx, self.node, pod, self.rule)

    async def after_evict(self, pod: Obj) -> None:
        if controller_owner(pod) is not None:
            return
        ctx, name = self.ctx, self.node
        record = barepods.Record(
            str(meta(pod).get("uid") or ""),
            self.rule,
            barepods.replacement_name(pod),
            barepods.sanitised(pod),
        )
        key = pod_key(pod)
        if ctx.dry_run:
            # The original stays in a dry run; show the create that would follow.
            state = await barepods.create(ctx, name, key, record)
        else:
            state = await barepods.complete(ctx, name, key, record)
            if state in ("recreated", "exists"):
                await barepods.drop(ctx, name, {key: record.uid})
        if state == "recreated":
            self.recreated.append(f"{meta(pod).get('namespace', 'default')}/{record.replacement}")


async def _unknown_holders(
    ctx: ActionContext, decision: Decision, node: str, device: str, why: str
) -> Outcome:
    """``deviceOnly`` with unknown holders: evict nothing, since missing data must
    never act more widely than known data would. Only the replacements of bare pods
    that an earlier run already evicted are finished (that loses nothing and moves
    nothing)."""
    message = (
        f"node {node}: unknown holders: which pods hold {device or 'the device'} is unknown "
        f"({why}); deviceOnly evicts nothing rather than every device pod of the node"
    )
    details: dict[str, object] = {"unknown": "holders", "device": device, "evicted": []}
    try:
        settled = await barepods.settle(ctx, node, final=True)
    except NotFound:
        return Outcome("skipped", message, details)
    except KubeError as e:
        return Outcome("unknown", f"{message}; finishing earlier bare-pod moves: {e}", details)
    if settled.recreated:
        details["recreated"] = settled.recreated
        message += f"; recreated {len(settled.recreated)} bare pod(s) an earlier run evicted"
    # Routine (a device pod not yet reported, a source still warming up) and
    # already in the outcome: info, not a warning that reads like an error.
    log.info("rule %s: %s", decision.rule, message)
    return Outcome("skipped", message, details)
