"""``replace_machine``: hand a node whose hardware does not heal back to Cluster API,
so that its MachineSet brings a fresh machine in its place.

The last step of an escalation ladder (migrate, reset, reboot, replace): when a
device stays broken after a reset and a reboot, the machine is the fault. This
controller does not provision machines; Cluster API does, and it already knows
how to replace one. The action only says *which* one, in one of two ways:

- ``mode: remediate`` (the default) sets ``cluster.x-k8s.io/remediate-machine`` on
  the Machine. Cluster API's MachineHealthCheck controller treats a Machine with
  that annotation as unhealthy whatever its checks say, and the Machine's owner
  remediates it: a MachineSet deletes it and creates a new one, the kubeadm control
  plane remediates control-plane Machines itself. The MachineHealthCheck's limits
  still hold (``unhealthyLessThanOrEqualTo``, the MachineDeployment's
  ``spec.remediation.maxInFlight``), so a storm is held by Cluster API as well as
  by our breaker. It needs a MachineHealthCheck whose selector matches the Machine:
  without one the annotation is read by nobody and nothing happens, so the action
  lists the MachineHealthChecks of the Machine's namespace first and, when none
  selects it, fails and says so rather than mark a Machine nobody will replace.
- ``mode: delete`` deletes the Machine, with its uid as a precondition so that a
  retried delete can never hit a Machine that took the same name; its MachineSet
  creates a replacement because it is one replica short. No MachineHealthCheck is
  needed, and none of its limits apply.

Which Machine: the one the node's ``cluster.x-k8s.io/machine`` annotation names (set
by Cluster API's Machine controller on every node it manages, with the Machine's
namespace in ``cluster.x-k8s.io/cluster-namespace``); without that annotation, the
one whose ``status.nodeRef`` names the node, in the node-pool provider's namespace.
Exactly one Machine, or the action fails and says why: an annotation whose Machine
points at another node is stale, and two Machines claiming one node are a mess for
a person, not for a controller. A Machine that nothing owns (no controller
ownerReference, no MachineSet labels) is not replaced either: deleting it would
only remove it.

Once, and only once: before it acts, the action records the Machine (namespace,
name, uid) and the request's id in the rule's entry of the node's
``accel-fleet.io/remediation`` annotation (``autoscaler/actions/ops/ownership.py``),
and in remediate mode also writes the id on the Machine
(``accel-fleet.io/replace-request``). A replayed decision or a restarted controller
finds that record and answers ``done`` without a second mark or delete: the
Machine being deleted, gone, replaced by another uid, or already carrying the mark
all mean the replacement was asked for. A node that is gone has been replaced.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

============  ==============================================  ==============
``mode``      ``remediate`` (mark for Cluster API's           ``remediate``
              MachineHealthCheck remediation) or ``delete``
              (delete the Machine)
============  ==============================================  ==============

Nothing to undo: a replaced machine stays replaced (``recover`` releases the rule's
entry only).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from accel_common.clusterjson import ClusterValueError, annotation_object, annotations_of
from accel_common.names import CAPI_CLUSTER_NAMESPACE_ANNOTATION as NAMESPACE_ANNOTATION
from accel_common.names import CAPI_DEPLOYMENT_LABEL as DEPLOYMENT_LABEL
from accel_common.names import CAPI_MACHINE_ANNOTATION as MACHINE_ANNOTATION
from accel_common.names import CAPI_MACHINESET_LABEL as MACHINESET_LABEL
from accel_common.names import CAPI_REMEDIATE_MACHINE_ANNOTATION as REMEDIATE
from accel_common.names import REPLACE_REQUEST_ANNOTATION as REQUEST
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
from autoscaler.actions.ops.nodes import node_of, release
from autoscaler.actions.ops.ownership import (
    Entry,
    entries,
    entries_patch,
    event,
    iso,
    new_entry,
    node_ref,
    ours,
    set_phase,
    update_node,
)
from autoscaler.actions.ops.unknown import UnknownFact, answering_unknown, where
from autoscaler.decision import Decision
from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import (
    CAPI_GROUP,
    CAPI_VERSION,
    MACHINE_HEALTH_CHECKS,
    MACHINES,
    Obj,
)

log = logging.getLogger("accel_autoscaler.actions")

NAME = "replace_machine"
TARGETS = ("node", "device")
MODES = ("remediate", "delete")
# The entry's phases: asked is recorded before the Machine is touched; replaced
# after the mark or the delete went through.
ASKING, REPLACED = "replacing", "replaced"
API_VERSION = f"{CAPI_GROUP}/{CAPI_VERSION}"


@dataclass(frozen=True)
class ReplaceMachineParams:
    mode: str = param("mode", "remediate")


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(ReplaceMachineParams))
    mode = r.choice("mode", MODES, "remediate") or "remediate"
    return to_params(ReplaceMachineParams(mode=mode)), r.problems


class Refused(Exception):
    """No single Machine to replace; the message says why and what to do."""


@dataclass(frozen=True)
class MachineRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, machine: Obj) -> MachineRef:
        meta = machine.get("metadata") or {}
        return cls(
            str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
        )


def _node_ref_name(machine: Obj) -> str | None:
    ref = (machine.get("status") or {}).get("nodeRef") or {}
    name = ref.get("name")
    return str(name) if name else None


@runtime_checkable
class NamespacedPools(Protocol):
    """What a provider may offer beyond ``NodePoolProvider``: the one namespace its
    pools live in (``ClusterAPIProvider`` has it), where a Machine is looked for
    when the node's annotations name none."""

    namespace: str


