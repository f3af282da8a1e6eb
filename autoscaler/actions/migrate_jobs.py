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
recreated here before it is evicted, with its spec intact but for ``nodeName``
and a required node affinity that excludes the failed node; its name is derived
from the original's uid, so a retry after a crash finds the replacement already
there instead of making a second one. With ``deviceOnly`` the pods holding the
device come from the exporter's ``accel_device_pod_info`` (the kubelet's
assignment); when that is unknown every device-using pod of the node goes, and
the Event says so. Phase ``migrated`` (or ``migrate-incomplete``). Events:
``MigrationStarted`` and ``Migrated``/``MigrationIncomplete`` on the node,
``Evicted`` on each pod, ``Recreated`` on each bare pod's replacement.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

================  ===========================================  ===========================
``taint``         taint to set first (``key=value:Effect``)    ``accel-fleet.io/faulty=``
                                                               ``true:NoSchedule``
``drainTimeout``  how long to keep evicting (duration, > 0)    ``10m``
``deviceOnly``    evict only pods holding the target device;   ``false``
                  needs target ``device``
================  ===========================================  ===========================
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.names import DEFAULT_TAINT, KUBELET_CONFIG_PREFIX
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
from autoscaler.actions.ownership import MIGRATED_FROM, event, iso, parse_iso
from autoscaler.actions.pods import (
    controller_owner,
    evict_until,
    finish,
    meta,
    pod_key,
    uses_devices,
)
from autoscaler.decision import Decision
from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import Obj
from autoscaler.promql.matchers import quote
from autoscaler.types import Vector

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


def replacement(pod: Obj, node: str) -> Obj:
    """A bare pod's replacement: the same spec, minus ``nodeName``, plus a required
    node affinity that excludes ``node``; named after the original's uid so that
    creating it twice is a Conflict, not a second copy."""
    m = meta(pod)
    uid = str(m.get("uid") or pod_key(pod))
    suffix = hashlib.sha256(uid.encode()).hexdigest()[:6]
    spec = copy.deepcopy(pod.get("spec") or {})
    spec.pop("nodeName", None)
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": [node]}
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term.setdefault("matchFields", []).append(dict(avoid))
    required["nodeSelectorTerms"] = terms
    annotations = {
        k: v
        for k, v in (m.get("annotations") or {}).items()
        if not k.startswith(KUBELET_CONFIG_PREFIX)
    }
    annotations[MIGRATED_FROM] = f"{pod_key(pod)}@{node}"
    metadata: Obj = {
        "name": f"{m['name'][:240]}-m{suffix}",
        "namespace": m.get("namespace", "default"),
        "annotations": annotations,
    }
    if m.get("labels"):
        metadata["labels"] = dict(m["labels"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


async def _device_pods(ctx: ActionContext, node: str, device: str) -> set[str] | None:
    """``namespace/pod`` of the pods holding ``device``, or None when unknown."""
    if ctx.query is None:
        return None
    expr = f"accel_device_pod_info{{node={quote(node)},device={quote(device)}}}"
    result = await ctx.query(expr, ctx.clock())
    if not isinstance(result, Vector):
        return None
    return {f"{s.get('namespace')}/{s.get('pod')}" for s in result.samples}


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return await undo(ctx, decision)
    params = from_params(MigrateJobsParams, decision.params)
    name = node_of(decision)
    device = decision.target.get("device", "")
    holders: set[str] | None = None
    scope = f"every device-using pod of node {name}"
    if params.device_only and device:
        holders = await _device_pods(ctx, name, device)
        if holders is None:
            scope += f" (which pods hold {device} is unknown: no accel_device_pod_info)"
        else:
            scope = f"the {len(holders)} pod(s) holding {device}"
    try:
        claimed = await claim(ctx, decision, phase="migrating", taint=params.taint)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("failed", f"node {name}: {e}")
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

    def select(pod: Obj) -> bool:
        if holders is not None:
            return pod_key(pod) in holders
        return uses_devices(pod)

    async def before_evict(pod: Obj) -> None:
        if controller_owner(pod) is not None:
            return  # its owner makes a new one; the taint keeps it off this node
        body = replacement(pod, name)
        namespace = body["metadata"]["namespace"]
        try:
            created = await ctx.kube.create_pod(namespace, body)
        except Conflict as e:
            if not e.already_exists:
                raise
            log.info("replacement %s/%s already exists", namespace, body["metadata"]["name"])
            return
        recreated.append(f"{namespace}/{body['metadata']['name']}")
        await event(
            ctx,
            created if created.get("metadata") else body,
            "Recreated",
            f"replaces bare pod {pod_key(pod)} moved off node {name} by rule {decision.rule}",
            action="Create",
        )

    try:
        result = await evict_until(
            ctx,
            name,
            select,
            deadline=deadline,
            rule=decision.rule,
            why=f"migrated off failing node ({decision.rule})",
            before_evict=before_evict,
        )
    except KubeError as e:
        return Outcome("failed", f"node {name}: {e}")
    return await finish(
        ctx,
        claimed.node,
        decision.rule,
        NAME,
        result,
        phases=("migrated", "migrate-incomplete"),
        reasons=("Migrated", "MigrationIncomplete"),
        extra=f", recreated {len(recreated)} bare pod(s) elsewhere" if recreated else "",
        details={"recreated": recreated},
    )


SPEC = ActionSpec(
    NAME,
    TARGETS,
    reversible=True,
    params_type=MigrateJobsParams,
    validate=validate,
    check_target=check_target,
    execute=execute,
)
