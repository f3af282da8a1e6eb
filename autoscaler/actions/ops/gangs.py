"""Gangs: the pods of a multi-node job that run, fail and restart as one.

Why a module of its own: when one member of a synchronous training job loses its
device, every other member hangs on the next collective. Evicting that one pod (what
``migrate_jobs`` and ``drain`` do with any other pod) leaves the rest holding their
devices for nothing, and most gang operators would not even replace it. So
``migrate_jobs``, ``drain`` and ``requeue_job`` hand gang members to this module,
which restarts the whole gang once, the way its operator expects:

- **JobSet** (``jobset.x-k8s.io/v1alpha2``; a TrainJob of ``trainer.kubeflow.org``
  runs as a JobSet of its own name and restarts the same way): every member pod of
  the current restart attempt (label ``jobset.sigs.k8s.io/restart-attempt`` equal to
  ``status.restarts``) is deleted with its uid as a precondition, in one pass. Their
  child Jobs (``backoffLimit: 0`` in training JobSets) fail, and the JobSet's
  failure policy (default action ``RestartJobSet``) recreates all of them once,
  with ``status.restarts`` + 1. A JobSet with no restart left
  (``spec.failurePolicy.maxRestarts`` reached, or no failure policy at all, which
  fails the JobSet on the first failed Job) is not touched: deleting its pods
  would end the job, which is for a person to decide.
- **PyTorchJob** (``kubeflow.org/v1``) and **MPIJob** (``kubeflow.org/v2beta1``):
  every member pod is deleted (uid preconditions) in one pass; the training
  operator recreates the missing replicas. An MPIJob's launcher pod (replica type
  ``launcher``, owned by the launcher Job) goes too, so that ``mpirun`` starts
  again with the new workers.
- **Volcano Job** (``batch.volcano.sh/v1alpha1``): a ``bus.volcano.sh/v1alpha1``
  ``Command`` with ``action: RestartJob`` and ``target`` the Job (Volcano's own
  restart, what ``vcctl job restart`` sends). Volcano bumps ``status.version``.
- **label** (``accel-fleet.io/gang``): every pod of the namespace with the same
  value is deleted in one pass. Their owner must recreate them; the record lives on
  the Job that owns the first member (by name), and a gang with no Job-owned member
  is left alone, since nothing would count its restarts.

Once, across restarts and replays: before anything is deleted, the restart is
recorded on the gang's owner in ``accel-fleet.io/gang-restarts`` (JSON ``count``,
``requeues``: those requeue_job made, whose ``maxRequeues`` counts only them,
``last``, the member ``uids``, Volcano's ``version``), written conditionally on the
owner's resourceVersion. A later decision that finds a live member whose uid is in
the record is the same restart, interrupted or replayed: it finishes deleting the
recorded members and counts nothing (for Volcano, it sends the Command only while
``status.version`` has not moved). The member on the faulty node is deleted last,
so a controller that dies in the middle finds it again when it resumes. Which gang
a pod belongs to comes from ``accel_common/gangs.py``, the one definition the
cluster state and the simulator share.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_common.clusterjson import ClusterValueError, describe, text, whole
from accel_common.gangs import (
    JOBSET,
    LABELLED,
    MPIJOB,
    PYTORCHJOB,
    TRAINJOB,
    VOLCANOJOB,
    GangRef,
    gang_of,
)
from accel_common.names import (
    GANG_LABEL,
    GANG_RESTARTS_ANNOTATION,
    JOBSET_GROUP,
    JOBSET_NAME_LABEL,
    JOBSET_RESTART_ATTEMPT_LABEL,
    KUBEFLOW_GROUP,
    KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_REPLICA_TYPE_LABEL,
    TRAINER_GROUP,
    VOLCANO_BATCH_GROUP,
    VOLCANO_BUS_GROUP,
)
from autoscaler.actions.context import ActionContext
from autoscaler.actions.ops import unknown
from autoscaler.actions.ops.ownership import event, iso
from autoscaler.actions.ops.pods import (
    EvictionResult,
    controller_owner,
    is_live,
    meta,
    pod_key,
)
from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import Obj

log = logging.getLogger("accel_autoscaler.actions")

# Where each kind's record lives: (group, version, plural) of its owner object.
OWNERS: dict[str, tuple[str, str, str]] = {
    JOBSET: (JOBSET_GROUP, "v1alpha2", "jobsets"),
    TRAINJOB: (JOBSET_GROUP, "v1alpha2", "jobsets"),
    PYTORCHJOB: (KUBEFLOW_GROUP, "v1", "pytorchjobs"),
    MPIJOB: (KUBEFLOW_GROUP, "v2beta1", "mpijobs"),
    VOLCANOJOB: (VOLCANO_BATCH_GROUP, "v1alpha1", "jobs"),
}
COMMAND = (VOLCANO_BUS_GROUP, "v1alpha1", "commands")
# Member uids kept in the record: enough to recognise a replay of a large gang.
KEEP_UIDS = 2048


@dataclass
class Gang:
    """A gang as found now: its identity, its live members and its record holder."""

    ref: GangRef
    members: list[Obj]
    # The object the restart record is kept on (None: nowhere to keep it).
    holder: Obj | None
    # (group, version, plural) of the holder; ("batch", "v1", "jobs") for a Job.
    holder_kind: tuple[str, str, str] | None

    @property
    def key(self) -> str:
        return f"{self.ref.kind}/{self.ref.namespace}/{self.ref.name}"


@dataclass
class Restart:
    """What one gang restart did."""

    gang: str
    # "restarted", "resumed", "already", "refused", "failed", or "unknown" (its
    # record or status could not be read: left alone, never counted as failed)
    status: str
    message: str
    deleted: list[str] = field(default_factory=list)
    command: str = ""


def _labels(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


FACT = "gang-restart record"


def record(holder: Obj | None) -> dict[str, Any]:
    """The restart record on ``holder``, its fields checked: {} when there is none.
    The tenant owns the holder's annotations, so the record may be anything: one
    that cannot be read raises ``UnknownFact`` (it may hide a restart a minute ago,
    or a limit reached), and the gang is left alone rather than restarted again."""
    if holder is None:
        return {}
    rec, out, at = unknown.counted(holder, GANG_RESTARTS_ANNOTATION, FACT)
    if not rec:
        return {}
    if "version" in rec:
        out["version"] = unknown.count(rec, "version", at, FACT)
    # The restarts requeue_job made (its maxRequeues counts those, not a fault's
    # migration); a record from before it kept them apart counts every restart.
    out["requeues"] = (
        unknown.count(rec, "requeues", at, FACT) if "requeues" in rec else out["count"]
    )
    out["uids"] = unknown.uid_list(rec, "uids", at, FACT, KEEP_UIDS)
    try:
        if rec.get("rule") is not None:
            out["rule"] = text(rec["rule"], f"{at} field rule", max_len=253)
    except ClusterValueError as e:
        raise unknown.UnknownFact(FACT, e) from None
    return out


def _attempt(holder: Obj) -> int | None:
    """The JobSet's ``status.restarts``; None when it is not a plausible count."""
    status = holder.get("status")
    value = status.get("restarts") if isinstance(status, Mapping) else None
    if value is None:
        return 0
    try:
        return whole(value, f"{describe(holder)} status.restarts", hi=unknown.MAX_COUNT)
    except ClusterValueError as e:
        log.warning("%s; its restart attempt is unknown", e)
        return None