def _provider_namespace(ctx: ActionContext) -> str | None:
    pools = ctx.pools
    if not isinstance(pools, NamespacedPools):
        return None
    namespace = pools.namespace
    return namespace if isinstance(namespace, str) and namespace else None


# An object name as Kubernetes allows it (a DNS subdomain).
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _named(node: Obj, key: str) -> str:
    """A name in annotation ``key`` of ``node`` ("" when absent). Anyone who may
    patch the Node may write it: one that is no object name is unknown
    (``UnknownFact``), never a reason to look elsewhere for a Machine to delete."""
    value = annotations_of(node).get(key)
    if value is None or value == "":
        return ""
    if isinstance(value, str) and _NAME.fullmatch(value):
        return value
    shown = repr(value)[:80] if isinstance(value, str) else type(value).__name__
    problem = ClusterValueError(
        where({"kind": "Node", **node}, key), f"{shown} is not an object name"
    )
    log.warning("%s; the Machine is unknown", problem)
    raise UnknownFact("Machine of the node", problem)


async def find_machine(ctx: ActionContext, node: Obj) -> Obj:
    """The one Machine behind ``node`` (module docstring); ``Refused`` otherwise."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    namespace = _named(node, NAMESPACE_ANNOTATION) or _provider_namespace(ctx)
    machine_name = _named(node, MACHINE_ANNOTATION)
    if not namespace:
        raise Refused(
            f"node {name} has no {NAMESPACE_ANNOTATION} annotation and no Cluster API "
            "pool provider is configured, so the namespace of its Machine is unknown "
            "(run the controller with --pool-provider clusterapi and its namespace)"
        )
    if machine_name:
        try:
            machine = await ctx.kube.get_custom(
                CAPI_GROUP, CAPI_VERSION, namespace, MACHINES, machine_name
            )
        except NotFound:
            raise Refused(
                f"node {name}'s {MACHINE_ANNOTATION} annotation names Machine "
                f"{namespace}/{machine_name}, which does not exist"
            ) from None
        owner = _node_ref_name(machine)
        if owner is not None and owner != name:
            raise Refused(
                f"node {name}'s {MACHINE_ANNOTATION} annotation names Machine "
                f"{namespace}/{machine_name}, whose nodeRef is node {owner}: the annotation is "
                "stale; not replacing a Machine that may be another node's"
            )
        return machine
    machines = [
        m
        for m in await ctx.kube.list_custom(CAPI_GROUP, CAPI_VERSION, namespace, MACHINES)
        if _node_ref_name(m) == name
    ]
    if len(machines) != 1:
        found = ", ".join(str(MachineRef.of(m)) for m in machines) or "none"
        raise Refused(
            f"node {name} has no {MACHINE_ANNOTATION} annotation and "
            f"{len(machines)} Machines in namespace {namespace} have it as nodeRef "
            f"({found}); replace_machine replaces exactly one"
        )
    return machines[0]


def _owned(machine: Obj) -> bool:
    """Whether something replaces the Machine when it goes: a controller owner (a
    MachineSet, a control plane), or the labels a MachineSet puts on its Machines."""
    meta = machine.get("metadata") or {}
    if any(ref.get("controller") for ref in meta.get("ownerReferences") or []):
        return True
    labels = meta.get("labels") or {}
    return bool(labels.get(DEPLOYMENT_LABEL) or labels.get(MACHINESET_LABEL))


def _selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels; an empty one
    selects everything, as in Kubernetes."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


async def health_check(ctx: ActionContext, machine: Obj) -> str | None:
    """The name of a MachineHealthCheck that selects ``machine`` (same cluster, its
    selector matching the Machine's labels, as Cluster API matches them); None when
    none does; "" when they cannot be read (the mark is set anyway, and the log
    says why it may do nothing)."""
    meta = machine.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    cluster = str((machine.get("spec") or {}).get("clusterName") or "")
    try:
        checks = await ctx.kube.list_custom(
            CAPI_GROUP, CAPI_VERSION, namespace, MACHINE_HEALTH_CHECKS
        )
    except KubeError as e:
        log.warning(
            "cannot list MachineHealthChecks in %s (%s): marking Machine %s/%s anyway; "
            "it is replaced only if one selects it",
            namespace,
            e,
            namespace,
            meta.get("name"),
        )
        return ""
    labels = meta.get("labels") or {}
    for mhc in sorted(checks, key=lambda m: str((m.get("metadata") or {}).get("name", ""))):
        spec = mhc.get("spec") or {}
        if cluster and spec.get("clusterName") and spec.get("clusterName") != cluster:
            continue
        if _selects(spec.get("selector") or {}, labels):
            return str((mhc.get("metadata") or {}).get("name", ""))
    return None


def _request_id(decision: Decision, node: str, entry: Entry | None, now: float) -> str:
    incident = decision.extra.get("incident")
    if isinstance(incident, (int, float)) and math.isfinite(incident) and 0 <= incident < 2**33:
        start = iso(float(incident))
    elif isinstance(incident, str) and incident:
        start = incident
    elif entry is not None:
        start = entry.started
    else:
        start = iso(now)
    return f"{decision.rule}/{node}/{start}"


async def _record(
    ctx: ActionContext, decision: Decision, node: str, machine: MachineRef, request: str
) -> Entry:
    """The rule's entry on the node, now a replace_machine entry in phase
    ``replacing`` that names the Machine: written before the Machine is touched. A
    cordon or taint the rule's earlier step owns stays owned."""
    result: dict[str, Entry] = {}

    def mutate(n: Obj) -> Obj | None:
        es = entries(n)
        old = es.get(decision.rule)
        if old is not None and ours(old, ctx) and old.action == NAME:
            if old.params.get("machineUID") == machine.uid and old.phase in (ASKING, REPLACED):
                result["entry"] = old
                return None
            e = old
            e.phase = ASKING
        else:
            e = new_entry(ctx, decision, ASKING)
            if old is not None and ours(old, ctx):
                e.cordoned, e.taint = old.cordoned, old.taint
        e.params = {
            **dict(decision.params),
            "machine": str(machine),
            "machineUID": machine.uid,
            "request": request,
        }
        es[decision.rule] = e
        result["entry"] = e
        return entries_patch(es)

    await update_node(ctx.kube, node, mutate)
    return result["entry"]


async def _phase(ctx: ActionContext, node: str, rule: str, phase: str, message: str) -> None:
    """``set_phase``, where a node that Cluster API already removed is no error."""
    with contextlib.suppress(NotFound):
        await set_phase(ctx, node, rule, phase, message)


def _asked_already(machine: Obj, request: str, mode: str) -> str | None:
    """Why this Machine needs nothing more for ``request``, or None."""
    meta = machine.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return "is already being deleted"
    annotations: Mapping[str, Any] = meta.get("annotations") or {}
    if mode == "remediate" and REMEDIATE in annotations:
        # Bounded: the Machine's annotations are anyone's who may patch it. An
        # unreadable request is not ours; either way nothing more is asked.
        request_record = annotation_object(machine, REQUEST, log=log) or {}
        asked = request_record.get("id")
        return f"already carries {REMEDIATE}" + (
            " (our request)" if asked == request else " (set by someone else)"
        )
    return None


async def _mark(ctx: ActionContext, machine: Obj, record: Mapping[str, Any]) -> None:
    """Sets the remediate-machine annotation and our request, conditional on the
    Machine's resourceVersion (read again on a conflict)."""
    ref = MachineRef.of(machine)
    for _ in range(4):
        meta = machine.get("metadata") or {}
        if str(meta.get("uid", "")) != ref.uid:
            raise Refused(f"Machine {ref} was replaced by another object with the same name")
        patch = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {
                    REMEDIATE: record["at"],
                    REQUEST: json.dumps(dict(record), sort_keys=True),
                },
            }
        }
        try:
            await ctx.kube.patch_custom(
                CAPI_GROUP, CAPI_VERSION, ref.namespace, MACHINES, ref.name, patch
            )
            return
        except Conflict:
            machine = await ctx.kube.get_custom(
                CAPI_GROUP, CAPI_VERSION, ref.namespace, MACHINES, ref.name
            )
    raise Conflict(f"Machine {ref} kept changing while we marked it", status=409)


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    """Act: mark or delete the node's Machine, once (module docstring). Recover:
    release the rule's entry (nothing of a replacement can be undone)."""
    params = from_params(ReplaceMachineParams, decision.params)
    node_name = node_of(decision)
    if decision.kind == "recover":
        with contextlib.suppress(NotFound):
            await release(ctx, node_name, decision.rule)
        return Outcome("skipped", f"replace_machine cannot be undone (node {node_name})")
    try:
        node = await ctx.kube.get_node(node_name)
    except NotFound:
        return Outcome(
            "done",
            f"node {node_name} no longer exists: its Machine was replaced or removed",
            {"node": node_name},
        )
    except KubeError as e:
        return Outcome("unknown", f"node {node_name}: {e}")
    mine = entries(node).get(decision.rule)
    entry = mine if mine is not None and ours(mine, ctx) and mine.action == NAME else None
    request = (
        str(entry.params.get("request"))
        if entry is not None and entry.params.get("request")
        else _request_id(decision, node_name, entry, ctx.clock())
    )
    try:
        return await _replace(ctx, decision, node, entry, request, params.mode)
    except Refused as e:
        await event(ctx, node_ref(node_name), "ReplaceRefused", str(e), warning=True, action=NAME)
        return Outcome("failed", str(e), {"node": node_name, "mode": params.mode})
    except KubeError as e:
        return Outcome(
            "unknown", f"node {node_name}: {e}", {"node": node_name, "mode": params.mode}
        )


