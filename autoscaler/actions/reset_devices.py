"""``reset_devices``: reset a failed GPU (or all of a node's) through the node agent,
after moving the pods that hold the devices to be reset.

Most fatal faults (Xid 79, uncontained ECC, AMD uncorrectable RAS) do not heal on
their own, and a reset costs seconds where a reboot costs minutes. The controller
never resets anything itself: it asks the node agent (``accel-node-agent``,
docs/agent.md) through the node's ``accel-fleet.io/reset-request`` annotation and
reads the answer in ``accel-fleet.io/reset-status``. The agent refuses while a pod
holds a device of the reset group, so this action moves those pods first.

How wide the move is comes from the agent's ``accel-fleet.io/reset-scope``: on
``node`` (an NVSwitch board, whose GPUs reset together; NVLink or XGMI peers) every
device pod of the node moves; on ``device``, or when the agent has not said, only
the pods holding the target device (from ``accel_device_pod_info``; when that is
unknown, none are evicted and the agent's own check decides). A ``node`` target
asks for every device of the node and moves every device pod.

Execution, recorded in the node's ``accel-fleet.io/remediation`` entry:

1. The taint goes on and the pods move as ``migrate_jobs`` moves them (Eviction API,
   PodDisruptionBudgets honoured until ``drainTimeout``, bare pods recreated, gangs
   restarted as one). Pods a budget still protects at the deadline end it ``failed``
   without asking for the reset.
2. In one write, the request (``{"id", "devices", "requestedAt", "by"}``) goes on the
   node and the phase becomes ``resetting``. The id is built from the rule, the target
   and the incident (the ladder's start, else the entry's), so a controller that
   restarts (``kill -9``) finds its own request and only waits: no second request,
   no second move.
3. It waits up to ``wait`` from the request for the agent's answer with that id:
   ``done`` ends ``done`` (phase ``reset``); ``failed``, or a ``refused`` answer
   still standing at the deadline, ends ``failed`` (phase ``reset-failed``), which
   an escalation ladder takes as the signal to go on at once: the agent's own word
   that the reset did not work. No answer at all by the deadline ends ``unknown``
   (the agent may not run there): the ladder then waits for the step's timeout. A
   request given up on is closed with a ``failed`` status written by the
   controller, so the agent never carries it out later. A device whose UUID is
   unknown, or another open request on the node, also ends ``unknown``, with
   nothing asked.

A step the node cannot perform is *skipped*, not failed after the wait: when the
target device's ``vendor`` (its labels, else ``accel_device_info``) is one the agent
cannot reset (``accel_common.agentsupport``, the table the agent answers by:
NVIDIA and AMD only), the action ends ``skipped`` with ``details.reason:
unsupported`` before it claims the node, moves anything or asks (a
``ResetUnsupported`` Event says so, with the table's reason); an agent's ``failed``
answer with ``"reason": "unsupported"`` (the same table, on the node) ends the same
way. An escalation ladder takes the next step at once. An unknown vendor is no
evidence: the agent is asked. An agent's ``failed`` answer after a reset that ran
but did not fix the device (``"reason": "unfixed"``: it does not answer, or its
vendor library still shows the fault) ends ``failed`` with that reason in the
details.

With ``moveJobs: false`` (the ``reset_when_idle`` class: a pending row remap that
a reset applies) no pod is moved: the taint keeps new work off, the agent refuses
while a pod holds the reset group and resets once none does, within ``wait``.

The taint stays until the rule's ``recover`` removes it. Events: those of the move,
then ``ResetRequested``, and ``DevicesReset`` or ``DeviceResetFailed`` on the node.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

================  ===========================================  ===========================
``taint``         taint to set first (``key=value:Effect``)    ``accel-fleet.io/faulty=``
                                                               ``true:NoSchedule``
``drainTimeout``  how long to keep evicting the pods that      ``10m``
                  hold the devices (duration, > 0)
``wait``          how long to wait for the agent's answer      ``10m``
                  once the request is written (duration, > 0)
``moveJobs``      move the pods that hold the devices first;   ``true``
                  false: reset once they are idle
================  ===========================================  ===========================
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.agentsupport import (
    UNFIXED_REASON,
    UNSUPPORTED_REASON,
    can_reset,
    resets_summary,
    support,
)
from accel_common.names import (
    DEFAULT_TAINT,
    RESET_REQUEST_ANNOTATION,
    RESET_SCOPE_ANNOTATION,
    RESET_STATUS_ANNOTATION,
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
    move_pods,
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
    ours,
    parse_iso,
    set_phase,
    update_node,
)
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj
from autoscaler.promql.matchers import quote
from autoscaler.types import Vector

log = logging.getLogger("accel_autoscaler.actions")

NAME = "reset_devices"
TARGETS = ("node", "device")
DEFAULT_WAIT = 600.0
FINAL = ("done", "failed")
# The reason of a skipped outcome, and of the agent's failed answer, when the
# device's vendor is one the agent cannot reset (docs/agent.md).
UNSUPPORTED = UNSUPPORTED_REASON


@dataclass(frozen=True)
class ResetDevicesParams:
    taint: str = param("taint", DEFAULT_TAINT)
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    wait: float = param("wait", DEFAULT_WAIT)
    move_jobs: bool = param("moveJobs", True)


DEFAULTS = ResetDevicesParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(ResetDevicesParams))
    params = ResetDevicesParams(
        taint=read_taint(r, "taint", DEFAULTS.taint),
        drain_timeout=r.duration("drainTimeout", DEFAULTS.drain_timeout, positive=True),
        wait=r.duration("wait", DEFAULTS.wait, positive=True),
        move_jobs=r.boolean("moveJobs", DEFAULTS.move_jobs),
    )
    return to_params(params), r.problems


async def _device_fact(ctx: ActionContext, decision: Decision, node: str, label: str) -> str | None:
    """A label of the target device (``uuid``, ``vendor``): from the decision's
    labels, else the exporter's ``accel_device_info``; None when unknown."""
    labels = dict(decision.sample_labels)
    for source in (decision.target, labels):
        if source.get(label):
            return str(source[label])
    device = decision.target.get("device", "")
    if not device or ctx.query is None:
        return None
    expr = f"accel_device_info{{node={quote(node)},device={quote(device)}}}"
    result = await ctx.query(expr, ctx.clock())
    if isinstance(result, Vector):
        for s in result.samples:
            value = dict(s.labels).get(label)
            if value:
                return value
    return None


