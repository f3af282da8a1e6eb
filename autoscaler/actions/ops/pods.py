"""Pods as the actions see them: which ones use devices, which ones may be moved,
and the eviction loop that drain, migrate_jobs, rebalance and scale-down share.

Eviction, not deletion: the API server checks PodDisruptionBudgets and answers 429
when one would be broken. The loop retries those every ``ctx.retry_interval`` until
the deadline, re-reading the node's pods each round, so a pod that its owner
already replaced, or that finished, is not evicted again; a pod that is already
terminating (``deletionTimestamp``) counts as gone. Across a restart the deadline
is the one recorded in the node annotation, so a resumed drain does not start
its clock again. Two hooks let an action do its own part around each eviction
without a loop of its own: ``migrate_jobs`` keeps a bare pod's spec before it and
creates the replacement after it (``autoscaler/actions/ops/barepods.py``).

A device pod requests an accelerator resource or uses ResourceClaims (Dynamic
Resource Allocation): ``uses_devices`` with the claims ``claims_of`` read judges
the latter by what the claims hold (``autoscaler.clusterstate.is_device_pod``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from accel_common.dra import EMPTY_STATE, DraState, claim_devices, has_claims, pod_claim_names
from accel_common.names import MIRROR_POD_ANNOTATION, is_device_resource
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import event, set_phase
from autoscaler.clusterstate import (
    all_device_requests,
    device_requests,
    dra_node_devices,
    is_device_pod,
)
from autoscaler.kube.dra import read_dra
from autoscaler.kube.errors import KubeError, NotFound, TooManyRequests
from autoscaler.kube.protocol import Obj
from autoscaler.pools.capacity import finished as is_finished

log = logging.getLogger("accel_autoscaler.actions")

# Owners that recreate their pods elsewhere when one is evicted.
RECREATING_OWNERS = ("Job", "JobSet", "StatefulSet", "ReplicaSet", "ReplicationController")


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def pod_key(pod: Obj) -> str:
    return f"{meta(pod).get('namespace', 'default')}/{meta(pod).get('name', '')}"


def uses_devices(pod: Obj, dra: DraState | None = None) -> bool:
    """Whether the pod uses accelerators: device resources, or ResourceClaims
    (judged by ``dra`` when given: ``autoscaler.clusterstate.is_device_pod``)."""
    return is_device_pod(pod, dra)


async def claims_of(ctx: ActionContext, pods: Sequence[Obj]) -> DraState | None:
    """The ResourceClaims of the namespaces of those ``pods`` that use claims (one
    list per namespace, no read at all when none does), for ``uses_devices`` and
    ``all_device_requests``. None when they cannot be read (logged): those pods
    then count as device pods whose devices are unknown."""
    namespaces = {str(meta(p).get("namespace") or "default") for p in pods if has_claims(p)}
    if not namespaces:
        return EMPTY_STATE
    try:
        return await read_dra(ctx.kube, pods, namespaces=namespaces, slices=False, classes=False)
    except KubeError as e:
        log.warning("cannot read the ResourceClaims of %s: %s", ", ".join(sorted(namespaces)), e)
        return None


async def claimed_devices(ctx: ActionContext, pod: Obj) -> list[str]:
    """``driver/pool/device`` of every device the pod's claims were allocated, for
    the record of what an action freed; claims that cannot be read are left out."""
    out: list[str] = []
    namespace = str(meta(pod).get("namespace") or "default")
    for name in pod_claim_names(pod):
        try:
            claim = await ctx.kube.get_resource_claim(namespace, name)
        except KubeError as e:
            log.info("claim %s/%s of pod %s: %s", namespace, name, pod_key(pod), e)
            continue
        out += [f"{d.driver}/{d.pool}/{d.device}" for d in claim_devices(claim)]
    return out


def controller_owner(pod: Obj) -> Obj | None:
    for ref in meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    refs = meta(pod).get("ownerReferences") or []
    return dict(refs[0]) if refs else None


def is_daemonset_pod(pod: Obj) -> bool:
    owner = controller_owner(pod)
    return owner is not None and owner.get("kind") == "DaemonSet"


def is_mirror_pod(pod: Obj) -> bool:
    return MIRROR_POD_ANNOTATION in (meta(pod).get("annotations") or {})


def is_terminating(pod: Obj) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def is_live(pod: Obj) -> bool:
    """Neither finished nor terminating: a pod that holds what it asked for."""
    return not is_finished(pod) and not is_terminating(pod)


def evictable(pod: Obj) -> str | None:
    """Why a pod on a node being drained stays, or None if it goes."""
    if is_mirror_pod(pod):
        return "mirror pod (the kubelet owns it)"
    if is_daemonset_pod(pod):
        return "DaemonSet pod (its controller ignores cordons and would put it back)"
    if is_finished(pod):
        return "already finished"
    if is_terminating(pod):
        return "already terminating"
    return None


@dataclass
class EvictionResult:
    evicted: list[str] = field(default_factory=list)
    # Pods still there at the deadline, with the last refusal.
    refused: dict[str, str] = field(default_factory=dict)
    forced: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # Pods that ``before_evict`` kept in place, with why (a bare pod whose spec
    # cannot be kept), and work begun but not finished (a bare pod's replacement
    # that waits for its original to terminate).
    held: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    stopped: str = ""

    @property
    def complete(self) -> bool:
        return not (self.refused or self.failed or self.held or self.waiting or self.stopped)


async def evict_until(
    ctx: ActionContext,
    node: str,
    select: Callable[[Obj], bool],
    *,
    deadline: float,
    rule: str,
    why: str,
    grace_period_seconds: int | None = None,
    force_after_deadline: bool = False,
    before_evict: Callable[[Obj], Awaitable[str | None]] | None = None,
    after_evict: Callable[[Obj], Awaitable[None]] | None = None,
) -> EvictionResult:
    """Evict the node's pods that ``select`` picks (and ``evictable`` allows) until
    none is left or ``deadline`` (``ctx.clock()`` time) passes.

    ``before_evict(pod)`` runs before the first eviction attempt of each pod (to
    keep a bare pod's spec); a reason it returns keeps the pod in place
    (``result.held``). ``after_evict(pod)`` runs after each successful eviction (to
    create a bare pod's replacement). With ``force_after_deadline`` the pods a PDB
    still protects at the deadline are deleted; otherwise they stay, and are
    reported.
    """
    result = EvictionResult()
    prepared: set[str] = set()
    # An evicted pod may linger until its grace period ends; it is never evicted twice.
    gone: set[str] = set()
    while True:
        if not ctx.leading():
            result.stopped = "this replica lost the leader lease; the new leader resumes"
            return result
        pods = [
            p
            for p in await ctx.kube.list_pods(node=node)
            if select(p)
            and evictable(p) is None
            and meta(p).get("uid", pod_key(p)) not in gone
            and pod_key(p) not in result.held
        ]
        if not pods:
            result.refused.clear()
            return result
        if ctx.clock() >= deadline:
            if force_after_deadline:
                for p in pods:
                    await _force(ctx, p, rule, result, grace_period_seconds)
                return result
            for p in pods:
                # A resumed drain can find its deadline already past: what is left
                # stays, and says so.
                result.refused.setdefault(pod_key(p), "the drain timeout passed first")
            return result
        refused_now = False
        for p in pods:
            refused_now |= await _evict_one(
                ctx,
                p,
                node,
                result,
                what=f"evicted from node {node} by rule {rule}: {why}",
                grace_period_seconds=grace_period_seconds,
                hooks=(before_evict, after_evict),
                seen=(prepared, gone),
            )
        if ctx.dry_run:
            # Nothing a dry run evicts goes away; one pass shows what would happen.
            return result
        if result.failed and not refused_now:
            return result
        if not refused_now:
            continue
        await ctx.sleep(min(ctx.retry_interval, max(0.0, deadline - ctx.clock())) or 0.001)


async def _evict_one(
    ctx: ActionContext,
    p: Obj,
    node: str,
    result: EvictionResult,
    *,
    what: str,
    grace_period_seconds: int | None,
    hooks: tuple[
        Callable[[Obj], Awaitable[str | None]] | None, Callable[[Obj], Awaitable[None]] | None
    ],
    seen: tuple[set[str], set[str]],
) -> bool:
    """One eviction attempt of ``evict_until``, noted in ``result``; whether a
    PodDisruptionBudget refused it (the loop then waits and tries again). ``seen``:
    the pods ``before_evict`` has run for, and those evicted (never twice)."""
    before_evict, after_evict = hooks
    prepared, gone = seen
    key = pod_key(p)
    uid = meta(p).get("uid")
    if before_evict is not None and key not in prepared:
        held = await before_evict(p)
        if held is not None:
            log.warning("%s stays on node %s: %s", key, node, held)
            result.held[key] = held
            return False
        prepared.add(key)
    try:
        await ctx.kube.evict_pod(
            meta(p).get("namespace", "default"),
            meta(p)["name"],
            grace_period_seconds=grace_period_seconds,
            uid=uid,
        )
    except NotFound:
        return False
    except TooManyRequests as e:
        if result.refused.get(key) is None:
            log.info("eviction of %s refused, will retry: %s", key, e)
        result.refused[key] = str(e)
        return True
    except KubeError as e:
        result.failed[key] = str(e)
        return False
    result.refused.pop(key, None)
    result.failed.pop(key, None)
    result.evicted.append(key)
    gone.add(uid or key)
    await event(ctx, p, "Evicted", what, action="Evict")
    if after_evict is not None:
        await after_evict(p)
    return False


async def _force(
    ctx: ActionContext, pod: Obj, rule: str, result: EvictionResult, grace: int | None
) -> None:
    key = pod_key(pod)
    try:
        await ctx.kube.delete_pod(
            meta(pod).get("namespace", "default"),
            meta(pod)["name"],
            grace_period_seconds=grace,
            uid=meta(pod).get("uid"),
        )
    except NotFound:
        return
    except KubeError as e:
        result.failed[key] = str(e)
        return
    result.refused.pop(key, None)
    result.forced.append(key)
    await event(
        ctx,
        pod,
        "ForceDeleted",
        f"deleted by rule {rule} after its eviction was refused until the drain timeout "
        "(the rule sets forceDeleteAfterTimeout)",
        warning=True,
        action="Delete",
    )


async def finish(
    ctx: ActionContext,
    node: Obj,
    rule: str,
    action: str,
    result: EvictionResult,
    *,
    phases: tuple[str, str],
    reasons: tuple[str, str],
    extra: str = "",
    details: dict[str, object] | None = None,
) -> Outcome:
    """The end of an eviction action (drain, migrate_jobs): record the finished
    phase on the node (``phases``: complete, incomplete), write the closing Event
    (``reasons``: likewise) and say what happened. A run stopped by a lost lease
    records nothing: its phase stays in flight for the next leader to resume."""
    name = meta(node).get("name", "")
    message = f"node {name}: {summary(result)}{extra}"
    details = {"evicted": result.evicted, "refused": dict(result.refused), **(details or {})}
    if result.stopped:
        return Outcome("partial", message, details)
    done = result.complete
    phase = phases[0] if done else phases[1]
    try:
        await set_phase(ctx, name, rule, phase, "" if done else message)
    except KubeError as e:
        log.warning("node %s: could not record phase %s: %s", name, phase, e)
    await event(
        ctx, node, reasons[0] if done else reasons[1], message, warning=not done, action=action
    )
    return Outcome("done" if done else "partial", message, details)


def summary(result: EvictionResult, kept: Sequence[str] = ()) -> str:
    parts = [f"evicted {len(result.evicted)}"]
    if result.forced:
        parts.append(f"force-deleted {len(result.forced)}")
    if result.refused:
        sample = "; ".join(f"{k}: {v}" for k, v in list(result.refused.items())[:3])
        parts.append(f"{len(result.refused)} still refused at the deadline ({sample})")
    if result.failed:
        sample = "; ".join(f"{k}: {v}" for k, v in list(result.failed.items())[:3])
        parts.append(f"{len(result.failed)} failed ({sample})")
    if result.held:
        sample = "; ".join(f"{k}: {v}" for k, v in list(result.held.items())[:3])
        parts.append(f"kept {len(result.held)} in place ({sample})")
    if result.waiting:
        sample = "; ".join(f"{k}: {v}" for k, v in list(result.waiting.items())[:3])
        parts.append(f"{len(result.waiting)} replacement(s) not created yet ({sample})")
    if kept:
        parts.append(f"left {len(kept)} in place")
    if result.stopped:
        parts.append(result.stopped)
    return ", ".join(parts)


__all__ = [
    "RECREATING_OWNERS",
    "EvictionResult",
    "all_device_requests",
    "claimed_devices",
    "claims_of",
    "controller_owner",
    "device_requests",
    "dra_node_devices",
    "evict_until",
    "evictable",
    "finish",
    "is_daemonset_pod",
    "is_device_resource",
    "is_finished",
    "is_live",
    "is_mirror_pod",
    "is_terminating",
    "meta",
    "pod_key",
    "summary",
    "uses_devices",
]
