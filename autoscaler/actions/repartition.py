"""``repartition``: reshape a node's devices (MIG layout, AMD partition mode) by asking
its node agent, after moving the pods that use them.

The controller never touches devices itself: the node agent (``accel-node-agent``,
docs/agent.md) does, when the node's ``accel-fleet.io/partition-layout`` label names
a layout of its layouts file and no pod holds a device. This action makes that
moment happen and waits for the answer.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

==================  ===============================================  =========
``layout``          the layout to apply: a name in the node agent's  required
                    layouts file (``h100-all-1g``, ``mi300x-cpx``);
                    the controller checks that it is a label value,
                    the agent that it knows it
``drainTimeout``    how long to keep evicting the node's device      ``10m``
                    pods (duration, > 0)
``wait``            how long to wait for the agent's answer once     ``10m``
                    the label is set (duration, > 0)
==================  ===============================================  =========

Execution, each step recorded in the node's ``accel-fleet.io/remediation`` entry:

1. A node whose agent already reports the layout applied is left alone (``done``,
   no cordon, no eviction). A node whose devices' vendor is known (the target's
   ``vendor`` label, else the node's ``accel-fleet.io/vendor``) and takes no
   partition layout (``accel_common.agentsupport``, the table the node agent applies
   layouts by: NVIDIA MIG and AMD compute/memory partitions only) is not touched
   either: ``skipped`` with ``details.reason: unsupported`` and a
   ``RepartitionUnsupported`` Event that says why, rather than a drained node and a
   wait for an answer that can only be ``failed``. An unknown vendor is no
   evidence: the agent is asked.
2. The node is cordoned (phase ``draining``) and the pods that request devices are
   evicted, as ``drain`` does (gangs restart as one); other pods stay.
3. In one write, the label is set and the phase becomes ``repartitioning``.
4. The action waits for the agent's ``accel-fleet.io/partition-state`` to say
   ``applied`` for that layout (``refused`` is waited through: the agent retries
   every round). Then the cordon is lifted and the entry removed: the node is
   healthy capacity again, not a node under remediation (``done``).
5. A ``failed`` answer written after the action started, or no answer within
   ``wait``, ends it ``failed`` (phase ``repartition-failed``): the node stays
   cordoned, since its devices may be half-way, until a person or the rule's
   ``recover`` lifts it; until then the same rule's next decisions for the node are
   ``skipped``.

After a restart (``kill -9``) the controller resumes from the recorded phase: a
``draining`` entry finishes its drain (pods already evicted are not evicted again,
and the deadline is the recorded one); a ``repartitioning`` entry only waits, with
no second drain. Events: ``RepartitionStarted``, ``Repartitioned`` or
``RepartitionFailed`` (or ``RepartitionUnsupported``) on the node, ``Evicted`` on
each pod.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.agentsupport import UNSUPPORTED_REASON, can_partition, partition_unsupported
from accel_common.clusterjson import ClusterValueError
from accel_common.clusterjson import text as bounded_text
from accel_common.gangs import gang_of
from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
    VENDOR_LABEL,
)
from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    from_params,
    label_value_problem,
    param,
    param_keys,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops import gangs, unknown
from autoscaler.actions.ops.drain import DEFAULT_DRAIN_TIMEOUT
from autoscaler.actions.ops.nodes import claim, node_of, release, undo
from autoscaler.actions.ops.ownership import (
    entries,
    entries_patch,
    event,
    iso,
    node_ref,
    ours,
    parse_iso,
    update_node,
)
from autoscaler.actions.ops.pods import evict_until, summary, uses_devices
from autoscaler.actions.ops.unknown import answering_unknown, plausible_time
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj

log = logging.getLogger("accel_autoscaler.actions")

NAME = "repartition"
TARGETS = ("node", "device")
DEFAULT_WAIT = 600.0
# How often the node is read while waiting for the agent (the agent's own interval
# is 30s by default; reading more often only finds the answer sooner).
POLL_SECONDS = 5.0
DRAINING, REPARTITIONING, FAILED = "draining", "repartitioning", "repartition-failed"


@dataclass(frozen=True)
class RepartitionParams:
    layout: str = param("layout", "")
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    wait: float = param("wait", DEFAULT_WAIT)


DEFAULTS = RepartitionParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(RepartitionParams))
    layout = r.string("layout", None)
    if layout is None:
        r.problem(
            "layout",
            "required: the name of a layout in the node agent's layouts file (e.g. h100-all-1g)",
        )
        layout = ""
    elif not layout or (problem := label_value_problem(layout)) is not None:
        r.problem("layout", problem or "must not be empty: it becomes the node's label value")
        layout = ""
    params = RepartitionParams(
        layout=layout,
        drain_timeout=r.duration("drainTimeout", DEFAULTS.drain_timeout, positive=True),
        wait=r.duration("wait", DEFAULTS.wait, positive=True),
    )
    return to_params(params), r.problems


STATE_FACT = "partition state"


def agent_state(node: Obj) -> dict[str, Any]:
    """The agent's PARTITION_STATE_ANNOTATION with its fields checked; {} when
    absent. Anyone who may patch the Node may write it, so one that cannot be read
    raises ``UnknownFact``: read as "nothing applied" it would drain a node whose
    layout may be in place."""
    state = unknown.record(node, PARTITION_STATE_ANNOTATION, STATE_FACT)
    at = unknown.where({"kind": "Node", **node}, PARTITION_STATE_ANNOTATION)
    try:
        for key in ("layout", "state", "message", "at"):
            if state.get(key) is not None:
                bounded_text(state[key], f"{at} field {key}", max_len=4096)
        devices = state.get("devices")
        if devices is not None and not isinstance(devices, (dict, list)):
            raise ClusterValueError(f"{at} field devices", "expected an object or a list")
    except ClusterValueError as e:
        raise unknown.UnknownFact(STATE_FACT, e) from None
    return state


def applied(node: Obj, layout: str) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    state = agent_state(node)
    return (
        labels.get(PARTITION_APPLIED_LABEL) == layout
        and state.get("layout") == layout
        and state.get("state") == "applied"
    )


def failed_since(node: Obj, layout: str, since: float) -> str | None:
    """The agent's failure message for ``layout`` when written at or after ``since``
    (a failure whose time cannot be read is not taken as one)."""
    state = agent_state(node)
    if state.get("layout") != layout or state.get("state") != "failed":
        return None
    try:
        at = plausible_time(state.get("at"), f"node annotation {PARTITION_STATE_ANNOTATION} at")
    except ClusterValueError:
        return None
    return str(state.get("message") or "no message") if at >= since else None


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return await undo(ctx, decision)
    params = from_params(RepartitionParams, decision.params)
    name = node_of(decision)
    try:
        node = await ctx.kube.get_node(name)
        entry = entries(node).get(decision.rule)
        resuming = entry is not None and ours(entry, ctx) and entry.action == NAME
        if not resuming and applied(node, params.layout):
            return Outcome("done", f"node {name} already has layout {params.layout}", {})
        if not resuming and (skipped := await _unsupported(ctx, decision, node, params)):
            return skipped
        if resuming and entry is not None and entry.phase == FAILED:
            return Outcome(
                "skipped",
                f"node {name}: an earlier repartition failed ({entry.message}); it stays "
                "cordoned until the rule's recover or a person clears it",
            )
        if resuming and entry is not None and entry.phase == REPARTITIONING:
            started = parse_iso(entry.started)
        else:
            outcome = await _drain(ctx, decision, params, name)
            if isinstance(outcome, Outcome):
                return outcome
            started = outcome
        return await _wait(ctx, decision, params, name, started)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")


def _vendor(decision: Decision, node: Obj) -> str | None:
    """The vendor of the devices to reshape: the target's or its sample's ``vendor``
    label, else the node's ``VENDOR_LABEL``; None when nothing says."""
    for source in (decision.target, dict(decision.sample_labels)):
        if source.get("vendor"):
            return str(source["vendor"])
    value = ((node.get("metadata") or {}).get("labels") or {}).get(VENDOR_LABEL)
    return value if isinstance(value, str) and value else None


