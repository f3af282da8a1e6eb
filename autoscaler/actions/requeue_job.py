"""``requeue_job``: delete a pod that has stopped making progress (timed out, or
stalled with its device idle) so that its owner starts it again, up to a limit.

Deleting, not evicting: the pod is the problem, not the node, and its
PodDisruptionBudget exists to protect healthy replicas, not to keep a hung one
holding a device. ``maxRequeues`` stops a job that hangs every time from cycling
forever (the count lives in an ``accel-fleet.io/`` annotation on the owner), and
the requeues of one job are spaced exponentially, in Kueue's shape
(``waitForPodsReady.requeuingStrategy``): after the n-th requeue the next waits
``backoff`` × 2^(n-1), at most ``maxBackoff``. A job that hangs every time costs its
devices less and less often, while one that hung once is retried soon. There is
nothing to undo, so a rule with this action has no ``recover``. A pod whose
devices come from ResourceClaims (Dynamic Resource Allocation) is requeued the same
way; the Event and the outcome name the claimed devices it frees
(``driver/pool/device``). A claim generated from a template is deleted with the
pod and the new pod gets a new one; a named claim is shared and stays.

Targets: ``pod``.

Parameters:

===============  ===========================================  =======
``maxRequeues``  requeues per job before giving up (>= 0)     ``3``
``backoff``      least time between the first and second      ``1m``
                 requeue of a job; it doubles after each
                 requeue (duration)
``maxBackoff``   the most the doubled backoff grows to        ``1h``
                 (duration, at least ``backoff``; raised to
                 ``backoff`` when that is longer and this is
                 not given)
``via``          ``delete`` the pod (the Job controller       ``delete``
                 makes a new one), or ``suspend`` the Job
                 and resume it (its pods go without counting
                 as failures against ``backoffLimit``)
===============  ===========================================  =======

Execution: a pod whose job Kueue manages (the Job, or the gang's owner, carries
``kueue.x-k8s.io/queue-name`` and a Workload owns it) goes back through its queue:
its Workload is evicted the way Kueue evicts a job that stopped making progress
(``Evicted``, reason ``PodsReadyTimeout``, and ``status.requeueState`` one more
``count`` and ``requeueAt`` = now + the backoff after that many requeues), once per
incident; Kueue then suspends the job, frees its quota and admits it again after
``requeueAt`` (``autoscaler/actions/ops/kueue.py``). No pod is deleted; ``maxRequeues``
counts Kueue's ``requeueState.count``, and ``via`` does not apply.

Otherwise, a member of a gang (a JobSet, TrainJob, PyTorchJob, MPIJob or Volcano
Job, or pods sharing an ``accel-fleet.io/gang`` label) is requeued by restarting
its whole gang once, the way its operator expects (``autoscaler/actions/ops/gangs.py``;
``maxRequeues`` and the backoff count the gang's restarts, recorded on its owner).
Otherwise only pods owned by a Job are requeued (a JobSet or a training
operator runs its pods through Jobs too); a bare pod or a Deployment's pod is
left alone with a ``RequeueSkipped`` Event, since nothing would retry it as a job.
The attempt is recorded on the Job first, in the annotation
``accel-fleet.io/requeues`` (``{"count", "last", "pods"}``, written conditionally on
the Job's resourceVersion), and only then is the pod deleted (with its uid as a
precondition, so a retry never deletes its replacement). The backoff runs from
``last``, the time of the latest requeue recorded there, whichever replica made it,
and its length from ``count``. A restart that finds the
pod's uid already recorded finishes that requeue without counting it again. At
``maxRequeues`` the Job gets a ``RequeueLimitReached`` Event and nothing else
happens: it needs a person.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.dra import has_claims
from accel_common.gangs import gang_of
from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    from_params,
    param,
    param_keys,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome, Status
from autoscaler.actions.ops import gangs, kueue, unknown
from autoscaler.actions.ops.ownership import REQUEUES, event, iso, parse_iso
from autoscaler.actions.ops.pods import claimed_devices, controller_owner
from autoscaler.actions.ops.unknown import answering_unknown
from autoscaler.decision import Decision
from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import Obj

NAME = "requeue_job"
VIA = ("delete", "suspend")
# Pod uids kept in the requeue record (enough to recognise a retried requeue).
KEEP_PODS = 20
# How long a suspend waits for the Job's pods to go before resuming it anyway.
SUSPEND_WAIT = 300.0
TARGETS = ("pod",)


@dataclass(frozen=True)
class RequeueJobParams:
    max_requeues: int = param("maxRequeues", 3)
    backoff: float = param("backoff", 60.0)
    # Kueue's backoffMaxSeconds default: an hour.
    max_backoff: float = param("maxBackoff", 3600.0)
    via: str = param("via", "delete")


DEFAULTS = RequeueJobParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(RequeueJobParams))
    max_requeues = r.integer("maxRequeues", DEFAULTS.max_requeues, minimum=0)
    backoff = r.duration("backoff", DEFAULTS.backoff)
    ceiling = max(DEFAULTS.max_backoff, backoff)
    max_backoff = r.duration("maxBackoff", ceiling)
    if max_backoff < backoff:
        r.problem(
            "maxBackoff",
            f"must be at least backoff ({backoff:g}s), got {max_backoff:g}s: "
            "the first wait would already be longer than the cap",
        )
        max_backoff = ceiling
    params = RequeueJobParams(
        max_requeues=max_requeues,
        backoff=backoff,
        max_backoff=max_backoff,
        via=r.choice("via", VIA, DEFAULTS.via) or DEFAULTS.via,
    )
    return to_params(params), r.problems


def backoff_after(requeues: int, params: RequeueJobParams) -> float:
    """The least time after a job's ``requeues``-th requeue before the next one:
    ``backoff`` × 2^(requeues-1), capped at ``maxBackoff`` (Kueue's requeuing
    backoff, without its jitter: one controller requeues, not a fleet)."""
    doublings = min(max(requeues, 1) - 1, 64)  # 2^64 × any backoff is past any cap
    return float(min(params.backoff * 2.0**doublings, params.max_backoff))


REQUEUE_FACT = "requeue record"


def _record(job: Obj) -> dict[str, Any]:
    """The Job's requeue record, its fields checked ({} when there is none). One
    that cannot be read raises ``UnknownFact``: read as "never requeued" it would
    lift ``maxRequeues`` and the backoff, so the pod is left where it is."""
    rec, out, at = unknown.counted(job, REQUEUES, REQUEUE_FACT)
    if not rec:
        return {}
    out["pods"] = unknown.uid_list(rec, "pods", at, REQUEUE_FACT, 4 * KEEP_PODS)
    return out


async def _count(
    ctx: ActionContext,
    namespace: str,
    job_name: str,
    pod_uid: str,
    params: RequeueJobParams,
    read: Obj | None = None,
) -> tuple[Obj, str | None, bool]:
    """Record this requeue on the Job, conditionally on its resourceVersion, from
    ``read`` (the Job as just read) or a new read. Returns (job, why not, whether
    it was already recorded)."""
    for _ in range(8):
        job = read if read is not None else await ctx.kube.get_job(namespace, job_name)
        read = None
        rec = _record(job)
        pods = [str(u) for u in rec.get("pods") or []]
        if pod_uid in pods:
            return job, None, True
        count = int(rec.get("count", 0))
        if count >= params.max_requeues:
            return (
                job,
                f"requeued {count} time(s) already; maxRequeues is {params.max_requeues}",
                False,
            )
        last = rec.get("last")
        now = ctx.clock()
        wait = backoff_after(count, params)
        if isinstance(last, str) and now - parse_iso(last) < wait:
            return (
                job,
                f"last requeued at {last}; after {count} requeue(s) the backoff is {wait:g}s",
                False,
            )
        rec.update(count=count + 1, last=iso(now), pods=[*pods, pod_uid][-KEEP_PODS:])
        patch: Obj = {
            "metadata": {
                "resourceVersion": job["metadata"].get("resourceVersion"),
                "annotations": {REQUEUES: json.dumps(rec, sort_keys=True)},
            }
        }
        try:
            return await ctx.kube.patch_job(namespace, job_name, patch), None, False
        except Conflict:
            continue
    raise Conflict(f"job {namespace}/{job_name} kept changing while we counted a requeue")


async def _suspend_cycle(ctx: ActionContext, namespace: str, job_name: str) -> None:
    """Suspend the Job (its pods go, not counted as failures), wait for them to
    go, and resume it."""
    await ctx.kube.patch_job(namespace, job_name, {"spec": {"suspend": True}})
    waited = 0.0
    while not ctx.dry_run and waited < SUSPEND_WAIT and ctx.leading():
        job = await ctx.kube.get_job(namespace, job_name)
        if not (job.get("status") or {}).get("active"):
            break
        await ctx.sleep(ctx.retry_interval)
        waited += ctx.retry_interval
    await ctx.kube.patch_job(namespace, job_name, {"spec": {"suspend": False}})


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return Outcome("skipped", "requeue_job has nothing to undo")
    params = from_params(RequeueJobParams, decision.params)
    namespace = decision.target.get("namespace", "")
    pod_name = decision.target.get("pod", "")
    if not namespace or not pod_name:
        return Outcome("failed", f"target {dict(decision.target)} names no namespace and pod")
    try:
        pod = await ctx.kube.get_pod(namespace, pod_name)
    except NotFound:
        return Outcome("skipped", f"pod {namespace}/{pod_name} is gone already")
    except KubeError as e:
        return Outcome("unknown", f"pod {namespace}/{pod_name}: {e}")
    try:
        lookup = await kueue.managed(ctx, pod)
    except KubeError as e:
        return Outcome("unknown", f"pod {namespace}/{pod_name}: its Kueue Workload: {e}")
    if lookup.managed is not None:
        return await _requeue_workload(ctx, decision, pod, lookup.managed, params)
    if gang_of(pod) is not None:
        return await _requeue_gang(ctx, decision, pod, params)
    owner = controller_owner(pod)
    if owner is None or owner.get("kind") != "Job":
        what = f"{owner.get('kind')} {owner.get('name')}" if owner else "no owner"
        message = (
            f"not requeuing pod {namespace}/{pod_name}: it has {what}, and requeue_job "
            "restarts Job pods only (nothing would retry this one as a job)"
        )
        await event(ctx, pod, "RequeueSkipped", message, warning=True, action=NAME)
        return Outcome("skipped", message)
    job_name = str(owner.get("name"))
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    try:
        job, refused, resumed = await _count(ctx, namespace, job_name, uid, params, lookup.job)
    except NotFound:
        return Outcome("skipped", f"job {namespace}/{job_name} is gone")
    except KubeError as e:
        return Outcome("unknown", f"job {namespace}/{job_name}: {e}")
    if refused is not None:
        limit = "maxRequeues" in refused
        message = f"not requeuing job {namespace}/{job_name} (pod {pod_name}): {refused}"
        if limit:
            await event(ctx, job, "RequeueLimitReached", message, warning=True, action=NAME)
        return Outcome("skipped", message, {"limit": limit})
    # A pod that holds devices through ResourceClaims: say which ones the requeue
    # frees (read before the delete: a template's claim goes with its pod).
    freed = await claimed_devices(ctx, pod) if has_claims(pod) else []
    try:
        if params.via == "suspend":
            await _suspend_cycle(ctx, namespace, job_name)
        else:
            await ctx.kube.delete_pod(namespace, pod_name, uid=uid or None)
    except NotFound:
        pass
    except Conflict:
        pass  # a new pod under that name: the old one, our target, is gone
    except KubeError as e:
        return Outcome("unknown", f"pod {namespace}/{pod_name}: {e}")
    try:
        count = int(_record(job).get("count", 0))
    except unknown.UnknownFact:
        count = 0  # changed since we wrote it: the requeue is done all the same
    how = "suspended and resumed the job" if params.via == "suspend" else "deleted the pod"
    message = (
        f"requeued job {namespace}/{job_name} ({how}; attempt {count} of "
        f"{params.max_requeues}) for rule {decision.rule}"
        + (f"; freed claimed device(s) {', '.join(freed)}" if freed else "")
        + (f": {decision.reason}" if decision.reason else "")
    )
    await event(ctx, job, "Requeued", message, action=NAME)
    details: dict[str, object] = {"attempt": count, "resumed": resumed}
    if freed:
        details["devices"] = freed
    return Outcome("done", message, details)


async def _requeue_workload(
    ctx: ActionContext,
    decision: Decision,
    pod: Obj,
    queued: kueue.Managed,
    params: RequeueJobParams,
) -> Outcome:
    """A Kueue-managed job goes back through its queue: its Workload is evicted
    (``autoscaler/actions/ops/kueue.py``) and Kueue suspends the job, frees its
    quota and admits it again after the backoff. Nothing here deletes a pod."""
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    why = f"rule {decision.rule} requeues the job" + (
        f": {decision.reason}" if decision.reason else ""
    )
    try:
        done = await kueue.evict(
            ctx,
            queued,
            pod_uid=uid,
            why=why,
            max_requeues=params.max_requeues,
            backoff=lambda n: backoff_after(n, params),
        )
    except KubeError as e:
        return Outcome("unknown", f"Workload {queued.name}: {e}")
    details: dict[str, object] = {
        "workload": queued.name,
        "eviction": done.status,
        "attempt": done.count,
    }
    if done.status == "unknown":
        return Outcome("unknown", f"not requeuing: {done.message}", details)
    if done.status == "unsupported":
        return Outcome("failed", f"cannot requeue through Workload {queued.name}: {done.message}")
    if done.status == "refused":
        message = f"not requeuing Workload {queued.name}: {done.message}"
        await event(ctx, queued.job, "RequeueLimitReached", message, warning=True, action=NAME)
        return Outcome("skipped", message, {**details, "limit": True})
    if done.status not in ("evicted", "resumed"):
        return Outcome("skipped", f"not requeuing: {done.message}", details)
    message = (
        f"requeued through Kueue: {done.message} (requeue {done.count} of "
        f"{params.max_requeues}; back in its queue after {done.requeue_at}) for rule "
        f"{decision.rule}" + (f": {decision.reason}" if decision.reason else "")
    )
    if done.status == "evicted":
        await event(ctx, queued.job, "Requeued", message, action=NAME)
    return Outcome("done", message, {**details, "resumed": done.status == "resumed"})


async def _requeue_gang(
    ctx: ActionContext, decision: Decision, pod: Obj, params: RequeueJobParams
) -> Outcome:
    """A gang member is requeued by restarting its whole gang once
    (``autoscaler/actions/ops/gangs.py``), with ``maxRequeues`` and the backoff counted
    on the gang's own restart record."""
    key = f"{(pod.get('metadata') or {}).get('namespace')}/{pod['metadata']['name']}"

    def limit(rec: Mapping[str, Any]) -> str | None:
        # Its own restarts only: a gang moved off failed devices twice has not
        # hung twice (gangs.record counts them apart).
        count = int(rec.get("requeues", rec.get("count", 0)))
        if count >= params.max_requeues:
            return f"requeued {count} time(s) already; maxRequeues is {params.max_requeues}"
        last = rec.get("last")
        wait = backoff_after(count, params)
        if isinstance(last, str) and ctx.clock() - parse_iso(last) < wait:
            return f"last restarted at {last}; after {count} requeue(s) the backoff is {wait:g}s"
        return None

    try:
        gang = await gangs.find(ctx, pod)
        if gang is None:
            return Outcome("skipped", f"pod {key} belongs to no gang any more")
        done = await gangs.restart(
            ctx, gang, rule=decision.rule, why=decision.reason, last=key, limit=limit
        )
    except KubeError as e:
        return Outcome("unknown", f"pod {key}: gang restart: {e}")
    status: Status = "done" if done.status in ("restarted", "resumed") else "skipped"
    details = {"gang": done.gang, "restart": done.status, "deleted": done.deleted}
    return Outcome(status, done.message, details)


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=False,
        params_type=RequeueJobParams,
        validate=validate,
        execute=execute,
    )
)