async def find(ctx: ActionContext, pod: Obj) -> Gang | None:
    """The gang of ``pod`` with all its live members (the current restart attempt
    for a JobSet), or None for a single-pod job. Raises ``KubeError``."""
    ref = gang_of(pod)
    if ref is None:
        return None
    ns = ref.namespace
    kube = ctx.kube
    holder: Obj | None = None
    holder_kind = OWNERS.get(ref.kind)
    if holder_kind is not None:
        group, version, plural = holder_kind
        try:
            holder = await kube.get_custom(group, version, ns, plural, ref.name)
        except NotFound:
            holder = None
    if ref.kind == JOBSET:
        selector = f"{JOBSET_NAME_LABEL}={ref.name}"
        if holder is not None and _trainjob(holder):
            ref = GangRef(TRAINJOB, ns, ref.name)
    elif ref.kind in (PYTORCHJOB, MPIJOB):
        selector = f"{KUBEFLOW_JOB_NAME_LABEL}={ref.name}"
    elif ref.kind == LABELLED:
        selector = f"{GANG_LABEL}={ref.name}"
    else:
        selector = ""  # Volcano: by ownerReference or label, both read below
    pods = await kube.list_pods(namespace=ns, label_selector=selector or None)
    members = [p for p in pods if is_live(p) and _same(p, ref)]
    if ref.kind in (JOBSET, TRAINJOB) and holder is not None:
        # An unreadable attempt leaves the members unfiltered: restarts_left then
        # reads the same status as none left, so nothing is deleted.
        n = _attempt(holder)
        attempt = str(n)
        if n is not None:
            members = [
                p
                for p in members
                if _labels(p).get(JOBSET_RESTART_ATTEMPT_LABEL, attempt) == attempt
            ]
    if ref.kind == LABELLED:
        holder, holder_kind = await _label_holder(ctx, members)
    return Gang(ref, sorted(members, key=pod_key), holder, holder_kind)


