"""``uncordon``: make a node schedulable again.

As a rule's own action it returns capacity once a condition clears (for example
after a node has been repaired out of band). It only ever touches nodes that this
controller cordoned (recorded in an ``accel-fleet.io/`` annotation): a node that a
person cordoned for maintenance is theirs, and stays cordoned. That ownership
check happens when the action runs; here are its parameters.

Targets: ``node``.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.names import REMEDIATION_ANNOTATION
from autoscaler.actions.base import ActionSpec, ParamProblem, ParamReader, param_keys, to_params
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.nodes import node_of, release
from autoscaler.actions.ops.ownership import entries, event, node_ref, ours
from autoscaler.actions.ops.unknown import answering_unknown
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound

NAME = "uncordon"
TARGETS = ("node",)


@dataclass(frozen=True)
class UncordonParams:
    """No parameters."""


DEFAULTS = UncordonParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(UncordonParams))
    return to_params(DEFAULTS), r.problems


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    """Undo every cordon this controller holds on the node, and nothing else: a node
    that someone else cordoned stays cordoned, with an Event that says why."""
    name = node_of(decision)
    try:
        node = await ctx.kube.get_node(name)
        mine = [rule for rule, e in entries(node).items() if ours(e, ctx) and e.cordoned]
        if not mine:
            if (node.get("spec") or {}).get("unschedulable"):
                message = (
                    f"not uncordoning node {name}: {ctx.controller} did not cordon it "
                    f"(no {REMEDIATION_ANNOTATION} entry of ours says so)"
                )
                await event(ctx, node, "UncordonRefused", message, warning=True, action=NAME)
                return Outcome("skipped", message)
            return Outcome("skipped", f"node {name} is not cordoned")
        released = [await release(ctx, name, rule) for rule in mine]
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    uncordoned = any(r.uncordoned for r in released)
    message = (
        f"uncordoned by rule {decision.rule} (cordoned by {', '.join(mine)})"
        if uncordoned
        else f"released the cordons of {', '.join(mine)}; another rule of ours still holds one"
    )
    await event(ctx, node_ref(name), "Uncordoned", message, action=NAME)
    return Outcome("done", message, {"uncordoned": uncordoned, "rules": mine})


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=False,
        params_type=UncordonParams,
        validate=validate,
        execute=execute,
    )
)
