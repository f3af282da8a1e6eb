"""``reboot_node``: reboot a node whose devices a reset did not bring back, after moving
its device pods, through the maintenance tooling the cluster already has, or through
the node agent.

Two ways, chosen by ``method``:

- ``selfNodeRemediation``: a medik8s Self Node Remediation CR
  (``self-node-remediation.medik8s.io/v1alpha1`` ``SelfNodeRemediation``) named after
  the node, in ``snrNamespace``. The Self Node Remediation operator, where installed,
  reboots the node and fences it the way it already does for NodeHealthCheck; the
  controller creates and, once the node is back, deletes the CR (as NodeHealthCheck
  does with the CRs it creates).
- ``agent``: the node agent (``accel-node-agent``, docs/agent.md) through the node's
  ``accel-fleet.io/reboot-request`` annotation; it writes ``rebooting`` with the boot id
  in ``accel-fleet.io/reboot-status``, reboots (``systemctl reboot``), and answers
  ``done`` after the boot.
- ``auto`` (the default): the CR when the API server serves that API (a list of the
  CRs answers; an API that is not served answers 404), else the agent. Installing
  the operator is what makes the choice: no flag to keep in step with the cluster.

Execution, recorded in the node's ``accel-fleet.io/remediation`` entry:

1. The taint goes on and every device pod moves, as ``migrate_jobs`` moves them
   (Eviction API, PodDisruptionBudgets honoured until ``drainTimeout``). Pods a
   budget still protects at the deadline end it ``failed`` without a reboot. Pods
   that use no device stay: the reboot restarts them where they are.
2. The CR (or the request) is written with the request id (built from the rule, the
   target and the incident) and the node's boot id before the reboot; the phase
   becomes ``rebooting``. A controller that restarts (``kill -9``) finds its own CR or
   request and only waits: no second move, no second reboot.
3. Success: the node's ``status.nodeInfo.bootID`` changed and the node is Ready, or
   the agent answered ``done``: ``done`` (phase ``rebooted``). The agent's ``failed``,
   or no success within ``wait`` from the request, ends ``failed`` (phase
   ``reboot-failed``), which an escalation ladder takes as the signal to go on at
   once. A request given up on is closed with a ``failed`` status written by the
   controller (unless the agent already said ``rebooting``), and a CR given up on
   is deleted, so no reboot comes late.

Events: those of the move, then ``RebootRequested``, and ``Rebooted`` or
``RebootFailed`` on the node. The taint stays until the rule's ``recover`` removes
it.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

================  ===============================================  ===========================
``method``        how to reboot: ``auto``, ``selfNodeRemediation``  ``auto``
                  or ``agent``
``snrNamespace``  the namespace of the SelfNodeRemediation CR      ``openshift-workload-``
                  (the Self Node Remediation operator's)           ``availability``
``taint``         taint to set first (``key=value:Effect``)        ``accel-fleet.io/faulty=``
                                                                   ``true:NoSchedule``
``drainTimeout``  how long to keep evicting the node's device      ``10m``
                  pods (duration, > 0)
``wait``          how long to wait for the node to come back       ``20m``
                  rebooted once asked (duration, > 0)
================  ===============================================  ===========================
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.names import (
    DEFAULT_TAINT,
    REBOOT_REQUEST_ANNOTATION,
    REBOOT_STATUS_ANNOTATION,
    SNR_GROUP,
)
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
from autoscaler.actions.ops.agent import (
    POLL_SECONDS,
    annotation_json,
    boot_id,
    move_pods,
    node_ready,
    own_entry,
    request_id,
)
from autoscaler.actions.ops.drain import DEFAULT_DRAIN_TIMEOUT
from autoscaler.actions.ops.nodes import claim, node_of, undo
from autoscaler.actions.ops.ownership import (
    entries,
    entries_patch,
    event,
    iso,
    node_ref,
    ours,
    parse_iso,
    set_phase,
    update_node,
)
from autoscaler.decision import Decision
from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import Obj

log = logging.getLogger("accel_autoscaler.actions")

NAME = "reboot_node"
TARGETS = ("node", "device")
METHODS = ("auto", "selfNodeRemediation", "agent")
DEFAULT_WAIT = 1200.0
SNR_VERSION = "v1alpha1"
SNR_PLURAL = "selfnoderemediations"
SNR_KIND = "SelfNodeRemediation"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class RebootNodeParams:
    method: str = param("method", "auto")
    snr_namespace: str = param("snrNamespace", "openshift-workload-availability")
    taint: str = param("taint", DEFAULT_TAINT)
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    wait: float = param("wait", DEFAULT_WAIT)


DEFAULTS = RebootNodeParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(RebootNodeParams))
    namespace = r.string("snrNamespace", DEFAULTS.snr_namespace)
    if len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        r.problem("snrNamespace", f"must be a namespace name (a DNS label), got {namespace!r}")
        namespace = DEFAULTS.snr_namespace
    params = RebootNodeParams(
        method=r.choice("method", METHODS, DEFAULTS.method) or DEFAULTS.method,
        snr_namespace=namespace,
        taint=read_taint(r, "taint", DEFAULTS.taint),
        drain_timeout=r.duration("drainTimeout", DEFAULTS.drain_timeout, positive=True),
        wait=r.duration("wait", DEFAULTS.wait, positive=True),
    )
    return to_params(params), r.problems


@dataclass
class Asked:
    """A reboot asked for: how, when, and the boot it must leave behind."""

    method: str  # "selfNodeRemediation" or "agent"
    requested_at: float
    boot: str
    cr_uid: str = ""
    rid: str = ""  # the request's id, as written


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return await undo(ctx, decision)
    params = from_params(RebootNodeParams, decision.params)
    name = node_of(decision)
    try:
        node = await ctx.kube.get_node(name)
        entry = own_entry(ctx, node, decision)
        if entry is None:
            entry = (await claim(ctx, decision, phase="migrating", taint=params.taint)).entry
        rid = request_id(decision, entry.started)
        asked = await _asked(ctx, node, params, rid, adopt=entry.phase == "rebooting")
        if asked is None:
            result = await _ask(ctx, decision, params, name, rid)
            if isinstance(result, Outcome):
                return result
            asked = result
        if ctx.dry_run:
            return Outcome("done", f"dry run: would wait up to {params.wait:g}s for the reboot")
        return await _wait(ctx, decision, params, name, asked.rid or rid, asked)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")


def _record(cr_or_node: Obj) -> dict[str, Any] | None:
    return annotation_json(cr_or_node, REBOOT_REQUEST_ANNOTATION)


async def _asked(
    ctx: ActionContext, node: Obj, params: RebootNodeParams, rid: str, *, adopt: bool
) -> Asked | None:
    """This decision's reboot, when an earlier run already asked for it. With
    ``adopt`` (the entry is ``rebooting``: the request went out in the same write as
    that phase) a request of this controller is this entry's whatever its id, since
    the executor resumes from the entry without the ladder's incident."""

    def ours_(record: Mapping[str, Any] | None) -> bool:
        if record is None:
            return False
        return record.get("id") == rid or (adopt and record.get("by") == ctx.controller)

    mine = _record(node)
    if mine is not None and ours_(mine):
        return Asked(
            "agent", _when(mine, ctx), str(mine.get("bootID") or ""), rid=str(mine.get("id"))
        )
    if params.method == "agent":
        return None
    name = node["metadata"]["name"]
    try:
        cr = await ctx.kube.get_custom(
            SNR_GROUP, SNR_VERSION, params.snr_namespace, SNR_PLURAL, name
        )
    except NotFound:
        return None  # no such CR, or the API is not served: decided when asking
    mine = _record(cr)
    if mine is None or not ours_(mine):
        return None
    uid = str((cr.get("metadata") or {}).get("uid") or "")
    boot = str(mine.get("bootID") or "")
    return Asked("selfNodeRemediation", _when(mine, ctx), boot, uid, rid=str(mine.get("id")))


