"""``migrate_jobs``: taint a node so that nothing new lands on it, then evict the
device-using pods, so that their controllers (Job, JobSet, training operators)
start them again elsewhere.

This is the answer to a device that has failed: its jobs are already broken or
about to be, and waiting helps nobody. Unlike ``drain`` it leaves pods that use no
accelerator where they are. With a ``device`` target and ``deviceOnly: true`` only
the pods that hold the failed device are evicted (an ECC burst on one GPU need not
stop the seven jobs beside it); the taint is still the node's, because Kubernetes
cannot taint a device. A rule's ``recover`` block removes the taint.

Execution: the taint goes on first, in the same conditional write as the
``accel-fleet.io/remediation`` entry (phase ``migrating``), so the scheduler
keeps replacements off the node from then on. Then the pods are evicted through
the Eviction API (PodDisruptionBudgets are honoured: a refusal is retried until
``drainTimeout``). A pod owned by a Job, JobSet, StatefulSet or ReplicaSet is
recreated elsewhere by its owner. A bare pod has no owner to do that, so it is
recreated here, and never runs twice: its spec is kept in the node annotation
``accel-fleet.io/bare-pods`` first, then it is evicted, and only once it is gone
is the replacement created (the same spec but for ``nodeName``, a required node
affinity that excludes the failed node, a name derived from the original's uid)
and the record removed. A refused eviction leaves the original as the one copy;
a controller that dies in between finishes from the record when it resumes
(``autoscaler/actions/barepods.py`` walks through every cut point). A bare pod
whose spec would take the node's annotations past Kubernetes' 256 KiB is left in
place, and the outcome says so.

With ``deviceOnly`` the pods holding the device come from the exporter's
``accel_device_pod_info`` (the kubelet's assignment). When that is unknown (no
series for the device, a failed query, no source) nothing is evicted and nothing
is tainted: the outcome is ``skipped`` with ``unknown holders`` and the reason, as
missing data must never act more widely than known data would. Phase
``migrated`` (or ``migrate-incomplete``; it stays ``migrating``, to be resumed,
while a bare pod's replacement waits for its original to terminate). Events:
``MigrationStarted`` and ``Migrated``/``MigrationIncomplete`` on the node,
``Evicted`` on each pod, ``Recreated`` on each bare pod's replacement.

Dynamic Resource Allocation: a pod that got its devices through ResourceClaims is
a device pod like one that requests ``nvidia.com/gpu``: the node-wide migration
reads the claims of the node's pods (one list per namespace) and moves every pod
whose claims hold an accelerator, or whose claims cannot be read (their devices
are unknown, and the issue's rule is that a pod with claims uses devices); a pod
whose claims all hold something else (a network card) stays. With ``deviceOnly``
the exporter names the pods of a claim-allocated device as for any other
(``accel_device_pod_info{claim=...}``); a claim shared by several pods
(``status.reservedFor``) moves all of them, as all of them hold the device.

Gangs: a pod that belongs to a gang (a JobSet, TrainJob, PyTorchJob, MPIJob or
Volcano Job, or pods sharing ``accel-fleet.io/gang``) is never evicted alone. Once
the taint is on, each gang with a chosen member on the node restarts once, the way
its operator expects (``autoscaler/actions/gangs.py``), and the rest of the pods
are evicted as above. A gang that cannot be restarted (a JobSet with no restart
left) stays, and the outcome is ``partial`` with the reason.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

================  ===========================================  ===========================
``taint``         taint to set first (``key=value:Effect``)    ``accel-fleet.io/faulty=``
                                                               ``true:NoSchedule``
``drainTimeout``  how long to keep evicting (duration, > 0)    ``10m``
``deviceOnly``    evict only pods holding the target device;   ``false``
                  needs target ``device``; unknown holders
                  evict nothing
================  ===========================================  ===========================
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.dra import DraState
from accel_common.gangs import gang_of
from accel_common.names import BARE_PODS_ANNOTATION as BARE_PODS
from accel_common.names import DEFAULT_TAINT
from autoscaler.actions import barepods, gangs
from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    from_params,
    param,
    param_keys,
    read_taint,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.drain import DEFAULT_DRAIN_TIMEOUT
from autoscaler.actions.nodeops import claim, node_of, undo
from autoscaler.actions.ownership import event, iso, parse_iso
from autoscaler.actions.pods import (
    claims_of,
    controller_owner,
    evict_until,
    finish,
    meta,
    pod_key,
    uses_devices,
)
from autoscaler.actions.unknown import answering_unknown
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj
from autoscaler.promql.matchers import quote
from autoscaler.types import Unknown, Vector

log = logging.getLogger("accel_autoscaler.actions")

NAME = "migrate_jobs"
TARGETS = ("node", "device")


@dataclass(frozen=True)
class MigrateJobsParams:
    taint: str = param("taint", DEFAULT_TAINT)
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    device_only: bool = param("deviceOnly", False)


DEFAULTS = MigrateJobsParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(MigrateJobsParams))
    params = MigrateJobsParams(
        taint=read_taint(r, "taint", DEFAULTS.taint),
        drain_timeout=r.duration("drainTimeout", DEFAULTS.drain_timeout, positive=True),
        device_only=r.boolean("deviceOnly", DEFAULTS.device_only),
    )
    return to_params(params), r.problems


def check_target(params: Mapping[str, Any], target: str) -> list[ParamProblem]:
    if params.get("deviceOnly") and target != "device":
        return [ParamProblem("deviceOnly", f"needs target device; this rule's target is {target}")]
    return []


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


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return await undo(ctx, decision)
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
        action=NAME,
    )
    recreated: list[str] = []
    # Whether the node may hold bare-pod records: skip the final read when not.
    saved = [bool((meta(claimed.node).get("annotations") or {}).get(BARE_PODS))]

    dra: DraState | None = None

    def chosen(pod: Obj) -> bool:
        if holders is not None:
            return pod_key(pod) in holders
        return uses_devices(pod, dra)

    def select(pod: Obj) -> bool:
        # A gang member is never evicted alone: its gang restarts as one, below.
        return chosen(pod) and gang_of(pod) is None

    async def before_evict(pod: Obj) -> str | None:
        if controller_owner(pod) is not None:
            return None  # its owner makes a new one; the taint keeps it off this node
        saved[0] = True
        return await barepods.save(ctx, name, pod, decision.rule)

    async def after_evict(pod: Obj) -> None:
        if controller_owner(pod) is not None:
            return
        record = barepods.Record(
            str(meta(pod).get("uid") or ""),
            decision.rule,
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
            recreated.append(f"{meta(pod).get('namespace', 'default')}/{record.replacement}")

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
            before_evict=before_evict,
            after_evict=after_evict,
        )
        if saved[0] and not result.stopped:
            settled = await barepods.settle(ctx, name, final=True)
            recreated.extend(settled.recreated)
            result.waiting.update(settled.waiting)
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    ganged.held_back(result)
    return await finish(
        ctx,
        claimed.node,
        decision.rule,
        NAME,
        result,
        # A replacement still to create keeps the work in flight: the next leader
        # (or this one after a restart) resumes it from the node annotation.
        phases=("migrated", "migrating" if result.waiting else "migrate-incomplete"),
        reasons=("Migrated", "MigrationIncomplete"),
        extra=(f", recreated {len(recreated)} bare pod(s) elsewhere" if recreated else "")
        + (f", {ganged.summary()}" if ganged.summary() else ""),
        details={"recreated": recreated, "gangs": [r.gang for r in ganged.restarts]},
    )


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


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=True,
        params_type=MigrateJobsParams,
        validate=validate,
        check_target=check_target,
        execute=execute,
    )
)