async def _unsupported(ctx: ActionContext, decision: Decision, name: str) -> Outcome | None:
    """``skipped`` (reason ``unsupported``) when the target device's vendor is known
    and the node agent cannot reset it (``accel_common.agentsupport``, the table the
    agent answers by too): a ladder then goes on at once instead of failing after
    its timeout. An unknown vendor is no such evidence: the agent is asked."""
    if "device" not in decision.target:
        return None
    vendor = await _device_fact(ctx, decision, name, "vendor")
    if vendor is None or can_reset(vendor):
        return None
    message = (
        f"node {name}: {decision.target.get('device')} is a {vendor} device, which the node "
        f"agent cannot reset ({support(vendor).no_reset}; it resets {resets_summary()}); "
        "skipped"
    )
    await event(
        ctx,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
        "ResetUnsupported",
        f"{message} for rule {decision.rule}",
        action=NAME,
    )
    return Outcome("skipped", message, {"reason": UNSUPPORTED, "vendor": vendor})


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return await undo(ctx, decision)
    params = from_params(ResetDevicesParams, decision.params)
    name = node_of(decision)
    try:
        return await _execute(ctx, decision, params, name)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")


async def _execute(
    ctx: ActionContext, decision: Decision, params: ResetDevicesParams, name: str
) -> Outcome:
    node = await ctx.kube.get_node(name)
    entry = own_entry(ctx, node, decision)
    if entry is None:
        unsupported = await _unsupported(ctx, decision, name)
        if unsupported is not None:
            return unsupported
        entry = (await claim(ctx, decision, phase="migrating", taint=params.taint)).entry
    rid = request_id(decision, entry.started)
    request = annotation_json(node, RESET_REQUEST_ANNOTATION)
    if entry.phase == "resetting" and request is not None and request.get("by") == ctx.controller:
        # Resumed from the entry alone (the executor after a restart rebuilds the
        # decision without the ladder's incident): the request written in the same
        # write as this phase is this entry's.
        rid = str(request.get("id") or rid)
    if request is None or request.get("id") != rid:
        asked = await _ask(ctx, decision, params, name, rid)
        if isinstance(asked, Outcome):
            return asked
        request = asked
    if ctx.dry_run:
        return Outcome("done", f"dry run: would wait up to {params.wait:g}s for the reset {rid}")
    return await _wait(ctx, decision, name, rid, request, params.wait)