def _when(record: Mapping[str, Any], ctx: ActionContext) -> float:
    try:
        return parse_iso(str(record.get("requestedAt")))
    except ValueError:
        return ctx.clock()


async def snr_served(ctx: ActionContext, namespace: str) -> bool:
    """Whether the API server serves SelfNodeRemediation: a list answers 404 only when
    the resource is not served (a list never answers 404 for an empty namespace)."""
    try:
        await ctx.kube.list_custom(SNR_GROUP, SNR_VERSION, namespace, SNR_PLURAL)
    except NotFound:
        return False
    return True


async def _ask(
    ctx: ActionContext, decision: Decision, params: RebootNodeParams, name: str, rid: str
) -> Asked | Outcome:
    method = params.method
    if method == "auto":
        method = "selfNodeRemediation" if await snr_served(ctx, params.snr_namespace) else "agent"
    stop, moved = await move_pods(ctx, decision, device_only=False)
    if stop is not None:
        return stop
    node = await ctx.kube.get_node(name)
    now = ctx.clock()
    record = {"id": rid, "requestedAt": iso(now), "by": ctx.controller, "bootID": boot_id(node)}
    asked = Asked(method, now, record["bootID"], rid=rid)
    # The phase first: a controller killed right after the CR is created still finds
    # its entry in flight, and its resume finds the CR.
    await _phase_and_request(ctx, decision, name, None if method != "agent" else record)
    if method == "selfNodeRemediation":
        body: Obj = {
            "apiVersion": f"{SNR_GROUP}/{SNR_VERSION}",
            "kind": SNR_KIND,
            "metadata": {
                "name": name,
                "namespace": params.snr_namespace,
                "annotations": {REBOOT_REQUEST_ANNOTATION: json.dumps(record)},
            },
            "spec": {},
        }
        try:
            cr = await ctx.kube.create_custom(
                SNR_GROUP, SNR_VERSION, params.snr_namespace, SNR_PLURAL, body
            )
        except Conflict as e:
            if not e.already_exists:
                raise
            message = (
                f"node {name}: a {SNR_KIND} {params.snr_namespace}/{name} already exists and is "
                "not this rule's (NodeHealthCheck's, or a person's): not rebooting over it"
            )
            await set_phase(ctx, name, decision.rule, "reboot-failed", message)
            # Someone else remediates the node: no evidence that a reboot fails.
            return Outcome("unknown", message)
        asked.cr_uid = str((cr.get("metadata") or {}).get("uid") or "")
    how = (
        f"{SNR_KIND} {params.snr_namespace}/{name}"
        if method == "selfNodeRemediation"
        else "the node agent"
    )
    await event(
        ctx,
        node,
        "RebootRequested",
        f"asked {how} to reboot node {name} (request {rid}, boot {asked.boot or 'unknown'}) "
        f"for rule {decision.rule}; {moved}",
        action=NAME,
    )
    return asked