def _same(pod: Obj, ref: GangRef) -> bool:
    got = gang_of(pod)
    if got is not None:
        return got.name == ref.name and (
            got.kind == ref.kind or (got.kind == JOBSET and ref.kind == TRAINJOB)
        )
    # An MPIJob's launcher pod belongs to its launcher Job, not to the MPIJob.
    labels = _labels(pod)
    return (
        ref.kind == MPIJOB
        and labels.get(KUBEFLOW_JOB_NAME_LABEL) == ref.name
        and labels.get(KUBEFLOW_REPLICA_TYPE_LABEL, "").lower() == "launcher"
    )


def _trainjob(jobset: Obj) -> bool:
    return any(
        r.get("kind") == TRAINJOB and str(r.get("apiVersion", "")).startswith(f"{TRAINER_GROUP}/")
        for r in meta(jobset).get("ownerReferences") or []
    )


async def _label_holder(
    ctx: ActionContext, members: list[Obj]
) -> tuple[Obj | None, tuple[str, str, str] | None]:
    for p in sorted(members, key=pod_key):
        owner = controller_owner(p)
        if owner is not None and owner.get("kind") == "Job":
            try:
                job = await ctx.kube.get_job(meta(p).get("namespace", "default"), owner["name"])
            except NotFound:
                continue
            return job, ("batch", "v1", "jobs")
    return None, None


def restarts_left(jobset: Obj) -> int:
    """How many more times the JobSet's failure policy restarts it (0: the next
    failed child Job fails the JobSet). A rule whose action is ``FailJobSet`` for a
    Job that failed on its backoff limit (what a deleted pod of a ``backoffLimit:
    0`` Job does), or for any reason, leaves none."""
    spec = jobset.get("spec")
    policy = spec.get("failurePolicy") if isinstance(spec, Mapping) else None
    if not isinstance(policy, Mapping):
        return 0
    rules = policy.get("rules") or []
    for rule in rules if isinstance(rules, list) else [{"action": "FailJobSet"}]:
        if not isinstance(rule, Mapping):
            return 0  # a rule we cannot read may be a FailJobSet: none left
        reasons = rule.get("onJobFailureReasons") or []
        if rule.get("action") == "FailJobSet" and (
            not reasons or not isinstance(reasons, list) or "BackoffLimitExceeded" in reasons
        ):
            return 0
    status = jobset.get("status")
    status = status if isinstance(status, Mapping) else {}
    # Unreadable counts leave no restart: deleting the pods could fail the JobSet.
    where = describe(jobset)
    try:
        used = whole(
            status.get("restartsCountTowardsMax", status.get("restarts", 0)) or 0,
            f"{where} status.restartsCountTowardsMax",
            hi=unknown.MAX_COUNT,
        )
        most = whole(
            policy.get("maxRestarts") or 0,
            f"{where} spec.failurePolicy.maxRestarts",
            hi=unknown.MAX_COUNT,
        )
    except ClusterValueError as e:
        log.warning("%s; counted as no restart left", e)
        return 0
    return max(0, most - used)