async def _unsupported(
    ctx: ActionContext, decision: Decision, node: Obj, params: RepartitionParams
) -> Outcome | None:
    """``skipped`` (reason ``unsupported``) when the devices' vendor is known and the
    node agent applies no partition layout to it (step 1)."""
    vendor = _vendor(decision, node)
    if vendor is None or can_partition(vendor):
        return None
    name = node_of(decision)
    message = (
        f"node {name}: layout {params.layout} not applied: {partition_unsupported(vendor)}; skipped"
    )
    await event(
        ctx,
        node_ref(name),
        "RepartitionUnsupported",
        f"{message} (rule {decision.rule})",
        action=NAME,
    )
    return Outcome("skipped", message, {"reason": UNSUPPORTED_REASON, "vendor": vendor})


async def _drain(
    ctx: ActionContext, decision: Decision, params: RepartitionParams, name: str
) -> Outcome | float:
    """Steps 2 and 3: cordon, evict the device pods, then label and move to
    ``repartitioning`` in one write. Returns the recorded start, or the Outcome that
    ends the action here."""
    claimed = await claim(ctx, decision, phase=DRAINING, cordon=True)
    started = parse_iso(claimed.entry.started)
    deadline = started + params.drain_timeout
    if claimed.changed:
        await event(
            ctx,
            claimed.node,
            "RepartitionStarted",
            f"repartitioning to layout {params.layout} for rule {decision.rule}: draining "
            f"device pods until {iso(deadline)}"
            + (f": {decision.reason}" if decision.reason else ""),
            action=NAME,
        )
    why = f"node {name} is repartitioned to {params.layout} ({decision.rule})"
    ganged = await gangs.restart_on_node(ctx, name, uses_devices, rule=decision.rule, why=why)
    result = await evict_until(
        ctx,
        name,
        lambda p: uses_devices(p) and gang_of(p) is None,
        deadline=deadline,
        rule=decision.rule,
        why=why,
    )
    ganged.held_back(result)
    if result.stopped:
        return Outcome("partial", f"node {name}: {summary(result)}", {"evicted": result.evicted})
    if not result.complete:
        return await _fail(
            ctx,
            decision,
            name,
            f"device pods stayed: {summary(result)}",
            {"evicted": result.evicted},
        )

    def label(n: Obj) -> Obj | None:
        es = entries(n)
        e = es.get(decision.rule)
        if e is None or not ours(e, ctx):
            return None
        e.phase = REPARTITIONING
        patch = entries_patch(es)
        patch["metadata"]["labels"] = {PARTITION_LAYOUT_LABEL: params.layout}
        return patch

    if not ctx.dry_run:
        await update_node(ctx.kube, name, label)
    return started