async def _phase_and_request(
    ctx: ActionContext, decision: Decision, name: str, record: Mapping[str, Any] | None
) -> None:
    """Phase ``rebooting`` and, for the agent, the request, in one write."""

    def mutate(n: Obj) -> Obj | None:
        es = entries(n)
        e = es.get(decision.rule)
        if e is not None and ours(e, ctx):
            e.phase, e.message = "rebooting", ""
        patch = entries_patch(es)
        if record is not None:
            patch["metadata"]["annotations"][REBOOT_REQUEST_ANNOTATION] = json.dumps(record)
        return patch

    await update_node(ctx.kube, name, mutate)


async def _wait(
    ctx: ActionContext,
    decision: Decision,
    params: RebootNodeParams,
    name: str,
    rid: str,
    asked: Asked,
) -> Outcome:
    deadline = asked.requested_at + params.wait
    last = ""
    while True:
        if not ctx.leading():
            return Outcome(
                "partial", f"node {name}: lost the leader lease waiting for reboot {rid}; resumed"
            )
        node = await ctx.kube.get_node(name)
        now_boot = boot_id(node)
        if asked.boot and now_boot and now_boot != asked.boot and node_ready(node):
            return await _end(
                ctx, decision, params, name, asked, True, f"boot id {asked.boot} -> {now_boot}"
            )
        if asked.method == "agent":
            status = annotation_json(node, REBOOT_STATUS_ANNOTATION)
            if status is not None and status.get("id") == rid:
                last = f"the agent says {status.get('state')}: {status.get('message', '')}"
                if status.get("state") in ("done", "failed"):
                    done = status.get("state") == "done"
                    ended = await _end(ctx, decision, params, name, asked, done, last)
                    if not done and status.get("reason") == "unreadable":
                        # The agent could not read the request: nothing was tried.
                        return Outcome("unknown", ended.message, ended.details)
                    return ended
        now = ctx.clock()
        if now >= deadline:
            return await _give_up(ctx, decision, params, name, rid, asked, last)
        await ctx.sleep(max(0.001, min(POLL_SECONDS, deadline - now)))


async def _give_up(
    ctx: ActionContext,
    decision: Decision,
    params: RebootNodeParams,
    name: str,
    rid: str,
    asked: Asked,
    last: str,
) -> Outcome:
    why = f"node {name} did not come back rebooted within {params.wait:g}s" + (
        f" ({last})" if last else ""
    )
    if asked.method == "agent":
        closed = {
            "id": rid,
            "state": "failed",
            "bootID": asked.boot,
            "message": f"closed by {ctx.controller}: {why}",
            "at": iso(ctx.clock()),
        }

        def mutate(n: Obj) -> Obj | None:
            status = annotation_json(n, REBOOT_STATUS_ANNOTATION)
            if status is not None and status.get("id") == rid:
                return None  # the agent answered (or is rebooting): its word stands
            return {"metadata": {"annotations": {REBOOT_STATUS_ANNOTATION: json.dumps(closed)}}}

        await update_node(ctx.kube, name, mutate)
    return await _end(ctx, decision, params, name, asked, False, why)


async def _end(
    ctx: ActionContext,
    decision: Decision,
    params: RebootNodeParams,
    name: str,
    asked: Asked,
    done: bool,
    why: str,
) -> Outcome:
    if asked.method == "selfNodeRemediation" and asked.cr_uid:
        # The creator removes the CR, as NodeHealthCheck does once a node is healthy;
        # one given up on is removed too, so that no reboot comes late.
        try:
            await ctx.kube.delete_custom(
                SNR_GROUP, SNR_VERSION, params.snr_namespace, SNR_PLURAL, name, uid=asked.cr_uid
            )
        except (NotFound, Conflict):
            pass
        except KubeError as e:
            why += f"; could not delete {SNR_KIND} {params.snr_namespace}/{name}: {e}"
    message = f"node {name}: {'rebooted' if done else 'reboot failed'}: {why}"
    await set_phase(
        ctx, name, decision.rule, "rebooted" if done else "reboot-failed", "" if done else message
    )
    await event(
        ctx,
        node_ref(name),
        "Rebooted" if done else "RebootFailed",
        message,
        warning=not done,
        action=NAME,
    )
    return Outcome("done" if done else "failed", message, {"method": asked.method})


SPEC = ActionSpec(
    NAME,
    TARGETS,
    reversible=True,
    params_type=RebootNodeParams,
    validate=validate,
    execute=execute,
)