# A limit on restarts beyond the operator's own: the record → why not, or None.
Limit = Callable[[Mapping[str, Any]], str | None]


async def restart(
    ctx: ActionContext,
    gang: Gang,
    *,
    rule: str,
    why: str,
    last: str = "",
    limit: Limit | None = None,
) -> Restart:
    """Restart ``gang`` once (see the module docstring). ``last`` is the
    ``namespace/name`` of the member to delete last (the one on the faulty node);
    ``limit`` may refuse a new restart (requeue_job's maxRequeues and backoff)."""
    rec = record(gang.holder)
    recorded = {str(u) for u in rec.get("uids") or []}
    live = {str(meta(p).get("uid") or "") for p in gang.members}
    if gang.ref.kind == VOLCANOJOB:
        return await _volcano(ctx, gang, rec, recorded & live, rule=rule, why=why, limit=limit)
    if recorded & live:
        targets = [p for p in gang.members if str(meta(p).get("uid") or "") in recorded]
        deleted = await _delete_all(ctx, targets, last)
        n = int(rec["count"])
        return Restart(
            gang.key,
            "resumed",
            f"gang {gang.key}: finished restart {n} (recorded {rec.get('last')}): "
            f"deleted {len(deleted)} remaining member(s)",
            deleted,
        )
    if not gang.members:
        return Restart(gang.key, "already", f"gang {gang.key} has no live member to restart")
    refusal = _refusal(gang, rec, limit)
    if refusal:
        if gang.holder is not None:
            await event(ctx, gang.holder, "GangRestartRefused", refusal, warning=True)
        return Restart(gang.key, "refused", refusal)
    n = await _record(ctx, gang, rec, rule=rule, version=None, requeue=limit is not None)
    deleted = await _delete_all(ctx, gang.members, last)
    message = (
        f"restarted gang {gang.key} (restart {n} by this controller): deleted "
        f"{len(deleted)} member pod(s) in one pass for rule {rule}"
        + (f" ({_path(gang)})" if _path(gang) else "")
        + (f": {why}" if why else "")
    )
    await _announce(ctx, gang, message)
    return Restart(gang.key, "restarted", message, deleted)


def _path(gang: Gang) -> str:
    if gang.ref.kind in (JOBSET, TRAINJOB):
        return "the JobSet's failure policy recreates every child Job"
    if gang.ref.kind in (PYTORCHJOB, MPIJOB):
        return "the training operator recreates the replicas"
    return "their owners recreate them"


def _refusal(gang: Gang, rec: Mapping[str, Any], limit: Limit | None) -> str:
    if gang.holder is None:
        if gang.ref.kind == LABELLED:
            return (
                f"not restarting gang {gang.key}: no member is owned by a Job, so nothing "
                "would recreate the members or keep count of the restart"
            )
        return f"not restarting gang {gang.key}: its {gang.ref.kind} is gone"
    if gang.ref.kind in (JOBSET, TRAINJOB) and restarts_left(gang.holder) <= 0:
        return (
            f"not restarting gang {gang.key}: the JobSet has no restart left "
            "(spec.failurePolicy.maxRestarts reached, no failure policy, or a FailJobSet "
            "rule for a failed Job); deleting its pods would fail the JobSet"
        )
    if limit is not None:
        return limit(rec) or ""
    return ""