async def _ask(
    ctx: ActionContext, decision: Decision, params: ResetDevicesParams, name: str, rid: str
) -> dict[str, Any] | Outcome:
    """Move the pods, then write the request: the first run of this decision."""
    node = await ctx.kube.get_node(name)
    pending = annotation_json(node, RESET_REQUEST_ANNOTATION)
    answered = annotation_json(node, RESET_STATUS_ANNOTATION)
    if (
        pending is not None
        and pending.get("id") != rid
        and not (
            answered and answered.get("id") == pending.get("id") and answered.get("state") in FINAL
        )
    ):
        return Outcome(
            "unknown",
            f"node {name}: another reset request ({pending.get('id')}, by {pending.get('by')}) "
            "is still open; not asking over it",
        )
    scope = ((node.get("metadata") or {}).get("annotations") or {}).get(RESET_SCOPE_ANNOTATION)
    devices: list[str] = []
    whole = "device" not in decision.target
    if not whole:
        uuid = await _device_fact(ctx, decision, name, "uuid")
        if uuid is not None:
            devices = [uuid]
        elif scope == "node":
            whole = True  # the agent resets the whole board anyway
        else:
            return Outcome(
                "unknown",
                f"node {name}: the UUID of {decision.target.get('device')} is unknown (no uuid "
                "label and no accel_device_info series), so the agent cannot be told which "
                "device to reset",
            )
    if params.move_jobs:
        stop, moved = await move_pods(ctx, decision, device_only=not whole and scope != "node")
        if stop is not None:
            return stop
    else:
        # reset_when_idle: the taint keeps new work off, running jobs finish; the
        # agent refuses while a pod holds the reset group and resets once none does.
        moved = "no pod moved (moveJobs: false): the agent resets once the devices are idle"
    request = {
        "id": rid,
        "devices": devices,
        "requestedAt": iso(ctx.clock()),
        "by": ctx.controller,
    }

    def mutate(n: Obj) -> Obj | None:
        current = annotation_json(n, RESET_REQUEST_ANNOTATION)
        if current is not None and current.get("id") == rid:
            return None
        es = entries(n)
        e = es.get(decision.rule)
        if e is not None and ours(e, ctx):
            e.phase, e.message = "resetting", ""
        patch = entries_patch(es)
        patch["metadata"]["annotations"][RESET_REQUEST_ANNOTATION] = json.dumps(request)
        return patch

    await update_node(ctx.kube, name, mutate)
    what = ", ".join(devices) if devices else f"every device of node {name}"
    await event(
        ctx,
        node,
        "ResetRequested",
        f"asked the node agent to reset {what} (request {rid}, scope {scope or 'unknown'}) "
        f"for rule {decision.rule}; {moved}",
        action=NAME,
    )
    return request