async def _replaceable(
    ctx: ActionContext, machine: Obj, mode: str, details: dict[str, Any]
) -> None:
    """``Refused`` unless something would bring the Machine's replacement: an owner,
    and in remediate mode a MachineHealthCheck that selects it (named in
    ``details``)."""
    ref = MachineRef.of(machine)
    if not _owned(machine):
        raise Refused(
            f"Machine {ref} has no owner (no controller ownerReference, no "
            f"{DEPLOYMENT_LABEL} or {MACHINESET_LABEL} label): nothing would bring a "
            "replacement, so it is not replaced"
        )
    if mode == "remediate":
        checker = await health_check(ctx, machine)
        if checker is None:
            raise Refused(
                f"no MachineHealthCheck in namespace {ref.namespace} selects Machine {ref}: "
                f"nobody would act on {REMEDIATE} (add a MachineHealthCheck whose selector "
                "matches the pool's Machines, or use mode: delete)"
            )
        if checker:
            details["machineHealthCheck"] = checker


async def _replace(
    ctx: ActionContext,
    decision: Decision,
    node: Obj,
    entry: Entry | None,
    request: str,
    mode: str,
) -> Outcome:
    node_name = str((node.get("metadata") or {}).get("name", ""))
    details: dict[str, Any] = {"node": node_name, "mode": mode, "request": request}
    recorded = (
        cast(str, entry.params.get("machine"))
        if entry is not None and entry.params.get("machine")
        else None
    )
    try:
        machine = await find_machine(ctx, node)
    except Refused:
        if recorded is not None and entry is not None and entry.phase in (ASKING, REPLACED):
            # The Machine we recorded is gone (deleted, or remediated and replaced):
            # what we asked for has happened.
            if entry.phase != REPLACED:
                await _phase(ctx, node_name, decision.rule, REPLACED, f"Machine {recorded} gone")
            return Outcome("done", f"Machine {recorded} of node {node_name} is gone", details)
        raise
    ref = MachineRef.of(machine)
    details.update(machine=str(ref), uid=ref.uid)
    if entry is not None and recorded == str(ref) and entry.params.get("machineUID") != ref.uid:
        # A new Machine under the old name: the replacement has happened.
        if entry.phase != REPLACED:
            await _phase(ctx, node_name, decision.rule, REPLACED, f"Machine {ref} replaced")
        return Outcome("done", f"Machine {ref} was already replaced (new uid)", details)
    already = _asked_already(machine, request, mode)
    if already is not None:
        # A replay writes nothing once the entry says replaced.
        if entry is None or entry.phase != REPLACED:
            await _record(ctx, decision, node_name, ref, request)
            await _phase(ctx, node_name, decision.rule, REPLACED, f"Machine {ref} {already}")
        return Outcome("done", f"Machine {ref} of node {node_name} {already}", details)
    await _replaceable(ctx, machine, mode, details)
    if not ctx.leading():
        return Outcome("skipped", f"lost the lease before replacing Machine {ref}", details)
    await _record(ctx, decision, node_name, ref, request)
    at = iso(ctx.clock())
    why = f"rule {decision.rule}" + (f": {decision.reason}" if decision.reason else "")
    if mode == "remediate":
        record = {"id": request, "mode": mode, "rule": decision.rule, "node": node_name}
        await _mark(ctx, machine, {**record, "at": at, "by": ctx.controller})
        message = (
            f"marked Machine {ref} of node {node_name} with {REMEDIATE}: its "
            f"MachineHealthCheck and MachineSet replace it ({why})"
        )
        reason = "MachineRemediationRequested"
    else:
        with contextlib.suppress(NotFound):
            await ctx.kube.delete_custom(
                CAPI_GROUP, CAPI_VERSION, ref.namespace, MACHINES, ref.name, uid=ref.uid
            )
        message = (
            f"deleted Machine {ref} of node {node_name}: its MachineSet creates a new one ({why})"
        )
        reason = "MachineDeleted"
    await _phase(ctx, node_name, decision.rule, REPLACED, message)
    machine_obj: Obj = {
        "apiVersion": API_VERSION,
        "kind": "Machine",
        "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
    }
    await event(ctx, node_ref(node_name), reason, message, action=NAME)
    await event(ctx, machine_obj, reason, message, action=NAME)
    return Outcome("done", message, details)


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=False,
        params_type=ReplaceMachineParams,
        validate=validate,
        execute=execute,
    )
)