async def _record(
    ctx: ActionContext,
    gang: Gang,
    rec: Mapping[str, Any],
    *,
    rule: str,
    version: int | None,
    requeue: bool = False,
) -> int:
    """Write the restart on the holder, conditionally; returns its number.
    ``requeue``: requeue_job's (under its limit), counted apart as well."""
    assert gang.holder is not None and gang.holder_kind is not None
    group, ver, plural = gang.holder_kind
    ns, name = gang.ref.namespace, meta(gang.holder)["name"]
    holder = gang.holder
    for _ in range(8):
        current = record(holder)
        count = int(current.get("count", 0)) + 1
        new: dict[str, Any] = {
            "count": count,
            "requeues": int(current.get("requeues", 0)) + (1 if requeue else 0),
            "last": iso(ctx.clock()),
            "rule": rule,
            "uids": [str(meta(p).get("uid") or "") for p in gang.members][:KEEP_UIDS],
        }
        if version is not None:
            new["version"] = version
        patch: Obj = {
            "metadata": {
                "resourceVersion": meta(holder).get("resourceVersion"),
                "annotations": {GANG_RESTARTS_ANNOTATION: json.dumps(new, sort_keys=True)},
            }
        }
        try:
            if group == "batch":
                await ctx.kube.patch_job(ns, name, patch)
            else:
                await ctx.kube.patch_custom(group, ver, ns, plural, name, patch)
            return count
        except Conflict:
            if group == "batch":
                holder = await ctx.kube.get_job(ns, name)
            else:
                holder = await ctx.kube.get_custom(group, ver, ns, plural, name)
    raise Conflict(f"{gang.key}: its owner kept changing while the restart was recorded")


async def _delete_all(ctx: ActionContext, pods: list[Obj], last: str) -> list[str]:
    """Delete ``pods`` in one pass, ``last`` at the end, each with its uid."""
    ordered = sorted(pods, key=lambda p: (pod_key(p) == last, pod_key(p)))
    deleted: list[str] = []
    for p in ordered:
        try:
            await ctx.kube.delete_pod(
                meta(p).get("namespace", "default"), meta(p)["name"], uid=meta(p).get("uid")
            )
        except (NotFound, Conflict):
            continue  # gone already, or a replacement under that name: not ours
        deleted.append(pod_key(p))
    return deleted


async def _announce(ctx: ActionContext, gang: Gang, message: str) -> None:
    if gang.holder is not None:
        await event(ctx, gang.holder, "GangRestarted", message, action="Restart")


async def _volcano(
    ctx: ActionContext,
    gang: Gang,
    rec: Mapping[str, Any],
    replay: set[str],
    *,
    rule: str,
    why: str,
    limit: Limit | None,
) -> Restart:
    """Volcano's restart: one ``RestartJob`` Command, sent while ``status.version``
    has not moved past the recorded one."""
    job = gang.holder
    if job is None:
        return Restart(gang.key, "refused", f"not restarting gang {gang.key}: its Job is gone")
    status = job.get("status")
    status = status if isinstance(status, Mapping) else {}
    try:
        version = whole(
            status.get("version") or 0, f"{describe(job)} status.version", hi=unknown.MAX_COUNT
        )
    except ClusterValueError as e:
        raise unknown.UnknownFact("Volcano job version", e) from None
    if replay:
        n = int(rec.get("count", 0))
        if version > int(rec.get("version", 0)):
            return Restart(gang.key, "already", f"gang {gang.key}: Volcano already ran restart {n}")
    else:
        refusal = _refusal(gang, rec, limit)
        if refusal:
            await event(ctx, job, "GangRestartRefused", refusal, warning=True)
            return Restart(gang.key, "refused", refusal)
        n = await _record(ctx, gang, rec, rule=rule, version=version, requeue=limit is not None)
    name = f"{gang.ref.name[:200]}-accel-restart-{n}"
    body: Obj = {
        "apiVersion": f"{VOLCANO_BUS_GROUP}/v1alpha1",
        "kind": "Command",
        "metadata": {"name": name, "namespace": gang.ref.namespace},
        "action": "RestartJob",
        "target": {
            "apiVersion": f"{VOLCANO_BATCH_GROUP}/v1alpha1",
            "kind": "Job",
            "name": gang.ref.name,
            "uid": meta(job).get("uid", ""),
        },
        "reason": "AcceleratorRemediation",
        "message": f"rule {rule}" + (f": {why}" if why else ""),
    }
    group, version_, plural = COMMAND
    try:
        await ctx.kube.create_custom(group, version_, gang.ref.namespace, plural, body)
    except Conflict as e:
        if not e.already_exists:
            raise
    message = f"restarted gang {gang.key}: Volcano Command {name} (RestartJob) for rule {rule}"
    if not replay:
        await _announce(ctx, gang, message)
    return Restart(gang.key, "resumed" if replay else "restarted", message, command=name)


