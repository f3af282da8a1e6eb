"""Requeues through Kueue: a job that Kueue admits goes back through its queue.

Why a module of its own: under Kueue a job's pods exist because its Workload holds
quota. Deleting them (``requeue_job``'s usual way) or restarting its gang makes
the job's own controller recreate them at once, in the quota the Workload still
holds, past every other job waiting in the queue; Kueue's accounting and fairness
never hear of it. So a Kueue-managed job is requeued the way Kueue itself
requeues a job that stopped making progress (its ``waitForPodsReady`` timeout,
``pkg/controller/core/workload_controller.go``): the Workload's status gets
``Evicted`` = True with reason ``PodsReadyTimeout`` and ``status.requeueState``
one more ``count`` and a ``requeueAt`` after the backoff. Kueue's job integration
then suspends the job (its pods go), releases the quota (``QuotaReserved`` False,
``status.admission`` cleared, ``Requeued`` False), and its queue admits the
Workload again only after ``requeueAt`` (then ``Requeued`` True,
``BackoffFinished``), in its turn.

Why not ``spec.active: false``: Kueue evicts a deactivated Workload but never
requeues it, and clears its ``requeueState``, so the job would wait for a person.
Only ``PodsReadyTimeout`` and ``AdmissionCheck`` evictions back off in Kueue, and
the first is the one that says "admitted and not progressing".

Once per incident: the eviction is written with the Workload's
``metadata.resourceVersion`` as a precondition, and its message names the pod
whose stall asked for it (``pod uid ...``). A later decision that finds the
Workload already evicted for that pod is the same requeue (resumed, counted
once); evicted for another reason, or not holding quota, it is Kueue's to move,
and nothing is written. ``requeueState.count`` is Kueue's own count of requeues,
so ``maxRequeues`` and the backoff count Kueue's evictions too, and a
``requeueAt`` that Kueue set later than ours is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accel_common.gangs import gang_of
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops.gangs import OWNERS
from autoscaler.actions.ops.ownership import iso, parse_iso
from autoscaler.actions.ops.pods import controller_owner, meta
from autoscaler.kube.errors import Conflict, NotFound
from autoscaler.kube.kueue import (
    EVICTED,
    PODS_READY_TIMEOUT,
    QUEUE_NAME_LABEL,
    QUOTA_RESERVED,
    condition,
    is_true,
)
from autoscaler.kube.protocol import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_VERSIONS,
    WORKLOADS,
    Obj,
    PatchesStatus,
)

# Conditions kept when the list is written back (Kueue's own hold a handful).
MAX_CONDITIONS = 64
MARK = "pod uid"


@dataclass(frozen=True)
class Managed:
    """A pod's job as Kueue manages it: the job object that carries the queue label
    (a Job, or a gang's owner such as a JobSet) and its Workload."""

    job: Obj
    workload: Obj
    # The API version the Workload was read at (KUEUE_VERSIONS).
    version: str = KUEUE_VERSION

    @property
    def name(self) -> str:
        return f"{meta(self.workload).get('namespace')}/{meta(self.workload).get('name')}"


@dataclass(frozen=True)
class Lookup:
    """What ``managed`` found: the Kueue-managed job and its Workload (None: the
    usual requeue applies), and the pod's Job as read on the way (None when the pod
    has no Job owner), so that the usual requeue need not read it again."""

    managed: Managed | None
    job: Obj | None


@dataclass(frozen=True)
class Eviction:
    """What one requeue through Kueue did: ``evicted`` (written now), ``resumed`` (an
    earlier decision wrote it for this pod), ``already`` (evicted for another
    reason), ``pending`` (holds no quota: nothing to requeue), ``refused`` (at
    ``maxRequeues``), ``unsupported`` (this Kube handle cannot write a status),
    ``unknown`` (its ``requeueState`` cannot be read: left alone)."""

    status: str
    message: str
    count: int = 0
    requeue_at: str = ""


def _queued(obj: Obj | None) -> bool:
    labels = meta(obj or {}).get("labels") or {}
    return isinstance(labels, dict) and bool(labels.get(QUEUE_NAME_LABEL))


async def _job(ctx: ActionContext, pod: Obj) -> tuple[Obj | None, Obj | None]:
    """(the object Kueue manages ``pod`` through, when it carries the queue label: a
    gang's owner (JobSet, PyTorchJob, MPIJob, Volcano Job), else the pod's Job;
    the pod's Job as read)."""
    ns = str(meta(pod).get("namespace", ""))
    ref = gang_of(pod)
    if ref is not None and ref.kind in OWNERS:
        group, version, plural = OWNERS[ref.kind]
        try:
            holder = await ctx.kube.get_custom(group, version, ns, plural, ref.name)
        except NotFound:
            holder = None
        if _queued(holder):
            return holder, None
    owner = controller_owner(pod)
    if owner is None or owner.get("kind") != "Job":
        return None, None
    try:
        job = await ctx.kube.get_job(ns, str(owner.get("name", "")))
    except NotFound:
        return None, None
    return (job if _queued(job) else None), job


async def managed(ctx: ActionContext, pod: Obj) -> Lookup:
    """The Kueue-managed job of ``pod`` and its Workload; none when the pod's job
    carries no queue label, Kueue is not installed, or no Workload owns the job
    (the requeue then goes the usual way). Raises ``KubeError``."""
    job, read = await _job(ctx, pod)
    if job is None:
        return Lookup(None, read)
    uid = meta(job).get("uid")
    ns = str(meta(pod).get("namespace", ""))
    for version in KUEUE_VERSIONS:
        try:
            workloads = await ctx.kube.list_custom(KUEUE_GROUP, version, ns, WORKLOADS)
        except NotFound:
            continue
        for wl in workloads:
            refs = meta(wl).get("ownerReferences") or []
            if any(
                isinstance(r, dict) and r.get("controller") and r.get("uid") == uid for r in refs
            ):
                return Lookup(Managed(job, wl, version), read)
        break
    return Lookup(None, read)


def _count(wl: Obj) -> tuple[int, str] | None:
    """Kueue's requeue count and ``requeueAt`` of a Workload (0 and "" when unset);
    None when they are there and not what the API says: read as "never requeued"
    they would lift ``maxRequeues``, so the Workload is left as it is."""
    status = wl.get("status") or {}
    state = status.get("requeueState") if isinstance(status, dict) else None
    if state is None:
        return 0, ""
    if not isinstance(state, dict):
        return None
    count = state.get("count", 0)
    at = state.get("requeueAt", "")
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < 2**31:
        return None
    if not isinstance(at, str) or len(at) > 64:
        return None
    return count, at


def _later(at: str, ours: float) -> str:
    """``requeueAt``: ours, or Kueue's when it is later (Kueue never shortens one)."""
    try:
        return at if at and parse_iso(at) > ours else iso(ours)
    except ValueError:
        return iso(ours)


def _evicted_conditions(wl: Obj, now: float, message: str) -> list[Any]:
    conds = (wl.get("status") or {}).get("conditions")
    kept = (
        [c for c in conds[:MAX_CONDITIONS] if isinstance(c, dict)]
        if isinstance(conds, list)
        else []
    )
    evicted = {
        "type": EVICTED,
        "status": "True",
        "reason": PODS_READY_TIMEOUT,
        "message": message[:1024],
        "lastTransitionTime": iso(now),
        "observedGeneration": meta(wl).get("generation") or 1,
    }
    return [c for c in kept if c.get("type") != EVICTED] + [evicted]


async def evict(
    ctx: ActionContext,
    found: Managed,
    *,
    pod_uid: str,
    why: str,
    max_requeues: int,
    backoff: Callable[[int], float],
) -> Eviction:
    """Evict the Workload once for this incident (module docstring). ``backoff(n)``
    is the wait after the n-th requeue. Raises ``KubeError``."""
    kube = ctx.kube
    if not isinstance(kube, PatchesStatus):
        return Eviction("unsupported", "this Kube handle cannot write a Workload's status")
    ns, name = str(meta(found.workload).get("namespace")), str(meta(found.workload).get("name"))
    wl = found.workload
    for _ in range(8):
        evicted = condition(wl, EVICTED)
        counted = _count(wl)
        if counted is None:
            message = f"the requeueState of Workload {found.name} cannot be read"
            return Eviction("unknown", message)
        count, at = counted
        if evicted is not None and evicted.get("status") == "True":
            if f"{MARK} {pod_uid}" in str(evicted.get("message", "")):
                return Eviction("resumed", f"Workload {found.name} is evicted already", count, at)
            why_then = str(evicted.get("reason", ""))[:64]
            return Eviction("already", f"Kueue is evicting Workload {found.name} ({why_then})")
        if not is_true(wl, QUOTA_RESERVED):
            return Eviction(
                "pending", f"Workload {found.name} holds no quota: it waits in its queue"
            )
        if count >= max_requeues:
            message = f"requeued {count} time(s) already; maxRequeues is {max_requeues}"
            return Eviction("refused", message, count)
        now = ctx.clock()
        requeue_at = _later(at, now + float(backoff(count + 1)))
        message = f"accel-fleet: {why} ({MARK} {pod_uid})"
        patch: Obj = {
            "metadata": {"resourceVersion": meta(wl).get("resourceVersion")},
            "status": {
                "conditions": _evicted_conditions(wl, now, message),
                "requeueState": {"count": count + 1, "requeueAt": requeue_at},
            },
        }
        try:
            await kube.patch_custom_status(KUEUE_GROUP, found.version, ns, WORKLOADS, name, patch)
        except Conflict:
            wl = await kube.get_custom(KUEUE_GROUP, found.version, ns, WORKLOADS, name)
            continue
        return Eviction("evicted", f"evicted Workload {found.name}", count + 1, requeue_at)
    raise Conflict(f"Workload {found.name} kept changing while we evicted it")


__all__ = ["Eviction", "Lookup", "Managed", "evict", "managed"]