async def _wait(
    ctx: ActionContext, decision: Decision, params: RepartitionParams, name: str, started: float
) -> Outcome:
    """Steps 4 and 5: wait for the agent's answer, then uncordon and drop the entry."""
    if ctx.dry_run:
        return Outcome("done", f"node {name}: would label {params.layout} and wait for the agent")
    deadline = started + params.drain_timeout + params.wait
    last = ""
    while True:
        if not ctx.leading():
            return Outcome("partial", "this replica lost the leader lease; the new leader resumes")
        node = await ctx.kube.get_node(name)
        try:
            if applied(node, params.layout):
                break
            failure = failed_since(node, params.layout, started)
            if failure is not None:
                return await _fail(ctx, decision, name, f"the node agent failed: {failure}")
            state = agent_state(node)
            if state.get("layout") == params.layout:
                last = f"{state.get('state')}: {state.get('message')}"
        except unknown.UnknownFact as e:
            # Not an answer: wait on, as for no answer at all (logged where read).
            last = f"unreadable: {e.error}"
        if ctx.clock() >= deadline:
            said = (
                f" (last answer: {last})" if last else " (no answer: is accel-node-agent running?)"
            )
            return await _fail(
                ctx, decision, name, f"no 'applied' from the node agent by {iso(deadline)}{said}"
            )
        await ctx.sleep(min(POLL_SECONDS, max(0.001, deadline - ctx.clock())))
    released = await release(ctx, name, decision.rule)
    devices = agent_state(node).get("devices") or {}  # read just above: not unknown
    message = f"node {name} repartitioned to {params.layout}" + (
        "; uncordoned" if released.uncordoned else ""
    )
    await event(ctx, node_ref(name), "Repartitioned", message, action=NAME)
    return Outcome("done", message, {"layout": params.layout, "devices": devices})


async def _fail(
    ctx: ActionContext,
    decision: Decision,
    name: str,
    message: str,
    details: Mapping[str, Any] | None = None,
) -> Outcome:
    def mutate(n: Obj) -> Obj | None:
        es = entries(n)
        e = es.get(decision.rule)
        if e is None or not ours(e, ctx):
            return None
        e.phase, e.message = FAILED, message[:500]
        return entries_patch(es)

    await update_node(ctx.kube, name, mutate)
    text = f"node {name}: repartition failed, node stays cordoned: {message}"
    await event(ctx, node_ref(name), "RepartitionFailed", text, warning=True, action=NAME)
    return Outcome("failed", text, dict(details or {}))


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=True,
        params_type=RepartitionParams,
        validate=validate,
        execute=execute,
    )
)