async def _wait(
    ctx: ActionContext,
    decision: Decision,
    name: str,
    rid: str,
    request: Mapping[str, Any],
    wait: float,
) -> Outcome:
    try:
        asked_at = parse_iso(str(request.get("requestedAt")))
    except ValueError:
        asked_at = ctx.clock()
    deadline = asked_at + wait
    last: dict[str, Any] | None = None
    while True:
        if not ctx.leading():
            return Outcome(
                "partial", f"node {name}: lost the leader lease waiting for reset {rid}; resumed"
            )
        node = await ctx.kube.get_node(name)
        status = annotation_json(node, RESET_STATUS_ANNOTATION)
        if status is not None and status.get("id") == rid:
            last = status
            if status.get("state") in FINAL:
                return await _end(ctx, decision, name, rid, status)
        now = ctx.clock()
        if now >= deadline:
            return await _give_up(ctx, decision, name, rid, last, wait)
        await ctx.sleep(max(0.001, min(POLL_SECONDS, deadline - now)))


async def _end(
    ctx: ActionContext, decision: Decision, name: str, rid: str, status: Mapping[str, Any]
) -> Outcome:
    done = status.get("state") == "done"
    message = (
        f"node {name}: the agent answered {status.get('state')} to reset {rid}: "
        f"{status.get('message', '')}"
    )
    await set_phase(
        ctx, name, decision.rule, "reset" if done else "reset-failed", "" if done else message
    )
    await event(
        ctx,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
        "DevicesReset" if done else "DeviceResetFailed",
        message,
        warning=not done,
        action=NAME,
    )
    details: dict[str, Any] = {"request": rid, "devices": list(status.get("devices") or [])}
    if not done and status.get("reason") == UNFIXED_REASON:
        details["reason"] = UNFIXED_REASON  # the agent's evidence that it did not work
    if not done and status.get("reason") == UNSUPPORTED:
        # The agent cannot reset these devices (the vendor table, can_reset): the
        # step cannot be performed here, which a ladder skips at once.
        return Outcome("skipped", message, {**details, "reason": UNSUPPORTED})
    if not done and status.get("reason") == "unreadable":
        # The agent could not read the request (docs/agent.md): nothing was tried,
        # so nothing says that a reset fails.
        return Outcome("unknown", message, details)
    return Outcome("done" if done else "failed", message, details)


async def _give_up(
    ctx: ActionContext,
    decision: Decision,
    name: str,
    rid: str,
    last: Mapping[str, Any] | None,
    wait: float,
) -> Outcome:
    """Past ``wait``: close the request with a failed status of our own, so the agent
    never carries it out later, unless the agent is resetting right now."""
    if last is None:
        why = (
            f"no answer from the node agent within {wait:g}s (is accel-node-agent running "
            f"on {name}?)"
        )
    else:
        why = f"the agent still said {last.get('state')} after {wait:g}s: {last.get('message', '')}"
    closed = {
        "id": rid,
        "state": "failed",
        "devices": list((last or {}).get("devices") or []),
        "message": f"closed by {ctx.controller}: {why}",
        "at": iso(ctx.clock()),
    }

    def mutate(n: Obj) -> Obj | None:
        status = annotation_json(n, RESET_STATUS_ANNOTATION)
        if (
            status is not None
            and status.get("id") == rid
            and status.get("state") in (*FINAL, "resetting")
        ):
            return None
        return {"metadata": {"annotations": {RESET_STATUS_ANNOTATION: json.dumps(closed)}}}

    after = await update_node(ctx.kube, name, mutate)
    status = annotation_json(after, RESET_STATUS_ANNOTATION)
    if status is not None and status.get("id") == rid and status.get("state") == "resetting":
        # Not closed: the reset runs now and may still answer; this step ends anyway.
        return await _end(ctx, decision, name, rid, {**status, "state": "failed", "message": why})
    if status is not None and status.get("id") == rid and status.get("state") in FINAL:
        return await _end(ctx, decision, name, rid, status)  # the agent's, or ours
    ended = await _end(ctx, decision, name, rid, closed)
    if last is None:
        # No answer at all (is the agent running there?): nothing says that a reset
        # fails, so a ladder waits for its step's timeout rather than go on at once.
        return Outcome("unknown", ended.message, ended.details)
    return ended


SPEC = ActionSpec(
    NAME,
    TARGETS,
    reversible=True,
    params_type=ResetDevicesParams,
    validate=validate,
    execute=execute,
)