@dataclass
class GangPass:
    """The gangs with a member among some pods, and what restarting them did."""

    restarts: list[Restart] = field(default_factory=list)
    members: set[str] = field(default_factory=set)

    @property
    def failed(self) -> dict[str, str]:
        return {r.gang: r.message for r in self.restarts if r.status == "failed"}

    def held_back(self, result: EvictionResult) -> None:
        """A gang that was not restarted (refused, or an API error) keeps its
        members on the node: the work is not complete, and the outcome says why."""
        for r in self.restarts:
            if r.status in ("refused", "unknown"):
                result.held[r.gang] = r.message
            elif r.status == "failed":
                result.failed[r.gang] = r.message

    def summary(self) -> str:
        done = [r for r in self.restarts if r.status in ("restarted", "resumed")]
        refused = [r for r in self.restarts if r.status in ("refused", "unknown")]
        parts = []
        if done:
            parts.append(f"restarted {len(done)} gang(s) ({', '.join(r.gang for r in done)})")
        if refused:
            parts.append(f"left {len(refused)} gang(s): " + "; ".join(r.message for r in refused))
        return ", ".join(parts)


async def restart_on_node(
    ctx: ActionContext,
    node: str,
    select: Callable[[Obj], bool],
    *,
    rule: str,
    why: str,
) -> GangPass:
    """Restart, once each, the gangs with a member among the node's pods that
    ``select`` picks. Call it after the node is tainted or cordoned, so that the
    restart lands elsewhere. Its ``members`` are the pods to leave out of any
    eviction (evicting one member alone is what this prevents)."""
    result = GangPass()
    seen: set[GangRef] = set()
    for pod in await ctx.kube.list_pods(node=node):
        ref = gang_of(pod)
        if ref is None or not select(pod):
            continue
        result.members.add(pod_key(pod))
        if ref in seen or not is_live(pod):
            continue
        seen.add(ref)
        try:
            gang = await find(ctx, pod)
            if gang is None:
                continue
            result.restarts.append(await restart(ctx, gang, rule=rule, why=why, last=pod_key(pod)))
        except KubeError as e:
            key = f"{ref.kind}/{ref.namespace}/{ref.name}"
            log.warning("gang %s: restart failed: %s", key, e)
            result.restarts.append(Restart(key, "failed", f"gang {key}: {e}"))
        except unknown.UnknownFact as e:
            # Neither "never restarted" nor "failed": the gang stays as it is,
            # and the node's other pods still move.
            key = f"{ref.kind}/{ref.namespace}/{ref.name}"
            result.restarts.append(Restart(key, "unknown", f"left gang {key} alone: {e}"))
    return result


__all__ = [
    "OWNERS",
    "Gang",
    "GangPass",
    "Restart",
    "find",
    "record",
    "restart",
    "restart_on_node",
    "restarts_left",
]
